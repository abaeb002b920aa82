"""Why a toolkit trains slower than ours: the same profiler over its recipe's training loop and over our step on our
recipe's batches, on one machine in one run, each operator's own time summed by kind (`benchmarks/profile_step.py`'s
kinds) per 1,000 token positions computed; then as many updates of each without the profiler (its bookkeeping
weighs on many small operators), which give the speeds and the share of the positions that is padding. Runs in the
project's environment; the toolkit's side in its own (`joeynmt_profile.py`).

    nice -n 10 python scripts/peers/profile_peer.py joeynmt            # → results/peers/profile/joeynmt.json

Time per real token = positions computed per real token (padding) × time per position (the kernels, the loss, the
optimizer, the data) — the record holds both factors for each side, so their ratio splits the gap in two.
"""
import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import nullcontext
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "scripts" / "peers"
sys.path.insert(0, str(ROOT / "benchmarks"))
from common import bucketed_batches, multi30k_ids  # noqa: E402
from profile_step import kind_of  # noqa: E402
from train_throughput import Ours, train_step  # noqa: E402

from transformer.hardware import machine_description  # noqa: E402
from transformer.run import git_commit, load_average, load_run_config  # noqa: E402
from transformer.training import make_optimizer  # noqa: E402

MATMUL = "matrix products"


def side(operators: list[dict], profiled: dict, unprofiled: dict, updates: int, loop: str) -> dict:
    """One side's record from two windows of `updates` updates, each {"seconds", "positions": {"real", "padded"}}:
    its speed from the unprofiled one, its time by kind per 1,000 positions from the profiled one (`operators`)."""
    if not operators:
        raise ValueError(f"the profiler recorded no operator for {loop!r}: was it read before it stopped?")
    own = defaultdict(float)
    flops = 0
    for op in operators:
        own[kind_of(op["operator"])] += op["self_us"] / 1e6
        flops += op["flops"] if kind_of(op["operator"]) == MATMUL else 0
    per_k = 1000 / profiled["positions"]["padded"]
    outside = profiled["seconds"] - sum(own.values())  # Python, data loading and the profiler's own bookkeeping
    kinds = sorted(({"kind": k, "ms_per_1k_positions": round(s * 1e3 * per_k, 2)} for k, s in own.items()),
                   key=lambda r: -r["ms_per_1k_positions"])
    seconds, positions = unprofiled["seconds"], unprofiled["positions"]
    return {"loop": loop, "updates": updates, "ms_per_update": round(seconds / updates * 1e3, 1),
            "real_tokens_per_s": round(positions["real"] / seconds),
            "positions_per_s": round(positions["padded"] / seconds),
            "padding_share": round(1 - positions["real"] / positions["padded"], 3),
            "ms_per_1k_positions": round(seconds * 1e3 * 1000 / positions["padded"], 2),
            "profiled": {"ms_per_1k_positions": round(profiled["seconds"] * 1e3 * per_k, 2), "kinds": kinds,
                         "outside_operators_ms_per_1k_positions": round(outside * 1e3 * per_k, 2),
                         "matmul_gflops_per_s": round(flops / own[MATMUL] / 1e9, 1) if own[MATMUL] else None}}


def gap(theirs: dict, mine: dict) -> dict:
    "How many times longer their real token takes than ours, split into its padding factor and its per-position one."
    return {"time_per_real_token": round(mine["real_tokens_per_s"] / theirs["real_tokens_per_s"], 2),
            "positions_per_real_token": round((1 - mine["padding_share"]) / (1 - theirs["padding_share"]), 2),
            "time_per_position": round(theirs["ms_per_1k_positions"] / mine["ms_per_1k_positions"], 2)}


def ours(warmup: int, updates: int) -> dict:
    "Our recipe's step (configs/multi30k-de-en.toml: model, batches of its max_tokens; float32), profiled and not."
    recipe = load_run_config(ROOT / "configs" / "multi30k-de-en.toml")
    tokenizer, pairs, _ = multi30k_ids(recipe.vocab_size)
    cfg = recipe.model_config(tokenizer.get_vocab_size())
    batches = bucketed_batches(pairs, cfg, recipe.train.max_tokens, warmup + updates)
    torch.manual_seed(0)
    impl = Ours(cfg).train()
    optimizer = make_optimizer(impl, cfg.d_model, recipe.train.warmup)[0]
    for batch in batches[:warmup]:
        train_step(impl, optimizer, batch, bf16=False)
    windows = []
    for profiled in (True, False):  # the same batches under the profiler, then without it
        positions = {"real": sum(b.n_src_tokens + b.n_tgt_tokens for b in batches[warmup:]),
                     "padded": sum(b.src.numel() + b.tgt_in.numel() for b in batches[warmup:])}
        with profile(activities=[ProfilerActivity.CPU], with_flops=True) if profiled else nullcontext() as prof:
            started = time.perf_counter()
            for batch in batches[warmup:]:
                train_step(impl, optimizer, batch, bf16=False)
            windows.append({"seconds": time.perf_counter() - started, "positions": positions})
        if profiled:  # the profiler's events are there once it has stopped
            operators = [{"operator": e.key, "self_us": e.self_cpu_time_total, "flops": e.flops}
                         for e in prof.key_averages()]
    return side(operators, *windows, updates, "benchmarks/train_throughput.py's train_step, float32, "
                "batches pre-tokenized and bucketed by length (the Trainer's own batching)")


def joeynmt(args: argparse.Namespace, data: Path) -> dict:
    "Joey NMT's recipe, profiled and not, in its own environment."
    venv = args.venv or ROOT.parent / "venvs" / "joeynmt"
    subprocess.run(["bash", str(PEERS / "venv.sh"), "joeynmt", str(venv)], check=True)
    with tempfile.TemporaryDirectory() as out:
        record = Path(out) / "profile.json"
        subprocess.run([str(venv / "bin" / "python"), "-W", "ignore", str(PEERS / "joeynmt_profile.py"),
                        "--config", str(PEERS / "joeynmt.yaml"), "--data", str(data), "--out", out,
                        "--warmup", str(args.warmup), "--updates", str(args.updates), "--set", *args.settings,
                        "--record", str(record)], check=True)
        raw = json.loads(record.read_text())
    return side(raw["operators"], raw["profiled"], raw["unprofiled"], raw["updates"],
                "Joey NMT's own training loop (its batches, tokenisation as it reads, optimizer step)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("toolkit", choices=["joeynmt"])
    parser.add_argument("--warmup", type=int, default=5, help="updates before the profiled ones, each side")
    parser.add_argument("--updates", type=int, default=30, help="profiled updates, each side")
    parser.add_argument("--set", dest="settings", nargs="*", default=[], metavar="KEY=VALUE",
                        help="change the toolkit's recipe (e.g. a screen's variant)")
    parser.add_argument("--data", type=Path, help="prepared data (default runs/peers/profile/data, made if missing)")
    parser.add_argument("--venv", type=Path, help="the toolkit's environment (default ../venvs/TOOLKIT)")
    parser.add_argument("--record", type=Path, help="default results/peers/profile/TOOLKIT.json")
    args = parser.parse_args()
    record_path = args.record or ROOT / "results" / "peers" / "profile" / f"{args.toolkit}.json"
    data = args.data or ROOT / "runs" / "peers" / "profile" / "data"
    if not (data / "vocab.txt").is_file():
        subprocess.run([sys.executable, str(PEERS / "prepare.py"), "--out", str(data)], check=True)
    load_before = load_average()
    theirs = joeynmt(args, data)
    mine = ours(args.warmup, args.updates)
    record = {"toolkit": args.toolkit, "settings": args.settings, "theirs": theirs, "ours": mine,
              "theirs_over_ours": gap(theirs, mine), "load_average": {"start": load_before, "end": load_average()},
              "threads": torch.get_num_threads(), "machine": machine_description(),
              "command": shlex.join(["python", "scripts/peers/profile_peer.py", *sys.argv[1:]]),
              "commit": git_commit(outputs=[str(record_path.relative_to(ROOT))]
                                   if record_path.is_relative_to(ROOT) else [])}
    record_path.parent.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    for name, s in (("theirs", theirs), ("ours", mine)):
        print(f"{name}: {s['ms_per_update']} ms/update, {s['real_tokens_per_s']:,} real tokens/s, padding "
              f"{s['padding_share']:.0%}, {s['ms_per_1k_positions']} ms per 1k positions (profiled "
              f"{s['profiled']['ms_per_1k_positions']}), matmuls at {s['profiled']['matmul_gflops_per_s']} GFLOP/s")
        for k in s["profiled"]["kinds"]:
            print(f"    {k['kind']:46}{k['ms_per_1k_positions']:>8.2f} ms per 1k positions")
    print(f"theirs over ours: {record['theirs_over_ours']} → {record_path}")


if __name__ == "__main__":
    main()
