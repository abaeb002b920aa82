#!/usr/bin/env bash
# Build the book: run every notebook once, saving its outputs, render them to _build/html with warnings as
# errors, then put the notebooks back as they were (without outputs). Run after scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
saved=$(mktemp -d)
cp nbs/*.ipynb "$saved"/
trap 'cp "$saved"/*.ipynb nbs/ && rm -rf "$saved"' EXIT
python scripts/book_assets.py
nbdev-test --save --timing
jupyter-book build . --all -W --keep-going
echo "The book: $(pwd)/_build/html/index.html"
