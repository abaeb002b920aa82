"""Which attention path is faster for a training step on this device: PyTorch's fused kernel
(`scaled_dot_product_attention`) or attention written out as two matrix products and a softmax
(`explicit_attention`), forward and backward, by key length and dtype, at the `small` preset's heads (4 × 64) and
about 2,048 tokens per batch. `fast_attention` (chapter *Attention*) takes the written-out path on CPUs up to the
key lengths in `EXPLICIT_MAX_KEYS`; this script measures where the crossover lies on the machine it runs on.

    python benchmarks/attention_paths.py          # writes benchmarks/results/attention_paths-cpu.json
"""

import argparse

import torch
import torch.nn.functional as F

from common import write_result
from transformer.attention import EXPLICIT_MAX_KEYS, cpu_has_bf16_matmul, explicit_attention, subsequent_mask
from transformer.hardware import best_seconds

DTYPES = {"float32": torch.float32, "bf16": torch.bfloat16}


def forward_backward(attend, q, k, v, mask, grad) -> None:
    "One forward and backward pass of `attend` (the gradients land in q, k, v)."
    attend(q, k, v, mask).backward(grad)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384])
    parser.add_argument("--tokens", type=int, default=2048, help="batch size × length")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    paths = {"fused": lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
             "explicit": lambda q, k, v, m: explicit_attention(q, k, v, m)[0]}
    rows = []
    torch.manual_seed(0)
    for name, dtype in DTYPES.items():
        for T in args.lengths:
            B = max(1, args.tokens // T)
            q, k, v = (torch.randn(B, 4, T, 64, dtype=dtype, requires_grad=True) for _ in range(3))
            grad, mask = torch.randn(B, 4, T, 64, dtype=dtype), subsequent_mask(T)  # the decoder's causal mask
            t = best_seconds({p: lambda f=f: forward_backward(f, q, k, v, mask, grad) for p, f in paths.items()},
                             repeats=args.repeats)
            rows.append({"dtype": name, "keys": T, "batch": B, "fused_ms": round(t["fused"] * 1e3, 3),
                         "explicit_ms": round(t["explicit"] * 1e3, 3),
                         "explicit_speedup": round(t["fused"] / t["explicit"], 2),
                         "explicit_chosen": T <= EXPLICIT_MAX_KEYS.get(dtype, 0) and cpu_has_bf16_matmul()})
            chosen = "  ← explicit chosen" if rows[-1]["explicit_chosen"] else ""
            print(f"{name:8} T={T:4} B={B:4}: fused {t['fused'] * 1e3:7.2f} ms, explicit {t['explicit'] * 1e3:7.2f} ms "
                  f"({rows[-1]['explicit_speedup']:.2f}×){chosen}")
    # the decision's gain where it applies: fused time over chosen-path time, summed over the chosen lengths
    ratios = {}
    for name in DTYPES:
        chosen = [r for r in rows if r["dtype"] == name and r["explicit_chosen"]]
        if chosen:
            ratios[f"attention_{name}_explicit_vs_fused"] = round(
                sum(r["fused_ms"] for r in chosen) / sum(r["explicit_ms"] for r in chosen), 2)
    print("ratios:", ratios)
    path = write_result("attention_paths", {"heads": 4, "d_k": 64, "tokens": args.tokens,
                                            "cpu_has_bf16_matmul": cpu_has_bf16_matmul(),
                                            "explicit_max_keys": {str(k)[6:]: v for k, v in EXPLICIT_MAX_KEYS.items()},
                                            "rows": rows, "ratios": ratios})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
