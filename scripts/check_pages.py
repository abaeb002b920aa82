"""Look at the built book as a reader would: open every page of `_build/html` in headless Chromium at a given window
size and report the code blocks that need a horizontal scroll bar, and any `#|` line or install cell left on a page.
Optionally save screenshots. Needs `pip install playwright` and a Chromium (Debian: `apt-get install chromium`).

    python scripts/check_pages.py [--width 1400] [--height 2600] [--shots DIR] [--html _build/html]
"""

import argparse
import shutil
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

SCROLLING = """() => [...document.querySelectorAll('div.highlight pre, div.cell_output pre')]
    .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
    .map(e => ({chars: Math.max(...e.innerText.split('\\n').map(l => l.length)), text: e.innerText.slice(0, 80)}))"""
LEFTOVERS = """() => [...document.querySelectorAll('div.cell_input pre')].map(e => e.innerText)
    .filter(t => t.split('\\n').some(l => l.trimStart().startsWith('#|')) || t.includes('%pip install'))"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--html", default="_build/html")
    parser.add_argument("--width", type=int, default=1400)
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
        browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": args.width, "height": args.height})
        for path in pages:
            page.goto(path.resolve().as_uri())
            scrolling, leftovers = page.evaluate(SCROLLING), page.evaluate(LEFTOVERS)
            if path.stem == "00_introduction":  # the front page shows the install cell once, to explain it
                leftovers = [text for text in leftovers if "%pip install" not in text]
            problems += len(scrolling) + len(leftovers)
            print(f"{path.stem}: {len(scrolling)} code block(s) scroll, {len(leftovers)} with #| or install lines")
            for block in scrolling[:3]:
                print(f"    {block['chars']} characters: {block['text']!r}")
            if args.shots:
                Path(args.shots).mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(Path(args.shots) / f"{path.stem}.png"))
        browser.close()
    print(f"{problems} problem(s) on {len(pages)} pages at {args.width} px")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
