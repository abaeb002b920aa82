"""Record the published model's beam search on one validation sentence, step by step, for chapter 5's picture.

    python scripts/beam_trace.py [--model models/multi30k-de-en] [--line 7] [--out results/beam-search.json]

Line 7 is a short sentence on which beam search and greedy decoding differ. `transformer.decoding.beam_steps`
follows the search; each row gets its newest word piece and its text. The JSON records the model's SHA-256, and
tests/test_beam_trace.py checks it against the published model and re-records the trace.
"""
import argparse
import json
from pathlib import Path

import torch

from transformer.data import load_split, sha256
from transformer.decoding import beam_steps, greedy_decode
from transformer.translation import load_translator, translate_text

root = Path(__file__).resolve().parent.parent
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=str(root / "models/multi30k-de-en"), help="a model folder")
parser.add_argument("--line", type=int, default=7, help="the validation sentence (1 = the split's first line)")
parser.add_argument("--beam", type=int, default=4)
parser.add_argument("--alpha", type=float, default=0.6)
parser.add_argument("--out", default=str(root / "results/beam-search.json"))
args = parser.parse_args()

model_dir = Path(args.model)
model, tokenizer = load_translator(model_dir)
source = load_split("val")[args.line - 1][0]
src = torch.tensor([[*tokenizer.encode(source).ids, model.cfg.eos_id]])
steps = beam_steps(model, src, args.beam, args.alpha)
for row in steps:
    row["piece"] = "</s>" if row["ended"] else tokenizer.decode(row["tokens"][-1:])
    row["text"] = tokenizer.decode(row["tokens"][:-1] if row["ended"] else row["tokens"])
    row["logprob"] = round(row["logprob"], 4)
    row["score"] = None if row["score"] is None else round(row["score"], 4)
record = {"model": model_dir.name, "model_sha256": sha256(model_dir / "model.safetensors"), "split": "val",
          "line": args.line, "source": source, "beam": args.beam, "alpha": args.alpha,
          "translation": translate_text(model, tokenizer, [source], args.beam, args.alpha)[0],
          "greedy": tokenizer.decode(greedy_decode(model, src)[0]), "steps": steps}
Path(args.out).write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
print(f"{source}\n→ {record['translation']} (greedy: {record['greedy']})\n{len(steps)} rows written to {args.out}")
