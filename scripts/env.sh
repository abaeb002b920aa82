# Sourced by the other scripts: the project's virtual environment, and Multi30k from a local copy beside the
# checkout (CI, offline machines) instead of a download, unless MULTI30K_DIR is set already.
source .venv/bin/activate
if [ -z "${MULTI30K_DIR:-}" ] && [ -d ../shared/data/multi30k ]; then
  export MULTI30K_DIR="$(cd ../shared/data/multi30k && pwd)"
fi
