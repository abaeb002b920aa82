#!/usr/bin/env bash
# Every check, in order: notebooks and package in sync, every notebook runs and the book renders without a
# warning and its pages fit a 1400-px window, then pytest (last, so that its summary closes the output). Run after
# scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

snapshot() { find nbs transformer pyproject.toml -type f -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum; }
before=$(snapshot)
nbdev-clean
nbdev-export
after=$(snapshot)
if [ "$before" != "$after" ]; then
  echo "nbs/ and transformer/ are not in sync: nbdev-clean + nbdev-export changed these files:" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
  echo "Run nbdev-clean && nbdev-export and commit the result (never edit transformer/ by hand)." >&2
  exit 1
fi
echo "nbs/ and transformer/ are in sync."

bash scripts/book.sh
python scripts/check_pages.py  # no code block or table scrolls sideways at 1400 px
python -m pytest
