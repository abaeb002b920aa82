"""Every chapter of the paper part ends with exercises a reader can check: an "## Exercises" section, last in the
chapter, of 2 to 4 exercises, each with a cell for the answer, a check cell that says right or wrong
(`transformer.viz.check`), a collapsed solution, and a hidden cell that asserts the check accepts the solution and
rejects a wrong answer (so that it cannot pass whatever it is given). Read from the notebooks as committed;
`nbdev-test` runs the cells."""

import json
import re
from pathlib import Path

import pytest

NBS = Path(__file__).resolve().parents[1] / "nbs"
PAPER_CHAPTERS = ["01_attention", "02_layers", "03_model", "03b_why_self_attention", "04_training", "05_decoding",
                  "06_copy_task"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def tags(cell: dict) -> set[str]:
    return set(cell["metadata"].get("tags", []))


def exercises(name: str) -> list[tuple[str, list[dict]]]:
    "The chapter's exercises after its last level-2 heading, which must be '## Exercises': (heading, cells)."
    cells = json.loads((NBS / f"{name}.ipynb").read_text())["cells"]
    sections = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and source(c).startswith("## ")]
    assert sections and source(cells[sections[-1]]).startswith("## Exercises"), \
        f"{name} does not end with an '## Exercises' section"
    found: list[tuple[str, list[dict]]] = []
    for cell in cells[sections[-1] + 1:]:
        if cell["cell_type"] == "markdown" and source(cell).startswith("### Exercise"):
            found.append((source(cell).splitlines()[0], []))
        elif found:
            found[-1][1].append(cell)
    return found


@pytest.mark.parametrize("name", PAPER_CHAPTERS)
def test_chapter_ends_with_two_to_four_exercises(name):
    found = exercises(name)
    assert 2 <= len(found) <= 4, f"{name} has {len(found)} exercises; 2 to 4 wanted"
    numbers = [int(re.match(r"### Exercise (\d+)", heading).group(1)) for heading, _ in found]
    assert numbers == list(range(1, len(found) + 1)), numbers


@pytest.mark.parametrize("name", PAPER_CHAPTERS)
def test_every_exercise_is_checked_and_solved(name):
    for heading, cells in exercises(name):
        code = [c for c in cells if c["cell_type"] == "code"]
        shown = [c for c in code if not tags(c) & {"hide-cell", "remove-cell"}]
        checks = [i for i, c in enumerate(code) if c in shown and re.search(r"\bcheck\(", source(c))]
        solutions = [i for i, c in enumerate(code) if "hide-cell" in tags(c) and source(c).startswith("# Solution")]
        asserts = [c for c in code if "remove-cell" in tags(c) and "verdict(" in source(c)]
        assert checks, f"{name}, {heading}: no check cell (a shown code cell calling check)"
        assert shown and code.index(shown[0]) < checks[0], f"{name}, {heading}: no answer cell before the check"
        assert solutions and solutions[0] > checks[0], f"{name}, {heading}: no collapsed solution after the check"
        assert not any("# Solution" in source(c) for c in shown), f"{name}, {heading}: a solution is shown"
        assert asserts, f"{name}, {heading}: no hidden cell asserting what the check accepts and rejects"
        hidden = "\n".join(source(c) for c in asserts)
        assert '.startswith("right")' in hidden and '.startswith("not yet")' in hidden, \
            f"{name}, {heading}: the check must be shown to accept the solution and to reject a wrong answer"


def test_the_book_explains_the_checker_and_the_introduction_has_no_exercises():
    "The introduction says how exercises are checked; the checker is exported with the book's machinery."
    intro = json.loads((NBS / "00_introduction.ipynb").read_text(encoding="utf-8"))["cells"]
    making = json.loads((NBS / "12_making_the_book.ipynb").read_text(encoding="utf-8"))["cells"]
    assert any(source(c).startswith("## How the exercises are checked") for c in intro)
    assert any("def verdict(" in source(c) and "#| export" in source(c) for c in making)
    assert not any(source(c).startswith("### Exercise") for c in intro)
