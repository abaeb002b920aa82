"""Measure the translation page's model: BLEU of the page's own code and int8 graphs against float32 PyTorch.

    python scripts/web_model_bleu.py [--model models/multi30k-de-en] [--split val] [--out results/web-model.json]

The page's JavaScript (tokenizer.js, decoding.js) runs the exported model in node on the onnxruntime-web the page
vendors, greedy and beam 4 (α = 0.6), over every sentence of the split; PyTorch decodes the same sentences in
float32. The JSON also records the model's SHA-256, so that the book shows these numbers only beside that model.
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from transformer.data import load_split, sha256
from transformer.translation import bleu, load_translator, translate_text
from transformer.web import ORT_WEB_VERSION, export_web, vendor_onnxruntime, web_model_size

root = Path(__file__).resolve().parent.parent
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=str(root / "models/multi30k-de-en"), help="a model folder")
parser.add_argument("--split", default="val", help="a Multi30k split (never a test set: this is a check)")
parser.add_argument("--out", default=str(root / "results/web-model.json"))
parser.add_argument("--first", type=int, help="only the split's first FIRST sentences (a quick check)")
args = parser.parse_args()
if shutil.which("node") is None:
    sys.exit("web_model_bleu.py runs the page's JavaScript in node, which is not installed: apt-get install nodejs")

model_dir = Path(args.model)
model, tokenizer = load_translator(model_dir)
pairs = load_split(args.split)[: args.first]
sources, references = [s for s, _ in pairs], [r for _, r in pairs]
record = {"model": model_dir.name, "model_sha256": sha256(model_dir / "model.safetensors"), "split": args.split,
          "sentences": len(pairs), "onnxruntime_web": ORT_WEB_VERSION, "decoding": {}}
with tempfile.TemporaryDirectory() as tmp:
    web, vendor = export_web(model_dir, Path(tmp) / "model"), vendor_onnxruntime(Path(tmp) / "vendor")
    record["size_bytes"] = web_model_size(web)
    for name, beam in (("greedy", 1), ("beam4", 4)):
        done = subprocess.run(["node", str(root / "scripts/web_translate.js"), str(vendor), str(web),
                               "beam" if beam > 1 else "greedy"], input=json.dumps(sources), capture_output=True,
                              text=True, check=True)
        page = json.loads(done.stdout)
        float32 = translate_text(model, tokenizer, sources, beam_size=beam, alpha=0.6)
        record["decoding"][name] = {"page_int8": round(bleu(page, references)[0], 2),
                                    "float32": round(bleu(float32, references)[0], 2),
                                    "identical": sum(a == b for a, b in zip(page, float32))}
        print(name, record["decoding"][name], flush=True)
Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
print(json.dumps(record))
