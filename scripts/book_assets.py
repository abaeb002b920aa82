"""Write the static files the book serves itself, so that charts and math render without a network."""
import importlib.util
import shutil
from pathlib import Path

from transformer.viz import write_vega_bundle

root = Path(__file__).resolve().parent.parent
write_vega_bundle(root / "_static/vega-bundle.js")
# MathJax 3 as one self-contained script (SVG output needs no font files), from the django-static-mathjax wheel.
mathjax = Path(importlib.util.find_spec("mathjax").submodule_search_locations[0]) / "static/mathjax/es5/tex-svg.js"
(root / "_assets/mathjax").mkdir(parents=True, exist_ok=True)
shutil.copy(mathjax, root / "_assets/mathjax/tex-svg.js")
print("wrote _static/vega-bundle.js and _assets/mathjax/tex-svg.js")
