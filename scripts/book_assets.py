"""Write the static files the book serves itself, so that charts, math and the translation box work offline.

    python scripts/book_assets.py [--web-model FOLDER]

The translation box runs the model folder FOLDER (default: models/multi30k-de-en where it exists, else a tiny model
trained here for seconds on Multi30k, so that a fresh clone still builds a working page).
"""
import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path

from transformer.data import load_split
from transformer.viz import write_vega_bundle
from transformer.web import WebError, train_small_model, write_model_assets

root = Path(__file__).resolve().parent.parent
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--web-model", help="the model folder the translation box runs")
args = parser.parse_args()
if args.web_model and not (Path(args.web_model) / "config.json").is_file():
    sys.exit(f"book_assets.py: --web-model {args.web_model} is not a model folder (it has no config.json)")

write_vega_bundle(root / "_static/vega-bundle.js")
# MathJax 3 as one self-contained script (SVG output needs no font files), from the django-static-mathjax wheel.
mathjax = Path(importlib.util.find_spec("mathjax").submodule_search_locations[0]) / "static/mathjax/es5/tex-svg.js"
(root / "_assets/mathjax").mkdir(parents=True, exist_ok=True)
shutil.copy(mathjax, root / "_assets/mathjax/tex-svg.js")
print("wrote _static/vega-bundle.js and _assets/mathjax/tex-svg.js")

# The translation box: onnxruntime-web and the model into _assets/translate/ (the site's translate/ folder, beside
# the box's own scripts from _extra/translate/).
measured_file = root / "results/web-model.json"
measured = json.loads(measured_file.read_text()) if measured_file.is_file() else None
default = root / "models/multi30k-de-en"
with tempfile.TemporaryDirectory() as tmp:
    if args.web_model or default.is_dir():
        model_dir = Path(args.web_model or default)
        name = model_dir.name
    else:
        model_dir = train_small_model(load_split("train")[:3000], Path(tmp) / "small")
        name = f"a tiny model trained for seconds when the book was built ({default.name} was not in the checkout)"
    try:
        write_model_assets(model_dir, root / "_assets/translate", name, measured)
    except WebError as e:
        sys.exit(f"book_assets.py: {e}")
print(f"wrote _assets/translate/ for the translation box, running {name}")
