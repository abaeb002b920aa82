"""Score a peer toolkit's translations as ours are scored, choose its decoding on val, and write its reports.
Runs in the project's environment: the hypotheses (byte-level BPE tokens) are turned back into text by our tokenizer
and scored with `transformer.translation.bleu`, so every peer carries our sacreBLEU signature.

    python scripts/peers/report.py choose --out runs/peers/opennmt --beams 4 6 --alphas 0.6 1.0 \
        [--checkpoints last averaged] [--also 5:avg]
    python scripts/peers/report.py write --out runs/peers/opennmt --beams 4 6 --alphas 0.6 1.0 \
        --report results/peers/opennmt/seed-1.json --command "bash scripts/peers/run.sh opennmt"
    python scripts/peers/report.py combine --report results/peers/opennmt.json \
        --runs results/peers/opennmt/seed-*.json --screen results/peers/screen/opennmt.json \
        --recipe-run results/peers/opennmt/recipe.json
"""
import argparse
import json
import shlex
import sys
from pathlib import Path

from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from budget import (  # noqa: E402  (the launchers' own file names and record format)
    CHECKPOINTS, curve_name, curve_step, hypothesis_name, write_json)

from transformer.data import read_tokenizer  # noqa: E402
from transformer.hardware import machine_description  # noqa: E402
from transformer.run import git_commit  # noqa: E402
from transformer.translation import bleu  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TEST_SETS = ("test2016", "test2017", "mscoco2017")
OUR_SUMMARY = ROOT / "results" / "multi30k-de-en" / "summary.json"


def detokenize(lines: list[str], tokenizer: Tokenizer) -> list[str]:
    "Text of each line of space-separated byte-level BPE tokens."
    return [tokenizer.decoder.decode(line.split()) for line in lines]


def hypothesis_file(out: Path, split: str, beam: int, alpha: float | None, length_penalty: str = "wu",
                    checkpoint: str = "recipe") -> Path:
    "Where the toolkit's launcher wrote its tokens for `split` at one decoding setting of one checkpoint."
    return out / "hyp" / hypothesis_name(split, beam, alpha or 0.0, length_penalty, checkpoint)


def setting_text(beam: int, alpha: float | None, length_penalty: str = "wu", checkpoint: str = "recipe") -> str:
    "A decoding setting in words: 'beam 4, α 1.2', 'beam 5, mean log-probability (avg), averaged checkpoint'."
    text = f"beam {beam}, " + ("mean log-probability (avg)" if length_penalty == "avg" else f"α {alpha:g}")
    return text + (", averaged checkpoint" if checkpoint == "averaged" else "")


def score(out: Path, split: str, beam: int, alpha: float | None, length_penalty: str = "wu",
          checkpoint: str = "recipe") -> tuple[float, str]:
    "sacreBLEU of the toolkit's translation of `split` against the raw references, and the signature."
    path = hypothesis_file(out, split, beam, alpha, length_penalty, checkpoint)
    if not path.is_file():
        raise SystemExit(f"no translation of {split} with {setting_text(beam, alpha, length_penalty, checkpoint)}: "
                         f"{path} is missing")
    return scored_file(out, split, path)


def scored_file(out: Path, split: str, path: Path) -> tuple[float, str]:
    "sacreBLEU of the token lines in `path`, a translation of `split`, against the raw references, and the signature."
    data = out / "data"
    hypotheses = detokenize(path.read_text("utf-8").splitlines(), read_tokenizer(data / "tokenizer.json"))
    references = (data / f"{split}.raw.en").read_text("utf-8").splitlines()
    if len(hypotheses) != len(references):
        raise SystemExit(f"{path} has {len(hypotheses)} lines but {split} has {len(references)} references")
    value, _, signature = bleu(hypotheses, references)
    return round(value, 2), signature


def bleu_curve(out: Path, training: dict) -> list[dict]:
    """Greedy val BLEU of every checkpoint that `curve` translated, at the training minutes it was written: the
    validation point of its update (OpenNMT-py numbers that point with the next update: 251 after 250), or the end of
    training for the last one."""
    minutes = {point["step"] - 1: point["train_minutes"] for point in training["curve"]}
    minutes[training["steps"]] = training["train_minutes"]
    steps = sorted(curve_step(path.name) for path in (out / "hyp" / "curve").glob("*.tok"))
    if missing := [step for step in steps if step not in minutes]:
        raise SystemExit(f"checkpoints of updates {missing} were written where no validation was: save them where the "
                         "run validates (save_checkpoint_steps a multiple of valid_steps)")
    return [{"step": step, "train_minutes": minutes[step],
             "val_bleu": scored_file(out, "val", out / "hyp" / "curve" / curve_name(step))[0]} for step in steps]


def parse_also(text: str) -> tuple[int, float | None, str]:
    "'5:avg' (beam 5, OpenNMT-py's mean log-probability) or '5:1.0' (beam 5, α 1.0): a toolkit's default decoding."
    beam, sep, penalty = text.partition(":")
    try:
        if sep and beam.isdigit():
            return (int(beam), None, "avg") if penalty == "avg" else (int(beam), float(penalty), "wu")
    except ValueError:
        pass
    raise SystemExit(f"--also takes BEAM:ALPHA or BEAM:avg, got {text!r}")


def decoding_grid(beams: list[int], alphas: list[float], checkpoints: tuple[str, ...] = ("recipe",),
                  also: tuple[str, ...] = ()) -> list[dict]:
    "The settings tuned on val: for each checkpoint, every beam × α (GNMT's penalty) and each toolkit default."
    settings = [(beam, alpha, "wu") for beam in beams for alpha in alphas]
    for extra in map(parse_also, also):
        if extra not in settings:
            settings.append(extra)
    return [{"checkpoint": checkpoint, "beam": beam, "alpha": alpha, "length_penalty": penalty}
            for checkpoint in checkpoints for beam, alpha, penalty in settings]


def tune(out: Path, grid: list[dict]) -> list[dict]:
    "val BLEU of every setting of `grid`, best first (ties: the recipe's checkpoint, smaller beam, GNMT's, smaller α)."
    rows = [{**setting, "val_bleu": score(out, "val", setting["beam"], setting["alpha"], setting["length_penalty"],
                                          setting["checkpoint"])[0]} for setting in grid]
    return sorted(rows, key=lambda row: (-row["val_bleu"], row["checkpoint"] != "recipe", row["beam"],
                                         row["length_penalty"] != "wu", row["alpha"] or 0.0))


def epoch_tokens(data: Path) -> int:
    "Tokens in one pass over the training pairs, counted as the launchers and ours count them: each side plus one."
    return sum(len(line.split()) + 1 for lang in ("de", "en")
               for line in (data / f"train.{lang}").read_text("utf-8").splitlines())


def seed_setting(settings: list[str]) -> int | None:
    "The seed a run's settings set (OpenNMT-py's `seed`, Joey NMT's `training.random_seed`), or None: the recipe's."
    seeds = [int(value) for key, _, value in (s.partition("=") for s in settings)
             if key.lstrip("+").split(".")[-1] in ("seed", "random_seed")]
    return seeds[-1] if seeds else None


def peer_record(training: dict, grid: list[dict], scores: dict[str, float], signature: str, command: str,
                commit: str, machine: str, tokens_per_epoch: int, averaged: list[str] = (),
                val_bleu_curve: list[dict] = ()) -> dict:
    "The report of one peer run, with the fields of ours that a side-by-side table and chart need."
    best = grid[0]
    checkpoint = (f"the average of its last {len(averaged)} checkpoints" if best["checkpoint"] == "averaged"
                  else training["checkpoint_choice"])
    return {"toolkit": training["toolkit"], "version": training["toolkit_version"],
            "seed": seed_setting(training.get("settings", [])),
            "train_minutes": training["train_minutes"], "budget_minutes": training["budget_minutes"],
            "steps": training["steps"], "epochs": round(training["tokens"] / tokens_per_epoch, 2),
            "tokens_per_s": training["tokens_per_s"],
            "test2016_sacrebleu": scores["test2016"], "sacrebleu": scores, "sacrebleu_signature": signature,
            "beam_size": best["beam"], "alpha": best["alpha"], "length_penalty": best["length_penalty"],
            "decoding": "tuned on val", "tuning": grid, "checkpoint": checkpoint,
            "averaged_checkpoints": list(averaged),
            "train_loss_first_10": training["train_loss_first_10"],
            "train_loss_last_10": training["train_loss_last_10"],
            "validation_curve": training["curve"], "val_bleu_curve": list(val_bleu_curve),
            "architecture": training.get("architecture", "transformer"),
            "settings": training.get("settings", []), "load_average": training.get("load_average"),
            "profile": training.get("profile"), "command": command, "commit": commit, "machine": machine}


def signature_warning(signature: str, summary: Path = OUR_SUMMARY) -> str | None:
    "A line saying how `signature` differs from our report's, or None if they agree (or ours is missing)."
    if not summary.is_file():
        return None
    ours = json.loads(summary.read_text())["sacrebleu_signature"]
    return None if ours == signature else f"sacreBLEU signature {signature} differs from our report's {ours}"


def grid_val_bleu(record: dict) -> float:
    "A run's best val BLEU over our grid (GNMT's penalty) with the checkpoint its recipe translates: every run's."
    return max(row["val_bleu"] for row in record["tuning"]
               if row.get("checkpoint", "recipe") == "recipe" and row.get("length_penalty", "wu") == "wu")


CHECKPOINT_KEEPING = ("save_checkpoint_steps", "keep_checkpoint",  # OpenNMT-py's: they keep checkpoints, not train
                      "training.keep_best_ckpts")  # Joey NMT's
BUDGET_SCALED = ("start_decay_steps", "decay_steps")  # a schedule placed in updates: set anew for the hour's updates


def as_screened(settings: list[str]) -> set[str]:
    "Settings as a screen row and an hour's run share them: no checkpoint keeping, a schedule's place by key only."
    kept = [s for s in settings if s.partition("=")[0] not in CHECKPOINT_KEEPING]
    return {s.partition("=")[0] if s.partition("=")[0] in BUDGET_SCALED else s for s in kept}


def mean_of(values: list[float], digits: int = 2) -> float:
    "The mean of `values`, rounded."
    return round(sum(values) / len(values), digits)


def combined_record(runs: dict[str, dict], screen: dict | None = None, recipe_run: tuple[str, dict] | None = None,
                    command: str = "", commit: str = "", variant: str | None = None) -> dict:
    """A toolkit's report: its seeds' runs of one setting (`runs`: report path → record), the screen that chose it
    (search; `variant`: the row they ran, when a row added later beat it), the recipe's own run it is held against on
    val, and the seeds' means that the chapter compares."""
    records = list(runs.values())
    first = records[0]
    fixed = [sorted(s for s in r.get("settings", []) if seed_setting([s]) is None) for r in records]  # but the seed
    same = {(r["toolkit"], r["version"], r.get("architecture", "transformer"), r["budget_minutes"]) for r in records}
    if any(f != fixed[0] for f in fixed) or len(same) != 1:
        raise SystemExit("the runs differ in more than their seed: one report is one setting of one toolkit")
    if len({r["machine"] for r in records}) != 1:
        raise SystemExit("the runs were made on different machines: minutes only compare on one")
    if len({r.get("parameters") for r in records}) != 1:
        raise SystemExit("the runs' models differ in size: one report is one model")
    if len({r.get("seed") for r in records}) != len(records):
        raise SystemExit("two runs have the same seed")
    search = []
    if variant and not screen:
        raise SystemExit(f"variant {variant} names a row of a screen: give the screen too")
    if screen:
        rows = {row["variant"]: row for row in screen["rows"]}
        if variant and variant not in rows:
            raise SystemExit(f"the screen has no variant {variant}: it has {', '.join(rows)}")
        best = rows[variant] if variant else screen["rows"][0]
        if as_screened(fixed[0]) != as_screened(best["settings"]):
            which = "variant" if variant else "best variant"
            raise SystemExit(f"the runs' settings {fixed[0]} are not the screen's {which}, {best['variant']} "
                             f"({best['settings']})")
        variant = best["variant"]
        search = [{"variant": row["variant"], "val_bleu": row["val_bleu"], "minutes": screen["minutes"],
                   "steps": row["steps"]} for row in screen["rows"]]
    sets = list(first["sacrebleu"])
    record = {"toolkit": first["toolkit"], "version": first["version"],
              "architecture": first.get("architecture", "transformer"), "parameters": first.get("parameters"),
              "variant": variant or "the published recipe", "settings": fixed[0],
              "seeds": [{"seed": r.get("seed"), "report": path, **r["sacrebleu"],
                         "val_bleu": r["tuning"][0]["val_bleu"],
                         "val_bleu_grid": grid_val_bleu(r), "checkpoint": r["checkpoint"],
                         "steps": r["steps"], "epochs": r["epochs"], "tokens_per_s": r["tokens_per_s"],
                         "commit": r["commit"]} for path, r in runs.items()],
              "search": search, "search_minutes": screen["minutes"] if screen else None,
              "averaged_checkpoints": min(len(r.get("averaged_checkpoints", [])) for r in records),
              "load_average": [{"seed": r.get("seed"), **(r.get("load_average") or {})} for r in records],
              "sacrebleu": {split: mean_of([r["sacrebleu"][split] for r in records]) for split in sets},
              "train_minutes": mean_of([r["train_minutes"] for r in records]),
              "steps": round(mean_of([r["steps"] for r in records])),
              "epochs": mean_of([r["epochs"] for r in records]),
              "tokens_per_s": round(mean_of([r["tokens_per_s"] for r in records])),
              "machine": first["machine"], "command": command, "commit": commit}
    record["test2016_sacrebleu"] = record["sacrebleu"]["test2016"]
    if recipe_run:
        path, recipe = recipe_run
        record["recipe_run"] = {"report": path, "val_bleu_grid": grid_val_bleu(recipe),
                                **recipe["sacrebleu"], "machine": recipe["machine"]}
    return record


def check_run(training: dict, minutes: float, settings: list[str]) -> None:
    "Refuse to evaluate a run that `run.sh` with these minutes and settings did not train."
    if training["budget_minutes"] != minutes or training.get("settings", []) != settings:
        raise SystemExit(f"the run was trained for {training['budget_minutes']:g} minutes with settings "
                         f"{training.get('settings', [])}, not {minutes:g} with {settings}: another run's folder?")


def choice_line(best: dict) -> str:
    "The chosen setting as run.sh reads it: CHECKPOINT BEAM ALPHA PENALTY (α 0 for `avg`, which takes none)."
    return f"{best['checkpoint']} {best['beam']} {best['alpha'] or 0:g} {best['length_penalty']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("choose", "write"):
        purpose = {"choose": "print the best setting on val: CHECKPOINT BEAM ALPHA PENALTY",
                   "write": "score the test sets with it, write the run's report"}[name]
        one = commands.add_parser(name, help=purpose)
        one.add_argument("--out", type=Path, required=True, help="the peer's run folder")
        one.add_argument("--beams", type=int, nargs="+", required=True)
        one.add_argument("--alphas", type=float, nargs="+", required=True)
        one.add_argument("--checkpoints", nargs="+", default=["recipe"], choices=CHECKPOINTS)
        one.add_argument("--also", nargs="*", default=[], metavar="BEAM:ALPHA|BEAM:avg",
                         help="the toolkit's own default decoding, tuned beside the grid")
        if name == "write":
            one.add_argument("--report", type=Path, required=True, help="the JSON file to write")
            one.add_argument("--command", dest="run_command", default="", help="the command that made the run")
    check = commands.add_parser("check-run", help="refuse a run folder that another command trained")
    check.add_argument("--out", type=Path, required=True)
    check.add_argument("--minutes", type=float, required=True)
    check.add_argument("--set", dest="settings", nargs="*", default=[])
    joined = commands.add_parser("combine", help="a toolkit's report from its seeds' runs, its screen and its recipe")
    joined.add_argument("--report", type=Path, required=True)
    joined.add_argument("--runs", type=Path, nargs="+", required=True, help="the seeds' reports (`write`)")
    joined.add_argument("--screen", type=Path, help="the screen that chose their setting (screen.py)")
    joined.add_argument("--recipe-run", type=Path, help="the report of the recipe's own run, held against on val")
    joined.add_argument("--variant", help="the screen's row the runs ran, if not its best (a row added later)")
    args = parser.parse_args()
    if args.command == "combine":
        return combine(args)
    if args.command == "check-run":
        return check_run(read_json(args.out / "training.json"), args.minutes, args.settings)
    grid = tune(args.out, decoding_grid(args.beams, args.alphas, tuple(args.checkpoints), tuple(args.also)))
    best = grid[0]
    if args.command == "choose":
        print(choice_line(best))
        return
    results = {split: score(args.out, split, best["beam"], best["alpha"], best["length_penalty"], best["checkpoint"])
               for split in TEST_SETS}
    signature = results["test2016"][1]
    if warning := signature_warning(signature):
        print(f"warning: {warning}", file=sys.stderr)
    training = json.loads((args.out / "training.json").read_text())
    averaged = (json.loads((args.out / "averaged.json").read_text())["averaged"]
                if "averaged" in args.checkpoints else [])
    curve = bleu_curve(args.out, training) if (args.out / "hyp" / "curve").is_dir() else []
    record = peer_record(training, grid, {split: value for split, (value, _) in results.items()}, signature,
                         args.run_command, git_commit(), machine_description(), epoch_tokens(args.out / "data"),
                         averaged, curve)
    write_json(args.report, record)
    print(f"{record['toolkit']} {record['version']}: {scores_line(record)} → {args.report}")


def repo_path(path: Path) -> str:
    "`path` relative to the repository, as records name files (as given, if outside it)."
    resolved = path.resolve()
    return resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else str(path)


def combine(args: argparse.Namespace) -> None:
    "Write a toolkit's report from its seeds' reports, its screen and its recipe's run."
    runs = {repo_path(path): read_json(path) for path in args.runs}
    recipe_run = (repo_path(args.recipe_run), read_json(args.recipe_run)) if args.recipe_run else None
    command = shlex.join(["python", "scripts/peers/report.py", *sys.argv[1:]])
    record = combined_record(runs, read_json(args.screen) if args.screen else None, recipe_run, command,
                             git_commit(outputs=[repo_path(args.report)]), args.variant)
    write_json(args.report, record)
    print(f"{record['toolkit']} {record['version']}, {len(runs)} seed(s), means: {scores_line(record)} → "
          f"{args.report}")


def read_json(path: Path) -> dict:
    "A record, read."
    return json.loads(path.read_text())


def scores_line(record: dict) -> str:
    "The three test scores as one short text."
    return " · ".join(f"{split} {value:.2f}" for split, value in record["sacrebleu"].items())


if __name__ == "__main__":
    main()
