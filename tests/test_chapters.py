"""Every chapter runs from its notebook alone, the way Colab runs it: the .ipynb copied into an empty folder outside
the repository, the package installed from a wheel (not the checkout), the network blocked, and
TRANSFORMER_BOOK_QUICK=1 (chapters that train do their short run). And the install cell, in a runtime without the
package or with an older one, says in one line what to install, without a stack trace."""

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "nbs").glob("*.ipynb"))
# Python code run first by every process of the chapter runs (kernels, pip): no connection leaves the machine.
NO_NETWORK = '''
import socket

_connect, _getaddrinfo = socket.socket.connect, socket.getaddrinfo
LOCAL = ("127.", "::1", "localhost")


def _local(host) -> bool:
    return not isinstance(host, str) or host.startswith(LOCAL)


def connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address[0]):
        raise OSError(f"the network is blocked in this test (connect to {address[0]})")
    return _connect(self, address)


def getaddrinfo(host, *args, **kwargs):
    if not _local(host if not isinstance(host, bytes) else host.decode()):
        raise socket.gaierror(f"the network is blocked in this test (lookup of {host})")
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect, socket.getaddrinfo = connect, getaddrinfo
'''
# Runs one notebook with a Jupyter kernel, as Colab would, and prints where the package came from.
RUNNER = '''
import sys
import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

nb = nbformat.read(sys.argv[1], as_version=4)
nb.cells.append(nbformat.v4.new_code_cell("import transformer; print('TRANSFORMER FROM', transformer.__file__)"))
kernel = KernelManager(kernel_name="python3", transport="ipc")  # sockets as files in this folder: TCP ports, chosen
# free and then bound, can be taken by the kernel of the chapter that runs beside this one
NotebookClient(nb, km=kernel, timeout=900, resources={"metadata": {"path": sys.argv[2]}}).execute()
print("".join(output.get("text", "") for output in nb.cells[-1].outputs).strip())  # streams may come in pieces
'''


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A folder holding the package installed from a freshly built wheel, and the no-network hook."""
    tmp = tmp_path_factory.mktemp("wheel")
    built = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp),
                 str(ROOT)], cwd=tmp)
    assert built.returncode == 0, built.stderr
    site = tmp / "site"
    wheel = next(tmp.glob("transformer-*.whl"))
    done = run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)])
    assert done.returncode == 0, done.stderr
    (site / "sitecustomize.py").write_text(NO_NETWORK)
    return site


def fetch_data() -> None:
    """Multi30k and the treebank sample into their caches (or checked in $MULTI30K_DIR / $PTB_DIR), before the
    network is blocked: chapters read them as a reader's second run would."""
    from transformer.data import MULTI30K_SPLITS, multi30k_file
    from transformer.treebank import treebank_zip

    for split in ("train", "val", "test2016", "test2017", "mscoco2017"):
        for lang in ("de", "en"):
            multi30k_file(f"{MULTI30K_SPLITS[split]}.{lang}.gz")
    treebank_zip()


def run_chapter(chapter: Path, site: Path, folder: Path) -> tuple[int, str]:
    """Copy `chapter` alone into `folder` and execute it there, with the wheel's package and no network."""
    folder.mkdir()
    shutil.copy(chapter, folder / chapter.name)
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMER_BOOK_FILES"}
    env |= {"PYTHONPATH": str(site), "TRANSFORMER_BOOK_QUICK": "1", "OMP_NUM_THREADS": "1",
            "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    done = run([sys.executable, "-c", RUNNER, str(folder / chapter.name), str(folder)], cwd=folder, env=env,
               timeout=1800)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def chapter_runs(installed, tmp_path_factory, request) -> dict[str, tuple[int, str]]:
    """Every selected chapter (all of them, or those that `-k` picks) run outside the repository, two at a time (one
    thread each)."""
    selected = {item.callspec.params["chapter"] for item in request.session.items
                if item.originalname == "test_chapter_runs_from_its_notebook_alone"}
    chapters = [c for c in CHAPTERS if c.stem in selected]
    fetch_data()
    tmp = tmp_path_factory.mktemp("chapters")
    assert not tmp.resolve().is_relative_to(ROOT)
    with ThreadPoolExecutor(2) as pool:
        runs = pool.map(lambda c: run_chapter(c, installed, tmp / c.stem), chapters)
        return {c.stem: r for c, r in zip(chapters, runs)}


@pytest.mark.parametrize("chapter", [c.stem for c in CHAPTERS])
def test_chapter_runs_from_its_notebook_alone(chapter, chapter_runs, installed):
    code, output = chapter_runs[chapter]
    assert code == 0, output[-3000:]
    assert f"TRANSFORMER FROM {installed}" in output, output[-500:]  # the wheel's package, not the checkout


def install_cell() -> str:
    """The first code cell of the chapters (scripts/repository.py writes the same one into each)."""
    cells = json.loads(CHAPTERS[1].read_text())["cells"]
    return "".join(next(c for c in cells if c["cell_type"] == "code")["source"])


def run_install_cell(tmp_path: Path, hide_package: bool, pythonpath: str = "") -> str:
    """The install cell run by IPython (as in a kernel) in a runtime where pip cannot fetch anything."""
    script = tmp_path / "cell.py"
    script.write_text(install_cell())
    hide = ("import importlib.abc, sys\n"
            "class Hide(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'transformer':\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, Hide())\n") if hide_package else ""
    code = (hide + "from pathlib import Path\nfrom IPython.core.interactiveshell import InteractiveShell\n"
            f"InteractiveShell.instance().run_cell(Path({str(script)!r}).read_text())\n")
    git = tmp_path / "gitconfig"  # every GitHub address points at a folder that does not exist: pip fails at once
    git.write_text('[url "file:///nonexistent/"]\n\tinsteadOf = https://github.com/\n')
    env = os.environ | {"GIT_CONFIG_GLOBAL": str(git), "GIT_CONFIG_NOSYSTEM": "1", "PIP_NO_INDEX": "1",
                        "PIP_TARGET": str(tmp_path / "pip-target"), "PYTHONPATH": pythonpath}
    done = run([sys.executable, "-c", code], cwd=tmp_path, env=env, timeout=300)
    return done.stdout + done.stderr


def test_install_cell_without_the_package_says_what_to_install(tmp_path):
    output = run_install_cell(tmp_path, hide_package=True)
    lines = [line for line in output.splitlines() if "This chapter needs transformer" in line]
    assert len(lines) == 1 and "it is not installed" in lines[0] and "%pip install -U" in lines[0], output
    assert "Traceback" not in output and "NeedsPackage" not in output, output


def test_install_cell_with_an_older_package_says_what_to_install(tmp_path):
    old = tmp_path / "old" / "transformer"
    old.mkdir(parents=True)
    (old / "__init__.py").write_text('__version__ = "0.1.0"\n')
    output = run_install_cell(tmp_path, hide_package=False, pythonpath=str(old.parent))
    lines = [line for line in output.splitlines() if "This chapter needs transformer" in line]
    assert len(lines) == 1 and "version 0.1.0 is installed" in lines[0] and "restart the runtime" in lines[0], output
    assert "Traceback" not in output, output


def test_install_cell_with_this_package_does_nothing(tmp_path):
    assert run_install_cell(tmp_path, hide_package=False).strip() == ""
