#!/usr/bin/env bash
# One peer toolkit, trained and scored under the same conditions as our full run (scripts/multi30k.sh); README.md
# in this folder says what "the same" means and where each recipe comes from. Run after scripts/setup.sh:
#
#   nice -n 10 bash scripts/peers/run.sh joeynmt    # the recipe, 60 minutes → results/peers/joeynmt/recipe.json
#   PEER_SET="batch_size=2048 warmup_steps=550 learning_rate=0.5244 seed=2 save_checkpoint_steps=250 \
#     keep_checkpoint=5" PEER_OUT=runs/peers/opennmt-seed2 PEER_REPORT=results/peers/opennmt/seed-2.json \
#     nice -n 10 bash scripts/peers/run.sh opennmt  # a screen's winner, one seed
#
# Decoding is chosen on val over our grid and the toolkit's own default (OpenNMT-py: beam 5, mean log-probability;
# Joey NMT: beam 5, α 1.0), with the last checkpoint and, where the run kept several (OpenNMT-py's keep_checkpoint),
# with their average (OpenNMT-py's own average_models); then the test sets are translated once with the choice.
#
# Settings (environment): PEER_MINUTES (training budget, default 60), PEER_OUT (run folder, default
# runs/peers/TOOLKIT), PEER_REPORT (default results/peers/TOOLKIT/recipe.json; needed with PEER_SET or PEER_RECIPE),
# PEER_VENV (the toolkit's own virtual environment, default ../venvs/TOOLKIT beside the checkout; made on first use),
# PEER_RECIPE (default scripts/peers/TOOLKIT.yaml; scripts/peers/opennmt-rnn.yaml is OpenNMT-py's recurrent model),
# PEER_SET (changes to the recipe, "KEY=VALUE …": a screen's winner, a seed), PEER_AVERAGE_LAST (average only the
# last N kept checkpoints, default all), PEER_CURVE=1 (OpenNMT-py: translate val greedily with every kept checkpoint,
# for the report's val_bleu_curve; keep them all with keep_checkpoint=-1), PEER_BEAMS and PEER_ALPHAS (the decoding
# grid tuned on val, default ours: 4 6 and 0.6 … 1.6), PEER_VALID_EVERY (validate every N updates instead of the
# recipe's 250) and PEER_EVAL_LINES (validate, tune and test on the first N pairs of each set only): the last two for
# smoke tests; PEER_EVALUATE_ONLY=1 skips training and evaluates (decodes everything again) the run in PEER_OUT that
# the same command trained, and with PEER_RESUME=1 also keeps the translations a stopped evaluation finished. A
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
MINUTES=${PEER_MINUTES:-60}
OUT=${PEER_OUT:-runs/peers/$TOOLKIT}
if [ -n "${PEER_SET:-}${PEER_RECIPE:-}" ] && [ -z "${PEER_REPORT:-}" ]; then  # the default: the published recipe's
  echo "PEER_SET or PEER_RECIPE changes the recipe: name the report (PEER_REPORT=results/peers/…/seed-N.json)" >&2
  exit 2
fi
REPORT=${PEER_REPORT:-results/peers/$TOOLKIT/recipe.json}
VENV=${PEER_VENV:-../venvs/$TOOLKIT}
read -r -a BEAMS <<< "${PEER_BEAMS:-4 6}"
read -r -a ALPHAS <<< "${PEER_ALPHAS:-0.6 0.8 1.0 1.2 1.4 1.6}"
read -r -a SETTINGS_CHANGED <<< "${PEER_SET:-}"  # KEY=VALUE changes to the recipe: a screen's winner, a seed
if [ -n "${PEER_CURVE:-}" ] && [ "$TOOLKIT" != opennmt ]; then
  echo "PEER_CURVE: only the OpenNMT-py launcher translates every kept checkpoint" >&2
  exit 2
fi
if [ -n "${PEER_RESUME:-}" ] && [ -z "${PEER_EVALUATE_ONLY:-}" ]; then
  echo "PEER_RESUME resumes an evaluation: set PEER_EVALUATE_ONLY=1 too (training always starts afresh)" >&2
  exit 2
fi
if [ -n "${PEER_EVALUATE_ONLY:-}" ] && [ ! -f "$OUT/training.json" ]; then
  echo "PEER_EVALUATE_ONLY: $OUT holds no trained run (no training.json); run without it to train" >&2
  exit 2
fi
source scripts/env.sh

bash scripts/peers/venv.sh "$TOOLKIT" "$VENV"

SETTINGS="PEER_MINUTES=$MINUTES"  # the command, with every setting that differs from the defaults
for name in $(compgen -v PEER_ | grep -Ev '^PEER_(MINUTES|EVALUATE_ONLY|RESUME)$' | sort); do
  SETTINGS+=" $name=$(printf %q "${!name}")"
done
RUNNER=("$VENV/bin/python" -W ignore "scripts/peers/${TOOLKIT}_run.py")
KEEP=(${PEER_RESUME:+--keep-existing})  # decode: skip what a stopped evaluation finished
RECIPE=${PEER_RECIPE:-scripts/peers/$TOOLKIT.yaml}
if [ -n "${PEER_EVALUATE_ONLY:-}" ]; then  # the run in OUT must be this command's
  python scripts/peers/report.py check-run --out "$OUT" --minutes "$MINUTES" --set "${SETTINGS_CHANGED[@]}"
else
  python scripts/peers/prepare.py --out "$OUT/data" ${PEER_EVAL_LINES:+--eval-lines "$PEER_EVAL_LINES"}
  "${RUNNER[@]}" train --config "$RECIPE" --data "$OUT/data" --out "$OUT" --minutes "$MINUTES" \
    ${PEER_VALID_EVERY:+--valid-every "$PEER_VALID_EVERY"} --set "${SETTINGS_CHANGED[@]}"
fi
if [ -n "${PEER_CURVE:-}" ]; then  # every kept checkpoint translates val greedily: the BLEU curve
  "${RUNNER[@]}" curve --out "$OUT"
fi
CHECKPOINTS=(recipe)  # and the average of the kept checkpoints where a run kept several (keep_checkpoint)
KEPT=$(find "$OUT/model" -type f \( -name 'model_step_*.pt' -o -regex '.*/[0-9]+\.ckpt' \) | wc -l)
if [ "$KEPT" -gt 1 ]; then  # OpenNMT-py's keep_checkpoint, Joey NMT's training.keep_best_ckpts
  "${RUNNER[@]}" average --out "$OUT" ${PEER_AVERAGE_LAST:+--last "$PEER_AVERAGE_LAST"}
  CHECKPOINTS+=(averaged)
fi
case "$TOOLKIT" in  # the toolkit's own default decoding joins the grid
  opennmt) DEFAULT=(5 0 avg) ;;  # onmt_translate: beam 5, mean log-probability
  joeynmt) DEFAULT=(5 1.0 wu) ;;  # the recipe's testing section: beam 5, α 1.0
esac
decode_val() {  # one checkpoint: our grid on val, then the toolkit's default
  "${RUNNER[@]}" decode --out "$OUT" --splits val --beams "${BEAMS[@]}" --alphas "${ALPHAS[@]}" \
    --checkpoint "$1" "${KEEP[@]}"
  "${RUNNER[@]}" decode --out "$OUT" --splits val --beams "${DEFAULT[0]}" --alphas "${DEFAULT[1]}" \
    --length-penalty "${DEFAULT[2]}" --checkpoint "$1" "${KEEP[@]}"
}
# Decoding is not timed: on two or more cores the checkpoints decode side by side, a thread each (Joey NMT on the
# AVX2 EPYC: about 1.2-1.35x the settings an hour of one two-thread decoder, two rough timings, not a benchmark)
DECODERS=()
for CHECKPOINT in "${CHECKPOINTS[@]}"; do
  if [ "${#CHECKPOINTS[@]}" -gt 1 ] && [ "$(nproc)" -ge "${#CHECKPOINTS[@]}" ]; then
    OMP_NUM_THREADS=1 decode_val "$CHECKPOINT" > "$OUT/decode-$CHECKPOINT.log" 2>&1 &
    DECODERS+=($!)
  else
    decode_val "$CHECKPOINT"
  fi
done
for DECODER in "${DECODERS[@]}"; do  # each must succeed (set -e); its log says why not
  wait "$DECODER" || { echo "decoding failed: see $OUT/decode-*.log" >&2; exit 1; }
done
GRID=(--out "$OUT" --beams "${BEAMS[@]}" --alphas "${ALPHAS[@]}" --checkpoints "${CHECKPOINTS[@]}"
      --also "${DEFAULT[0]}:$([ "${DEFAULT[2]}" = avg ] && echo avg || echo "${DEFAULT[1]}")")
read -r CHECKPOINT BEAM ALPHA PENALTY < <(python scripts/peers/report.py choose "${GRID[@]}")
"${RUNNER[@]}" decode --out "$OUT" --splits test2016 test2017 mscoco2017 --beams "$BEAM" --alphas "$ALPHA" \
  --length-penalty "$PENALTY" --checkpoint "$CHECKPOINT" "${KEEP[@]}"
python scripts/peers/report.py write "${GRID[@]}" --report "$REPORT" \
  --command "$SETTINGS bash scripts/peers/run.sh $TOOLKIT"
