#!/usr/bin/env bash
# Build the book: run every notebook once, saving its outputs, render them to _build/html with warnings as
# errors, then strip the outputs again so that nbs/ stays as committed. Run after scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
trap 'nbdev-clean' EXIT
python scripts/book_assets.py
nbdev-test --save --timing
jupyter-book build . --all -W --keep-going
echo "The book: $(pwd)/_build/html/index.html"
