"""Screen a recipe's variants (screens.yaml): each trained for the screen's minutes, one at a time, then scored on val
with the toolkit's default decoding; the rows, best first, go to results/peers/screen/SCREEN.json after every variant.
Runs in the project's environment, the launchers in the toolkit's own (made by venv.sh on first use).

    nice -n 10 python scripts/peers/screen.py opennmt              # every variant not yet in the record
    nice -n 10 python scripts/peers/screen.py opennmt-rnn          # OpenNMT-py's recurrent model
    python scripts/peers/screen.py opennmt --only w300 --minutes 1 --eval-lines 40 --out /tmp/s --record /tmp/s.json
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402

from transformer.hardware import machine_description  # noqa: E402
from transformer.run import git_commit  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "scripts" / "peers"


def variant_row(name: str, settings: list[str], training: dict, tokens_per_epoch: int, commit: str) -> dict:
    "One row of the screen: the variant, its settings, its val BLEU and what its training measured."
    curve = training["curve"]
    return {"variant": name, "settings": settings, "val_bleu": training["val_bleu"], "steps": training["steps"],
            "epochs": round(training["tokens"] / tokens_per_epoch, 2), "train_minutes": training["train_minutes"],
            "tokens_per_s": training["tokens_per_s"],
            "valid_loss": curve[-1]["valid_loss"] if curve else None, "curve": curve,  # rows compare at equal updates
            "load_average": training["load_average"], "profile": training.get("profile"), "commit": commit,
            "machine": machine_description()}


def run_variant(runner: list[str], recipe: Path, data: Path, out: Path, minutes: float, settings: list[str],
                decoding: dict) -> dict:
    "Train one variant, translate val with the screen's decoding and return its training record with `val_bleu`."
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "data").exists():
        (out / "data").symlink_to(data.resolve())  # the launchers and report.score read OUT/data
    subprocess.run([*runner, "train", "--config", str(recipe), "--data", str(data),
                    "--out", str(out), "--minutes", str(minutes), "--set", *settings], check=True)
    beam, alpha, penalty = str(decoding["beam"]), str(decoding["alpha"]), decoding["length_penalty"]
    subprocess.run([*runner, "decode", "--out", str(out), "--splits", "val", "--beams", beam, "--alphas", alpha,
                    "--length-penalty", penalty], check=True)
    training = json.loads((out / "training.json").read_text())
    training["val_bleu"] = report.score(out, "val", int(beam), float(alpha), penalty)[0]
    return training


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("screen", help="a screen of screens.yaml: joeynmt, opennmt, opennmt-rnn")
    parser.add_argument("--only", nargs="+", help="these variants only (default: every one not yet recorded)")
    parser.add_argument("--minutes", type=float, help="training minutes per variant (default: the screen's)")
    parser.add_argument("--out", type=Path, help="run folders (default runs/peers/screen/SCREEN)")
    parser.add_argument("--record", type=Path, help="the JSON file (default results/peers/screen/SCREEN.json)")
    parser.add_argument("--venv", type=Path, help="the toolkit's environment (default ../venvs/TOOLKIT)")
    parser.add_argument("--eval-lines", type=int, default=0, help="val: its first N pairs only (smoke tests)")
    parser.add_argument("--refresh", action="store_true",
                        help="train nothing: give the recorded rows their validation curves from the run folders")
    args = parser.parse_args()
    screens = yaml.safe_load((PEERS / "screens.yaml").read_text())
    if args.screen not in screens:
        raise SystemExit(f"no screen {args.screen!r} in screens.yaml (it has {', '.join(screens)})")
    screen = screens[args.screen]
    toolkit = screen.get("toolkit", args.screen)
    recipe = PEERS / screen.get("recipe", f"{toolkit}.yaml")
    minutes = args.minutes or screen["minutes"]
    out = args.out or ROOT / "runs" / "peers" / "screen" / args.screen
    record_path = args.record or ROOT / "results" / "peers" / "screen" / f"{args.screen}.json"
    venv = args.venv or ROOT.parent / "venvs" / toolkit
    unknown = set(args.only or ()) - set(screen["variants"])
    if unknown:
        raise SystemExit(f"no variant {', '.join(sorted(unknown))} in the {args.screen} screen of screens.yaml")
    record = json.loads(record_path.read_text()) if record_path.is_file() else {"rows": []}
    if args.refresh:  # rows recorded before rows kept their curve
        for row in record["rows"]:
            row["curve"] = json.loads((out / row["variant"] / "training.json").read_text())["curve"]
        record_path.write_text(json.dumps(record, indent=1) + "\n")
        return
    subprocess.run(["bash", str(PEERS / "venv.sh"), toolkit, str(venv)], check=True)
    runner = [str(venv / "bin" / "python"), "-W", "ignore", str(PEERS / f"{toolkit}_run.py")]
    data = out / "data"
    if not (data / "vocab.txt").is_file():
        lines = ["--eval-lines", str(args.eval_lines)] if args.eval_lines else []
        subprocess.run([sys.executable, str(PEERS / "prepare.py"), "--out", str(data), *lines], check=True)
    done = {row["variant"] for row in record["rows"]}
    names = args.only or [name for name in screen["variants"] if name not in done]
    for name in names:
        settings = [str(s) for s in screen["variants"][name]]
        training = run_variant(runner, recipe, data, out / name, minutes, settings, screen["decoding"])
        commit = git_commit(outputs=[str(record_path.relative_to(ROOT))] if record_path.is_relative_to(ROOT) else [])
        row = variant_row(name, settings, training, report.epoch_tokens(data), commit)
        rows = [r for r in record["rows"] if r["variant"] != name] + [row]
        record = {"toolkit": training["toolkit"], "version": training["toolkit_version"], "recipe": recipe.name,
                  "architecture": training["architecture"], "minutes": minutes,
                  "decoding": screen["decoding"], "chosen_on": "val",
                  "rows": sorted(rows, key=lambda r: -r["val_bleu"]),
                  "command": shlex.join(["python", "scripts/peers/screen.py", *sys.argv[1:]]),
                  "threads": os.cpu_count()}  # each row has its own commit and machine: a screen may resume
        record_path.parent.mkdir(parents=True, exist_ok=True)
        record_path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"{name}: val BLEU {row['val_bleu']:.2f} after {row['steps']} updates → {record_path}",
              file=sys.stderr)


if __name__ == "__main__":
    main()
