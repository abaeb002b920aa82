"""Data-parallel scaling on this machine: training tokens/s of `transformer train` with 1 process (all cores) and
with N processes (cores shared out), the same model, batches and steps. Writes benchmarks/results/ddp_scaling-*.json.

    python benchmarks/ddp_scaling.py [--steps 60] [--nproc 2] [--repeats 3]

The two setups alternate `--repeats` times; each pair gives a ratio, and the median pair's ratio is kept with the
spread of all, so that a slow moment of the machine does not decide it.
"""

import argparse
import csv
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import repeated, write_result

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
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.repeats < 3:
        parser.error("--repeats must be at least 3: the ratio needs a median and a spread")
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
    pairs = list(zip(every[::2], every[1::2]))  # (1 process, nproc processes), as they alternated
    ratio = repeated([many["tokens_per_s"] / one["tokens_per_s"] for one, many in pairs])
    runs = list(sorted(pairs, key=lambda p: p[1]["tokens_per_s"] / p[0]["tokens_per_s"])[(len(pairs) - 1) // 2])
    print(f"{args.nproc} processes / 1 process: median {ratio['median']:.2f}× (spread {ratio['spread']:.2f}, "
          f"{args.repeats} pairs)")
    path = write_result("ddp_scaling", {"preset": "small", "max_tokens": 4096, "cores": cores, "runs": runs,
                                        "every_run": every,
                                        "ratios": {f"processes_{args.nproc}_vs_1_tokens_per_s": ratio}})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
