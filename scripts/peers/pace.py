"""Tokens a second of our recipe and of a peer's screen row on one machine at one time: short runs in turn.

A machine's speed moves between sessions and within one (results/speed-checks/), so the ratio of two hours' tokens a
second mixes the machines' speeds with the models'. Here each round trains both sides for the same few minutes, one
after the other, the order alternating (ours first, then theirs first, …) so that a drift of the machine's speed
falls on both; the record keeps every round's pair and their ratio, its median and spread.

    nice -n 10 python scripts/peers/pace.py opennmt-rnn brnn-adam-lr2e-3 --rounds 3 --minutes 4 \
        --record results/peers/pace/opennmt-rnn.json
    python scripts/peers/pace.py opennmt-rnn brnn-adam-lr2e-3 --rounds 2 --minutes 0.3 --out /tmp/pace \
        --record /tmp/pace.json                                   # a smoke test
"""
import argparse
import csv
import json
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import screen  # noqa: E402

from transformer.data import load_split  # noqa: E402
from transformer.hardware import machine_description  # noqa: E402
from transformer.run import git_commit, load_average  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUR_CONFIG = ROOT / "configs" / "multi30k-de-en.toml"


def side_order(round_index: int) -> tuple[str, str]:
    "Which side trains first in a round: ours in even rounds, theirs in odd ones."
    return ("ours", "theirs") if round_index % 2 == 0 else ("theirs", "ours")


def pace_summary(rounds: list[dict]) -> dict:
    "The median and spread of the rounds' ratios (ours ÷ theirs), and each side's median tokens a second."
    if len(rounds) < 2:
        raise ValueError(f"a pace needs at least two rounds, to have a spread; got {len(rounds)}")
    ratios = [r["ours"] / r["theirs"] for r in rounds]
    return {"repeats": len(rounds), "ratio_median": round(statistics.median(ratios), 3),
            "ratio_spread": round(max(ratios) - min(ratios), 3),
            "ours_median": round(statistics.median(r["ours"] for r in rounds)),
            "theirs_median": round(statistics.median(r["theirs"] for r in rounds))}


def our_corpus(folder: Path, valid_pairs: int = 16) -> list[str]:
    "Multi30k's train pairs as files, with a few val pairs: the end's validation, not timed, then takes seconds."
    folder.mkdir(parents=True, exist_ok=True)
    splits = {"train": load_split("train"), "valid": load_split("val")[:valid_pairs]}
    options = []
    for split, pairs in splits.items():
        for side, lang in enumerate(("de", "en")):
            path = folder / f"{split}.{lang}"
            path.write_text("".join(pair[side] + "\n" for pair in pairs), encoding="utf-8")
            options += [f"--{split}-{'src' if side == 0 else 'tgt'}", str(path)]
    return options


def train_ours(out: Path, minutes: float, corpus: list[str]) -> float:
    "Our recipe (seed 0, eager) for `minutes` of training on `corpus` (our_corpus's options); its tokens a second."
    subprocess.run(["transformer", "train", "--config", str(OUR_CONFIG), "--out", str(out), "--seed", "0",
                    "--compile", "off", "--max-minutes", str(minutes), *corpus], check=True)
    with open(out / "metrics.csv", newline="") as rows:
        return float(list(csv.DictReader(rows))[-1]["tokens_per_s"])  # tokens seen ÷ training seconds, all along


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("screen", help="a screen of screens.yaml, e.g. opennmt-rnn")
    parser.add_argument("variant", help="its row to train, e.g. brnn-adam-lr2e-3")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both sides (at least 2)")
    parser.add_argument("--minutes", type=float, default=4, help="training minutes of each side in each round")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "peers" / "pace", help="run folders")
    parser.add_argument("--record", type=Path, required=True, help="the JSON file to write")
    parser.add_argument("--venv", type=Path, help="the toolkit's environment (default ../venvs/TOOLKIT)")
    args = parser.parse_args()
    if args.rounds < 2:
        raise SystemExit(f"--rounds must be at least 2, to give the ratio a spread; got {args.rounds}")
    spec = yaml.safe_load((screen.PEERS / "screens.yaml").read_text())[args.screen]
    if args.variant not in spec["variants"]:
        raise SystemExit(f"no variant {args.variant!r} in the {args.screen} screen of screens.yaml")
    toolkit = spec.get("toolkit", args.screen)
    venv = args.venv or ROOT.parent / "venvs" / toolkit
    subprocess.run(["bash", str(screen.PEERS / "venv.sh"), toolkit, str(venv)], check=True)
    runner = [str(venv / "bin" / "python"), "-W", "ignore", str(screen.PEERS / f"{toolkit}_run.py")]
    data = args.out / "data"
    if not (data / "vocab.txt").is_file():
        subprocess.run([sys.executable, str(screen.PEERS / "prepare.py"), "--out", str(data)], check=True)
    corpus = our_corpus(args.out / "ours-data")
    settings = [str(s) for s in spec["variants"][args.variant]]
    recipe = screen.PEERS / spec.get("recipe", f"{toolkit}.yaml")
    before, rounds = load_average(), []
    for index in range(args.rounds):
        row = {"round": index + 1, "order": list(side_order(index))}
        for side in row["order"]:
            out = args.out / f"round{index + 1}-{side}"
            shutil.rmtree(out, ignore_errors=True)  # each run starts afresh
            if side == "ours":
                row["ours"] = round(train_ours(out, args.minutes, corpus))
            else:
                out.mkdir(parents=True)
                subprocess.run([*runner, "train", "--config", str(recipe), "--data", str(data), "--out", str(out),
                                "--minutes", str(args.minutes), "--set", *settings], check=True)
                row["theirs"] = json.loads((out / "training.json").read_text())["tokens_per_s"]
        rounds.append(row | {"ratio": round(row["ours"] / row["theirs"], 3)})
        print(f"round {index + 1}: ours {row['ours']:,} tokens/s, theirs {row['theirs']:,}", file=sys.stderr)
    record = {"what": f"tokens a second, our recipe against {args.screen} {args.variant}, in turn on one machine",
              "screen": args.screen, "variant": args.variant, "settings": settings, "minutes": args.minutes,
              "rounds": rounds, **pace_summary(rounds), "load_average": {"start": before, "end": load_average()},
              "machine": machine_description(), "commit": git_commit(),
              "command": shlex.join(["python", "scripts/peers/pace.py", *sys.argv[1:]])}
    args.record.parent.mkdir(parents=True, exist_ok=True)
    args.record.write_text(json.dumps(record, indent=1) + "\n")
    print(f"ours ÷ theirs: median {record['ratio_median']} (spread {record['ratio_spread']}) → {args.record}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
