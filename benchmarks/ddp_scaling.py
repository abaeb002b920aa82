"""Data-parallel scaling on this machine: training tokens/s of `transformer train` with 1 process (all cores) and
with N processes (cores shared out), the same model, batches and steps. Writes benchmarks/results/ddp_scaling-*.json.

    python benchmarks/ddp_scaling.py [--steps 60] [--nproc 2] [--repeats 2]

The two setups alternate `--repeats` times and the best run of each counts, so that a slow moment of the machine
does not decide the ratio.
"""

import argparse
import csv
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import write_result

from transformer.data import load_split
from transformer.distributed import RUN_CLI


def train_tokens_per_s(folder: Path, nproc: int, steps: int, threads: int) -> dict:
    "Train the small preset for `steps` steps on Multi30k's training split as plain files; the run's tokens/s."
    out = Path(tempfile.mkdtemp(dir=folder)) / "run"
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, *RUN_CLI, "train", "--preset", "small", "--train-src", str(folder / "train.de"),
           "--train-tgt", str(folder / "train.en"), "--out", str(out), "--max-steps", str(steps), "--precision", "fp32",
           "--device", "cpu", "--nproc", str(nproc), "--quiet"]
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    with open(out / "metrics.csv") as f:
        last = list(csv.DictReader(f))[-1]
    return {"processes": nproc, "threads_per_process": threads, "steps": int(last["step"]),
            "train_seconds": round(60 * float(last["train_minutes"]), 2), "tokens_per_s": round(float(last["tokens_per_s"]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        pairs = load_split("train")
        for i, lang in enumerate(("de", "en")):
            (folder / f"train.{lang}").write_text("".join(p[i] + "\n" for p in pairs), encoding="utf-8")
        every = [train_tokens_per_s(folder, n, args.steps, max(1, cores // n))
                 for _ in range(args.repeats) for n in (1, args.nproc)]
    for r in every:
        print(f"{r['processes']} process(es) × {r['threads_per_process']} thread(s): {r['tokens_per_s']:,} tokens/s")
    runs = [max((r for r in every if r["processes"] == n), key=lambda r: r["tokens_per_s"]) for n in (1, args.nproc)]
    ratio = runs[1]["tokens_per_s"] / runs[0]["tokens_per_s"]
    print(f"best of {args.repeats}: {args.nproc} processes / 1 process: {ratio:.2f}×")
    path = write_result("ddp_scaling", {"preset": "small", "max_tokens": 4096, "cores": cores, "runs": runs, "every_run": every,
                                        "ratios": {f"processes_{args.nproc}_vs_1_tokens_per_s": round(ratio, 3)}})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
