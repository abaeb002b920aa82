"""Measure the translation page's model: BLEU of its int8 ONNX graphs against the float32 PyTorch model.

    python scripts/web_model_bleu.py [--model models/multi30k-de-en] [--split val] [--out results/web-model.json]

Both decode greedily (the page's default) every sentence of the split; the JSON also records the model's SHA-256,
so that the book shows these numbers only beside the model they were measured on.
"""
import argparse
import json
import tempfile
from pathlib import Path

from transformer.data import load_split, sha256
from transformer.export import OnnxTranslator
from transformer.translation import bleu, load_translator, translate_text
from transformer.web import export_web, web_model_size

root = Path(__file__).resolve().parent.parent
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=str(root / "models/multi30k-de-en"), help="a model folder")
parser.add_argument("--split", default="val", help="a Multi30k split (never a test set: this is for checking)")
parser.add_argument("--out", default=str(root / "results/web-model.json"))
args = parser.parse_args()

model_dir = Path(args.model)
model, tokenizer = load_translator(model_dir)
pairs = load_split(args.split)
sources, references = [s for s, _ in pairs], [r for _, r in pairs]
float32 = translate_text(model, tokenizer, sources, beam_size=1)
with tempfile.TemporaryDirectory() as tmp:
    web = export_web(model_dir, tmp)
    int8 = tokenizer.decode_batch(OnnxTranslator(web).translate_ids([tokenizer.encode(s).ids for s in sources]))
    size = web_model_size(web)
record = {"model": model_dir.name, "model_sha256": sha256(model_dir / "model.safetensors"), "split": args.split,
          "sentences": len(pairs), "decoding": "greedy", "size_bytes": size,
          "bleu": {"int8": round(bleu(int8, references)[0], 2), "float32": round(bleu(float32, references)[0], 2)},
          "identical_translations": sum(a == b for a, b in zip(int8, float32))}
Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
print(json.dumps(record))
