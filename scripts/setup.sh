#!/usr/bin/env bash
# Create .venv and install the package with its book and development extras. torch is installed first and
# pinned by constraints.txt in every later step, so that no dependency pulls in another torch build.
set -euo pipefail
cd "$(dirname "$0")/.."
# The translation page's test and scripts/check_pages.py drive Debian's chromium (headless, --no-sandbox), and the
# book vendors onnxruntime-web with npm. Without recommends: chromium's (through chromium-common) are a desktop's,
# about 160 packages (cups-pk-helper, system-config-printer, samba-libs, avahi, upower, udev, polkitd, python3) that
# a headless browser does not use, and chromium-sandbox (the setuid sandbox; we run without it); npm's are git,
# node-tap and (through node-gyp) build-essential, which `npm pack` does not need. Only the fonts matter: check_pages.py
# measures text, in the fonts the pages get on Debian, DejaVu Sans and DejaVu Sans Mono (the theme's system-ui and
# monospace stacks; fonts-dejavu-core), with Liberation (chromium-common's recommend) for Arial, Helvetica and
# Courier. Both are named: with fonts-liberation asked for, fontconfig's dependency on "fonts-dejavu-core | ... |
# fonts-liberation" no longer brings DejaVu in.
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v npm >/dev/null || missing+=(npm)
for fonts in fonts-dejavu-core fonts-liberation; do
    if command -v dpkg-query >/dev/null \
        && ! dpkg-query -W -f='${Status}' "$fonts" 2>/dev/null | grep -q "ok installed"; then
        missing+=("$fonts")
    fi
done
if ((${#missing[@]})); then
    sudo=$([ "$(id -u)" = 0 ] || echo sudo)
    $sudo apt-get update -q && $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -c constraints.txt torch
.venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e ".[dev]"
.venv/bin/python -c "import torch, transformer; print(f'torch {torch.__version__}, transformer {transformer.__version__}')"
