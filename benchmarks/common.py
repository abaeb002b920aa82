"""What the benchmark scripts share: provenance, a measured matmul peak, Multi30k batches, repeated ratios, and
result files, one folder per kind of machine."""

import json
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from transformer.data import encode_pairs, load_split, train_bpe
from transformer.hardware import cpuinfo, cpu_isa, machine_description
from transformer.training import TokenBatchSampler, make_batch
from transformer.run import git_commit, load_average

RESULTS = Path(__file__).resolve().parent / "results"


def device_tag() -> str:
    "'cpu' or the GPU's name, for file names and tables."
    return torch.cuda.get_device_name().replace(" ", "-") if torch.cuda.is_available() else "cpu"


def machine_key() -> str:
    "A folder name for this kind of machine: the CPU's maker and family and its widest instruction set."
    cpu = re.sub(r"\((R|TM|tm)\)", "", cpuinfo("model name") or platform.processor() or platform.machine())
    family = "-".join(re.findall(r"[a-z0-9]+", cpu.lower())[:2]) or "cpu"
    isa = cpu_isa()
    if "AMX-BF16" in isa:
        widest = "amx"
    elif "AVX512-BF16" in isa:
        widest = "avx512-bf16" + ("-fp16" if "AVX512-FP16" in isa else "")
    else:
        widest = next((name.lower().replace("-", "") for name in ("AVX-512", "AVX2") if name in isa), "")
    return "-".join(filter(None, (family, widest)))


def repeated(values: list[float], digits: int = 3) -> dict:
    "One ratio measured several times: its median (the number to quote), spread (largest − smallest) and values."
    if len(values) < 3:
        raise ValueError(f"a ratio needs at least 3 repeats to give a median and a spread, got {len(values)}")
    return {"median": round(statistics.median(values), digits), "spread": round(max(values) - min(values), digits),
            "values": [round(v, digits) for v in values]}


def ratio_of_rounds(per_round: list[dict], slow: str, fast: str, digits: int = 2) -> dict:
    "How many times faster `fast` ran than `slow`, round by round (seconds per name in each round), `repeated`."
    return repeated([r[slow] / r[fast] for r in per_round], digits)


def matmul_peak_gflops(dtype: torch.dtype = torch.float32, n: int = 2048, repeats: int = 5,
                       device: str = "cpu") -> float:
    "Best GFLOP/s of an n × n product computed as linear layers do (x @ wᵀ): the machine's practical peak."
    # (measured the way layers multiply: without bf16 instructions, PyTorch's bf16 `a @ b` is ~10× slower than x @ wᵀ)
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(repeats + 1):
        sync(device)
        start = time.perf_counter()
        F.linear(a, b)
        sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def sync(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


def multi30k_ids(vocab_size: int = 8000):
    "A BPE tokenizer trained on Multi30k's training split, and the encoded train and test2016 pairs."
    train = load_split("train")
    tokenizer = train_bpe([s for pair in train for s in pair], vocab_size)
    return tokenizer, encode_pairs(tokenizer, train), encode_pairs(tokenizer, load_split("test2016"))


def bucketed_batches(pairs, cfg, max_tokens: int, n: int, seed: int = 0):
    "The first `n` token-bucketed training batches of epoch 0 (the Trainer's own batching)."
    sampler = TokenBatchSampler([(len(x) + 1, len(y) + 1) for x, y in pairs], max_tokens, seed=seed)
    return [make_batch([pairs[i] for i in idx], cfg) for idx in sampler.batches(0)[:n]]


def write_result(name: str, result: dict, tag: str = "") -> Path:
    """Write `result` with provenance to benchmarks/results/MACHINE/NAME[-TAG]-DEVICE.json and return the path.

    `result["ratios"]`, where present, maps each ratio to `repeated(...)`: the file keeps the medians under "ratios"
    (what the book quotes), their spreads under "spreads", every value under "ratio_values", and the fewest repeats
    of any ratio under "repeats"."""
    folder = RESULTS / machine_key()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}{'-' + tag if tag else ''}-{device_tag()}.json"
    if "ratios" in result:
        measured = result.pop("ratios")
        result |= {"repeats": min(len(r["values"]) for r in measured.values()),
                   "ratios": {k: r["median"] for k, r in measured.items()},
                   "spreads": {k: r["spread"] for k, r in measured.items()},
                   "ratio_values": {k: r["values"] for k, r in measured.items()}}
    run = os.environ.get("BENCH_RUN") or time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())  # run_all.sh: one for all
    commit = git_commit(outputs=["benchmarks/results"])  # the files this run is rewriting do not make it dirty
    result = {"benchmark": name, "run": run, "commit": commit, "machine": machine_description(),
              "isa": cpu_isa(), "kernels": torch.backends.cpu.get_cpu_capability(),
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "load_averages": load_average(),  # 1, 5 and 15 minutes, as the run ends
              "command": " ".join(["python", *sys.argv]), **result}
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
