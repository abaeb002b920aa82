"""Peak memory (resident set size) of one training step for each preset, each in a fresh process so that the
peaks do not mix: model, gradients, Adam's moments and activations for a batch of `--max-tokens` tokens per side.

    python benchmarks/memory.py --presets tiny small base big

Each preset runs `--repeats` times (3 by default); a row keeps the median peak and the spread.
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys

import torch

from common import write_result


def child(preset: str, max_tokens: int) -> None:
    "Run one training step of `preset` on a batch of random sentences; print the peak RSS in MiB as JSON."
    from transformer.model import Transformer, TransformerConfig
    from transformer.training import label_smoothing, make_batch, make_optimizer

    cfg = TransformerConfig.preset(preset, src_vocab_size=8000, tgt_vocab_size=8000)
    torch.manual_seed(0)
    model = Transformer(cfg).train()
    optimizer, _ = make_optimizer(model, cfg.d_model, 4000)
    length = 20
    pairs = [(torch.randint(3, 8000, (length - 1,)).tolist(),) * 2 for _ in range(max_tokens // length)]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    loss, _ = model.batch_loss(make_batch(pairs, cfg), label_smoothing(0.1))
    loss.backward()
    optimizer.step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"preset": preset, "parameters": params, "peak_rss_mib": round(peak),
                      "rss_before_step_mib": round(before)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "small", "base", "big"])
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per preset")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.max_tokens)
    if args.repeats < 3:
        parser.error("--repeats must be at least 3: a peak needs a median and a spread")
    rows = []
    for preset in args.presets:
        runs = [json.loads(subprocess.run([sys.executable, __file__, "--child", preset, "--max-tokens",
                                           str(args.max_tokens)], capture_output=True, text=True,
                                          check=True).stdout.strip().splitlines()[-1]) for _ in range(args.repeats)]
        peaks = [r["peak_rss_mib"] for r in runs]
        rows.append({**runs[0], "peak_rss_mib": round(statistics.median(peaks)),
                     "peak_rss_mib_spread": max(peaks) - min(peaks),
                     "rss_before_step_mib": round(statistics.median(r["rss_before_step_mib"] for r in runs))})
        row = rows[-1]
        print(f"{preset:6} {row['parameters'] / 1e6:7.1f}M parameters: peak RSS {row['peak_rss_mib']:,} MiB "
              f"(spread {row['peak_rss_mib_spread']} MiB over {args.repeats} processes)", flush=True)
    path = write_result("memory", {"max_tokens": args.max_tokens, "vocab_size": 8000, "repeats": args.repeats,
                                   "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
