"""The book reads like a book: code fits the page, plumbing is out of the reader's way, and nothing on a page needs
the network. These check the notebooks as committed, so every new chapter follows the same rules."""

import json
import re
from pathlib import Path

import pytest

NBS = sorted((Path(__file__).resolve().parents[1] / "nbs").glob("*.ipynb"))
WIDTH = 120  # characters of code that fit the content column at 1400 px (_static/book.css; README, "Developing")


def code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("path", NBS, ids=[p.stem for p in NBS])
def test_code_fits_the_page(path):
    """No line of code is wider than the content column, so no code cell needs a horizontal scroll bar."""
    long = [line for cell in code_cells(path) for line in "".join(cell["source"]).splitlines() if len(line) > WIDTH]
    assert not long, f"{len(long)} line(s) over {WIDTH} characters, e.g. {long[0]!r}"


@pytest.mark.parametrize("path", NBS, ids=[p.stem for p in NBS])
def test_plumbing_is_hidden(path):
    """The Colab install cell is removed from the page (chapter 00 keeps it collapsed, to explain it) and the cells that
    set nbdev's module are collapsed; both still run in Colab and in nbdev-test."""
    for cell in code_cells(path):
        source, tags = "".join(cell["source"]), cell["metadata"].get("tags", [])
        if "%pip install" in source and path.stem != "00_introduction":
            assert "remove-cell" in tags, source[:80]
        if "#| default_exp" in source:
            assert {"hide-cell", "remove-cell"} & set(tags), source[:80]


@pytest.mark.parametrize("path", NBS, ids=[p.stem for p in NBS])
def test_pages_load_no_external_images(path):
    """Markdown cells link to Colab with text: an external badge image is a broken image offline."""
    prose = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown")
    assert not re.findall(r"!\[[^\]]*\]\(https?://", prose)
