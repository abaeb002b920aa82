#!/usr/bin/env bash
# The book's full run: train German→English on Multi30k with configs/multi30k-de-en.toml (60 minutes of training),
# average the last 5 checkpoints, choose beam size and α on the validation split, score every Multi30k test set
# present, and write the report files that the last chapter reads into results/multi30k-de-en/. Run after
# scripts/setup.sh. Data: $MULTI30K_DIR if set (scripts/env.sh sets it to ../shared/data/multi30k when that exists),
# else downloaded once. RESUME=1 continues an interrupted run.
#
#   SEED=1 bash scripts/multi30k.sh       # the same recipe with another seed → results/multi30k-de-en-seed1/
#   CONFIG=configs/recipe/X.toml REPORT=results/multi30k-recipes/X RUN=runs/X bash scripts/multi30k.sh   # a variant
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
CONFIG=${CONFIG:-configs/multi30k-de-en.toml}
SEED=${SEED:-0}
MAIN=${REPORT:-results/multi30k-de-en}
if [ "$SEED" = 0 ]; then SUFFIX=""; else SUFFIX="-seed$SEED"; fi
RUN=${RUN:-runs/multi30k-de-en$SUFFIX}
REPORT=$MAIN$SUFFIX
transformer train --config "$CONFIG" --out "$RUN" --seed "$SEED" ${RESUME:+--resume}
transformer average --run "$RUN" --last 5 --out "$RUN/average"
transformer tune --model "$RUN/average" --split val --beam 4 6 --alpha 0.6 0.8 1.0 1.2 1.4 1.6
transformer evaluate --model "$RUN/average" --split test2016 test2017 mscoco2017 test2018 --skip-missing \
  --output "$RUN/hyp.en" --report "$REPORT"
if [ -f "$MAIN/summary.json" ]; then  # every seed's scores, gathered into the main report
  python -c "import sys; from transformer.report import record_seeds; record_seeds(sys.argv[1])" "$MAIN"
fi
