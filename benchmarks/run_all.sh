#!/usr/bin/env bash
# Every benchmark of the appendix, one after another on one machine: one dated run. Each result file records the
# run's date (BENCH_RUN), and the appendix refuses files of different runs, so its ratios never mix machines.
# Run it on a quiet machine (nothing else on the cores), after scripts/setup.sh and `pip install -e ".[bench]"`:
#
#   bash benchmarks/run_all.sh        # about 15 minutes on 2 cores; rewrites benchmarks/results/*-cpu.json
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
export BENCH_RUN=${BENCH_RUN:-$(date -u +%Y-%m-%dT%H:%MZ)}
rm -f benchmarks/results/*-cpu.json  # a file this run does not rewrite would be from another machine or day
run() { echo "== $* ($(date -u +%H:%M:%S))"; "$@"; }
run python benchmarks/train_throughput.py --steps 12
run python benchmarks/train_throughput.py --presets base --steps 6 --bf16-steps 1
run python benchmarks/profile_step.py --steps 8
run python benchmarks/attention_paths.py
run python benchmarks/decode_throughput.py
OMP_NUM_THREADS=2 run python benchmarks/decode_engines.py
run python benchmarks/memory.py
run python benchmarks/ddp_scaling.py
echo "== done ($(date -u +%H:%M:%S)): run $BENCH_RUN"
