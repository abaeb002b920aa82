"""Joey NMT 2.3's training loop under PyTorch's profiler: a recipe's updates after a warm-up, every operator's own
time, the loop's wall time and the token positions it computed, then as many updates timed without the profiler;
runs in Joey NMT's own virtual environment (scripts/peers/profile_peer.py runs it and reads what it writes).

    python joeynmt_profile.py --config joeynmt.yaml --data DATA --out OUT --warmup 5 --updates 20 --record P.json
"""
import argparse
import json
import time
from pathlib import Path

import joeynmt_run  # noqa: F401  (its import patches Joey's plateau schedule for torch 2.13, as training does)
import torch
import yaml
from joeynmt.helpers import make_model_dir
from joeynmt.training import TrainManager, train
from torch.profiler import ProfilerActivity, profile

from budget import apply_settings, fill_config


class Profiled(Exception):
    "Raised once the profiled updates are done: the profile is all this run is for."


def profiled_training(cfg: dict, warmup: int, updates: int) -> dict:
    "Run Joey's training loop: `warmup` updates, then `updates` under the profiler, then as many without it."
    prof = profile(activities=[ProfilerActivity.CPU], with_flops=True)
    windows = [{"seconds": 0.0, "positions": {"real": 0, "padded": 0}} for _ in range(2)]  # profiled, unprofiled
    train_step, calls, started = TrainManager._train_step, 0, 0.0

    def step(self, batch):
        nonlocal calls, started
        if calls in (warmup, warmup + updates, warmup + 2 * updates):  # a window closes and the next one opens
            now = time.perf_counter()  # (a window: its updates' forward, backward and optimizer steps and batches)
            if calls > warmup:
                windows[(calls - warmup) // updates - 1]["seconds"] = now - started
            if calls == warmup:
                prof.start()
            elif calls == warmup + updates:
                prof.stop()
            else:
                raise Profiled
            started = time.perf_counter()
        if calls >= warmup:
            positions = windows[(calls - warmup) // updates]["positions"]
            positions["real"] += int(batch.src_length.sum()) + int(batch.ntokens)  # each side with its </s>
            positions["padded"] += batch.src.numel() + batch.trg.numel()
        calls += 1
        return train_step(self, batch)  # forward and backward (Joey steps the optimizer outside it)

    TrainManager._train_step = step
    try:
        train(rank=0, world_size=1, cfg=cfg, skip_test=True)
    except Profiled:
        pass
    else:
        raise SystemExit(f"training ended before {warmup + 2 * updates} updates")
    return {"profiled": windows[0], "unprofiled": windows[1],
            "operators": [{"operator": e.key, "self_us": e.self_cpu_time_total, "calls": e.count, "flops": e.flops}
                          for e in prof.key_averages()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--warmup", type=int, default=5, help="updates before the profiled ones")
    parser.add_argument("--updates", type=int, default=20, help="profiled updates")
    parser.add_argument("--set", dest="settings", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--record", type=Path, required=True, help="the JSON file to write")
    args = parser.parse_args()
    cfg = apply_settings(fill_config(args.config, args.data, args.out), args.settings)
    cfg["training"]["validation_freq"] = cfg["training"]["logging_freq"] = 10**9  # no validation in the window
    make_model_dir(Path(cfg["model_dir"]), overwrite=True)
    (args.out / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    record = profiled_training(cfg, args.warmup, args.updates)
    record |= {"updates": args.updates, "warmup": args.warmup, "settings": args.settings,
               "threads": torch.get_num_threads(), "torch": torch.__version__}
    args.record.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
