"""scripts/check_pages.py fails on a page that logs an error in Chromium: tiny sites (file://, a page of the theme's
shape) that log to the console, throw, declare a `const` twice (as sphinx-thebe's script did when Sphinx wrote it
twice) or show a second search box fail it, and a clean one passes."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).is_file():
    pytest.skip("chromium is not installed: bash scripts/setup.sh installs Debian's", allow_module_level=True)

CHECK = Path(__file__).resolve().parents[1] / "scripts/check_pages.py"
SEARCH = '<button class="search-button-field">Search</button>'


def chapter(head: str = "", body: str = "", header: str = "") -> str:
    "A page of the book's shape: `header`, a sidebar with the search box, the article, the right-hand contents bar."
    return (f'<!doctype html><html><head><meta charset="utf-8">{head}</head><body style="display: flex">{header}'
            f'<nav class="bd-sidebar-primary" style="width: 200px">{SEARCH}</nav>'
            f'<main style="flex: 1"><article class="bd-article"><h1>A chapter</h1><pre>print(1)</pre>{body}'
            '</article></main><nav class="bd-sidebar-secondary" style="width: 150px">Contents</nav></body></html>')


def check(tmp_path: Path, pages: dict[str, str]) -> subprocess.CompletedProcess:
    "Run check_pages.py on a site of `pages` (paths under the site's root: text)."
    for name, text in pages.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return subprocess.run([sys.executable, str(CHECK), "--html", str(tmp_path), "--chromium", CHROMIUM],
                          capture_output=True, text=True, timeout=300)


def test_a_clean_site_passes(tmp_path):
    done = check(tmp_path, {"nbs/01_clean.html": chapter("<script>console.log('only a log line')</script>"),
                            "search.html": chapter()})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "01_clean: 0 block(s) scroll sideways, 0 with #| or install lines, 0 script error(s)" in done.stdout
    assert "0 problem(s) on 2 pages" in done.stdout


@pytest.mark.parametrize("head, body, reported", [
    ("<script>console.error('Got invalid theme mode: . Resetting to auto.')</script>", "",
     "console error: Got invalid theme mode: . Resetting to auto."),
    ('<script>const THEBE_JS_URL = "a"</script><script>const THEBE_JS_URL = "a"</script>', "",
     "uncaught SyntaxError: Identifier 'THEBE_JS_URL' has already been declared"),
    ("", "<script>document.addEventListener('DOMContentLoaded', () => { null.x; })</script>",
     "uncaught TypeError: Cannot read properties of null (reading 'x')"),
    ('<script src="missing.js"></script>', "", "console error: Failed to load resource"),
], ids=["console.error", "const declared twice", "uncaught when loaded", "missing script"])
def test_a_script_error_fails_the_check(tmp_path, head, body, reported):
    done = check(tmp_path, {"nbs/01_errors.html": chapter(head, body), "nbs/02_clean.html": chapter()})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "01_errors: 0 block(s) scroll sideways, 0 with #| or install lines, 1 script error(s)" in done.stdout
    assert f"    {reported}" in done.stdout
    assert "02_clean: 0 block(s) scroll sideways, 0 with #| or install lines, 0 script error(s)" in done.stdout
    assert "1 problem(s) on 2 pages" in done.stdout


def test_an_error_on_the_search_page_fails_the_check(tmp_path):
    "The site's pages outside nbs/ (index, search, genindex) are opened too, for their script errors."
    done = check(tmp_path, {"nbs/01_clean.html": chapter(), "search.html": chapter("<script>throw new Error('x')"
                                                                                    "</script>")})
    assert done.returncode == 1 and "search.html: 1 script error(s)\n    uncaught Error: x" in done.stdout, done.stdout


def test_every_page_is_a_first_visit(tmp_path):
    "An error logged only while localStorage is empty (a reader's first page) shows on every page, not the first."
    first_visit = ("<script>if (!localStorage.getItem('seen')) { console.error('first visit'); }"
                   " localStorage.setItem('seen', '1')</script>")
    done = check(tmp_path, {f"nbs/0{i}_page.html": chapter(first_visit) for i in range(1, 4)})
    assert done.returncode == 1 and done.stdout.count("console error: first visit") == 3, done.stdout


def test_a_second_search_box_fails_the_check(tmp_path):
    "A search box in a header bar, beside the sidebar's (the search page's own form, in its content, is not one)."
    done = check(tmp_path, {"nbs/01_two.html": chapter(header=f"<header>{SEARCH}</header>"),
                            "nbs/02_one.html": chapter(body='<form class="bd-search"><input></form>')})
    assert done.returncode == 1 and "01_two: 0 block(s) scroll sideways, 0 with #| or install lines, " \
        "0 script error(s), 2 search boxes, not 1" in done.stdout, done.stdout
