"""Where a training step's time goes: PyTorch's profiler over training steps of our model (the `small` preset on
token-bucketed Multi30k batches, as `train_throughput.py` times them), in float32 or in bf16 autocast, each
operator's own time summed into kinds (matrix products, fused attention, loss, layer norm, dropout, other
element-wise work, data movement, optimizer), and the step's fraction of the matrix-multiplication peak of its
dtype measured in the same run.

    python benchmarks/profile_step.py --steps 8                      # .../profile_step-small-cpu.json
    python benchmarks/profile_step.py --steps 8 --precision bf16     # .../profile_step-small-bf16-cpu.json

The profiler adds a little time of its own to every operator; the fraction of peak is therefore measured on
steps timed without it, right after the profiled ones, in rounds that each measure the peak first (median round).
"""

import argparse
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from common import bucketed_batches, matmul_peak_gflops, multi30k_ids, repeated, write_result
from train_throughput import Ours, step_flops, train_step
from transformer.hardware import keep_freed_memory
from transformer.model import TransformerConfig
from transformer.training import make_optimizer

# operator name (aten::…) → kind; the first matching rule wins, anything else is "other"
KINDS = [
    ("matrix products", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul")),
    ("fused attention", ("scaled_dot_product", "flash_attention")),
    ("loss (log-softmax, smoothing)", ("log_softmax", "softmax", "gather", "scatter", "nll", "logsumexp")),
    ("layer norm", ("layer_norm",)),
    ("dropout", ("dropout", "bernoulli")),
    ("optimizer (Adam)", ("_fused_adam", "_foreach", "addcdiv", "addcmul", "lerp", "sqrt")),
    ("element-wise (add, ReLU, scale)", ("aten::add", "aten::mul", "aten::div", "relu", "threshold", "aten::sub",
                                         "aten::neg", "aten::exp", "aten::sum", "aten::mean", "aten::fill_",
                                         "aten::zero_")),
    ("data movement (copies, gathers, transposes)", ("copy", "clone", "contiguous", "cat", "index", "embedding",
                                                     "to_copy", "empty", "view", "transpose", "reshape")),
]


def kind_of(name: str) -> str:
    "The kind of an operator, by the first rule of KINDS whose pattern its name contains."
    return next((kind for kind, patterns in KINDS if any(p in name for p in patterns)), "other")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--steps", type=int, default=8, help="profiled steps (after 2 warm-up), then as many timed")
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (peak, then the steps); the median is kept")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="bf16: the steps run in bf16 autocast, as the Trainer runs them, against the bf16 peak")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3: the fraction needs a median and a spread")
    bf16 = args.precision == "bf16"
    dtype, dtype_name = (torch.bfloat16, "bf16") if bf16 else (torch.float32, "float32")
    kept = keep_freed_memory()  # as Trainer does on a CPU: a step's large tensors reuse memory already mapped

    tokenizer, train, _ = multi30k_ids()
    V = tokenizer.get_vocab_size()
    cfg = TransformerConfig.preset(args.preset, src_vocab_size=V, tgt_vocab_size=V)
    batches = bucketed_batches(train, cfg, args.max_tokens, args.steps + 2)
    torch.manual_seed(0)
    impl = Ours(cfg).train()
    optimizer = make_optimizer(impl, cfg.d_model, 4000)[0]
    flops = sum(step_flops(impl, b) for b in batches[2:])
    for batch in batches[:2]:
        train_step(impl, optimizer, batch, bf16)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches[2:]:
            with record_function("step"):
                train_step(impl, optimizer, batch, bf16)
    # the same steps again without the profiler, for the fraction of peak: `--rounds` times, each round right after
    # its own measurement of the peak, so that a shared machine's changing speed affects both alike; the median
    # round is reported, and every round is kept in the JSON
    rounds = []
    for _ in range(args.rounds):
        peak = matmul_peak_gflops(dtype, repeats=3)
        start = time.perf_counter()
        for batch in batches[2:]:
            train_step(impl, optimizer, batch, bf16)
        seconds = time.perf_counter() - start
        rounds.append({"peak_gflops": peak, "seconds": seconds, "fraction": flops / seconds / 1e9 / peak})
    median = sorted(rounds, key=lambda r: r["fraction"])[(len(rounds) - 1) // 2]  # the lower middle one if even
    peak, seconds = median["peak_gflops"], median["seconds"]
    fractions = [r["fraction"] for r in rounds]
    rounds = [{"peak_gflops": round(r["peak_gflops"], 1), "step_ms": round(r["seconds"] / (len(batches) - 2) * 1e3, 1),
               "fraction": round(r["fraction"], 3)} for r in rounds]

    own = defaultdict(float)  # kind → self CPU time (µs) over the profiled steps
    ops = []
    for event in prof.key_averages():
        if event.key == "step":
            continue
        own[kind_of(event.key)] += event.self_cpu_time_total
        ops.append((event.key, event.self_cpu_time_total, event.count))
    total = sum(own.values())
    steps = len(batches) - 2
    kinds = sorted(({"kind": k, "ms_per_step": round(v / 1e3 / steps, 2), "fraction": round(v / total, 4)}
                    for k, v in own.items()), key=lambda r: -r["fraction"])
    top = [{"operator": name, "kind": kind_of(name), "ms_per_step": round(t / 1e3 / steps, 2),
            "calls_per_step": round(n / steps, 1), "fraction": round(t / total, 4)}
           for name, t, n in sorted(ops, key=lambda o: -o[1])[:20]]
    fraction = flops / seconds / 1e9 / peak
    tokens = sum(b.n_tgt_tokens for b in batches[2:])
    print(f"{'kind':46}{'ms/step':>9}{'share':>8}")
    for r in kinds:
        print(f"{r['kind']:46}{r['ms_per_step']:>9.1f}{r['fraction']:>8.1%}")
    print(f"\nunprofiled: {seconds / steps * 1e3:.0f} ms/step, {tokens / seconds:,.0f} target tokens/s, "
          f"{flops / seconds / 1e9:.1f} GFLOP/s of matrix products = {fraction:.1%} of the measured "
          f"{dtype_name} peak ({peak:.1f} GFLOP/s)")
    # about the ceiling of this step's fraction if everything but the matrix products took no time: an estimate, as
    # the profiled times include a little of the profiler's own time
    products_alone = flops / (own["matrix products"] / 1e6) / 1e9 / peak
    print(f"matrix products alone (profiled): {products_alone:.1%} of the peak, about the ceiling of the step's share")
    path = write_result("profile_step", {
        "preset": args.preset, "dtype": dtype_name, "max_tokens": args.max_tokens, "steps": steps,
        "keeps_freed_memory": kept,
        "matmul_peak_gflops": peak, "step_ms": round(seconds / steps * 1e3, 1),
        "target_tokens_per_s": round(tokens / seconds), "matmul_flops_per_step": round(flops / steps),
        "kinds": kinds, "top_operators": top, "rounds": rounds,
        "matrix_products_alone_peak_fraction": round(products_alone, 3),
        "ratios": {f"train_{args.preset}_{dtype_name}_peak_fraction": repeated(fractions)}},
        tag=args.preset + ("-bf16" if bf16 else ""))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
