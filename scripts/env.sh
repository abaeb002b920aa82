# Sourced by the other scripts: the project's virtual environment, and Multi30k and the Penn Treebank sample from
# local copies beside the checkout (CI, offline machines) instead of downloads, unless MULTI30K_DIR / PTB_DIR are set.
source .venv/bin/activate
if [ -z "${MULTI30K_DIR:-}" ] && [ -d ../shared/data/multi30k ]; then
  export MULTI30K_DIR="$(cd ../shared/data/multi30k && pwd)"
fi
if [ -z "${PTB_DIR:-}" ] && [ -d ../shared/data/ptb-sample ]; then
  export PTB_DIR="$(cd ../shared/data/ptb-sample && pwd)"
fi
