"""Write every address derived from the repository's, and the package version every chapter needs.

The one source is `Repository = "https://github.com/OWNER/REPO"` under `[project.urls]` in pyproject.toml (with
`__version__` in transformer/__init__.py). From it this script writes: the Documentation URL (GitHub Pages), the
repository of the book (_config.yml), each chapter's "Open in Colab" link and install cell, the install line
of the README and the introduction, and the address of the release assets that published models are downloaded
from (a code cell of the published-model chapter). A fork changes that one line and runs `python scripts/repository.py`;
`--check` changes nothing and exits 1 if any file is out of date (tests/test_repository.py runs it).
"""
import argparse
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GITHUB = re.compile(r"https://github\.com/([\w.-]+)/([\w.-]+?)/?$")
# the first code cell of every chapter: {version} and {source} are filled in
INSTALL_CELL = '''\
# The package this chapter runs on; a fresh Colab runtime installs it here (the book's pages hide this cell).
import re

BOOK_NEEDS, BOOK_SOURCE = "{version}", "{source}"


def installed_transformer() -> tuple[int, ...] | None:
    "The importable transformer package's version as numbers, or None."
    try:
        import transformer
    except ImportError:
        return None
    return tuple(int(n) for n in re.findall(r"\\d+", transformer.__version__)[:3])


class NeedsPackage(Exception):
    "Shown as its one-line message, without a stack trace."

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


if installed_transformer() is None:
    %pip install -q "{{BOOK_SOURCE}}"
if (found := installed_transformer()) is None or found < tuple(map(int, BOOK_NEEDS.split("."))):
    have = "it is not installed" if found is None else "version " + ".".join(map(str, found)) + " is installed"
    raise NeedsPackage(f'This chapter needs transformer {{BOOK_NEEDS}} or newer ({{have}}): run '
                       f'%pip install -U "{{BOOK_SOURCE}}" and restart the runtime.')'''


def repository() -> tuple[str, str]:
    "(owner, name) of the GitHub repository named in pyproject.toml's [project.urls]."
    url = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    if not (match := GITHUB.match(url)):
        sys.exit(f"pyproject.toml: [project.urls] Repository must be https://github.com/OWNER/REPO, got {url!r}")
    return match[1], match[2]


def package_version() -> str:
    "`__version__` of transformer/__init__.py."
    return re.search(r'__version__ = "([\d.]+)"', (ROOT / "transformer/__init__.py").read_text())[1]


def install_source(owner: str, name: str) -> str:
    "What pip installs for a chapter: the package with the book's extras, from the repository's main branch."
    return f"transformer[book] @ git+https://github.com/{owner}/{name}"


def install_cell(owner: str, name: str) -> str:
    "The first code cell of every chapter."
    return INSTALL_CELL.format(version=package_version(), source=install_source(owner, name))


def derived_text(path: Path, text: str, owner: str, name: str) -> str:
    "`text` of `path` (not a notebook) with every derived address rewritten."
    url = f"https://github.com/{owner}/{name}"
    text = re.sub(r"git\+https://github\.com/[\w.-]+/[\w.-]+", f"git+{url}", text)
    if path.name == "pyproject.toml":
        text = re.sub(r'(?m)^Documentation = ".*"$', f'Documentation = "https://{owner.lower()}.github.io/{name}"',
                      text)
    if path.name == "_config.yml":
        text = re.sub(r"(?m)^(repository:\n  url: ).*$", rf"\g<1>{url}", text)
    return text


def derived_notebook(path: Path, text: str, owner: str, name: str) -> str:
    "A chapter with its Colab link and install cell (its first code cell) rewritten."
    nb = json.loads(text)
    cells = nb["cells"]
    colab = f"https://colab.research.google.com/github/{owner}/{name}/blob/main/nbs/{path.name}"
    heading = "".join(cells[0]["source"])
    heading, found = re.subn(r"\[Open this chapter in Colab\]\([^)]*\)", f"[Open this chapter in Colab]({colab})",
                             heading)
    if not found:
        sys.exit(f"{path}: the first cell has no '[Open this chapter in Colab](...)' link")
    cells[0]["source"] = heading.splitlines(keepends=True)
    first_code = next(c for c in cells if c["cell_type"] == "code")
    first_code["source"] = install_cell(owner, name).splitlines(keepends=True)
    if path.stem != "00_introduction":  # the introduction shows the cell once, to explain it
        first_code["metadata"]["tags"] = ["remove-cell"]
    releases = f"https://github.com/{owner}/{name}/releases/download"
    for cell in cells:
        if cell["cell_type"] == "markdown":
            cell["source"] = derived_text(path, "".join(cell["source"]), owner, name).splitlines(keepends=True)
        elif cell is not first_code:
            code = re.sub(r"https://github\.com/[\w.-]+/[\w.-]+/releases/download", releases, "".join(cell["source"]))
            cell["source"] = code.splitlines(keepends=True)
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def targets() -> list[Path]:
    "Every file that holds a derived address."
    return [ROOT / "pyproject.toml", ROOT / "_config.yml", ROOT / "README.md", *sorted((ROOT / "nbs").glob("*.ipynb"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file is out of date")
    args = parser.parse_args()
    owner, name = repository()
    stale = []
    for path in targets():
        text = path.read_text()
        derive = derived_notebook if path.suffix == ".ipynb" else derived_text
        if (new := derive(path, text, owner, name)) != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(new)
    if args.check:
        if stale:
            sys.exit(f"out of date with pyproject.toml's Repository: {', '.join(map(str, stale))}; "
                     "run python scripts/repository.py")
        print(f"every derived address names {owner}/{name}")
        return
    print(f"rewrote {len(stale)} file(s) for {owner}/{name}: {', '.join(map(str, stale)) or 'none'}")
    if stale:  # nbdev writes the repository's and documentation's addresses into the package's module index
        beside = Path(sys.executable).with_name("nbdev-export")  # the environment's own, even if not activated
        subprocess.run([str(beside) if beside.exists() else "nbdev-export"], cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
