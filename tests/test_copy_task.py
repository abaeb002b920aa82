"""End to end: the tiny model learns to copy, with the machine's own kernels, with AVX2 kernels forced, and with one
thread.

Each case runs in a fresh interpreter, because PyTorch reads the kernel settings when it is imported. The AVX2
case makes an AVX-512 machine compute like an AVX2 one (on an AVX2 machine it changes nothing), so on an AVX-512
machine both kernel families are covered; a training outcome that held only for one CPU's rounding fails here. The
cases use different seeds, so that three seeds are covered too.
"""

import json
import os
import platform
import subprocess
import sys

import pytest

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}

RUN = """
import json, sys, torch
from transformer.copy_task import copy_data, exact_match, train_copy_model
seed = int(sys.argv[1])
model, metrics = train_copy_model(seed=seed)
test = copy_data(seed)["test"]
print(json.dumps({"kernels": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads(),
                  "steps": metrics[-1]["step"], "valid_exact": [m["valid_exact"] for m in metrics],
                  "training": model.training, "greedy": exact_match(model, test),
                  "beam": exact_match(model, test[:200], beam_size=4)}))
"""


X86 = platform.machine().lower() in ("x86_64", "amd64")


@pytest.mark.parametrize("setting, seed, env", [
    ("native", 0, {}),
    pytest.param("avx2", 1, AVX2, marks=pytest.mark.skipif(not X86, reason="AVX2 kernels exist on x86 only")),
    ("one-thread", 2, {"OMP_NUM_THREADS": "1"})])
def test_copy_task_reaches_perfect_exact_match(setting, seed, env):
    """Training stops at the criterion (all validation sequences copied twice in a row) before the cap of
    2,000 steps, and greedy and beam decoding then copy at least 99% of the unseen test sequences exactly."""
    done = subprocess.run([sys.executable, "-c", RUN, str(seed)], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    if setting == "avx2":
        assert result["kernels"] in ("AVX2", "DEFAULT"), result  # the override took effect
    if setting == "one-thread":
        assert result["threads"] == 1, result
    assert not result["training"]
    assert result["steps"] < 2000 and result["valid_exact"][-2:] == [1.0, 1.0], result
    assert result["valid_exact"][0] < 0.5, result  # it learned the task: at the first validation it could not
    assert result["greedy"] >= 0.99 and result["beam"] >= 0.99, result  # in practice 99.9–100%
