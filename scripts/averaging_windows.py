"""Which checkpoints to average, chosen on val alone: the recipe's last five, more of the last ones, or those around
the lowest validation loss. Each average is scored by val BLEU with the run's own decoding; no test set is read.

A run that keeps a checkpoint every epoch (`transformer train`) and whose validation loss is lowest well before the
end (chapter 9a: near epoch 20 of 33) may average better from that minimum on than over its last five epochs. A run
that trains few epochs (14 on an AVX2-only CPU) reaches back before its cooldown with five: the checkpoints written
in the cooldown are a window of their own.

    python scripts/averaging_windows.py --runs runs/amx runs/amx-seed1 \
        --out results/multi30k-recipes/averaging-windows.json
"""
import argparse
import csv
import json
import shlex
import sys
import time
from pathlib import Path

import torch

from transformer.checkpoint import average_checkpoints
from transformer.data import load_split, read_tokenizer
from transformer.hardware import machine_description
from transformer.run import git_commit, load_average
from transformer.translation import bleu, translate_text

def windows(steps: list[int], losses: dict[int, float], cooling: list[int]) -> dict[str, list[int]]:
    "Named sets of checkpoint steps to average: the last 1, 5, 10 and 15, around and after the lowest loss, cooldown."
    lowest = min((s for s in steps if s in losses), key=losses.__getitem__)
    at = steps.index(lowest)
    return {"last 1": steps[-1:], "last 5 (the recipe)": steps[-5:], "last 10": steps[-10:], "last 15": steps[-15:],
            "5 around the lowest validation loss": steps[max(at - 2, 0) : at + 3],
            "from the lowest validation loss on": steps[at:],
            "written in the cooldown": [s for s in steps if s in cooling]}


def cooldown_steps(run: Path) -> list[int]:
    "Steps of the checkpoints written after the cooldown began: a time budget's last `cooldown` (none by steps)."
    train = json.loads((run / "run.json").read_text())["train"]
    if not (train.get("max_minutes") and train.get("cooldown")):  # older runs have no cooldown in their record
        return []
    begins = train["max_minutes"] * (1 - train["cooldown"])
    with open(run / "metrics.csv") as f:
        return [int(row["step"]) for row in csv.DictReader(f) if float(row["train_minutes"]) >= begins]


def read_losses(run: Path) -> dict[int, float]:
    "Validation loss by step, from the run's metrics.csv."
    with open(run / "metrics.csv") as f:
        return {int(row["step"]): float(row["valid_loss"]) for row in csv.DictReader(f) if row["valid_loss"]}


def run_decoding(run: Path) -> tuple[int, float]:
    "The beam size and α the run's average was tuned to on val (its decoding.json), else §6.1's 4 and 0.6."
    tuned = run / "average" / "decoding.json"
    best = json.loads(tuned.read_text())["best"] if tuned.is_file() else {"beam": 4, "alpha": 0.6}
    return best["beam"], best["alpha"]


def score_windows(run: Path, pairs: list[tuple[str, str]]) -> dict:
    "Val BLEU of each window's average for one run, with what it averaged."
    folders = {int(p.name.split("-")[1]): p for p in (run / "checkpoints").glob("step-*")}
    steps, losses = sorted(folders), read_losses(run)
    beam, alpha = run_decoding(run)
    tokenizer = read_tokenizer(run / "tokenizer.json")
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    rows = []
    for name, chosen in windows(steps, losses, cooldown_steps(run)).items():
        if not chosen:  # no cooldown
            continue
        if same := next((row for row in rows if row["steps"] == chosen), None):  # e.g. the minimum is 5 from the end
            rows.append({**same, "window": name, "same_as": same["window"]})
            continue
        start = time.perf_counter()
        model = average_checkpoints([folders[s] for s in chosen])
        score = bleu(translate_text(model, tokenizer, sources, beam, alpha), references)[0]
        rows.append({"window": name, "steps": chosen, "val_bleu": round(score, 2),
                     "seconds": round(time.perf_counter() - start, 1)})
        print(f"{run.name}: {name} ({len(chosen)} checkpoints, steps {chosen[0]}–{chosen[-1]}): val {score:.2f}",
              flush=True)
    lowest = min(losses, key=losses.__getitem__)
    return {"run": run.name, "beam": beam, "alpha": alpha, "lowest_valid_loss": {"step": lowest,
            "valid_loss": round(losses[lowest], 4)}, "last_step": steps[-1], "windows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="training output folders")
    parser.add_argument("--out", type=Path, required=True, help="the JSON to write")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    pairs = load_split("val")
    loads = {"start": load_average()}
    runs = [score_windows(run, pairs) for run in args.runs]
    loads["end"] = load_average()
    record = {"split": "val", "sentences": len(pairs), "runs": runs, "load_average": loads,
              "machine": machine_description(), "commit": git_commit(outputs=[str(args.out)]),
              "command": shlex.join(["python", "scripts/averaging_windows.py", *sys.argv[1:]])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"→ {args.out}")


if __name__ == "__main__":
    main()
