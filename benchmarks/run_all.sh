#!/usr/bin/env bash
# Every benchmark of the appendix, one after another on one machine: one dated run, written to this kind of
# machine's folder, benchmarks/results/MACHINE/ (e.g. intel-xeon-amx). Each result file records the run's date
# (BENCH_RUN), and the appendix refuses a folder of files from different runs, so its ratios never mix machines;
# it shows the machines' folders side by side. Every ratio is the median of at least 3 repeats, with its spread.
# Run it on a quiet machine (nothing else on the cores), after scripts/setup.sh and `pip install -e ".[bench]"`:
#
#   bash benchmarks/run_all.sh        # about 50 minutes on 2 cores; rewrites benchmarks/results/MACHINE/*-cpu.json
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
if ! python -c "import transformers" 2>/dev/null; then  # else decode_throughput's Marian rows are missing, silently
  echo 'run_all.sh needs the [bench] extra (Hugging Face transformers):' \
       'pip install -e ".[bench]" -c constraints.txt' >&2
  exit 1
fi
export BENCH_RUN=${BENCH_RUN:-$(date -u +%Y-%m-%dT%H:%MZ)}
machine=$(cd benchmarks && python -c "from common import machine_key; print(machine_key())")
rm -f "benchmarks/results/$machine"/*-cpu.json  # a file this run does not rewrite would be from another day
run() { echo "== $* ($(date -u +%H:%M:%S))"; "$@"; }
run python benchmarks/train_throughput.py --steps 12 --compile  # and our step under torch.compile
run python benchmarks/train_throughput.py --presets base --steps 6 --bf16-steps 1
run python benchmarks/profile_step.py --steps 8
if python -c "import sys; from transformer.hardware import native_bf16; sys.exit(not native_bf16('cpu')[0])"; then
  run python benchmarks/profile_step.py --steps 8 --precision bf16  # only where bf16 is native: else it is emulated
fi
run python benchmarks/attention_paths.py
run python benchmarks/decode_throughput.py
OMP_NUM_THREADS=2 run python benchmarks/decode_engines.py
OMP_NUM_THREADS=2 run python benchmarks/profile_decode.py
OMP_NUM_THREADS=2 run python benchmarks/profile_decode.py --int8  # where int8's time goes
run python benchmarks/int8_kernels.py  # fbgemm's int8 kernel or oneDNN's, the one torch.compile emits
OMP_NUM_THREADS=2 run python benchmarks/decode_workers.py  # two batches at once, ours and CTranslate2's
run python benchmarks/memory.py
run python benchmarks/ddp_scaling.py
echo "== done ($(date -u +%H:%M:%S)): run $BENCH_RUN"
