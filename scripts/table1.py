"""Table 1 of the paper, measured on this machine: writes results/table1.json, which the chapter
"Why self-attention (§4), measured" draws.

    python scripts/table1.py [--d-model 256] [--max-n 8192]

Run it on a quiet machine (nothing else busy): the times are wall-clock. A few minutes on 2 CPU cores.
"""

import argparse
import json
import time
from pathlib import Path

import torch

from transformer.complexity import fit_exponent, measure_path_lengths, measure_table1
from transformer.hardware import machine_description
from transformer.run import git_commit

OUT = Path(__file__).resolve().parent.parent / "results" / "table1.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--max-n", type=int, default=8192)
    parser.add_argument("--max-path-n", type=int, default=512, help="longest sequence for the path lengths")
    parser.add_argument("--k", type=int, default=3, help="convolution kernel width")
    parser.add_argument("--r", type=int, default=16, help="neighbourhood of restricted self-attention")
    args = parser.parse_args()
    ns = [2**i for i in range(3, args.max_n.bit_length()) if 2**i <= args.max_n]
    start = time.time()
    rows = measure_table1(ns, args.d_model, args.k, args.r)
    for row in rows:
        print(f"{row['kind']:26} n={row['n']:5}  {1e3 * row['seconds']:9.2f} ms  {row['flops']:>14,} FLOPs  "
              f"{row['saved_bytes']:>13,} B", flush=True)
    exponents, fit_from = {}, args.max_n // 4  # the asymptotic regime: n well above d, fixed costs negligible
    for kind in dict.fromkeys(r["kind"] for r in rows):
        upper = [r for r in rows if r["kind"] == kind and r["n"] >= fit_from]
        exponents[kind] = {m: round(fit_exponent([r["n"] for r in upper], [r[m] for r in upper]), 2)
                           for m in ("seconds", "flops", "saved_bytes")}
        print(kind, exponents[kind])
    paths = measure_path_lengths([n for n in ns if n <= args.max_path_n], args.k, args.r)
    result = {"d_model": args.d_model, "k": args.k, "r": args.r, "rows": rows, "fit_from_n": fit_from, "exponents": exponents,
              "path_lengths": paths, "minutes": round((time.time() - start) / 60, 1), "commit": git_commit(),
              "machine": machine_description(), "threads": torch.get_num_threads(),
              "command": f"python scripts/table1.py --d-model {args.d_model} --max-n {args.max_n} "
                         f"--max-path-n {args.max_path_n} --k {args.k} --r {args.r}"}
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
