#!/usr/bin/env bash
# Create .venv and install the package with its book and development extras. torch is installed first and
# pinned by constraints.txt in every later step, so that no dependency pulls in another torch build.
set -euo pipefail
cd "$(dirname "$0")/.."
# The translation page's test drives Debian's chromium, and the book vendors onnxruntime-web with npm.
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
    sudo=$([ "$(id -u)" = 0 ] || echo sudo)
    $sudo apt-get update -q && $sudo apt-get install -y -q "${missing[@]}"
fi
python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -c constraints.txt torch
.venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e ".[dev]"
.venv/bin/python -c "import torch, transformer; print(f'torch {torch.__version__}, transformer {transformer.__version__}')"
