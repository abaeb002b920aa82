"""Look at the built book as a reader would: open every page of `_build/html` in headless Chromium, in a window of a
given size that shows a desktop browser's vertical scroll bar and the page's right-hand contents bar, and report
every code block, table or other element of a page that needs a horizontal scroll bar (hidden cells opened), and any
`#|` line or install cell left on a page. Exit code 1 if there is one. Optionally save screenshots.
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
LEFTOVERS = """() => [...document.querySelectorAll('div.cell_input pre')].map(e => e.innerText)
    .filter(t => t.split('\\n').some(l => l.trimStart().startsWith('#|')) || t.includes('%pip install'))"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", default="_build/html")
    parser.add_argument("--width", type=int, default=1400, help="window width in px, the scroll bar included")
    parser.add_argument("--height", type=int, default=2600)
    parser.add_argument("--shots", help="folder for one screenshot per page (the top, window-sized)")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    pages = sorted(Path(args.html, "nbs").glob("*.html"))
    if not pages:
        print(f"no pages in {args.html}/nbs: build the book first (bash scripts/book.sh)", file=sys.stderr)
        return 2
    problems = 0
    with sync_playwright() as p:
        # Headless Chromium hides scroll bars unless told not to; a reader's desktop browser shows one (15 px).
        browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox", "--disable-gpu"],
                                    ignore_default_args=["--hide-scrollbars"])
        page = browser.new_page(viewport={"width": args.width, "height": args.height})
        for path in pages:
            page.goto(path.resolve().as_uri())
            if page.evaluate(CONTENTS_BAR_HIDDEN):
                print(f"{path.stem}: the right-hand contents bar is hidden at {args.width} px: widths are not checked")
                problems += 1
                continue
            page.evaluate(OPEN_HIDDEN_CELLS)
            scrolling, leftovers = page.evaluate(SCROLLING), page.evaluate(LEFTOVERS)
            if path.stem == "00_introduction":  # the front page shows the install cell once, to explain it
                leftovers = [text for text in leftovers if "%pip install" not in text]
            problems += len(scrolling) + len(leftovers)
            print(f"{path.stem}: {len(scrolling)} block(s) scroll sideways, {len(leftovers)} with #| or install lines")
            for block in scrolling:
                print(f"    {block['kind']}, {block['over']} px too wide, longest line {block['chars']} characters: "
                      f"{block['text']!r}")
            if args.shots:
                Path(args.shots).mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(Path(args.shots) / f"{path.stem}.png"))
        browser.close()
    print(f"{problems} problem(s) on {len(pages)} pages in a window {args.width} px wide")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
