"""§6.3 at small scale: train the Transformer to parse NLTK's Penn Treebank sample (files wsj_0001–0179), keep the
checkpoint with the best development F1 (wsj_0180–0189, constrained greedy decoding), score test (wsj_0190–0199)
with EVALB's rules beside two baselines, run the diagnostics, and write results/parsing.json for the chapter.

    python scripts/parsing.py [--leaves words] [--d-model 128] [--max-minutes 20] [--diagnostic-minutes 5]

Training stops when dev F1 has not improved for `--patience` evaluations, or at `--max-minutes` / `--max-steps`.
The diagnostics (a blanked source; when the main run copies words, XX leaves and untied embeddings; the schedule's
full rate; 25% and 50% of the training trees) train the same way under the smaller budget, and `memorise` checks
that the model can learn 64 training trees by heart at the chosen rate and at the full one.
"""

import argparse
import json
import random
import shlex
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from transformer.checkpoint import load_weights, save_model_files
from transformer.hardware import machine_description
from transformer.model import Transformer, TransformerConfig, count_parameters
from transformer.parsing import PAPER_DECODING, Vocab, parse, parsing_pairs, word_class
from transformer.treebank import Tree, evalb, flat_tree, linearize, right_branching, treebank_splits, words_and_tags
from transformer.trainer import TrainConfig, Trainer
from transformer.training import noam_rate
from transformer.run import git_commit

ROOT = Path(__file__).resolve().parent.parent


def sentences(trees: list[Tree], blank: bool = False) -> list[list[str]]:
    "The words of each tree, or as many <unk> as it has words when `blank` (the model then sees only the length)."
    return [["<unk>" if blank else w for w, _ in words_and_tags(t)] for t in trees]


def score(gold: list[Tree], parsed: list[Tree]) -> dict[str, float]:
    "EVALB's precision, recall, F1 and counts, rounded for the result file."
    return {k: round(v, 2) for k, v in evalb(gold, parsed).items()}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small", choices=["small", "tiny"])
    parser.add_argument("--d-model", type=int, default=0, help="override the preset's width (d_ff = 4 d_model)")
    parser.add_argument("--dropout", type=float, default=0.3)
    parser.add_argument("--min-count", type=int, default=2, help="rarer words fall back to their shape class")
    parser.add_argument("--no-word-classes", action="store_true", help="rare words become plain <unk>")
    parser.add_argument("--leaves", default="xx", choices=["xx", "words"],
                        help="the tree's leaves: XX (the paper, after Vinyals et al.) or the words, copied")
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--warmup", type=int, default=400)
    parser.add_argument("--lr-factor", type=float, default=0.4,
                        help="multiplies the rate schedule (peak factor / sqrt(d_model * warmup)); at 1.0 the model "
                             "does not fit even its training trees (the full_rate diagnostic)")
    parser.add_argument("--eval-every", type=int, default=200)
    parser.add_argument("--patience", type=int, default=4, help="evaluations without a better dev F1 before stopping")
    parser.add_argument("--max-steps", type=int, default=20_000)
    parser.add_argument("--max-minutes", type=float, default=20.0, help="training-time cap of the main run")
    parser.add_argument("--diagnostic-minutes", type=float, default=5.0, help="cap of each diagnostic run (0: none)")
    parser.add_argument("--diagnostics", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--seed", type=int, default=0, help="seeds initialisation and batch order of every run")
    parser.add_argument("--train-sample", type=int, default=200, help="training sentences scored for training F1")
    parser.add_argument("--out", default=str(ROOT / "runs" / "parsing"))
    parser.add_argument("--result", default=str(ROOT / "results" / "parsing.json"))
    return parser.parse_args()


def train(name: str, trees: list[Tree], dev: list[Tree], words: Vocab, labels: Vocab, cfg: TransformerConfig,
          args: argparse.Namespace, minutes: float, blank: bool = False,
          lr_factor: float | None = None) -> tuple[Transformer, dict]:
    "Train until dev F1 (constrained greedy) plateaus or the budget ends; the model at its best dev F1, and the run."
    fits = lambda p: max(len(p[0]), len(p[1])) + 1 <= cfg.max_len  # noqa: E731
    copy_words = cfg.tgt_vocab_size > len(labels)
    pairs = [p for p in parsing_pairs(trees, words, labels, copy_words, blank) if fits(p)]
    dev_pairs = [p for p in parsing_pairs(dev, words, labels, copy_words, blank) if fits(p)]
    dev_words, best_dir = sentences(dev, blank), Path(args.out) / name / "best"
    best_dir.mkdir(parents=True, exist_ok=True)
    best = {"f1": -1.0, "step": 0}

    def dev_f1(trainer: Trainer) -> dict[str, float]:
        f1 = evalb(dev, parse(trainer.model, words, labels, dev_words, beam_size=1))["f1"]
        if f1 > best["f1"]:  # the checkpoint we keep: chosen on dev, never on test
            best.update(f1=f1, step=trainer.state.step)
            save_model_files(trainer.model, best_dir)
        print(f"[{name}] step {trainer.state.step}: dev F1 {f1:.1f} (best {best['f1']:.1f} at {best['step']})",
              flush=True)
        return {"dev_f1": f1}

    def plateau(trainer: Trainer) -> bool:
        return trainer.state.step - best["step"] >= args.patience * args.eval_every

    train_cfg = TrainConfig(max_tokens=args.max_tokens, max_steps=args.max_steps, max_minutes=minutes,
                            warmup=args.warmup, lr_factor=lr_factor or args.lr_factor, eval_every=args.eval_every,
                            keep_last=1, precision="fp32", seed=args.seed)
    torch.manual_seed(args.seed)
    trainer = Trainer(Transformer(cfg), train_cfg, pairs, dev_pairs,
                      out_dir=Path(args.out) / name, progress="lines", on_eval=dev_f1, stop_when=plateau)
    trainer.fit()
    model = load_weights(trainer.model, best_dir).eval()
    peak_lr = noam_rate(train_cfg.warmup, cfg.d_model, train_cfg.warmup, train_cfg.lr_factor)
    return model, {"train_pairs": len(pairs), "train": asdict(train_cfg), "peak_lr": peak_lr,
                   "steps": trainer.state.step,
                   "train_minutes": round(trainer.state.train_seconds / 60, 1), "best_step": best["step"],
                   "dev_f1": best["f1"], "stopped": "plateau" if plateau(trainer) else "budget",
                   "curve": [{k: row.get(k) for k in ("step", "train_loss", "valid_loss", "dev_f1", "train_minutes")}
                             for row in trainer.state.metrics]}


def memorise(trees: list[Tree], words: Vocab, labels: Vocab, cfg: TransformerConfig, lr_factor: float,
             n_trees: int = 64, epochs: int = 100) -> dict:
    "Can the model learn `n_trees` short training trees by heart at this rate? Their F1 after about `epochs` passes."
    short = sorted(trees, key=lambda t: len(linearize(t)))[len(trees) // 4:][:n_trees]  # short, not one-word ones
    pairs = parsing_pairs(short, words, labels, cfg.tgt_vocab_size > len(labels))
    torch.manual_seed(0)
    steps = epochs * -(-sum(len(t) + 1 for _, t in pairs) // 512)  # batches of ≤ 512 target tokens
    train_cfg = TrainConfig(max_tokens=512, max_steps=steps, warmup=100, lr_factor=lr_factor, label_smoothing=0.0,
                            precision="fp32", seed=0)
    trainer = Trainer(Transformer(replace(cfg, dropout=0.0)), train_cfg, pairs, progress=False)
    trainer.fit()
    f1 = evalb(short, parse(trainer.model, words, labels, sentences(short), beam_size=1))["f1"]
    print(f"[memorise] lr factor {lr_factor}: F1 {f1:.1f} on the {len(short)} trees it trained on", flush=True)
    return {"lr_factor": lr_factor, "trees": len(short), "steps": trainer.state.step,
            "train_loss": trainer.state.metrics[-1]["train_loss"] if trainer.state.metrics else None, "f1": f1}


def diagnostic_runs(train_trees: list[Tree], dev: list[Tree], test: list[Tree], words: Vocab, labels: Vocab,
                    cfg: TransformerConfig, args: argparse.Namespace, run: dict, test_greedy: dict) -> dict:
    "The diagnostics' runs under the smaller budget, and the memorisation check; `run`: the main run, for the curve."
    budget, diagnostics, test_words = args.diagnostic_minutes, {}, sentences(test)
    blank_model, blank_run = train("blank", train_trees, dev, words, labels, cfg, args, budget, blank=True)
    diagnostics["blank_source"] = blank_run | {"test": score(test, parse(blank_model, words, labels,
                                                                         sentences(test, blank=True), beam_size=1))}
    if args.leaves == "words":  # the paper's XX leaves, trained the same way under the diagnostic budget
        xx_cfg = replace(cfg, src_vocab_size=len(words), tgt_vocab_size=len(labels), tie_embeddings=False)
        xx_model, xx_run = train("xx_leaves", train_trees, dev, words, labels, xx_cfg, args, budget)
        diagnostics["xx_leaves"] = xx_run | {"test": score(test, parse(xx_model, words, labels, test_words,
                                                                       beam_size=1))}
        # the same ids, but source, target and output embeddings learned as three separate tables
        untied_model, untied_run = train("untied", train_trees, dev, words, labels,
                                         replace(cfg, tie_embeddings=False), args, budget)
        diagnostics["untied"] = untied_run | {"test": score(test, parse(untied_model, words, labels, test_words,
                                                                        beam_size=1))}
    full_model, full_run = train("full_rate", train_trees, dev, words, labels, cfg, args, budget, lr_factor=1.0)
    diagnostics["full_rate"] = full_run | {"test": score(test, parse(full_model, words, labels, test_words,
                                                                     beam_size=1))}
    diagnostics["memorise"] = [memorise(train_trees, words, labels, cfg, factor) for factor in (args.lr_factor, 1.0)]
    curve = []
    for fraction in (0.25, 0.5):
        part = train_trees[: round(fraction * len(train_trees))]  # whole files, in order
        part_model, part_run = train(f"fraction{fraction}", part, dev, words, labels, cfg, args, budget)
        curve.append({"fraction": fraction, "trees": len(part), "test_greedy": score(
            test, parse(part_model, words, labels, test_words, beam_size=1))} | part_run)
    curve.append({"fraction": 1.0, "trees": len(train_trees), "test_greedy": test_greedy} | run)
    diagnostics["learning_curve"] = curve
    return diagnostics


def main() -> None:
    args = arguments()
    start = time.time()
    splits = treebank_splits()
    train_trees, dev, test = splits["train"], splits["dev"], splits["test"]
    words = Vocab(sentences(train_trees), args.min_count, None if args.no_word_classes else word_class)
    labels = Vocab([linearize(t) for t in train_trees])
    overrides = dict(d_model=args.d_model, d_ff=4 * args.d_model) if args.d_model else {}
    copy_words = args.leaves == "words"  # copied words: one id space (words past the labels), tied embeddings
    vocab = dict(src_vocab_size=len(labels) + len(words), tgt_vocab_size=len(labels) + len(words),
                 tie_embeddings=True) if copy_words else dict(src_vocab_size=len(words), tgt_vocab_size=len(labels),
                                                              tie_embeddings=False)
    cfg = TransformerConfig.preset(args.preset, dropout=args.dropout, max_len=512, **vocab, **overrides)

    model, run = train("main", train_trees, dev, words, labels, cfg, args, args.max_minutes)
    test_words = sentences(test)
    test_scores = {"greedy": score(test, parse(model, words, labels, test_words, beam_size=1)),
                   "beam4": score(test, parse(model, words, labels, test_words, beam_size=4)),
                   "paper": score(test, parse(model, words, labels, test_words, **PAPER_DECODING)),
                   "greedy_unconstrained": score(test, parse(model, words, labels, test_words, beam_size=1,
                                                             constrained=False))}
    dev_paper = score(dev, parse(model, words, labels, sentences(dev), **PAPER_DECODING))
    sample = random.Random(0).sample(train_trees, min(args.train_sample, len(train_trees)))
    train_f1 = score(sample, parse(model, words, labels, sentences(sample), beam_size=1))
    examples = parse(model, words, labels, test_words[:5], **PAPER_DECODING)

    # baselines: no learning; the right-branching tree's inner label is the one best on dev
    inner = max(("NP", "VP", "S", "PP"), key=lambda lab: evalb(dev, [right_branching(s, inner=lab)
                                                                       for s in sentences(dev)])["f1"])
    baselines = {"flat": score(test, [flat_tree(s) for s in test_words]),
                 "right_branching": score(test, [right_branching(s, inner=inner) for s in test_words]) | {
                     "inner_label": inner}}

    diagnostics = {"train_f1": train_f1 | {"sentences": len(sample)}, "dev_paper": dev_paper}
    if args.diagnostics:  # without them (exploring settings, another seed): the main run alone
        diagnostics |= diagnostic_runs(train_trees, dev, test, words, labels, cfg, args, run, test_scores["greedy"])

    result = {"command": "python scripts/parsing.py " + shlex.join(sys.argv[1:]), "commit": git_commit(),
              "machine": machine_description(), "seed": args.seed, "sentences": {k: len(v) for k, v in splits.items()},
              "vocab": {"words": len(words), "labels": len(labels), "min_count": args.min_count,
                        "word_classes": not args.no_word_classes, "leaves": args.leaves},
              "model": cfg.to_dict(), "parameters": count_parameters(model), "decoding": {"paper": PAPER_DECODING},
              "main": run, "steps": run["steps"], "train_minutes": run["train_minutes"], "test": test_scores,
              "baselines": baselines, "diagnostics": diagnostics,
              "examples": [{"words": " ".join(s), "gold": " ".join(linearize(g)), "parsed": " ".join(linearize(p))}
                           for s, g, p in zip(test_words, test, examples)],
              "wall_minutes": round((time.time() - start) / 60, 1)}
    Path(args.result).write_text(json.dumps(result, indent=1) + "\n")
    print(f"test F1 {test_scores['paper']['f1']:.1f} (paper decoding), {test_scores['greedy']['f1']:.1f} (greedy); "
          f"baselines {baselines['flat']['f1']:.1f} flat, {baselines['right_branching']['f1']:.1f} right-branching")


if __name__ == "__main__":
    main()
