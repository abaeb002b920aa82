"""Look at the built book as a reader would: open every page of `_build/html` in headless Chromium, in a window of a
given size that shows a desktop browser's vertical scroll bar and the page's right-hand contents bar, and report
every code block, table or other element of a page that needs a horizontal scroll bar (hidden cells opened), any
`#|` line or install cell left on a page, a search box beside the sidebar's, and every error a page logs to the
browser's console or throws uncaught (the site's other pages too: index, search, genindex; each page opened as the
first of a visit). Exit code 1 if there is one. Optionally save screenshots.
Needs `pip install playwright` and a Chromium (Debian: `apt-get install chromium`).

    python scripts/check_pages.py [--width 1400] [--height 2600] [--shots DIR] [--html _build/html]
"""

import argparse
import shutil
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

OPEN_HIDDEN_CELLS = "() => document.querySelectorAll('.bd-article details').forEach(d => { d.open = true; })"
# Whether the right-hand contents bar is on the page but not shown (a page without sections has none).
CONTENTS_BAR_HIDDEN = """() => { const bar = document.querySelector('.bd-sidebar-secondary');
    return bar !== null && bar.offsetWidth === 0; }"""
# Elements that scroll sideways, and elements that stick out of the article's column without a scroll bar.
SCROLLING = """() => {
  const article = document.querySelector('.bd-article');
  const style = getComputedStyle(article);
  const right = article.getBoundingClientRect().right - parseFloat(style.paddingRight) + 1;
  const found = [...article.querySelectorAll('*')].filter(e => e.offsetParent !== null && (
      (['auto', 'scroll'].includes(getComputedStyle(e).overflowX) && e.scrollWidth > e.clientWidth + 1)
      || (['PRE', 'TABLE'].includes(e.tagName) && e.getBoundingClientRect().right > right)));
  return found.filter(e => !found.some(other => other !== e && other.contains(e))).map(e => {
    const kind = e.querySelector('table') || e.tagName === 'TABLE' ? 'table' : e.tagName === 'PRE'
        || e.querySelector('pre') ? 'code' : e.tagName.toLowerCase() + '.' + e.className;
    const lines = e.innerText.split('\\n');
    return {kind, over: Math.max(e.scrollWidth - e.clientWidth, 0), chars: Math.max(...lines.map(l => l.length)),
            text: lines.reduce((a, b) => (b.length > a.length ? b : a)).slice(0, 60)};
  });
}"""
# The search boxes a reader sees around the page's content (one: the sidebar's; a narrow window shows a search button
# instead). The search page's own form, in its content, is not one of them.
SEARCH_BOXES = """() => [...document.querySelectorAll('.search-button-field, form.bd-search')]
    .filter(e => e.offsetParent !== null && !e.closest('main')).length"""
LEFTOVERS = """() => [...document.querySelectorAll('div.cell_input pre')].map(e => e.innerText)
    .filter(t => t.split('\\n').some(l => l.trimStart().startsWith('#|')) || t.includes('%pip install'))"""


def watch_errors(page) -> list[str]:
    """A list that fills with every error `page` logs to the console (`console.error`, a resource that failed to
    load) and every exception one of its scripts throws uncaught, from now on."""
    errors: list[str] = []

    def on_console(message) -> None:
        if message.type == "error":
            where = message.location.get("url", "")
            where = f" ({where.rsplit('/', 1)[-1]}:{message.location.get('lineNumber')})" if where else ""
            errors.append(f"console error: {message.text}{where}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: errors.append(f"uncaught {error.name}: {error.message}"))
    return errors


def check(page, path: Path, errors: list[str], width: int, chapter: bool) -> int:
    """Open one page, print what is wrong with it and return how many problems: its script errors and its search
    boxes, and for a chapter (`chapter`) the blocks that scroll sideways and the `#|` or install lines. `errors` is
    `page`'s list from `watch_errors`."""
    page.goto(path.resolve().as_uri(), wait_until="networkidle")  # its scripts have run
    scrolling, leftovers, hidden_bar = [], [], False
    found = []
    if chapter:
        hidden_bar = page.evaluate(CONTENTS_BAR_HIDDEN)
        if not hidden_bar:
            page.evaluate(OPEN_HIDDEN_CELLS)
            scrolling, leftovers = page.evaluate(SCROLLING), page.evaluate(LEFTOVERS)
            if path.stem == "00_introduction":  # the front page shows the install cell once, to explain it
                leftovers = [text for text in leftovers if "%pip install" not in text]
            found = [f"{len(scrolling)} block(s) scroll sideways", f"{len(leftovers)} with #| or install lines"]
    search_boxes = page.evaluate(SEARCH_BOXES)
    # Read last: playwright may hand over a message the page logged while loading only during a later call.
    logged = list(errors)
    found.append(f"{len(logged)} script error(s)")
    if search_boxes != 1:
        found.append(f"{search_boxes} search boxes, not 1")
    print(f"{path.stem if chapter else path.name}: {', '.join(found)}")
    if hidden_bar:
        print(f"    the right-hand contents bar is hidden at {width} px: widths are not checked")
    for block in scrolling:
        print(f"    {block['kind']}, {block['over']} px too wide, longest line {block['chars']} characters: "
              f"{block['text']!r}")
    for error in logged:
        print(f"    {error}")
    return len(logged) + hidden_bar + len(scrolling) + len(leftovers) + (search_boxes != 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", default="_build/html")
    parser.add_argument("--width", type=int, default=1400, help="window width in px, the scroll bar included")
    parser.add_argument("--height", type=int, default=2600)
    parser.add_argument("--shots", help="folder for one screenshot per page (the top, window-sized)")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    chapters = sorted(Path(args.html, "nbs").glob("*.html"))
    if not chapters:
        print(f"no pages in {args.html}/nbs: build the book first (bash scripts/book.sh)", file=sys.stderr)
        return 2
    others = sorted(Path(args.html).glob("*.html"))  # index.html (a redirect to the first chapter), search, genindex
    problems = 0
    with sync_playwright() as p:
        # Headless Chromium hides scroll bars unless told not to; a reader's desktop browser shows one (15 px).
        browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox", "--disable-gpu"],
                                    ignore_default_args=["--hide-scrollbars"])
        for path in others + chapters:
            # Each page in a fresh context, as the first page a reader opens: nothing in localStorage yet (the
            # theme's mode, for one), so that an error of a first visit shows on every page, not only the first.
            context = browser.new_context(viewport={"width": args.width, "height": args.height})
            page = context.new_page()
            chapter = path in chapters
            problems += check(page, path, watch_errors(page), args.width, chapter)
            if args.shots and chapter:
                Path(args.shots).mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(Path(args.shots) / f"{path.stem}.png"))
            context.close()
        browser.close()
    print(f"{problems} problem(s) on {len(chapters) + len(others)} pages in a window {args.width} px wide")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
