"""Score a peer toolkit's translations as ours are scored, choose its beam size and α on val, and write its report.
Runs in the project's environment: the hypotheses (byte-level BPE tokens) are turned back into text by our tokenizer
and scored with `transformer.translation.bleu`, so every peer carries our sacreBLEU signature.

    python scripts/peers/report.py choose --out runs/peers/joeynmt --beams 4 6 --alphas 0.6 1.0
    python scripts/peers/report.py write --out runs/peers/joeynmt --beams 4 6 --alphas 0.6 1.0 \
        --report results/peers/joeynmt.json --command "bash scripts/peers/run.sh joeynmt"
"""
import argparse
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from budget import hypothesis_name  # noqa: E402  (the launchers' own file names)

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


def hypothesis_file(out: Path, split: str, beam: int, alpha: float, length_penalty: str = "wu") -> Path:
    "Where the toolkit's launcher wrote its tokens for `split` at this beam size and α."
    return out / "hyp" / hypothesis_name(split, beam, alpha, length_penalty)


def score(out: Path, split: str, beam: int, alpha: float, length_penalty: str = "wu") -> tuple[float, str]:
    "sacreBLEU of the toolkit's translation of `split` against the raw references, and the signature."
    data, path = out / "data", hypothesis_file(out, split, beam, alpha, length_penalty)
    if not path.is_file():
        raise SystemExit(f"no translation of {split} with beam {beam}, α {alpha:g}: {path} is missing")
    hypotheses = detokenize(path.read_text("utf-8").splitlines(), read_tokenizer(data / "tokenizer.json"))
    references = (data / f"{split}.raw.en").read_text("utf-8").splitlines()
    if len(hypotheses) != len(references):
        raise SystemExit(f"{path} has {len(hypotheses)} lines but {split} has {len(references)} references")
    value, _, signature = bleu(hypotheses, references)
    return round(value, 2), signature


def tune(out: Path, beams: list[int], alphas: list[float]) -> list[dict]:
    "val BLEU of every (beam, α), best first (ties: the smaller beam, then the smaller α)."
    grid = [{"beam": b, "alpha": a, "val_bleu": score(out, "val", b, a)[0]} for b in beams for a in alphas]
    return sorted(grid, key=lambda row: (-row["val_bleu"], row["beam"], row["alpha"]))


def epoch_tokens(data: Path) -> int:
    "Tokens in one pass over the training pairs, counted as the launchers and ours count them: each side plus one."
    return sum(len(line.split()) + 1 for lang in ("de", "en")
               for line in (data / f"train.{lang}").read_text("utf-8").splitlines())


def peer_record(training: dict, grid: list[dict], scores: dict[str, float], signature: str, command: str,
                commit: str, machine: str, tokens_per_epoch: int) -> dict:
    "The report of one peer run, with the fields of ours that a side-by-side table and chart need."
    best = grid[0]
    return {"toolkit": training["toolkit"], "version": training["toolkit_version"],
            "train_minutes": training["train_minutes"], "budget_minutes": training["budget_minutes"],
            "steps": training["steps"], "epochs": round(training["tokens"] / tokens_per_epoch, 2),
            "tokens_per_s": training["tokens_per_s"],
            "test2016_sacrebleu": scores["test2016"], "sacrebleu": scores, "sacrebleu_signature": signature,
            "beam_size": best["beam"], "alpha": best["alpha"], "decoding": "tuned on val", "tuning": grid,
            "checkpoint": training["checkpoint_choice"],
            "train_loss_first_10": training["train_loss_first_10"],
            "train_loss_last_10": training["train_loss_last_10"],
            "validation_curve": training["curve"], "architecture": training.get("architecture", "transformer"),
            "settings": training.get("settings", []), "load_average": training.get("load_average"),
            "command": command, "commit": commit, "machine": machine}


def signature_warning(signature: str, summary: Path = OUR_SUMMARY) -> str | None:
    "A line saying how `signature` differs from our report's, or None if they agree (or ours is missing)."
    if not summary.is_file():
        return None
    ours = json.loads(summary.read_text())["sacrebleu_signature"]
    return None if ours == signature else f"sacreBLEU signature {signature} differs from our report's {ours}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["choose", "write"])
    parser.add_argument("--out", type=Path, required=True, help="the peer's run folder")
    parser.add_argument("--beams", type=int, nargs="+", required=True)
    parser.add_argument("--alphas", type=float, nargs="+", required=True)
    parser.add_argument("--report", type=Path, help="the JSON file to write (write)")
    parser.add_argument("--command", dest="run_command", default="", help="the command that made the run (write)")
    args = parser.parse_args()
    grid = tune(args.out, args.beams, args.alphas)
    if args.command == "choose":
        print(grid[0]["beam"], grid[0]["alpha"])
        return
    if args.report is None:
        parser.error("write needs --report")
    results = {split: score(args.out, split, grid[0]["beam"], grid[0]["alpha"]) for split in TEST_SETS}
    signature = results["test2016"][1]
    if warning := signature_warning(signature):
        print(f"warning: {warning}", file=sys.stderr)
    training = json.loads((args.out / "training.json").read_text())
    record = peer_record(training, grid, {split: value for split, (value, _) in results.items()}, signature,
                         args.run_command, git_commit(), machine_description(), epoch_tokens(args.out / "data"))
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(record, indent=1) + "\n")
    print(f"{record['toolkit']} {record['version']}: {scores_line(record)} → {args.report}")


def scores_line(record: dict) -> str:
    "The three test scores as one short text."
    return " · ".join(f"{split} {value:.2f}" for split, value in record["sacrebleu"].items())


if __name__ == "__main__":
    main()
