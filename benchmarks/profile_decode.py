"""Where decoding's time goes: PyTorch's profiler over our decoder translating test2016 sources with the trained
model (greedy and beam 4, in the batches `decode_engines.py` times), each operator's own time summed by
where it ran (the encoder, the decoder's layers, the output projection, or the search around them: log-softmax,
top-k, reordering) and by kind, beside the time no operator accounts for (Python and dispatch).

    OMP_NUM_THREADS=2 python benchmarks/profile_decode.py          # float32: .../profile_decode-cpu.json
    OMP_NUM_THREADS=2 python benchmarks/profile_decode.py --int8   # dynamic int8: .../profile_decode-int8-cpu.json

A decoding step on a batch of 64 is small: its matrix products are (64·k × 256) by (256 × 768, 256 or 1,024, or the
8,000-token output projection), so launching an operator can cost as much as its arithmetic. The file therefore
records the operators launched per decoding step, beside the time of each part. Times under the profiler include
its own overhead (`profiled_ms_per_step`); `ms_per_step` is the median of unprofiled passes over the same batches.
"""

import argparse
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from common import repeated, write_result
from decode_engines import PUBLISHED, ROOT, batches_of, ours
from transformer.data import load_split, sha256
from transformer.decoding import dynamic_int8
from transformer.hub import model_folder
from transformer.run import load_average
from transformer.translation import load_translator

SEARCH = "search (log-softmax, top-k, reordering, stopping)"  # whatever runs outside the model's own parts
PARTS = {"model.start": "encoder (once a batch)", "model.step": "decoder layers",
         "model.generator": "output projection"}
VIEWS = {"aten::view", "aten::transpose", "aten::reshape", "aten::as_strided", "aten::expand", "aten::t",
         "aten::select", "aten::slice", "aten::split", "aten::split_with_sizes", "aten::unflatten", "aten::flatten",
         "aten::permute", "aten::unsqueeze", "aten::squeeze", "aten::narrow", "aten::detach", "aten::alias",
         "aten::_unsafe_view", "aten::unbind", "aten::lift_fresh", "aten::linear"}  # linear: its addmm does the work
KINDS = [  # operator name → kind: the first rule whose pattern the name contains
    ("matrix products", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul",
                         "quantized::linear_dynamic")),  # int8: quantises its input and multiplies, in one operator
    ("attention and log-softmax (softmax, masks)", ("softmax", "nan_to_num", "masked_fill", "scaled_dot_product",
                                                    "flash_attention")),
    ("layer norm", ("layer_norm",)),
    ("top-k", ("topk", "sort")),
    ("copies and gathers", ("copy", "clone", "contiguous", "cat", "index", "embedding", "empty", "gather",
                            "repeat_interleave", "stack")),
    ("reads on the host (item, nonzero)", ("item", "_local_scalar_dense", "nonzero")),
]


def kind_of(name: str) -> str:
    "The kind of an operator: views by name, then the first rule of KINDS that matches, else element-wise."
    if name in VIEWS:
        return "views (reshape, transpose, slice)"
    return next((kind for kind, patterns in KINDS if any(p in name for p in patterns)), "element-wise and other")


def scoped(name: str, method):
    "`method`, its operators marked as running inside the part `name`."
    def run(*args, **kwargs):
        with record_function(name):
            return method(*args, **kwargs)
    return run


def part_of(event) -> tuple[str, bool]:
    "The part an operator event ran in, and whether Python launched it (no operator above it)."
    parent, launched = event.cpu_parent, True
    while parent is not None:
        if parent.name in PARTS:
            return PARTS[parent.name], launched
        launched = False
        parent = parent.cpu_parent
    return SEARCH, launched


@torch.inference_mode()
def profile_search(run, batches: list, rounds: int, count) -> dict:
    "Unprofiled wall times of `rounds` passes over `batches`, then one profiled pass: its time by part and kind."
    walls = []
    for _ in range(rounds):
        start = time.perf_counter()
        for b in batches:
            run(b)
        walls.append(time.perf_counter() - start)
    before = count()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for b in batches:
            run(b)
        profiled = time.perf_counter() - start
    steps = count() - before
    by_part, by_kind, by_op, launched = defaultdict(float), defaultdict(float), defaultdict(lambda: [0.0, 0]), 0
    for event in prof.events():
        if event.name in PARTS:
            continue
        part, top_level = part_of(event)
        seconds = event.self_cpu_time_total / 1e6
        by_part[part] += seconds
        by_kind[kind_of(event.name)] += seconds
        by_op[event.name][0] += seconds
        by_op[event.name][1] += 1
        launched += top_level
    outside = max(profiled - sum(by_part.values()), 0.0)
    by_part["not in an operator (Python, dispatch, profiler)"] = by_kind["not in an operator"] = outside

    def table(seconds: dict) -> list[dict]:
        rows = ({"name": k, "profiled_ms_per_step": round(v * 1e3 / steps, 3), "fraction": round(v / profiled, 4)}
                for k, v in seconds.items())
        return sorted(rows, key=lambda r: -r["fraction"])

    return {"decoding_steps": steps, "seconds": repeated(walls),
            "ms_per_step": round(statistics.median(walls) * 1e3 / steps, 3),
            "profiled_ms_per_step": round(profiled * 1e3 / steps, 3),
            "operators_launched_per_step": round(launched / steps, 1),
            "parts": table(by_part), "kinds": table(by_kind),
            "top_operators": [{"operator": op, "kind": kind_of(op), "profiled_us_per_step": round(t * 1e6 / steps, 1),
                               "calls_per_step": round(n / steps, 1)}
                              for op, (t, n) in sorted(by_op.items(), key=lambda o: -o[1][0])[:20]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(PUBLISHED), help="a model folder or a published model's name")
    parser.add_argument("--sentences", type=int, default=1000, help="how many test2016 sources")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--beam", type=int, default=4, help="the beam search's size (greedy is profiled too)")
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--rounds", type=int, default=3, help="unprofiled passes, for the wall time (median)")
    parser.add_argument("--int8", action="store_true", help="profile the model with dynamic int8 linear layers")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3: the wall time needs a median and a spread")
    if args.beam < 2 or args.sentences < 1:
        parser.error("--beam must be at least 2 (greedy is profiled anyway) and --sentences at least 1")
    load_before = load_average()
    folder = model_folder(args.model)
    model, tokenizer = load_translator(folder)
    if args.int8:
        model = dynamic_int8(model)  # as decode_engines.py times it
    test = [e.ids for e in tokenizer.encode_batch([s for s, _ in load_split("test2016")[: args.sentences]])]
    _, batches = batches_of(test, args.batch_size)
    steps = [0]  # decoding steps: each one calls the output projection once, greedy or beam
    model.generator.register_forward_hook(lambda *_: steps.__setitem__(0, steps[0] + 1))
    for attribute in ("start", "step"):
        setattr(model, attribute, scoped(f"model.{attribute}", getattr(model, attribute)))
    model.generator.forward = scoped("model.generator", model.generator.forward)
    searches = {}
    for name, beam in (("greedy", 1), (f"beam{args.beam}", args.beam)):
        run = ours(model, beam, args.alpha)
        run(batches[0])  # warm-up: first calls allocate
        searches[name] = found = profile_search(run, batches, args.rounds, lambda: steps[0])
        print(f"\n{name}: {found['decoding_steps']} decoding steps over {len(batches)} batches of {args.batch_size}; "
              f"{found['ms_per_step']:.2f} ms a step ({found['profiled_ms_per_step']:.2f} profiled), "
              f"{found['operators_launched_per_step']:.0f} operators launched a step")
        for table in ("parts", "kinds"):
            print(f"{'by ' + table[:-1]:50}{'ms/step':>9}{'share':>8}")
            for r in found[table]:
                print(f"  {r['name']:48}{r['profiled_ms_per_step']:>9.3f}{r['fraction']:>8.1%}")
    named = os.path.relpath(folder, ROOT) if Path(args.model).is_dir() else args.model  # not this machine's path
    load = {"before": load_before, "after": load_average()}
    path = write_result("profile_decode", {
        "model": named, "model_sha256": sha256(folder / "model.safetensors"), "sentences": len(test),
        "batch_size": args.batch_size, "beam": args.beam, "alpha": args.alpha, "load_averages": load,
        "weights": "int8" if args.int8 else "float32", "repeats": args.rounds, "searches": searches},
        tag="int8" if args.int8 else "")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
