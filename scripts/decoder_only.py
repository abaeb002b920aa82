"""The decoder-only chapter's experiments on Multi30k De→En, one JSON per row in results/decoder-only/:

- `encoder-decoder`, `decoder-only`, `decoder-only-both`: the small encoder-decoder against a decoder-only model
  of the same parameter count, trained for the same minutes on `German </s> <s> English` (loss on the English
  part only, or on both parts), each scored on test2016 (beam 4), with training and decoding speed;
- `lm`: a causal language model on the English side alone, with samples and a temperature sweep.

    python scripts/decoder_only.py [--minutes 12] [--lm-minutes 6] [--rows ...] [--runs runs/decoder-only]

Resumable: a row whose JSON exists is skipped, an interrupted row continues from its last checkpoint. Rows run one
after another (about an hour on 2 CPU cores); run it alone on the machine, since the budgets are in minutes.
"""

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

from transformer.checkpoint import RunFolder
from transformer.data import load_split
from transformer.decoder_only import continuation_nll, distinct_ngrams
from transformer.decoding import generate
from transformer.distributed import RUN_CLI
from transformer.model import count_parameters
from transformer.hardware import machine_description
from transformer.run import git_commit
from transformer.translation import bleu, load_translator, translate_text

ROOT = Path(__file__).resolve().parent.parent
# row → (what it is, top-level config lines, [model] overrides); every row shares the [train] recipe below
ROWS = {  # in the order they run
    "encoder-decoder": ("encoder-decoder, small preset (3 + 3 layers)", [], {}),
    "decoder-only": ("decoder-only, 7 blocks, loss on the English part", ['kind = "decoder-only"'], {}),
    "lm": ("decoder-only language model on the English side", ['kind = "decoder-only"', 'task = "language-model"'],
           {}),
    "decoder-only-both": ("decoder-only, 7 blocks, loss on German and English", ['kind = "decoder-only"'],
                          {"prompt_loss": 1.0}),
}
PROMPTS = ["", "A man", "Two dogs", "A little girl in a pink"]
TEMPERATURES = [0.5, 0.7, 1.0, 1.3, 1.6]


def config_text(head: list[str], model: dict, minutes: float) -> str:
    "The TOML run configuration of a row: the small preset and the full run's recipe, scaled to `minutes`."
    return "\n".join(['preset = "small"', *head, "[model]", *(f"{k} = {json.dumps(v)}" for k, v in model.items()),
                      "[train]", "max_tokens = 2048", f"max_minutes = {minutes}", "max_steps = 100000",
                      "warmup = 400", "lr_factor = 0.6", "eval_every = 200", "keep_last = 1",
                      "[data]", "vocab_size = 8000"]) + "\n"


def train(name: str, runs: Path, minutes: float) -> Path:
    "Train (or finish training) a row; its run folder."
    out = runs / name
    out.mkdir(parents=True, exist_ok=True)
    _, head, model = ROWS[name]
    (out / "row.toml").write_text(config_text(head, model, minutes))
    args = ["train", "--config", str(out / "row.toml"), "--out", str(out), "--device", "cpu", "--quiet"]
    done = subprocess.run([sys.executable, *RUN_CLI, *args, *(["--resume"] if RunFolder(out).latest() else [])],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"training {name} failed:\n{done.stderr}")
    return out


def translation_scores(checkpoint: Path, sentences: int) -> dict:
    "test2016 BLEU (of its first `sentences`, 0: all) with beam 4 and greedy, and decoding speed."
    model, tokenizer = load_translator(checkpoint)
    pairs = load_split("test2016")[: sentences or None]
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    scores = {}
    for beam in (1, 4):
        start = time.perf_counter()
        hyps = translate_text(model, tokenizer, sources, beam_size=beam)
        seconds = time.perf_counter() - start
        scores |= {f"test2016_bleu_beam{beam}": round(bleu(hyps, references)[0], 2),
                   f"decode_sentences_per_s_beam{beam}": round(len(sources) / seconds, 1)}
    scores["samples"] = [{"source": s, "reference": r, "translation": h}
                         for (s, r), h in list(zip(pairs, hyps))[:5]]
    return scores


def lm_samples(checkpoint: Path) -> dict:
    "Samples from the language model for a few prompts, and distinct n-grams against likelihood per temperature."
    model, tokenizer = load_translator(checkpoint)
    torch.manual_seed(0)
    samples = []
    for prompt in PROMPTS:
        ids = tokenizer.encode(prompt).ids
        for how, options in (("greedy", {"greedy": True}), ("T = 0.7, top-k 40", {"temperature": 0.7, "top_k": 40}),
                             ("top-p 0.9", {"top_p": 0.9})):
            for text in generate(model, ids, n=2 if how != "greedy" else 1, max_new_tokens=30, seed=1, **options):
                samples.append({"prompt": prompt, "decoding": how, "text": tokenizer.decode([*ids, *text])})
    sweep = []
    for temperature in TEMPERATURES:
        out = generate(model, (), n=200, max_new_tokens=30, temperature=temperature, seed=2)
        sweep.append({"temperature": temperature, "distinct_1": round(distinct_ngrams(out, 1), 4),
                      "distinct_2": round(distinct_ngrams(out, 2), 4),
                      "nll_per_token": round(continuation_nll(model, (), out), 4),
                      "mean_tokens": round(sum(map(len, out)) / len(out), 1)})
    return {"samples": samples, "temperature_sweep": sweep}


def run_row(name: str, runs: Path, minutes: float, sentences: int) -> dict:
    "Train and score one row; its result."
    start = time.time()
    out = train(name, runs, minutes)
    checkpoint = RunFolder(out).latest()
    with open(out / "metrics.csv") as f:
        curve = [{key: float(value) for key, value in row.items() if value != ""} for row in csv.DictReader(f)]
    last = curve[-1]
    model, _ = load_translator(checkpoint)
    result = {"row": name, "what": ROWS[name][0], "config": (out / "row.toml").read_text(),
              "parameters": count_parameters(model), "steps": int(last["step"]),
              "train_minutes": round(last["train_minutes"], 1), "tokens_per_s": round(last["tokens_per_s"]),
              "valid_loss": last["valid_loss"], "valid_ppl": last["valid_ppl"], "curve": curve}
    result |= lm_samples(checkpoint) if name == "lm" else translation_scores(checkpoint, sentences)
    return result | {"wall_minutes": round((time.time() - start) / 60, 1), "commit": git_commit(),
                     "machine": machine_description(),
                     "command": f"python scripts/decoder_only.py --rows {name} "
                                f"--{'lm-minutes' if name == 'lm' else 'minutes'} {minutes}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=12, help="training minutes of each translation row")
    parser.add_argument("--lm-minutes", type=float, default=6, help="training minutes of the language model")
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    parser.add_argument("--runs", default=str(ROOT / "runs" / "decoder-only"), help="where the rows' runs go")
    parser.add_argument("--out", default=str(ROOT / "results" / "decoder-only"), help="where the rows' JSON go")
    parser.add_argument("--test-sentences", type=int, default=0, help="score only the first N of test2016 (0: all)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.rows:
        path = out / f"{name}.json"
        if path.is_file():
            continue
        result = run_row(name, Path(args.runs), args.lm_minutes if name == "lm" else args.minutes,
                         args.test_sentences)
        path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
        print(f"{name}: {result['parameters']:,} parameters, {result['steps']} steps, valid ppl "
              f"{result['valid_ppl']:.2f}" + (f", test2016 BLEU {result['test2016_bleu_beam4']:.1f} (beam 4)"
                                              if "test2016_bleu_beam4" in result else ""), flush=True)


if __name__ == "__main__":
    main()
