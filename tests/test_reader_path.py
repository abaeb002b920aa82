"""The book's first reader came for the paper: the table of contents puts the paper first and the software's machinery
after the full run, and the pages up to the full run show little code. `python tests/test_reader_path.py` prints
the visible lines of code of every page, in the book's order."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = {"remove-cell", "hide-input", "hide-cell", "remove-input"}  # Jupyter Book's tags that keep code off a page
INTRODUCTION_LIMIT = 40  # lines of code the introduction shows
PATH_LIMIT = 2500  # lines of code the pages show from the introduction up to and including the full run
PARTS = {  # the parts of _toc.yml, in order, with the chapters of each that the order tests name
    "The paper": ["01_attention", "02_layers", "03_model", "03b_why_self_attention", "04_training", "05_decoding",
                  "06_copy_task"],
    "The full run": ["09_multi30k", "09a_recipes_and_rivals"],
    "The rest of the paper": ["09b_model_variations", "09c_treebank", "09c_parsing", "09d_conclusion"],
    "Beyond the paper": ["09e_decoder_only"],
    "The machinery of a real run": ["04a_hardware", "04b_checkpoints", "04b_model_folders", "04c_data_parallel",
                                    "04d_budget", "04d_trainer", "07_data", "07a_run", "07b_translation",
                                    "07b_translation_run", "05b_fast_decoding", "07c_scoring", "07d_report", "08_cli",
                                    "12_making_the_book"],
    "Appendix": ["10_benchmarks"],
}


def table_of_contents() -> tuple[str, list[tuple[str, list[str]]]]:
    "The root chapter and the (caption, chapters) of every part of _toc.yml, chapters by their file's stem."
    root, parts = "", []
    for line in (ROOT / "_toc.yml").read_text(encoding="utf-8").splitlines():
        if found := re.match(r"root:\s*(\S+)", line):
            root = Path(found[1]).name
        elif found := re.match(r"\s*- caption:\s*(.+)", line):
            parts.append((found[1].strip(), []))
        elif found := re.match(r"\s*- file:\s*(\S+)", line):
            parts[-1][1].append(Path(found[1]).name)
    return root, parts


def visible_code_lines(chapter: str) -> int:
    "Lines of code a chapter's page shows: code cells not tagged to be hidden, without nbdev's `#|` lines."
    cells = json.loads((ROOT / "nbs" / f"{chapter}.ipynb").read_text(encoding="utf-8"))["cells"]
    return sum(1 for cell in cells if cell["cell_type"] == "code" and not HIDDEN & set(cell["metadata"].get("tags", []))
               for line in "".join(cell["source"]).splitlines() if not line.startswith("#|"))


def reader_path() -> list[str]:
    "The pages from the introduction up to and including the full run, in the book's order."
    root, parts = table_of_contents()
    pages = [root] + [chapter for _, chapters in parts for chapter in chapters]
    return pages[: pages.index("09_multi30k") + 1]


def test_parts_tell_the_story():
    """The parts come in the story's order; each holds its chapters in the paper's order (the machinery in the order
    it is built), and every notebook is a page."""
    root, parts = table_of_contents()
    assert root == "00_introduction"
    assert [caption.split(" (")[0] for caption, _ in parts] == list(PARTS)
    for (caption, chapters), expected in zip(parts, PARTS.values()):
        named = [c for c in chapters if c in expected]
        assert named == expected, f"{caption}: {named} is not in the order {expected}"
    pages = [root] + [c for _, chapters in parts for c in chapters]
    assert sorted(pages) == sorted(p.stem for p in (ROOT / "nbs").glob("*.ipynb")), "every notebook is one page"


def test_machinery_comes_after_the_full_run():
    path = reader_path()
    assert path[0] == "00_introduction" and path[1:-1] == PARTS["The paper"] and path[-1] == "09_multi30k"
    assert not set(path) & set(PARTS["The machinery of a real run"])


def test_the_introduction_opens_with_the_idea():
    assert (lines := visible_code_lines("00_introduction")) <= INTRODUCTION_LIMIT, f"{lines} lines of code shown"


def test_the_way_to_the_full_run_shows_little_code():
    lines = {chapter: visible_code_lines(chapter) for chapter in reader_path()}
    assert sum(lines.values()) <= PATH_LIMIT, f"{sum(lines.values())} lines of code shown: {lines}"


if __name__ == "__main__":
    root, parts = table_of_contents()
    total = 0
    for caption, chapters in [("", [root])] + parts:
        for chapter in chapters:
            total += (lines := visible_code_lines(chapter))
            print(f"{caption[:30]:30} {chapter:26} {lines:5} {total:6}")
    print(f"up to and including the full run: {sum(map(visible_code_lines, reader_path()))} (limit {PATH_LIMIT})")
