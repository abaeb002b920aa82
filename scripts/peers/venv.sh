#!/usr/bin/env bash
# The toolkit's own virtual environment, with our torch pin (made once; README.md says what each toolkit needs):
#
#   bash scripts/peers/venv.sh joeynmt|opennmt VENV
set -euo pipefail
cd "$(dirname "$0")/../.."
TOOLKIT=$1
VENV=$2
if [ ! -f "$VENV/.peer-ready" ]; then  # the toolkit's own environment, with our torch pin
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -c constraints.txt torch
  if [ "$TOOLKIT" = joeynmt ]; then
    # joeynmt 2.3.0 imports importlib_metadata without declaring it
    "$VENV/bin/pip" install -q --disable-pip-version-check -c constraints.txt "joeynmt==2.3.0" importlib-metadata
  else
    # OpenNMT-py 3.5.1 declares torch<2.3; pip then picks 3.0.4 instead. Its other requirements, then 3.5.1 itself
    # without the torch pin (README.md: what that takes on torch 2.13)
    "$VENV/bin/pip" install -q --disable-pip-version-check -c constraints.txt configargparse "ctranslate2>=4,<5" \
      "tensorboard>=2.3" flask waitress "pyonmttok>=1.37,<2" pyyaml sacrebleu rapidfuzz pyahocorasick \
      fasttext-wheel spacy six
    "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "opennmt-py==3.5.1"
  fi
  touch "$VENV/.peer-ready"
fi
