#!/usr/bin/env bash
# One peer toolkit, trained and scored under the same conditions as our full run (scripts/multi30k.sh); README.md
# in this folder says what "the same" means and where each recipe comes from. Run after scripts/setup.sh:
#
#   nice -n 10 bash scripts/peers/run.sh joeynmt     # → results/peers/joeynmt.json (60 training minutes)
#   nice -n 10 bash scripts/peers/run.sh opennmt     # → results/peers/opennmt.json
#
# Settings (environment): PEER_MINUTES (training budget, default 60), PEER_OUT (run folder, default
# runs/peers/TOOLKIT), PEER_REPORT (default results/peers/TOOLKIT.json), PEER_VENV (the toolkit's own virtual
# environment, default ../venvs/TOOLKIT beside the checkout; made on first use), PEER_RECIPE (default
# scripts/peers/TOOLKIT.yaml; scripts/peers/opennmt-rnn.yaml is OpenNMT-py's recurrent model), PEER_SET (changes to
# the recipe, "KEY=VALUE …": a screen's winner, a seed), PEER_BEAMS and PEER_ALPHAS (the decoding grid tuned on val,
# default ours: 4 6 and 0.6 … 1.6), PEER_VALID_EVERY (validate every N updates instead of the recipe's 250) and
# PEER_EVAL_LINES (validate, tune and test on the first N pairs of each set only): the last two for smoke tests. A
# short smoke test that writes nothing into the repository:
#
#   PEER_MINUTES=3 PEER_VALID_EVERY=5 PEER_EVAL_LINES=40 PEER_BEAMS=4 PEER_ALPHAS="0.6 1.0" \
#     PEER_OUT=/tmp/peers/joeynmt PEER_REPORT=/tmp/peers/joeynmt.json nice -n 19 bash scripts/peers/run.sh joeynmt
set -euo pipefail
cd "$(dirname "$0")/../.."
TOOLKIT=${1:-}
case "$TOOLKIT" in
  joeynmt|opennmt) ;;
  *) echo "usage: bash scripts/peers/run.sh joeynmt|opennmt (got '${TOOLKIT}')" >&2; exit 2 ;;
esac
source scripts/env.sh
MINUTES=${PEER_MINUTES:-60}
OUT=${PEER_OUT:-runs/peers/$TOOLKIT}
REPORT=${PEER_REPORT:-results/peers/$TOOLKIT.json}
VENV=${PEER_VENV:-../venvs/$TOOLKIT}
read -r -a BEAMS <<< "${PEER_BEAMS:-4 6}"
read -r -a ALPHAS <<< "${PEER_ALPHAS:-0.6 0.8 1.0 1.2 1.4 1.6}"
read -r -a SETTINGS_CHANGED <<< "${PEER_SET:-}"  # KEY=VALUE changes to the recipe: a screen's winner, a seed

bash scripts/peers/venv.sh "$TOOLKIT" "$VENV"

SETTINGS="PEER_MINUTES=$MINUTES"  # the command, with every setting that differs from the defaults
for name in $(compgen -v PEER_ | grep -v '^PEER_MINUTES$' | sort); do SETTINGS+=" $name=$(printf %q "${!name}")"; done
RUNNER=("$VENV/bin/python" -W ignore "scripts/peers/${TOOLKIT}_run.py")
RECIPE=${PEER_RECIPE:-scripts/peers/$TOOLKIT.yaml}
python scripts/peers/prepare.py --out "$OUT/data" ${PEER_EVAL_LINES:+--eval-lines "$PEER_EVAL_LINES"}
"${RUNNER[@]}" train --config "$RECIPE" --data "$OUT/data" --out "$OUT" --minutes "$MINUTES" \
  ${PEER_VALID_EVERY:+--valid-every "$PEER_VALID_EVERY"} --set "${SETTINGS_CHANGED[@]}"
"${RUNNER[@]}" decode --out "$OUT" --splits val --beams "${BEAMS[@]}" --alphas "${ALPHAS[@]}"
read -r BEAM ALPHA < <(python scripts/peers/report.py choose --out "$OUT" --beams "${BEAMS[@]}" --alphas "${ALPHAS[@]}")
"${RUNNER[@]}" decode --out "$OUT" --splits test2016 test2017 mscoco2017 --beams "$BEAM" --alphas "$ALPHA"
python scripts/peers/report.py write --out "$OUT" --beams "${BEAMS[@]}" --alphas "${ALPHAS[@]}" --report "$REPORT" \
  --command "$SETTINGS bash scripts/peers/run.sh $TOOLKIT"
