"""Table 3 of the paper (model variations) at small scale: every row trains the `small` preset on Multi30k De→En
with one change, for the same number of steps, and writes results/table3/ROW.json.

    python scripts/table3.py [--steps 4000] [--rows base A1 ...] [--device cpu] [--jobs 1] [--out results/table3]

Resumable: a row whose JSON exists is skipped, a row whose run was interrupted continues from its last checkpoint.
On a GPU, `--device cuda --jobs 10` trains ten rows side by side (one H100: all 21 rows in about 13 minutes); on 2
CPU cores an 800-step row takes about 45 minutes (run it in the background with nohup, one row at a time).
The committed results: results/table3/ (4000 steps, H100), results/table3-800/ (800 steps, H100) and
results/table3-800-cpu/ (800 steps, the base, A1 and A2 rows on 2 CPU cores, to compare devices).
"""

import argparse
import csv
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from transformer.checkpoint import RunFolder, load_model_dir
from transformer.distributed import RUN_CLI
from transformer.model import count_parameters
from transformer.hardware import machine_description
from transformer.run import git_commit

ROOT = Path(__file__).resolve().parent.parent

# row → (Table 3 group, what changes, [model] overrides, [train] overrides); the base row is the `small` preset:
# d_model 256, 4 heads (d_k = d_v = 64), d_ff 1024, 3 + 3 layers, dropout 0.1, label smoothing 0.1, sinusoids
ROWS = {
    "base": ("base", "small preset", {}, {}),
    "A1": ("A", "h = 1, d_k = d_v = 256", {"n_heads": 1}, {}),
    "A2": ("A", "h = 2, d_k = d_v = 128", {"n_heads": 2}, {}),
    "A8": ("A", "h = 8, d_k = d_v = 32", {"n_heads": 8}, {}),
    "A16": ("A", "h = 16, d_k = d_v = 16", {"n_heads": 16}, {}),
    "B16": ("B", "d_k = 16 (h = 4, d_v = 64)", {"d_k": 16}, {}),
    "B32": ("B", "d_k = 32 (h = 4, d_v = 64)", {"d_k": 32}, {}),
    "C-N2": ("C", "N = 2 layers", {"n_encoder_layers": 2, "n_decoder_layers": 2}, {}),
    "C-N4": ("C", "N = 4 layers", {"n_encoder_layers": 4, "n_decoder_layers": 4}, {}),
    "C-N6": ("C", "N = 6 layers", {"n_encoder_layers": 6, "n_decoder_layers": 6}, {}),
    # not in the paper's table: N = 6 fails at the shared peak rate (post-norm depth), so two lower rates
    "C-N6-lr0.3": ("C", "N = 6 layers, peak rate / 2", {"n_encoder_layers": 6, "n_decoder_layers": 6},
                   {"lr_factor": 0.3}),
    "C-N6-lr0.15": ("C", "N = 6 layers, peak rate / 4", {"n_encoder_layers": 6, "n_decoder_layers": 6},
                    {"lr_factor": 0.15}),
    "C-d128": ("C", "d_model = 128, d_ff = 512", {"d_model": 128, "d_ff": 512}, {}),
    "C-d512": ("C", "d_model = 512, d_ff = 2048", {"d_model": 512, "d_ff": 2048}, {}),
    "C-ff512": ("C", "d_ff = 512", {"d_ff": 512}, {}),
    "C-ff2048": ("C", "d_ff = 2048", {"d_ff": 2048}, {}),
    "D-drop0": ("D", "P_drop = 0.0", {"dropout": 0.0}, {}),
    "D-drop0.3": ("D", "P_drop = 0.3", {"dropout": 0.3}, {}),
    "D-ls0": ("D", "ε_ls = 0.0", {}, {"label_smoothing": 0.0}),
    "D-ls0.2": ("D", "ε_ls = 0.2", {}, {"label_smoothing": 0.2}),
    "E": ("E", "learned positional embedding", {"positional": "learned"}, {}),
    # the base row again with other seeds (initialisation, batch order, dropout): how far apart identical rows land
    "base-seed1": ("base", "small preset, seed 1", {}, {"seed": 1}),
    "base-seed2": ("base", "small preset, seed 2", {}, {"seed": 2}),
}


def config_text(model: dict, train: dict, steps: int, warmup: int, lr_factor: float) -> str:
    "The TOML run configuration of a row: the shared recipe, then the row's overrides."
    recipe = {"max_tokens": 2048, "max_steps": steps, "warmup": warmup, "lr_factor": lr_factor,
              "eval_every": steps // 4, "keep_last": 1, "precision": "fp32"} | train
    lines = ['preset = "small"', "[model]", *(f"{k} = {json.dumps(v)}" for k, v in model.items()), "[train]",
             *(f"{k} = {json.dumps(v)}" for k, v in recipe.items()), "[data]", "vocab_size = 8000"]
    return "\n".join(lines) + "\n"


def cli(*args: str) -> str:
    "Run the command line; its standard output (its errors end this script)."
    done = subprocess.run([sys.executable, *RUN_CLI, *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"transformer {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def run_row(name: str, runs: Path, steps: int, warmup: int, lr_factor: float, device: str) -> dict:
    "Train (or finish training) one row and score it; the row's result."
    group, change, model, train = ROWS[name]
    out = runs / name
    out.mkdir(parents=True, exist_ok=True)
    config = out / "row.toml"
    config.write_text(config_text(model, train, steps, warmup, lr_factor))
    start = time.time()
    cli("train", "--config", str(config), "--out", str(out), "--device", device, "--quiet",
        *(["--resume"] if RunFolder(out).latest() else []))
    checkpoint = RunFolder(out).latest()
    with open(out / "metrics.csv") as f:
        curve = [{key: float(value) for key, value in row.items()} for row in csv.DictReader(f)]
    last = curve[-1]
    scores = {}
    for split, beam in (("val", 1), ("test2016", 1), ("test2016", 4)):
        line = cli("evaluate", "--model", str(checkpoint), "--split", split, "--beam", str(beam), "--device", device)
        scores[f"{split}_bleu_beam{beam}"] = float(line.split()[2])
    return {"row": name, "group": group, "change": change, "model": model, "train": train, "steps": int(last["step"]),
            "parameters": count_parameters(load_model_dir(checkpoint)),
            "train_minutes": round(float(last["train_minutes"]), 1), "valid_loss": last["valid_loss"],
            "valid_ppl": last["valid_ppl"], **scores, "wall_minutes": round((time.time() - start) / 60, 1),
            "commit": git_commit(), "machine": machine_description(),
            "curve": curve,
            "command": f"python scripts/table3.py --steps {steps} --warmup {warmup} --lr-factor {lr_factor} "
                       f"--rows {name} --device {device}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000, help="optimizer steps per row (the same for every row)")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--lr-factor", type=float, default=0.6, help="peak rate 0.0022 for the base row")
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    parser.add_argument("--runs", default=str(ROOT / "runs" / "table3"), help="where the rows' runs go")
    parser.add_argument("--out", default=str(ROOT / "results" / "table3"), help="where the rows' JSON files go")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, … (the same for every row)")
    parser.add_argument("--jobs", type=int, default=1, help="rows trained side by side (1 on a CPU)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    todo = [name for name in args.rows if not (out / f"{name}.json").is_file()]

    def row(name: str) -> None:
        result = run_row(name, Path(args.runs), args.steps, args.warmup, args.lr_factor, args.device)
        (out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
        print(f"{name}: {result['change']}: valid ppl {result['valid_ppl']:.2f}, "
              f"test2016 BLEU {result['test2016_bleu_beam1']:.1f} greedy, {result['test2016_bleu_beam4']:.1f} beam 4, "
              f"{result['train_minutes']:.1f} train minutes", flush=True)

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(row, todo))


if __name__ == "__main__":
    main()
