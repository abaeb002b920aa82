"""§6.3 at small scale: train the Transformer to parse NLTK's Penn Treebank sample (files wsj_0001–0179), score
test (wsj_0190–0199) with EVALB's rules, and write results/parsing.json, which the parsing chapter reads.

    python scripts/parsing.py [--steps 2000] [--out runs/parsing]

Resumable: an interrupted run continues from its last checkpoint. About 30 minutes on 2 CPU cores.
"""

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from transformer.checkpoint import latest_checkpoint
from transformer.model import Transformer, TransformerConfig, count_parameters
from transformer.parsing import Vocab, evalb, linearize, parse, parsing_pairs, treebank_splits, words_and_tags
from transformer.trainer import TrainConfig, Trainer
from transformer.hardware import machine_description
from transformer.translation import git_commit

ROOT = Path(__file__).resolve().parent.parent


def sentences(trees) -> list[list[str]]:
    return [[w for w, _ in words_and_tags(t)] for t in trees]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--out", default=str(ROOT / "runs" / "parsing"))
    args = parser.parse_args()
    start = time.time()
    splits = treebank_splits()
    words = Vocab(sentences(splits["train"]), min_count=2)
    labels = Vocab([linearize(t) for t in splits["train"]])
    cfg = TransformerConfig.preset("small", src_vocab_size=len(words), tgt_vocab_size=len(labels),
                                   tie_embeddings=False, dropout=0.3, max_len=512)
    fits = lambda p: max(len(p[0]), len(p[1])) + 1 <= cfg.max_len  # noqa: E731
    train = [p for p in parsing_pairs(splits["train"], words, labels) if fits(p)]
    dev = [p for p in parsing_pairs(splits["dev"], words, labels) if fits(p)]
    train_cfg = TrainConfig(max_tokens=2048, max_steps=args.steps, warmup=800, lr_factor=1.0, eval_every=250,
                            keep_last=1, precision="fp32", seed=0)
    torch.manual_seed(0)
    trainer = Trainer(Transformer(cfg), train_cfg, train, dev, out_dir=args.out, progress="lines")
    if latest_checkpoint(args.out):
        trainer.resume()
    metrics = trainer.fit()
    model = trainer.model.eval()
    gold = splits["test"]
    parsed = {k: parse(model, words, labels, sentences(gold), beam_size=k) for k in (1, 4)}
    scores = {f"beam{k}": evalb(gold, trees) for k, trees in parsed.items()}
    best = parsed[4][:5]  # the examples are among the trees that were scored
    result = {"sentences": {k: len(v) for k, v in splits.items()}, "train_pairs_used": len(train),
              "vocab": {"words": len(words), "labels": len(labels)},
              "model": cfg.to_dict(), "parameters": count_parameters(model), "train": asdict(train_cfg),
              "steps": trainer.step, "train_minutes": round(trainer.train_seconds / 60, 1),
              "valid_loss": metrics[-1].get("valid_loss"), "test": scores,
              "examples": [{"words": " ".join(s), "gold": " ".join(linearize(g)), "parsed": " ".join(linearize(p))}
                           for s, g, p in zip(sentences(gold), gold, best)],
              "metrics": metrics, "wall_minutes": round((time.time() - start) / 60, 1), "commit": git_commit(),
              "machine": machine_description(), "command": f"python scripts/parsing.py --steps {args.steps}"}
    (ROOT / "results" / "parsing.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"test F1 {scores['beam4']['f1']:.1f} (beam 4), {scores['beam1']['f1']:.1f} (greedy)")


if __name__ == "__main__":
    main()
