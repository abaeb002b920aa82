"""One place for the repository's address: pyproject.toml's [project.urls] Repository. Everything else that names
it (Colab links, install cells, _config.yml, the Documentation URL, the package's module index) is derived by
scripts/repository.py, and a fork changes that one line and runs that one command."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "repository.py"


def test_every_derived_address_matches_pyproject():
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_fork_changes_one_line_and_runs_one_command(tmp_path):
    fork = tmp_path / "fork"
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in tracked:  # the files of a fresh clone (tracked files only, as they are in the working tree)
        if (ROOT / name).is_file():
            (fork / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, fork / name)
    pyproject = fork / "pyproject.toml"
    text = pyproject.read_text()
    assert text.count("Repository = ") == 1
    pyproject.write_text(re.sub(r'(?m)^Repository = ".*"$', 'Repository = "https://github.com/Someone/fork"', text))

    stale = subprocess.run([sys.executable, "scripts/repository.py", "--check"], cwd=fork, capture_output=True,
                           text=True)
    assert stale.returncode == 1 and "nbs/01_attention.ipynb" in stale.stderr, stale.stderr
    done = subprocess.run([sys.executable, "scripts/repository.py"], cwd=fork, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr

    old = re.compile(r"github\.com/transformer-book/|transformer-book\.github\.io")
    left = [str(p.relative_to(fork)) for p in fork.rglob("*") if p.is_file() and p.suffix in
            (".ipynb", ".py", ".md", ".toml", ".yml") and old.search(p.read_text(errors="ignore"))]
    assert not left, f"still naming the original repository: {left}"
    for nb in (fork / "nbs").glob("*.ipynb"):
        cells = json.loads(nb.read_text())["cells"]
        assert f"colab.research.google.com/github/Someone/fork/blob/main/nbs/{nb.name})" in "".join(cells[0]["source"])
        install = "".join(next(c for c in cells if c["cell_type"] == "code")["source"])
        assert '"transformer[book] @ git+https://github.com/Someone/fork"' in install
    assert 'Documentation = "https://someone.github.io/fork"' in pyproject.read_text()
    assert "url: https://github.com/Someone/fork" in (fork / "_config.yml").read_text()
    assert "'git_url': 'https://github.com/Someone/fork'" in (fork / "transformer" / "_modidx.py").read_text()
    again = subprocess.run([sys.executable, "scripts/repository.py", "--check"], cwd=fork, capture_output=True,
                           text=True)
    assert again.returncode == 0, again.stderr


def test_a_repository_address_that_is_not_github_is_refused(tmp_path):
    for name in ("pyproject.toml", "_config.yml", "README.md", "transformer/__init__.py", "scripts/repository.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "nbs").mkdir()
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(re.sub(r'(?m)^Repository = ".*"$', 'Repository = "https://gitlab.com/a/b"',
                                pyproject.read_text()))
    done = subprocess.run([sys.executable, "scripts/repository.py"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 1 and "must be https://github.com/OWNER/REPO" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1  # one line, no stack trace
