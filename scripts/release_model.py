"""Publish a trained model: write its files in float16, record their SHA-256 in the package, check them.

    python scripts/release_model.py runs/multi30k-de-en/average models/multi30k-de-en [--val-bleu]
    python scripts/release_model.py --check [--assets DIR]

The first form writes OUT (named after the published model): model.safetensors in float16, config.json,
tokenizer.json and decoding.json (when the run tuned one); then rewrites the registry `PUBLISHED_MODELS` in
nbs/11b_hub.ipynb and runs nbdev-export. `--val-bleu` scores the float32 model and the float16 files on Multi30k's
validation split, greedy and with the tuned beam. `--check` compares every model folder under models/ with the
registry of the importable package and exits 1 on any difference; `--assets DIR` then copies the files into DIR
under their release asset names (the release workflow attaches those).
"""
import argparse
import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "nbs" / "11b_hub.ipynb"
REGISTRY = "PUBLISHED_MODELS: dict[str, dict[str, str]] = "


def write_published(model_dir: Path, out: Path) -> dict[str, str]:
    "Write the published files of the model folder `model_dir` into `out`; return file → SHA-256."
    from safetensors.torch import save_model

    from transformer.checkpoint import load_model_dir, write_atomically
    from transformer.data import sha256

    model = load_model_dir(model_dir)
    if not (model_dir / "tokenizer.json").is_file():
        sys.exit(f"{model_dir} has no tokenizer.json: publish a translation model folder")

    def write(tmp: Path) -> None:
        save_model(model.half(), str(tmp / "model.safetensors"))
        for name in ("config.json", "tokenizer.json", "decoding.json"):
            if (model_dir / name).is_file():
                shutil.copy(model_dir / name, tmp / name)

    write_atomically(out, write)
    return {f.name: sha256(f) for f in sorted(out.iterdir())}


def register(notebook: Path, name: str, digests: dict[str, str]) -> None:
    "Record `digests` as the published model `name` in the registry cell of `notebook`."
    nb = json.loads(notebook.read_text())
    (cell,) = [c for c in nb["cells"] if REGISTRY in "".join(c["source"])]
    head, literal = "".join(cell["source"]).split(REGISTRY)
    models = ast.literal_eval(literal) | {name: digests}
    lines = [REGISTRY + "{"] + [
        line for model, files in sorted(models.items())
        for line in (f'    "{model}": {{', *(f'        "{f}": "{d}",' for f, d in sorted(files.items())), "    },")]
    cell["source"] = (head + "\n".join(lines) + "\n}").splitlines(keepends=True)
    notebook.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def val_bleu(float32_dir: Path, float16_dir: Path) -> None:
    "Print sacreBLEU on Multi30k val of both folders, greedy and with the tuned (or default) beam."
    from transformer.data import load_split
    from transformer.scoring import decoding_settings
    from transformer.translation import bleu, load_translator, translate_text

    pairs = load_split("val")
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    tuned = decoding_settings(float16_dir)
    for label, folder in (("float32 model", float32_dir), ("float16 files", float16_dir)):
        model, tokenizer = load_translator(folder)
        for beam, alpha in ((1, 0.0), (tuned["beam"], tuned["alpha"])):
            score = bleu(translate_text(model, tokenizer, sources, beam, alpha), references)[0]
            print(f"val BLEU, {label}, beam {beam}, alpha {alpha}: {score:.2f}")


def check(models: Path, assets: Path | None) -> None:
    "Exit 1 unless every published model's folder under `models` holds exactly its registered files."
    from transformer.data import sha256
    from transformer.hub import PUBLISHED_MODELS, asset_name

    problems = []
    folders = {p.name for p in models.iterdir() if p.is_dir()} if models.is_dir() else set()
    problems += [f"{models / f} is not in the package's registry" for f in sorted(folders - set(PUBLISHED_MODELS))]
    for name, files in PUBLISHED_MODELS.items():
        folder = models / name
        present = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
        problems += [f"{folder / f} is missing" for f in sorted(set(files) - present)]
        problems += [f"{folder / f} is not in the registry" for f in sorted(present - set(files))]
        problems += [f"{folder / f} has SHA-256 {got[:12]}…, the registry {d[:12]}…" for f, d in files.items()
                     if f in present and (got := sha256(folder / f)) != d]
    if problems:
        sys.exit("published model files differ from the package's registry: " + "; ".join(problems))
    if assets is not None:
        assets.mkdir(parents=True, exist_ok=True)
        for name, files in PUBLISHED_MODELS.items():
            for f in files:
                shutil.copy(models / name / f, assets / asset_name(name, f))
    print(f"{sum(map(len, PUBLISHED_MODELS.values()))} published file(s) match the registry: "
          f"{', '.join(PUBLISHED_MODELS) or 'no models'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", nargs="?", type=Path, help="the run's averaged model folder (float32)")
    parser.add_argument("out", nargs="?", type=Path, help="the folder to write, named after the published model")
    parser.add_argument("--val-bleu", action="store_true", help="score both on Multi30k val (greedy and beam)")
    parser.add_argument("--notebook", type=Path, default=NOTEBOOK, help="the notebook that holds the registry")
    parser.add_argument("--check", action="store_true", help="compare models/ with the package's registry")
    parser.add_argument("--models", type=Path, default=ROOT / "models", help="the published models' folders")
    parser.add_argument("--assets", type=Path, help="with --check: copy the files here under their asset names")
    args = parser.parse_args()
    if args.check:
        return check(args.models, args.assets)
    if args.model_dir is None or args.out is None:
        parser.error("give the model folder and the folder to write (or --check)")
    if not args.model_dir.is_dir():
        sys.exit(f"model folder {args.model_dir} not found")
    digests = write_published(args.model_dir, args.out)
    register(args.notebook, args.out.name, digests)
    print(f"wrote {args.out} ({sum(f.stat().st_size for f in args.out.iterdir()) / 1e6:.1f} MB) and registered "
          f"{args.out.name} in {args.notebook}")
    if args.notebook.resolve() == NOTEBOOK:  # the package's own registry: export it into transformer/hub.py
        for command in (["nbdev-clean", "--fname", str(NOTEBOOK)], ["nbdev-export"]):
            beside = Path(sys.executable).with_name(command[0])  # the environment's own, even if not activated
            subprocess.run([str(beside) if beside.exists() else command[0], *command[1:]], cwd=ROOT, check=True)
    if args.val_bleu:
        val_bleu(args.model_dir, args.out)


if __name__ == "__main__":
    main()
