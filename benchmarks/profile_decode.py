"""Where decoding's time goes: PyTorch's profiler over our decoder translating test2016 sources with the trained
model (greedy and beam 4, float32, the batches `decode_engines.py` times), each operator's own time summed into
kinds, and the time no operator accounts for (Python: the search's bookkeeping, the modules' calls, dispatch).

    OMP_NUM_THREADS=2 python benchmarks/profile_decode.py        # .../profile_decode-cpu.json

A decoding step on a batch of 64 is small: its matrix products are (64·k × 256) by (256 × 256 or 1,024, or the
8,000-token generator), so the cost of launching each operator weighs as much as the arithmetic. The file records
the operators called per decoding step, and how many steps each search took, beside the time of each kind.
"""

import argparse
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from common import repeated, write_result
from decode_engines import MAX_EXTRA, PUBLISHED, batches_of
from profile_step import KINDS
from transformer.data import load_split, sha256
from transformer.decoding import beam_search, greedy_decode
from transformer.hub import model_folder
from transformer.training import pad_sequences
from transformer.translation import load_translator

DECODE_KINDS = [("search (top-k, sort, masks)", ("topk", "sort", "nonzero", "masked_fill", "where", "isfinite",
                                                 "aten::eq", "aten::ge", "aten::lt", "aten::bitwise", "aten::any",
                                                 "aten::all", "amax", "aten::item", "_local_scalar_dense")),
                *KINDS]


def kind_of(name: str) -> str:
    "The kind of an operator, by the first rule of DECODE_KINDS whose pattern its name contains."
    return next((kind for kind, patterns in DECODE_KINDS if any(p in name for p in patterns)), "other")


def decoder(model, beam: int, alpha: float):
    "Our decoder on a batch of id lists (without </s>), greedy for `beam` 1."
    def run(batch: list[list[int]]) -> None:
        src = pad_sequences([[*x, model.cfg.eos_id] for x in batch], model.cfg.pad_id)
        if beam == 1:
            greedy_decode(model, src, max_extra=MAX_EXTRA)
        else:
            beam_search(model, src, beam_size=beam, alpha=alpha, max_extra=MAX_EXTRA)
    return run


@torch.inference_mode()
def profile_search(run, batches: list, rounds: int) -> dict:
    "Operator time by kind, the unaccounted time, and the wall time of `rounds` unprofiled passes over `batches`."
    walls = []
    for _ in range(rounds):
        start = time.perf_counter()
        for b in batches:
            run(b)
        walls.append(time.perf_counter() - start)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("search"):
            start = time.perf_counter()
            for b in batches:
                run(b)
            profiled_wall = time.perf_counter() - start
    own, calls, ops = defaultdict(float), 0, []
    for event in prof.key_averages():
        if event.key == "search":
            continue
        own[kind_of(event.key)] += event.self_cpu_time_total / 1e6
        calls += event.count
        ops.append((event.key, event.self_cpu_time_total / 1e6, event.count))
    own["not in an operator (Python, dispatch)"] = max(profiled_wall - sum(own.values()), 0.0)
    return {"walls": walls, "profiled_wall": profiled_wall, "own": own, "calls": calls, "ops": ops}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(PUBLISHED), help="a model folder or a published model's name")
    parser.add_argument("--sentences", type=int, default=1000, help="how many test2016 sources")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--rounds", type=int, default=3, help="unprofiled passes, for the wall time (median)")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3: the wall time needs a median and a spread")
    folder = model_folder(args.model)
    model, tokenizer = load_translator(folder)
    test = [e.ids for e in tokenizer.encode_batch([s for s, _ in load_split("test2016")[: args.sentences]])]
    _, batches = batches_of(test, args.batch_size)
    steps = [0]  # decoding steps: each one calls the generator once, greedy or beam
    model.generator.register_forward_hook(lambda *_: steps.__setitem__(0, steps[0] + 1))
    searches = {}
    for name, beam in (("greedy", 1), (f"beam{args.beam}", args.beam)):
        run = decoder(model, beam, args.alpha)
        run(batches[0])  # warm-up: first calls allocate
        steps[0] = 0
        found = profile_search(run, batches, args.rounds)
        decode_steps = steps[0] // (args.rounds + 1)  # the rounds and the profiled pass decode the same batches
        total = found["profiled_wall"]
        kinds = sorted(({"kind": k, "ms_per_step": round(v * 1e3 / decode_steps, 3), "fraction": round(v / total, 4)}
                        for k, v in found["own"].items()), key=lambda r: -r["fraction"])
        top = [{"operator": op, "kind": kind_of(op), "us_per_step": round(t * 1e6 / decode_steps, 1),
                "calls_per_step": round(n / decode_steps, 1)}
               for op, t, n in sorted(found["ops"], key=lambda o: -o[1])[:20]]
        wall = sorted(found["walls"])[len(found["walls"]) // 2]
        searches[name] = {"decoding_steps": decode_steps, "sentences": len(test), "seconds": repeated(found["walls"]),
                          "profiled_seconds": round(total, 3), "ms_per_step": round(wall * 1e3 / decode_steps, 3),
                          "operators_per_step": round(found["calls"] / decode_steps, 1),
                          "kinds": kinds, "top_operators": top}
        print(f"\n{name}: {decode_steps} decoding steps over {len(batches)} batches of {args.batch_size}; "
              f"{searches[name]['ms_per_step']:.2f} ms a step unprofiled, "
              f"{searches[name]['operators_per_step']:.0f} operators a step")
        print(f"{'kind':46}{'ms/step':>9}{'share':>8}")
        for r in kinds:
            print(f"{r['kind']:46}{r['ms_per_step']:>9.3f}{r['fraction']:>8.1%}")
    path = write_result("profile_decode", {
        "model": str(args.model), "model_sha256": sha256(folder / "model.safetensors"),
        "batch_size": args.batch_size, "beam": args.beam, "alpha": args.alpha, "threads": torch.get_num_threads(),
        "repeats": args.rounds, "searches": searches})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
