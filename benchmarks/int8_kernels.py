"""Which int8 kernel a decoding step's linear layers could use on this CPU, timed side by side with float32: fbgemm's,
which `dynamic_int8` calls in eager PyTorch, and oneDNN's, the int8 product torch.compile (inductor) puts in a graph.

    python benchmarks/int8_kernels.py   # one thread (a decoding worker's share): .../int8_kernels-cpu.json

A compiled step is the way to shed the Python and the small operators around the products (*Decoding at speed*), but
fbgemm's packed weights are an object torch.compile cannot trace: each int8 layer of `dynamic_int8` breaks the graph.
Inside a graph only oneDNN's int8 product runs, which inductor puts in place of the pattern `Int8Pattern` writes
(activations quantised per tensor to 7 bits, weights per output channel to 8) when it freezes the weights. A
compiled int8 step pays only if that kernel is about as fast as fbgemm's; this file measures that, and checks that
inductor did emit oneDNN's product. The layers are the published model's decoder layers that `dynamic_int8`
quantises and its output projection, each on its own input of 64 rows (a greedy step on a batch of 64).
"""

import argparse
import os
import statistics
import time

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (defines torch.ops.quantized_decomposed)
import torch.nn.functional as F
from torch import Tensor, nn
from torch._inductor.utils import run_and_get_code

from common import ratio_of_rounds, write_result
from decode_engines import PUBLISHED, ROOT
from transformer.data import sha256
from transformer.decoding import dynamic_int8
from transformer.hub import model_folder
from transformer.run import load_average
from transformer.translation import load_translator

decomposed = torch.ops.quantized_decomposed
EPS = torch.finfo(torch.float32).eps
ACTIVATION_MAX = 127  # 7-bit activations, as PyTorch's x86 int8 layers keep them (reduce_range): AVX2 sums pairs
# of int8 products in 16 bits, which 8-bit activations can overflow
COMPILED = "oneDNN int8 compiled"  # the side whose int8 products run inside a compiled graph


class Int8Pattern(nn.Module):
    "A linear layer as quantise → dequantise → float32 product: a pattern inductor replaces with oneDNN's kernel."

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach()
        scale = w.abs().amax(1).clamp(min=EPS) / 127  # per output channel, symmetric
        self.register_buffer("weight", torch.round(w / scale[:, None]).clamp(-128, 127).to(torch.int8))
        self.register_buffer("scale", scale)
        self.register_buffer("zero_point", torch.zeros_like(scale, dtype=torch.long))
        self.register_buffer("bias", linear.bias.detach().clone() if linear.bias is not None else None)

    def forward(self, x: Tensor) -> Tensor:
        "x (n, d_in) → (n, d_out), its activations quantised by their range at every call."
        x_scale, x_zero = decomposed.choose_qparams.tensor(x, 0, ACTIVATION_MAX, EPS, torch.uint8)
        x = decomposed.dequantize_per_tensor.tensor(
            decomposed.quantize_per_tensor.tensor(x, x_scale, x_zero, 0, ACTIVATION_MAX, torch.uint8),
            x_scale, x_zero, 0, ACTIVATION_MAX, torch.uint8)
        w = decomposed.dequantize_per_channel(self.weight, self.scale, self.zero_point, 0, -128, 127, torch.int8)
        return F.linear(x, w, self.bias)


def step_layers(model: nn.Module) -> list[str]:
    "Names of the linear layers a decoding step runs that `dynamic_int8` quantises, and the output projection."
    return [name for name, m in model.named_modules() if isinstance(m, nn.Linear)
            and name.startswith(("decoder.", "generator")) and not name.endswith("cross_attn.in_proj")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=64, help="rows each layer multiplies (default 64)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each timing every side in turn (at least 3)")
    parser.add_argument("--passes", type=int, default=50, help="passes over every layer per side and round")
    parser.add_argument("--warm-up", type=int, default=10, help="untimed passes of each side first")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3 (a median and a spread)")
    torch.set_num_threads(1)
    load_before = load_average()
    folder = model_folder(str(PUBLISHED))
    model, _ = load_translator(folder)
    names = step_layers(model)
    modules = dict(model.named_modules())
    int8_modules = dict(dynamic_int8(model).named_modules())
    inputs = [torch.randn(args.rows, modules[n].in_features) for n in names]
    float32 = [modules[n] for n in names]
    fbgemm = [int8_modules[n] for n in names]
    patterns = nn.ModuleList(Int8Pattern(modules[n]) for n in names)

    def run(layers) -> list[Tensor]:
        return [layer(x) for layer, x in zip(layers, inputs)]

    with torch.inference_mode(), torch._inductor.config.patch(freezing=True):  # frozen weights: oneDNN's kernel
        onednn = torch.compile(lambda: run(patterns), fullgraph=True)
        _, (code, *_) = run_and_get_code(onednn)
        if "qlinear" not in code:
            raise RuntimeError("inductor did not put oneDNN's int8 product in the graph: the comparison is void")
        sides = {"float32": lambda: run(float32), "fbgemm int8": lambda: run(fbgemm), COMPILED: onednn}
        reference = run(float32)
        errors = {side: max(((y - r).abs().max() / r.abs().max()).item() for y, r in zip(f(), reference))
                  for side, f in sides.items()}
        for _ in range(args.warm_up):
            for f in sides.values():
                f()
        per_round = []
        for _ in range(args.rounds):
            seconds = dict.fromkeys(sides, 0.0)
            for _ in range(args.passes):  # the sides in turn, pass by pass: a busy moment slows each alike
                for side, f in sides.items():
                    start = time.perf_counter()
                    f()
                    seconds[side] += (time.perf_counter() - start) / args.passes
            per_round.append(seconds)
            print("  ".join(f"{side} {s * 1e3:.2f} ms" for side, s in seconds.items()), flush=True)
    rows = [{"side": side, "ms_per_pass": round(1e3 * statistics.median(r[side] for r in per_round), 3),
             "max_relative_error": round(errors[side], 5)} for side in sides]
    ratios = {"fbgemm_int8_vs_float32": ratio_of_rounds(per_round, "float32", "fbgemm int8"),
              "onednn_int8_compiled_vs_float32": ratio_of_rounds(per_round, "float32", COMPILED),
              "onednn_int8_compiled_vs_fbgemm_int8": ratio_of_rounds(per_round, "fbgemm int8", COMPILED)}
    for key, r in ratios.items():
        print(f"{key}: {r['median']:.2f} ± {r['spread']:.2f}")
    path = write_result("int8_kernels", {
        "model": os.path.relpath(folder, ROOT), "model_sha256": sha256(folder / "model.safetensors"),
        "layers": len(names), "rows": args.rows, "passes": args.passes,
        "load_averages": {"before": load_before, "after": load_average()}, "sides": rows, "ratios": ratios})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
