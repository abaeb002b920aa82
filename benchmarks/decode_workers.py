"""Decoding a file's worth of sentences on every core: our `translate_encoded` with one worker (the CPU's intra-op
threads on each operator) and with `--workers` batches at once (the threads shared out between them), against
CTranslate2 with the same two choices (one translation at a time on all the threads, or `inter_threads` at once on a
share each). Float32 and int8 weights (ours also int8 through `TracedDecoder`), beam 4 and greedy, on the test2016
sources.

Each round decodes every source with every decoder in turn, whole, the order rotated from round to round, so a
slower stretch of the machine falls on each decoder alike. A ratio is the median of its rounds, with its spread.
Each side is quoted at its own faster setting, so neither is held to the other's. The outputs of one and two
workers must be the same translations, and are checked to be.

    OMP_NUM_THREADS=2 python benchmarks/decode_workers.py [--workers 2] [--rounds 3]
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from common import ratio_of_rounds, write_result
from decode_engines import MAX_EXTRA, PUBLISHED, batches_of, unsort
from transformer.data import load_split, sha256
from transformer.decoding import dynamic_int8
from transformer.export import ct2_vocabulary, export_ctranslate2, optional, vocabulary
from transformer.fast_decoding import TracedDecoder
from transformer.hub import model_folder
from transformer.run import load_average
from transformer.translation import load_translator, translate_encoded

ROOT = Path(__file__).resolve().parents[1]


def ctranslate2_file(folder: str, compute_type: str, beam: int, alpha: float, threads: int, inter: int):
    "CTranslate2 on all the sources, in our batches (64, sorted by length), `inter` batches at once on `threads`."
    translator = optional("ctranslate2").Translator(folder, device="cpu", compute_type=compute_type,
                                                     intra_threads=max(1, threads // inter), inter_threads=inter)
    source, target = ct2_vocabulary(folder, "source"), ct2_vocabulary(folder, "target")
    suppressed = [[target[0]], [target[1]]]  # <pad> and <s>, which ours never emits either

    def run(ids: list[list[int]]) -> list[list[str]]:
        order, batches = batches_of(ids, 64)
        jobs = [translator.translate_batch(  # all submitted at once: CTranslate2 runs `inter` of them at a time
            [[source[t] for t in x] for x in b], beam_size=beam, length_penalty=alpha if beam > 1 else 0.0,
            max_decoding_length=max(map(len, b)) + MAX_EXTRA, suppress_sequences=suppressed, max_batch_size=0,
            asynchronous=True) for b in batches]
        return unsort(order, [job.result().hypotheses[0] for batch in jobs for job in batch])
    return run


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(PUBLISHED), help="a model folder or a published model's name")
    parser.add_argument("--sentences", type=int, default=1000, help="how many test2016 sources to decode")
    parser.add_argument("--workers", type=int, default=2, help="batches decoded at once (default 2)")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.rounds < 3 or args.workers < 2:
        parser.error("--rounds must be at least 3 (a median and a spread) and --workers at least 2")
    load_before = load_average()
    folder = model_folder(args.model)
    model, tokenizer = load_translator(folder)
    weights = {"float32": model, "int8": dynamic_int8(model)}
    ours_kinds = weights | {"int8 traced": TracedDecoder(weights["int8"])}  # CTranslate2: float32 and int8
    threads = torch.get_num_threads()
    ids = [e.ids for e in tokenizer.encode_batch([s for s, _ in load_split("test2016")[: args.sentences]])]
    searches = {f"beam {args.beam}": args.beam, "greedy": 1}
    with tempfile.TemporaryDirectory() as exported:
        export_ctranslate2(model, exported, vocabulary(model, tokenizer))
        decoders = {}
        for label, beam in searches.items():
            for kind, m in ours_kinds.items():
                for w in (1, args.workers):
                    decoders[f"ours {kind}, {label}, {w} worker{'s' * (w > 1)}"] = (
                        lambda x, m=m, beam=beam, w=w: translate_encoded(m, tokenizer, x, beam, args.alpha, 64,
                                                                         workers=w))
            for kind in weights:
                for inter in (1, args.workers):
                    decoders[f"CTranslate2 {kind}, {label}, {inter} at once"] = ctranslate2_file(
                        exported, kind, beam, args.alpha, threads, inter)
        for name, run in decoders.items():  # warm-up: first calls allocate; the traced decoder traces its graphs,
            run(ids if "traced" in name else ids[:128])  # one for each choice a batch of some length may need
        per_round, outputs, names = [], {}, list(decoders)
        for r in range(args.rounds):
            seconds = {}
            for name in names[r % len(names):] + names[: r % len(names)]:  # rotated: each starts a round once
                start = time.perf_counter()
                outputs[name] = decoders[name](ids)
                seconds[name] = time.perf_counter() - start
            per_round.append(seconds)
    for label in searches:
        for kind in ours_kinds:
            one, many = (outputs[f"ours {kind}, {label}, {w} worker{'s' * (w > 1)}"] for w in (1, args.workers))
            if one != many:
                raise AssertionError(f"{args.workers} workers translated differently from one ({kind}, {label})")
    ratios, rows = {}, []  # > 1: the second named is faster
    for label, beam in searches.items():
        key = f"beam{beam}" if beam > 1 else "greedy"
        for kind in ours_kinds:
            ours1, oursw = (f"ours {kind}, {label}, {w} worker{'s' * (w > 1)}" for w in (1, args.workers))
            suffix = "" if kind == "float32" else "_" + kind.replace(" ", "_")
            ratios[f"{key}{suffix}_workers_vs_one"] = ratio_of_rounds(per_round, ours1, oursw)
            if kind in weights:
                ct1, ctw = (f"CTranslate2 {kind}, {label}, {n} at once" for n in (1, args.workers))
                ratios[f"{key}_ctranslate2_{kind}_at_once_vs_one"] = ratio_of_rounds(per_round, ct1, ctw)
            for engine in ("int8", "float32"):  # each side at its faster setting, round by round
                best_ct = [min(r[f"CTranslate2 {engine}, {label}, {n} at once"] for n in (1, args.workers))
                           for r in per_round]
                best_ours = [min(r[ours1], r[oursw]) for r in per_round]
                ratios[f"{key}{suffix}_best_vs_ctranslate2_{engine}_best"] = ratio_of_rounds(
                    [{"ct": c, "ours": o} for c, o in zip(best_ct, best_ours)], "ct", "ours")
        eager, traced = ([min(r[f"ours {kind}, {label}, {w} worker{'s' * (w > 1)}"] for w in (1, args.workers))
                          for r in per_round] for kind in ("int8", "int8 traced"))  # each at its faster setting
        ratios[f"{key}_int8_traced_best_vs_int8_best"] = ratio_of_rounds(
            [{"eager": e, "traced": t} for e, t in zip(eager, traced)], "eager", "traced")
    for name in names:
        s = statistics.median(r[name] for r in per_round)
        rows.append({"decoder": name, "seconds": round(s, 2), "sentences_per_s": round(len(ids) / s, 1)})
        print(f"{name:44}{s:>8.2f} s{len(ids) / s:>9.1f} sentences/s")
    print("ratios (> 1: the second is faster; median, spread):",
          {k: (r["median"], r["spread"]) for k, r in ratios.items()})
    load = {"before": load_before, "after": load_average()}
    print("load averages (1, 5, 15 min) before and after:", load)
    named = os.path.relpath(folder, ROOT) if Path(args.model).is_dir() else args.model
    path = write_result("decode_workers", {"model": named, "model_sha256": sha256(folder / "model.safetensors"),
                                           "sentences": len(ids), "batch_size": 64, "workers": args.workers,
                                           "beam": args.beam, "alpha": args.alpha, "load_averages": load,
                                           "same_translations_with_workers": True, "rows": rows, "ratios": ratios})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
