"""Which attention path is faster for a training step on this device: PyTorch's fused kernel
(`scaled_dot_product_attention`) or attention written out as two matrix products and a softmax
(`explicit_attention`), forward and backward, by key length and dtype, at the `small` preset's heads (4 × 64) and
about 2,048 tokens per batch. `fast_attention` (chapter *Attention*) takes the written-out path on CPUs up to the
key lengths in `EXPLICIT_MAX_KEYS`; this script measures where the crossover lies on the machine it runs on. It
also times decoding's case, one query per row (sentences × beams rows, forward only), where `fast_attention` writes
attention out on a CPU once its products are large enough for PyTorch's bmm to call BLAS (`BLAS_BMM_MIN_PRODUCTS`),
and times `fast_attention` itself there, to measure that rule against writing out at every length.

    python benchmarks/attention_paths.py          # writes benchmarks/results/attention_paths-cpu.json
"""

import argparse
import statistics

import torch
import torch.nn.functional as F

from common import repeated, write_result
from transformer.attention import (EXPLICIT_MAX_KEYS, cpu_has_bf16_matmul, explicit_attention, explicit_on_cpu,
                                   fast_attention, subsequent_mask)
from transformer.hardware import best_seconds

DTYPES = {"float32": torch.float32, "bf16": torch.bfloat16}


def forward_backward(attend, q, k, v, mask, grad) -> None:
    "One forward and backward pass of `attend` (the gradients land in q, k, v)."
    attend(q, k, v, mask).backward(grad)


def one_query_shapes(rows: int, keys: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    "Random q (rows, 4, 1, 64), k and v (rows, 4, keys, 64): decoding's one query per row at the small preset."
    return torch.randn(rows, 4, 1, 64), torch.randn(rows, 4, keys, 64), torch.randn(rows, 4, keys, 64)


def one_query_times(lengths: list[int], rows: int, rounds: int, repeats: int) -> dict[int, dict[str, list[float]]]:
    "Decoding's shapes, one query per row over 1 to 30 cached keys, forward only: ms per path, per round."
    paths = {"fused": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
             "explicit": lambda q, k, v: explicit_attention(q, k, v)[0],
             "rule": lambda q, k, v: fast_attention(q, k, v)}  # the path the model takes
    times: dict[int, dict[str, list[float]]] = {}
    with torch.inference_mode():
        for _ in range(rounds):
            for T in lengths:
                q, k, v = one_query_shapes(rows, T)
                t = best_seconds({p: lambda f=f: f(q, k, v) for p, f in paths.items()}, repeats=repeats)
                for path_name, seconds in t.items():
                    times.setdefault(T, {}).setdefault(path_name, []).append(seconds * 1e3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384])
    parser.add_argument("--tokens", type=int, default=2048, help="batch size × length")
    parser.add_argument("--one-query-rows", type=int, default=256, help="rows of decoding's one-query case "
                        "(64 sentences × beam 4, as in decode_engines.py)")
    parser.add_argument("--repeats", type=int, default=5, help="calls per point in a round; the best counts")
    parser.add_argument("--rounds", type=int, default=3, help="sweeps; each time is the median of its rounds")
    args = parser.parse_args()
    paths = {"fused": lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
             "explicit": lambda q, k, v, m: explicit_attention(q, k, v, m)[0]}
    if args.rounds < 3:
        parser.error("--rounds must be at least 3: the ratios need a median and a spread")
    times = {}  # (dtype, keys) → {"fused": [ms per round], "explicit": [...]}
    torch.manual_seed(0)
    for _ in range(args.rounds):  # whole sweeps, so that a slow moment of the machine touches one round only
        for name, dtype in DTYPES.items():
            for T in args.lengths:
                B = max(1, args.tokens // T)
                q, k, v = (torch.randn(B, 4, T, 64, dtype=dtype, requires_grad=True) for _ in range(3))
                grad, mask = torch.randn(B, 4, T, 64, dtype=dtype), subsequent_mask(T)  # the decoder's causal mask
                t = best_seconds({p: lambda f=f: forward_backward(f, q, k, v, mask, grad) for p, f in paths.items()},
                                 repeats=args.repeats)
                for path_name, seconds in t.items():
                    times.setdefault((name, T), {}).setdefault(path_name, []).append(seconds * 1e3)
    rows = []
    for (name, T), ms in times.items():
        fused, explicit = statistics.median(ms["fused"]), statistics.median(ms["explicit"])
        rows.append({"dtype": name, "keys": T, "batch": max(1, args.tokens // T), "fused_ms": round(fused, 3),
                     "explicit_ms": round(explicit, 3), "explicit_speedup": round(fused / explicit, 2),
                     "explicit_chosen": T <= EXPLICIT_MAX_KEYS.get(DTYPES[name], 0) and cpu_has_bf16_matmul()})
        chosen = "  ← explicit chosen" if rows[-1]["explicit_chosen"] else ""
        print(f"{name:8} T={T:4}: fused {fused:7.2f} ms, explicit {explicit:7.2f} ms "
              f"(medians of {args.rounds} rounds, {rows[-1]['explicit_speedup']:.2f}×){chosen}")
    # the decision's gain where it applies: fused over chosen-path time, summed over the chosen lengths, per round
    ratios = {}
    for name in DTYPES:
        chosen = [(name, r["keys"]) for r in rows if r["dtype"] == name and r["explicit_chosen"]]
        if chosen:
            ratios[f"attention_{name}_explicit_vs_fused"] = repeated(
                [sum(times[c]["fused"][i] for c in chosen) / sum(times[c]["explicit"][i] for c in chosen)
                 for i in range(args.rounds)], digits=2)
    one_query = one_query_times(list(range(1, 31)), args.one_query_rows, args.rounds, args.repeats)
    medians = {T: {p: statistics.median(t) for p, t in ms.items()} for T, ms in one_query.items()}
    one_query_rows = [{"keys": T, "fused_ms": round(m["fused"], 4), "explicit_ms": round(m["explicit"], 4),
                       "rule_ms": round(m["rule"], 4), "explicit_speedup": round(m["fused"] / m["explicit"], 2),
                       "explicit_chosen": explicit_on_cpu(1, T, 64, torch.float32)}  # one_query_shapes's width
                      for T, m in medians.items()]

    def summed(a: str, b: str, keys: range) -> dict:
        "Path a's time over path b's, summed over `keys`, per round: median and spread."
        return repeated([sum(one_query[T][a][i] for T in keys) / sum(one_query[T][b][i] for T in keys)
                         for i in range(args.rounds)], digits=2)

    ratios["attention_one_query_explicit_vs_fused"] = summed("fused", "explicit", range(1, 31))
    ratios["attention_one_query_rule_vs_explicit"] = summed("explicit", "rule", range(1, 31))
    # up to 13 keys: about a Multi30k decode's mean length
    ratios["attention_one_query_rule_vs_explicit_short"] = summed("explicit", "rule", range(1, 14))
    print("ratios (median, spread):", {k: (r["median"], r["spread"]) for k, r in ratios.items()})
    path = write_result("attention_paths", {"heads": 4, "d_k": 64, "tokens": args.tokens,
                                            "cpu_has_bf16_matmul": cpu_has_bf16_matmul(),
                                            "explicit_max_keys": {str(k)[6:]: v for k, v in EXPLICIT_MAX_KEYS.items()},
                                            "rows": rows, "one_query_rows": one_query_rows,
                                            "one_query_row_count": args.one_query_rows, "ratios": ratios})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
