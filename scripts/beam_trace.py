"""Record the published model's beam search on one validation sentence, step by step, for chapter 5's picture.

    python scripts/beam_trace.py [--model models/multi30k-de-en] [--line N] [--out results/beam-search.json]

Without `--line`, the sentence is the first short one (at most `--max-words` words) of the validation split on which
beam search's translation is closer to the reference than greedy decoding's (sentence BLEU): one where keeping more
than the likeliest prefix pays. `transformer.decoding.beam_steps` follows the search; each row gets its newest word
piece and its text. The JSON records the model's SHA-256, and tests/test_beam_trace.py checks it against the
published model and re-records the trace.
"""
import argparse
import json
import sys
from pathlib import Path

import torch
from sacrebleu import sentence_bleu

from transformer.data import load_split, sha256
from transformer.decoding import beam_steps, greedy_decode
from transformer.translation import load_translator, translate_text

root = Path(__file__).resolve().parent.parent
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=str(root / "models/multi30k-de-en"), help="a model folder")
parser.add_argument("--line", type=int, help="the validation sentence (1 = the split's first line; default: chosen)")
parser.add_argument("--max-words", type=int, default=8, help="the longest sentence the choice considers, in words")
parser.add_argument("--beam", type=int, default=4)
parser.add_argument("--alpha", type=float, default=0.6)
parser.add_argument("--out", default=str(root / "results/beam-search.json"))
args = parser.parse_args()

model_dir = Path(args.model)
model, tokenizer = load_translator(model_dir)
val = load_split("val")


def trace(line: int) -> dict:
    "The beam's steps on validation line `line` (1-based), beside its translation and greedy decoding's."
    source = val[line - 1][0]
    src = torch.tensor([[*tokenizer.encode(source).ids, model.cfg.eos_id]])
    steps = beam_steps(model, src, args.beam, args.alpha)
    greedy = greedy_decode(model, src)[0]
    greedy_text = tokenizer.decode(greedy)
    for row in steps:
        row["piece"] = "</s>" if row["ended"] else tokenizer.decode(row["tokens"][-1:])
        row["text"] = tokenizer.decode(row["tokens"][:-1] if row["ended"] else row["tokens"])
        row["logprob"] = round(row["logprob"], 4)
        row["score"] = None if row["score"] is None else round(row["score"], 4)
    reference = val[line - 1][1]
    translation = translate_text(model, tokenizer, [source], args.beam, args.alpha)[0]
    return {"model": model_dir.name, "model_sha256": sha256(model_dir / "model.safetensors"), "split": "val",
            "line": line, "max_words": args.max_words if args.line is None else None, "source": source,
            "reference": reference, "beam": args.beam, "alpha": args.alpha, "translation": translation,
            "greedy": greedy_text, "greedy_tokens": greedy,
            "sentence_bleu": {"beam": round(sentence_bleu(translation, [reference]).score, 2),
                              "greedy": round(sentence_bleu(greedy_text, [reference]).score, 2)},
            "steps": steps}


if args.line is not None:
    if not 1 <= args.line <= len(val):
        sys.exit(f"--line must be between 1 and {len(val)} (the validation split's lines), got {args.line}")
    record = trace(args.line)
else:
    short = (line for line, (source, _) in enumerate(val, 1) if len(source.split()) <= args.max_words)
    record = next((r for r in map(trace, short) if r["sentence_bleu"]["beam"] > r["sentence_bleu"]["greedy"]), None)
    if record is None:
        sys.exit(f"on no validation sentence of at most {args.max_words} words does the beam beat greedy decoding: "
                 "raise --max-words")
Path(args.out).write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
print(f"line {record['line']}: {record['source']}\n→ {record['translation']} (greedy: {record['greedy']})\n"
      f"{len(record['steps'])} rows written to {args.out}")
