"""The release machinery: the GitHub workflows pass actionlint, the sdist and the wheel build and pass twine's
checks, the wheel carries the book's files, and it works without the book's extras."""

import ast
import email.parser
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
BOOK_EXTRAS = PYPROJECT["project"]["optional-dependencies"]["book"]
# Modules of the package that need the book's extras by design, with the reason; every other module must import
# without them.
NEEDS_BOOK: dict[str, str] = {}  # none: modules that draw (report, viz) import pandas and Altair inside functions
BLOCKED = ("altair", "pandas", "vl_convert")  # what the book's extras provide to the package's code


def requirement_name(requirement: str) -> str:
    "The normalized project name of a requirement such as `vl-convert-python>=1.6` or `pandas; extra == 'book'`."
    return re.split(r"[\s<>=!~;\[(@]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def tool(name: str) -> str:
    "The executable `name` from this Python's environment (its bin/ need not be on PATH), else from PATH."
    found = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    assert found, f"{name} is not installed: pip install -e '.[dev]'"
    return found


def actionlint(*paths: Path) -> subprocess.CompletedProcess:
    "actionlint on the given workflow files (shell checks too where shellcheck is installed)."
    return subprocess.run([tool("actionlint"), "-no-color", *map(str, paths)], capture_output=True, text=True,
                          timeout=60)


def test_workflows_pass_actionlint():
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert [f.name for f in files] == ["ci.yml", "pages.yml", "release.yml"]
    result = actionlint(*files)
    assert result.returncode == 0, result.stdout + result.stderr


# Each mistake is made in a copy of a real workflow, so actionlint is shown to read these files, not just any YAML.
BREAKAGES = {
    "misspelled key": ("pages.yml", "runs-on: ubuntu-latest", "run-on: ubuntu-latest"),
    "unknown step output": ("pages.yml", "steps.deployment.outputs.page_url", "steps.deploy.outputs.page_url"),
    "job needs a missing job": ("release.yml", "needs: publish", "needs: pubilsh"),
}


@pytest.mark.parametrize("breakage", BREAKAGES, ids=list(BREAKAGES))
def test_actionlint_fails_on_a_broken_workflow(tmp_path: Path, breakage: str):
    name, good, bad = BREAKAGES[breakage]
    text = (WORKFLOWS / name).read_text(encoding="utf-8")
    assert good in text, f"{name} no longer has {good!r}: choose another mistake to make"
    broken = tmp_path / ".github" / "workflows" / name
    broken.parent.mkdir(parents=True)
    broken.write_text(text.replace(good, bad), encoding="utf-8")
    assert actionlint(broken).returncode != 0


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = re.search(r"^(bash scripts/setup\.sh && bash scripts/test\.sh)\s+# tests", readme, re.M)[1]
    assert f"run: {command}\n" in (WORKFLOWS / "ci.yml").read_text(encoding="utf-8")


def source_copy(dest: Path) -> Path:
    "The checkout's files (tracked, or new and not ignored) copied to `dest`, so that building leaves it untouched."
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():  # a tracked file deleted in the work tree is still listed
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def can_build_offline() -> bool:
    "Whether this environment's setuptools satisfies pyproject's build requirement (then no download is needed)."
    required = Version(re.search(r"setuptools>=([\d.]+)", " ".join(PYPROJECT["build-system"]["requires"]))[1])
    try:
        return Version(importlib.metadata.version("setuptools")) >= required
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return source_copy(tmp_path_factory.mktemp("source"))


@pytest.fixture(scope="module")
def dist(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    "The sdist and the wheel, built as release.yml builds them: the wheel from the sdist (so the sdist must suffice)."
    out = tmp_path_factory.mktemp("dist")
    isolation = ["--no-isolation"] if can_build_offline() else []  # else build's own environment, from PyPI
    result = subprocess.run([sys.executable, "-m", "build", *isolation, "--outdir", str(out), str(source)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


def the(dist: Path, pattern: str) -> Path:
    "The one file of `dist` matching `pattern`."
    (found,) = dist.glob(pattern)
    return found


def book_files(source: Path) -> list[str]:
    "The files setup.py's BOOK_FILES selects, relative to the checkout (read from setup.py, not repeated here)."
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    (spec,) = [ast.literal_eval(node.value) for node in tree.body
               if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "BOOK_FILES"]
    return sorted({path.relative_to(source).as_posix() for folder, patterns in spec.items()
                   for pattern in patterns for path in (source / folder).rglob(pattern)})


def test_twine_check_strict(dist: Path):
    files = sorted(dist.iterdir())
    assert sorted(f.suffix for f in files) == [".gz", ".whl"]
    result = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, files)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_sdist_carries_the_book_files(dist: Path, source: Path):
    with tarfile.open(the(dist, "*.tar.gz")) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    expected = book_files(source)
    for folder in ("results/", "benchmarks/results/", "configs/"):
        assert any(name.startswith(folder) for name in expected), f"no {folder} files in the checkout?"
    assert not set(expected) - names, f"missing from the sdist (MANIFEST.in): {sorted(set(expected) - names)}"


def test_wheel_carries_the_book_files(dist: Path, source: Path):
    with zipfile.ZipFile(the(dist, "*.whl")) as wheel:
        names = set(wheel.namelist())
    expected = {f"transformer/book_files/{name}" for name in book_files(source)}
    assert "transformer/book_files/configs/multi30k-de-en.toml" in expected
    assert "transformer/book_files/results/multi30k-de-en/summary.json" in expected
    assert any(name.startswith("transformer/book_files/benchmarks/results/") for name in expected)
    assert not expected - names, f"missing from the wheel: {sorted(expected - names)}"


def test_published_model_files_stay_out_of_the_dists(dist: Path, source: Path):
    "models/ (float16 weights, release assets that the package downloads by name) is in neither file."
    assert (source / "models").is_dir(), "no models/ in the checkout?"
    with tarfile.open(the(dist, "*.tar.gz")) as sdist:
        sdist_names = [name.split("/", 1)[1] for name in sdist.getnames() if "/" in name]
    with zipfile.ZipFile(the(dist, "*.whl")) as wheel:
        wheel_names = wheel.namelist()
    assert not [n for n in sdist_names + wheel_names if n.endswith(".safetensors") or "/models/" in f"/{n}"]


def test_book_extras_are_optional_in_the_metadata(dist: Path):
    with zipfile.ZipFile(the(dist, "*.whl")) as wheel:
        (metadata,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
        requires = email.parser.Parser().parsestr(wheel.read(metadata).decode()).get_all("Requires-Dist")
    always = {requirement_name(r) for r in requires if ";" not in r}
    for_book = {requirement_name(r) for r in requires if re.search(r"""extra\s*==\s*["']book["']""", r)}
    book = {requirement_name(r) for r in BOOK_EXTRAS}
    assert {"altair", "pandas", "jupyter-book", "vl-convert-python", "ipykernel"} <= book
    assert not always & book, f"the book's extras are required by the wheel: {sorted(always & book)}"
    assert book <= for_book
    assert "torch" in always


# Run by the interpreter of the subprocess below (sitecustomize is imported at start-up, before any test code):
# the book's extras are installed in this environment, so their absence is simulated.
BLOCKER = f'''
import importlib.abc
import sys

BLOCKED = {BLOCKED!r}


class WithoutBookExtras(importlib.abc.MetaPathFinder):
    "Import fails for the modules that the book's extras provide, as if they were not installed."

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {{name!r}} (blocked by tests/test_release.py)", name=name)
        return None


sys.meta_path.insert(0, WithoutBookExtras())
'''

# Imports the blocked modules (each must fail) and every module of the package; prints where each failed, as JSON.
IMPORT_ALL = textwrap.dedent(f'''
    import importlib, json, pkgutil
    import transformer

    errors = {{}}
    for block in {BLOCKED!r}:
        try:
            importlib.import_module(block)
            errors[block] = None
        except ImportError as error:
            errors[block] = str(error)
    for module in pkgutil.iter_modules(transformer.__path__, "transformer."):
        try:
            importlib.import_module(module.name)
            errors[module.name] = None
        except ImportError as error:
            errors[module.name] = str(error)
    print(json.dumps({{"file": transformer.__file__, "errors": errors}}))
''')


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    "The wheel installed alone into a folder, and the environment that runs it first, without the book's extras."
    root = tmp_path_factory.mktemp("installed")
    site, hooks = root / "site", root / "hooks"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    "--target", str(site), str(the(dist, "*.whl"))], check=True, timeout=120)
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    # PYTHONPATH comes before site-packages, so the installed wheel wins over the editable checkout.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(hooks)])}
    return site, env


def test_command_line_runs_without_book_extras(installed: tuple[Path, dict]):
    site, env = installed
    script = site / "bin" / "transformer"  # the console script of [project.scripts], as pip wrote it
    result = subprocess.run([sys.executable, str(script), "--help"], cwd=site.parent, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: transformer")


def test_package_imports_without_book_extras(installed: tuple[Path, dict]):
    site, env = installed
    result = subprocess.run([sys.executable, "-c", IMPORT_ALL], cwd=site.parent, env=env, capture_output=True,
                            text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert Path(report["file"]).is_relative_to(site), f"imported {report['file']}, not the wheel in {site}"
    errors = report["errors"]
    assert all(errors[name] for name in BLOCKED), f"the book's extras were importable: {errors}"
    modules = {name: error for name, error in errors.items() if name.startswith("transformer.")}
    assert {"transformer.model", "transformer.cli", "transformer.translation"} <= set(modules)
    assert set(NEEDS_BOOK) <= set(modules), "a module in NEEDS_BOOK is gone: update the list"
    failed = {name: error for name, error in modules.items() if error and name not in NEEDS_BOOK}
    assert not failed, f"modules that need the book's extras (NEEDS_BOOK lists those that may): {failed}"
    assert all(modules[name] for name in NEEDS_BOOK), "a module in NEEDS_BOOK imports without the extras: drop it"


def test_book_files_are_found_in_the_wheel(installed: tuple[Path, dict]):
    "Outside a checkout, `transformer.viz.book_path` finds the committed files in the wheel's copy."
    site, env = installed
    env = {name: value for name, value in env.items() if name != "TRANSFORMER_BOOK_FILES"}
    code = "import transformer.viz as viz; print(viz.book_path('configs/multi30k-de-en.toml'))"
    result = subprocess.run([sys.executable, "-c", code], cwd=site.parent, env=env, capture_output=True, text=True,
                            timeout=60)
    if "has no attribute 'book_path'" in result.stderr:
        pytest.skip("transformer.viz.book_path is not in this version of the package")
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == site / "transformer" / "book_files" / "configs" / "multi30k-de-en.toml"
