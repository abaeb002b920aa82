"""Training throughput, side by side in one run: our Transformer, torch.nn.Transformer and a tutorial-style naive
implementation, with the same dimensions, embeddings, output layer and token-bucketed Multi30k batches.

Throughput is target tokens per second of a full training step (forward, loss, backward, Adam step). Steps of the
three implementations are interleaved, batch by batch, so that drifts of the machine's speed hit all of them alike.
The fraction of peak relates each implementation's own matrix-multiplication FLOPs per step (counted by PyTorch) to
the best matrix-multiplication rate measured in the same run, in float32 or bfloat16, whichever this machine runs
faster. `ceilings` bound what any optimisation of ours could reach: our FLOPs at 100% of the peak of the dtype the
products run in, over the other implementation's measured speed.

The timed steps run `--repeats` rounds (3 by default); every ratio in the result file is the median of its rounds,
with its spread.

    python benchmarks/train_throughput.py --steps 12            # small preset, float32 (and bf16 where native)
    python benchmarks/train_throughput.py --presets base --steps 6 --bf16-steps 1   # writes ...-base-cpu.json
"""

import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from common import bucketed_batches, matmul_peak_gflops, multi30k_ids, repeated, sync, write_result
from transformer.hardware import compile_dynamic, keep_freed_memory, native_bf16
from transformer.model import Transformer, TransformerConfig
from transformer.training import BatchLoss, make_optimizer

# --- the baselines ---------------------------------------------------------------------------------------------


class WithOurEmbeddings(nn.Module):
    "A baseline that uses our (tied) embeddings, positional encodings and output layer around its own layers."

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        ours = Transformer(cfg)
        self.cfg, self.src_embed, self.tgt_embed = cfg, ours.src_embed, ours.tgt_embed
        self.src_pos, self.tgt_pos, self.generator = ours.src_pos, ours.tgt_pos, ours.generator


class TorchTransformer(WithOurEmbeddings):
    "torch.nn.Transformer between our embeddings, positions and tied output layer; loss over every position."

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        self.core = nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.d_ff,
                                   cfg.dropout, batch_first=True)

    def loss(self, batch, smoothing):
        pad = self.cfg.pad_id
        T = batch.tgt_in.size(1)
        out = self.core(self.src_pos(self.src_embed(batch.src)), self.tgt_pos(self.tgt_embed(batch.tgt_in)),
                        tgt_mask=nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.bool),
                        src_key_padding_mask=batch.src == pad, tgt_key_padding_mask=batch.tgt_in == pad,
                        memory_key_padding_mask=batch.src == pad, tgt_is_causal=True)
        logits = self.generator(out)
        return F.cross_entropy(logits.flatten(0, 1).float(), batch.tgt_out.flatten(), ignore_index=pad,
                               label_smoothing=smoothing, reduction="sum")


class NaiveAttention(nn.Module):
    "Multi-head attention as tutorials write it: separate Q/K/V projections, masked_fill, softmax."

    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask):
        B = query.size(0)
        q, k, v = (proj(x).view(B, -1, self.h, self.d_k).transpose(1, 2)
                   for proj, x in ((self.q, query), (self.k, key), (self.v, value)))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        scores = scores.masked_fill(mask == 0, -1e9)
        attn = self.dropout(scores.softmax(dim=-1))
        return self.o((attn @ v).transpose(1, 2).contiguous().view(B, -1, self.h * self.d_k))


class NaiveLayer(nn.Module):
    "A post-LN encoder (cross=False) or decoder (cross=True) layer built from `NaiveAttention`."

    def __init__(self, cfg: TransformerConfig, cross: bool):
        super().__init__()
        self.self_attn = NaiveAttention(cfg.d_model, cfg.n_heads, cfg.dropout)
        self.cross_attn = NaiveAttention(cfg.d_model, cfg.n_heads, cfg.dropout) if cross else None
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.ReLU(), nn.Linear(cfg.d_ff, cfg.d_model))
        self.norms = nn.ModuleList(nn.LayerNorm(cfg.d_model) for _ in range(3 if cross else 2))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, mask, memory=None, memory_mask=None):
        x = self.norms[0](x + self.drop(self.self_attn(x, x, x, mask)))
        if self.cross_attn is not None:
            x = self.norms[1](x + self.drop(self.cross_attn(x, memory, memory, memory_mask)))
        return self.norms[-1](x + self.drop(self.ff(x)))


class NaiveTransformer(WithOurEmbeddings):
    "The whole model the naive way, with our embeddings and tied output layer; logits for every position."

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        self.encoder = nn.ModuleList(NaiveLayer(cfg, cross=False) for _ in range(cfg.n_encoder_layers))
        self.decoder = nn.ModuleList(NaiveLayer(cfg, cross=True) for _ in range(cfg.n_decoder_layers))

    def loss(self, batch, smoothing):
        pad, T = self.cfg.pad_id, batch.tgt_in.size(1)
        src_mask = (batch.src != pad)[:, None, None, :]
        tgt_mask = (batch.tgt_in != pad)[:, None, None, :] & torch.ones(T, T, dtype=torch.bool).tril()
        x = self.src_pos(self.src_embed(batch.src))
        for layer in self.encoder:
            x = layer(x, src_mask)
        y = self.tgt_pos(self.tgt_embed(batch.tgt_in))
        for layer in self.decoder:
            y = layer(y, tgt_mask, x, src_mask)
        logits = self.generator(y)
        return F.cross_entropy(logits.flatten(0, 1).float(), batch.tgt_out.flatten(), ignore_index=pad,
                               label_smoothing=smoothing, reduction="sum")


class Ours(nn.Module):
    "Our model with its own training loss (logits only at real target positions), compiled as the trainer compiles."

    def __init__(self, cfg: TransformerConfig, compile: bool = False, smoothing: float = 0.1):
        super().__init__()
        self.model, self.smoothing = Transformer(cfg), smoothing
        batch_loss = BatchLoss(self.model, smoothing)  # what `Trainer` runs, and compiles where it decides to
        self.step_loss = compile_dynamic(batch_loss) if compile else batch_loss

    def loss(self, batch, smoothing):
        if smoothing != self.smoothing:
            raise ValueError(f"this model's loss smooths with {self.smoothing}, not {smoothing}")
        return self.step_loss(batch.src, batch.tgt_in, batch.tgt_out, batch.target_rows)[0]

# --- measuring -----------------------------------------------------------------------------------------------------


def train_step(impl, optimizer, batch, bf16: bool) -> None:
    "One full step: forward, label-smoothed loss normalised by target tokens, backward, Adam."
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = impl.loss(batch, 0.1)
    (loss / batch.n_tgt_tokens).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def step_flops(impl: nn.Module, batch) -> int:
    "Matrix-multiplication FLOPs of one forward and backward pass of `impl` on `batch`, counted by PyTorch."
    with FlopCounterMode(display=False) as counter:
        impl.loss(batch, 0.1).backward()
    impl.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def measure(cfg: TransformerConfig, batches, bf16: bool, compile: bool, rounds: int,
            warmup: int = 2) -> tuple[list[dict], dict]:
    "Tokens/s of each implementation per round on the same batches, steps interleaved; and each one's FLOPs/token."
    impls = {"ours": lambda: Ours(cfg), "nn.Transformer": lambda: TorchTransformer(cfg),
             "naive": lambda: NaiveTransformer(cfg)}
    if compile:
        impls["ours (torch.compile)"] = lambda: Ours(cfg, compile=True)
    built, flops = {}, {}
    tokens = sum(b.n_tgt_tokens for b in batches[warmup:])
    for name, make in impls.items():
        torch.manual_seed(0)
        impl = make().train()
        built[name] = (impl, make_optimizer(impl, cfg.d_model, 4000)[0])
        if name.startswith("ours ("):  # a compiled variant does the work of "ours"
            flops[name] = flops["ours"]
        else:
            flops[name] = sum(step_flops(impl, b) for b in batches[warmup:]) / tokens
    for batch in batches[:warmup]:
        for impl, opt in built.values():
            train_step(impl, opt, batch, bf16)
    per_round = []
    for _ in range(rounds):  # every round times the same batches again
        seconds = dict.fromkeys(built, 0.0)
        for batch in batches[warmup:]:
            for name, (impl, opt) in built.items():
                sync("cpu")
                start = time.perf_counter()
                train_step(impl, opt, batch, bf16)
                seconds[name] += time.perf_counter() - start
        per_round.append({name: tokens / s for name, s in seconds.items()})
    return per_round, flops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["small"])
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "bf16"],
                        help="default: float32, and bf16 where the CPU has bf16 instructions (emulated bf16 is no test)")
    parser.add_argument("--steps", type=int, default=6, help="timed float32 steps per implementation (after 2 warm-up)")
    parser.add_argument("--bf16-steps", type=int, default=2, help="timed bf16 steps (after 1 warm-up; slow on CPUs "
                        "without bf16 instructions)")
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--compile", action="store_true", help="also time our model under torch.compile")
    parser.add_argument("--repeats", type=int, default=3, help="rounds over the timed steps; each ratio's median and "
                        "spread are kept (at least 3)")
    args = parser.parse_args()
    if args.repeats < 3:
        parser.error("--repeats must be at least 3: a ratio needs a median and a spread")
    bf16_native, bf16_why = native_bf16("cpu")
    args.dtypes = args.dtypes or ["float32", *(["bf16"] if bf16_native else [])]
    print(f"dtypes {args.dtypes}: {bf16_why}", flush=True)
    kept = keep_freed_memory()  # as Trainer does on a CPU: a step's large tensors reuse memory already mapped

    tokenizer, train, _ = multi30k_ids()
    V = tokenizer.get_vocab_size()
    rows, ratios, ceilings = [], {}, {}
    peak = {"float32": matmul_peak_gflops(torch.float32)}
    if "bf16" in args.dtypes:  # few repeats: without bf16 instructions a 2048² product takes over a second
        peak["bf16"] = matmul_peak_gflops(torch.bfloat16, repeats=2)
    for preset in args.presets:
        cfg = TransformerConfig.preset(preset, src_vocab_size=V, tgt_vocab_size=V)
        for dtype in args.dtypes:
            steps, warmup = (args.steps, 2) if dtype == "float32" else (args.bf16_steps, 1)
            batches = bucketed_batches(train, cfg, args.max_tokens, steps + warmup)
            per_round, flops = measure(cfg, batches, dtype == "bf16", args.compile, args.repeats, warmup)
            tok_s = {name: statistics.median(r[name] for r in per_round) for name in per_round[0]}
            machine_peak = max(peak.values())  # the best matmul rate of this machine, in whichever dtype
            for name, value in tok_s.items():
                rows.append({"preset": preset, "dtype": dtype, "implementation": name, "target_tokens_per_s": round(value),
                             "target_tokens_per_s_spread": round(max(r[name] for r in per_round)
                                                                 - min(r[name] for r in per_round)),
                             "flops_per_target_token": round(flops[name]),
                             "fraction_of_matmul_peak": round(value * flops[name] / 1e9 / machine_peak, 3),
                             "fraction_of_dtype_peak": round(value * flops[name] / 1e9 / peak[dtype], 3)})
            best = [max(v for k, v in r.items() if k.startswith("ours")) for r in per_round]  # per round
            # our step's matrix-product rate over this dtype's measured peak (issue target: ≥ 0.75 in float32)
            ratios[f"train_{preset}_{dtype}_peak_fraction"] = repeated([b * flops["ours"] / 1e9 / peak[dtype]
                                                                        for b in best])
            at_peak = peak[dtype] * 1e9 / flops["ours"]  # our tokens/s if every FLOP ran at this dtype's peak
            for other, key in (("nn.Transformer", "nn_transformer"), ("naive", "naive")):
                ratios[f"train_{preset}_{dtype}_vs_{key}"] = repeated([b / r[other] for b, r in zip(best, per_round)],
                                                                      digits=2)
                ceilings[f"train_{preset}_{dtype}_vs_{key}"] = round(at_peak / tok_s[other], 2)
            if "ours (torch.compile)" in tok_s:  # whether compiling our step pays, side by side
                ratios[f"train_{preset}_{dtype}_compiled_vs_eager"] = repeated(
                    [r["ours (torch.compile)"] / r["ours"] for r in per_round], digits=2)
            print(f"{preset} {dtype}: " + ", ".join(f"{k} {v:,.0f} tok/s" for k, v in tok_s.items()), flush=True)
    print(f"\n{'preset':8}{'dtype':9}{'implementation':24}{'target tok/s':>14}{'of peak':>9}")
    for r in rows:
        print(f"{r['preset']:8}{r['dtype']:9}{r['implementation']:24}{r['target_tokens_per_s']:>14,}"
              f"{r['fraction_of_matmul_peak']:>9.1%}")
    print("\nratios (median, spread over the rounds):",
          {k: (r["median"], r["spread"]) for k, r in ratios.items()})
    print("ceilings (our step at 100% of the dtype's measured matmul peak):", ceilings)
    path = write_result("train_throughput", {"max_tokens": args.max_tokens, "keeps_freed_memory": kept,
                                             "bf16_native": bf16_native, "bf16_reason": bf16_why,
                                             "matmul_peak_gflops": peak,
                                             "rows": rows, "ratios": ratios, "ceilings": ceilings},
                        tag="-".join(args.presets))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
