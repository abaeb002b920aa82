"""Decoding a trained model, side by side in one run: ours in float32, with dynamic int8 linear layers and through
`FastDecoder` (compiled, in float32 and, where the CPU has bf16 instructions, in bf16; in float32 also without its
packed output projection where its probe chose one), int8 through `TracedDecoder` (its steps traced into TorchScript
graphs), and CTranslate2 in float32 and int8 on the same exported
weights; beam 4 and greedy, on the test2016 sources. Our beam search runs a second time with `early_exit` (a
sentence stops once a step's best extension ends), to show what the stopping rule costs and saves.

Unlike decode_throughput.py (random weights, every output forced to one length), this decodes the real model as a
user would: each engine stops where its search ends, so the outputs and their lengths are counted. The same
batches (sources sorted by length, `--batch-size` at a time) go to every decoder, interleaved batch by batch. The
load averages before and after are recorded, since other work on the machine slows every decoder. The sources are
decoded `--rounds` times (3 by default); each ratio is the median of its rounds, with its spread. It also scores
each decoder on Multi30k's validation split (sacreBLEU), so that int8's cost in quality is measured with its speed.

    OMP_NUM_THREADS=2 python benchmarks/decode_engines.py [--model FOLDER_OR_NAME]
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from common import ratio_of_rounds, write_result
from transformer.data import load_split, sha256
from transformer.decoding import beam_search, dynamic_int8, greedy_decode
from transformer.export import ct2_vocabulary, export_ctranslate2, optional, vocabulary
from transformer.fast_decoding import FastDecoder, TracedDecoder
from transformer.hardware import native_bf16
from transformer.hub import model_folder
from transformer.run import load_average
from transformer.training import pad_sequences
from transformer.translation import bleu, load_translator

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "models" / "multi30k-de-en"
MAX_EXTRA = 50  # output tokens beyond the source length, for every decoder (our default)


def ours(model, beam: int, alpha: float, early_exit: bool = False):
    "Our decoder on a batch of id lists (without </s>)."
    def run(batch: list[list[int]]) -> list[list[int]]:
        src = pad_sequences([[*x, model.cfg.eos_id] for x in batch], model.cfg.pad_id)
        if beam == 1:
            return greedy_decode(model, src, max_extra=MAX_EXTRA)
        return [h[0].tokens for h in beam_search(model, src, beam_size=beam, alpha=alpha, max_extra=MAX_EXTRA,
                                                 early_exit=early_exit)]
    return run


def ctranslate2_decoder(folder: str, compute_type: str, beam: int, alpha: float, threads: int):
    "CTranslate2 on a batch of id lists; its length penalty is |Y|^α where ours is GNMT's ((5 + |Y|) / 6)^α."
    translator = optional("ctranslate2").Translator(folder, device="cpu", compute_type=compute_type,
                                                     intra_threads=threads, inter_threads=1)
    source, target = ct2_vocabulary(folder, "source"), ct2_vocabulary(folder, "target")
    ids = {token: i for i, token in enumerate(target)}
    suppressed = [[target[0]], [target[1]]]  # <pad> and <s>, which ours never emits either

    def run(batch: list[list[int]]) -> list[list[int]]:
        results = translator.translate_batch(
            [[source[t] for t in x] for x in batch], beam_size=beam, length_penalty=alpha if beam > 1 else 0.0,
            max_decoding_length=max(map(len, batch)) + MAX_EXTRA, suppress_sequences=suppressed, max_batch_size=0)
        return [[ids[token] for token in r.hypotheses[0]] for r in results]
    return run


def batches_of(sentences: list[list[int]], size: int) -> tuple[list[int], list[list[list[int]]]]:
    "The order that sorts `sentences` by length, and the sorted sentences in batches of `size`."
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    ordered = [sentences[i] for i in order]
    return order, [ordered[k: k + size] for k in range(0, len(ordered), size)]


def decode_all(run, batches: list) -> list[list[int]]:
    return [y for b in batches for y in run(b)]


def unsort(order: list[int], outputs: list) -> list:
    out = [None] * len(order)
    for i, y in zip(order, outputs):
        out[i] = y
    return out


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(PUBLISHED), help="a model folder or a published model's name "
                        "(default: the committed files of multi30k-de-en)")
    parser.add_argument("--sentences", type=int, default=1000, help="how many test2016 sources to time")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--beam", type=int, default=4, help="beam size (default 4, as in §6.1)")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty of beam search (default 0.6, §6.1)")
    parser.add_argument("--rounds", type=int, default=3, help="timed passes over the sources; ratios: median, spread")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3: the ratios need a median and a spread")
    load_before = load_average()
    folder = model_folder(args.model)
    model, tokenizer = load_translator(folder)
    alpha = args.alpha
    threads = torch.get_num_threads()
    int8_model = dynamic_int8(model)
    traced = TracedDecoder(int8_model)  # traced during the warm-up below, never while timed
    fast = {"float32": FastDecoder(model)}  # compiled during the warm-up below, never while timed
    if native_bf16("cpu")[0]:
        fast["bf16"] = FastDecoder(model, torch.bfloat16)
    unpacked = FastDecoder(model, pack=False) if fast["float32"].projection["packed"] else None  # what packing saves
    test = [e.ids for e in tokenizer.encode_batch([s for s, _ in load_split("test2016")[: args.sentences]])]
    val = load_split("val")
    val_ids = [e.ids for e in tokenizer.encode_batch([s for s, _ in val])]
    with tempfile.TemporaryDirectory() as exported:
        export_ctranslate2(model, exported, vocabulary(model, tokenizer))  # float32 weights; int8 quantized on load
        decoders = {}
        for beam, label in ((args.beam, f"beam {args.beam}"), (1, "greedy")):
            decoders |= {f"ours float32, {label}": ours(model, beam, alpha),
                         f"ours int8, {label}": ours(int8_model, beam, alpha),
                         f"ours int8 traced, {label}": ours(traced, beam, alpha),
                         **{f"ours compiled {kind}, {label}": ours(decoder, beam, alpha)
                            for kind, decoder in fast.items()},
                         **{f"CTranslate2 {kind}, {label}": ctranslate2_decoder(exported, kind, beam, alpha, threads)
                            for kind in ("float32", "int8")}}
            if unpacked is not None:
                decoders[f"ours compiled float32 unpacked, {label}"] = ours(unpacked, beam, alpha)
            if beam > 1:  # beam search that stops a sentence once a step's best extension ends
                decoders |= {f"ours float32, {label}, early exit": ours(model, beam, alpha, early_exit=True),
                             f"ours int8, {label}, early exit": ours(int8_model, beam, alpha, early_exit=True),
                             f"ours int8 traced, {label}, early exit": ours(traced, beam, alpha, early_exit=True)}
        _, batches = batches_of(test, args.batch_size)  # every decoder's outputs in this same order
        for name, run in decoders.items():  # warm-up: first calls allocate, and compile (with one sentence, the
            run(batches[0])                  # graphs for a lone sentence, which beam search reaches as others finish)
            run(batches[0][:1])
            if name.startswith(("ours compiled", "ours int8 traced")):  # and every batch once: greedy's rows leave
                decode_all(run, batches)  # as they end, and the shapes and lengths met may need graphs of their own
        per_round = []
        for _ in range(args.rounds):
            seconds, outputs = dict.fromkeys(decoders, 0.0), {name: [] for name in decoders}
            for b in batches:  # interleaved, batch by batch
                for name, run in decoders.items():
                    start = time.perf_counter()
                    outputs[name] += run(b)
                    seconds[name] += time.perf_counter() - start
            per_round.append(seconds)
        seconds = {name: statistics.median(r[name] for r in per_round) for name in decoders}
        val_order, val_batches = batches_of(val_ids, args.batch_size)
        references = [t for _, t in val]
        val_bleu = {name: round(bleu(tokenizer.decode_batch(unsort(val_order, decode_all(run, val_batches))),
                                     references)[0], 2) for name, run in decoders.items()}
    n = len(test)
    rows = []
    for name, s in seconds.items():
        reference = outputs[f"ours float32, {name.split(', ')[1]}"]
        rows.append({"decoder": name, "sentences_per_s": round(n / s, 1),
                     "tokens_per_s": round(sum(map(len, outputs[name])) / s, 1), "seconds": round(s, 2),
                     "same_as_ours_float32": round(sum(a == b for a, b in zip(outputs[name], reference)) / n, 3),
                     "val_bleu": val_bleu[name]})
    b = f"beam {args.beam}"
    ratios = {}  # > 1: ours is faster
    for key, label in ((f"beam{args.beam}", b), ("greedy", "greedy")):
        for kind in ("float32", "int8"):
            engine = f"CTranslate2 {kind}, {label}"
            ratios[f"{key}_vs_ctranslate2_{kind}"] = ratio_of_rounds(per_round, engine, f"ours float32, {label}")
            ratios[f"{key}_int8_vs_ctranslate2_{kind}"] = ratio_of_rounds(per_round, engine, f"ours int8, {label}")
            ratios[f"{key}_int8_traced_vs_ctranslate2_{kind}"] = ratio_of_rounds(
                per_round, engine, f"ours int8 traced, {label}")
        ratios[f"{key}_int8_vs_float32"] = ratio_of_rounds(per_round, f"ours float32, {label}", f"ours int8, {label}")
        ratios[f"{key}_int8_traced_vs_eager"] = ratio_of_rounds(  # the same int8 layers, eager and traced
            per_round, f"ours int8, {label}", f"ours int8 traced, {label}")
        for kind in fast:  # the compiled decoder against CTranslate2's fastest, and against our eager float32
            compiled = f"ours compiled {kind}, {label}"
            ratios[f"{key}_compiled_{kind}_vs_ctranslate2_int8"] = ratio_of_rounds(
                per_round, f"CTranslate2 int8, {label}", compiled)
            ratios[f"{key}_compiled_{kind}_vs_float32"] = ratio_of_rounds(per_round, f"ours float32, {label}", compiled)
        if unpacked is not None:  # the same compiled decoder with the plain output projection, side by side
            ratios[f"{key}_packed_projection_vs_unpacked"] = ratio_of_rounds(
                per_round, f"ours compiled float32 unpacked, {label}", f"ours compiled float32, {label}")
    stopping = (("float32", ""), ("int8", "int8_"), ("int8 traced", "int8_traced_")) if args.beam > 1 else ()
    for kind, key in stopping:  # stopping early: against CTranslate2's fastest, and against the same decoder's full
        early = f"ours {kind}, {b}, early exit"  # search
        ratios[f"beam{args.beam}_{key}early_exit_vs_ctranslate2_int8"] = ratio_of_rounds(
            per_round, f"CTranslate2 int8, {b}", early)
        ratios[f"beam{args.beam}_{key}early_exit_vs_full"] = ratio_of_rounds(per_round, f"ours {kind}, {b}", early)
    print(f"{n} test2016 sources in batches of {args.batch_size}, {threads} threads; model {folder}; "
          f"beam search alpha {alpha}")
    for r in rows:
        print(f"{r['decoder']:44}{r['sentences_per_s']:>8.1f} sentences/s{r['tokens_per_s']:>10,.1f} tokens/s"
              f"   same as ours float32: {r['same_as_ours_float32']:.1%}   val BLEU {r['val_bleu']:.2f}")
    print("ratios (> 1: ours is faster; median, spread):", {k: (r["median"], r["spread"]) for k, r in ratios.items()})
    load = {"before": load_before, "after": load_average()}
    print("load averages (1, 5, 15 min) before and after:", load)
    named = os.path.relpath(folder, ROOT) if Path(args.model).is_dir() else args.model  # not this machine's path
    path = write_result("decode_engines", {"model": named, "model_sha256": sha256(folder / "model.safetensors"),
                                           "sentences": n, "batch_size": args.batch_size,
                                           "beam": args.beam, "alpha": alpha, "load_averages": load,
                                           "fast_decoder_projection": {k: d.projection for k, d in fast.items()},
                                           "rows": rows, "ratios": ratios})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
