#!/usr/bin/env bash
# The book's full run: train German→English on Multi30k with configs/multi30k-de-en.toml (60 minutes of training),
# average the last 5 checkpoints, score test2016 with beam 4 and α = 0.6, and write the report files that the last
# chapter reads into results/multi30k-de-en/. Run after scripts/setup.sh. Data: $MULTI30K_DIR if set (scripts/env.sh
# sets it to ../shared/data/multi30k when that exists), else downloaded once. RESUME=1 continues an interrupted run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
RUN=${RUN:-runs/multi30k-de-en}
transformer train --config configs/multi30k-de-en.toml --out "$RUN" ${RESUME:+--resume}
transformer average --run "$RUN" --last 5 --out "$RUN/average"
transformer evaluate --model "$RUN/average" --split test2016 --beam 4 --alpha 0.6 \
  --output "$RUN/test2016.hyp.en" --report results/multi30k-de-en
