"""The machine's description, the precision decision ("auto" probes only the 16-bit types native here), and early
stopping."""

import ast
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import transformer.hardware as hardware
import transformer.trainer as trainer_module
from transformer.model import Transformer, TransformerConfig
from transformer.trainer import TrainConfig, Trainer
from transformer.hardware import (
    ISA_FLAGS, choose_precision, cpu_isa, machine_description, native_bf16, native_fp16, precision_of)

PAIRS = [([3, 4, 5], [5, 4, 3]), ([6, 7], [7, 6]), ([8, 9, 10], [10, 9, 8]), ([11, 12], [12, 11])] * 4


def tiny_trainer(cfg: TrainConfig, **kwargs) -> Trainer:
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=13, tgt_vocab_size=13, dropout=0.1))
    return Trainer(model, cfg, PAIRS, progress=False, **kwargs)


def test_machine_description_names_instruction_sets_and_kernels():
    """The description carries PyTorch's kernel family, and the ISA list only names known sets, AVX2 if present."""
    isa = cpu_isa()
    assert set(isa) <= set(ISA_FLAGS.values())
    assert torch.backends.cpu.get_cpu_capability() in machine_description()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file() and " avx2 " in cpuinfo.read_text().replace("\n", " "):
        assert "AVX2" in isa and "AVX2" in machine_description()


def bf16_verdict(**env: str) -> tuple[bool, str]:
    "native_bf16('cpu') in a fresh interpreter whose oneDNN settings are `env` (none: oneDNN's own choice)."
    clean = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")}
    out = subprocess.run([sys.executable, "-c", "from transformer.hardware import native_bf16; "
                          "print(repr(native_bf16('cpu')))"], env=clean | env, capture_output=True, text=True,
                         check=True).stdout
    return ast.literal_eval(out)


@pytest.mark.parametrize("held_below", [False, True], ids=["oneDNN free", "oneDNN held to AVX2"])
def test_native_bf16_on_this_cpu_follows_its_instruction_sets(held_below):
    """Native bf16 exactly when the CPU has AVX512-BF16 or AMX-BF16 and oneDNN may use them; the reason says why."""
    flags = {"AVX512-BF16", "AMX-BF16"} & set(cpu_isa())
    native, reason = bf16_verdict(**({"ONEDNN_MAX_CPU_ISA": "AVX2"} if held_below else {}))
    assert native == (bool(flags) and not held_below)
    assert all(flag in reason for flag in flags) and ("emulated" in reason) != native
    if flags and held_below:
        assert "held below" in reason
    assert native_bf16("meta") == (False, "no bf16 check for meta devices")


def test_native_fp16_on_this_cpu_follows_its_instruction_sets():
    """The CPU has native fp16 exactly when it has AVX512-FP16 or AMX-FP16; the reason says which."""
    native, reason = native_fp16("cpu")
    assert native == bool({"AVX512-FP16", "AMX-FP16"} & set(cpu_isa()))
    assert ("has" if native else "neither") in reason
    assert native_fp16("meta") == (False, "no fp16 check for meta devices")


def pretend_gpu(monkeypatch, name: str, capability: tuple[int, int], bf16: bool) -> None:
    "Make torch.cuda describe a GPU of this name, compute capability and bf16 support (none needs to be there)."
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: bf16)


@pytest.mark.parametrize("name, capability, bf16, expected", [
    ("Tesla P100", (6, 0), False, (False, False)), ("Tesla V100", (7, 0), False, (False, True)),
    ("Tesla T4", (7, 5), False, (False, True)), ("NVIDIA A100", (8, 0), True, (True, True))])
def test_native_checks_on_gpus(monkeypatch, name, capability, bf16, expected):
    """On CUDA, fp16 is native from compute capability 7.0 on (tensor cores), bf16 where PyTorch says so."""
    pretend_gpu(monkeypatch, name, capability, bf16)
    assert (native_bf16("cuda")[0], native_fp16("cuda")[0]) == expected
    reason = native_fp16("cuda")[1]
    assert name in reason and f"compute capability {capability[0]}.{capability[1]}" in reason


@pytest.mark.parametrize("value", ["maybe", 1, None, "Auto", "float16", True])
def test_train_config_rejects_bad_precisions(value):
    with pytest.raises(ValueError, match=r"^precision must be auto, bf16, fp16 or fp32, got"):
        TrainConfig(precision=value)
    with pytest.raises(ValueError, match=r"^precision must be auto, bf16, fp16 or fp32, got"):
        choose_precision(value, "cpu", lambda precision: None)


@pytest.mark.parametrize("setting", ["bf16", "fp16", "fp32"])
def test_explicit_precision_never_probes(monkeypatch, setting):
    """An explicit setting is obeyed as it is, whatever the hardware, without timing anything."""
    monkeypatch.setattr(hardware, "native_bf16", lambda device: (False, "no bf16 here"))
    monkeypatch.setattr(hardware, "native_fp16", lambda device: (False, "no fp16 here"))
    def step(precision):
        raise AssertionError("probed")
    assert choose_precision(setting, "cpu", step) == {"setting": setting, "precision": setting,
                                                      "reason": "set explicitly"}


def test_auto_without_native_16_bit_arithmetic_is_fp32_without_probing(monkeypatch):
    """Without bf16 or fp16 hardware, 'auto' is fp32 and says why, and never runs the (possibly very slow) steps."""
    monkeypatch.setattr(hardware, "native_bf16", lambda device: (False, "no bf16 here"))
    monkeypatch.setattr(hardware, "native_fp16", lambda device: (False, "no fp16 here"))
    def step(precision):
        raise AssertionError("probed")
    assert choose_precision("auto", "cpu", step) == {"setting": "auto", "precision": "fp32",
                                                     "reason": "no bf16 here; no fp16 here"}


AUTO_CASES = {  # native bf16, native fp16, probe seconds → what "auto" picks
    "bf16 faster": (True, True, {"fp32": 2.0, "bf16": 1.0, "fp16": 1.0}, "bf16"),
    "bf16 just fast enough": (True, False, {"fp32": 1.1, "bf16": 1.0}, "bf16"),
    "bf16 preferred to a faster fp16": (True, True, {"fp32": 2.0, "bf16": 1.5, "fp16": 1.0}, "bf16"),
    "bf16 too slow, fp16 faster": (True, True, {"fp32": 2.0, "bf16": 1.9, "fp16": 1.0}, "fp16"),
    "no bf16, fp16 faster": (False, True, {"fp32": 2.0, "fp16": 1.5}, "fp16"),
    "no bf16, fp16 not fast enough": (False, True, {"fp32": 1.09, "fp16": 1.0}, "fp32"),
    "both slower": (True, True, {"fp32": 1.0, "bf16": 3.0, "fp16": 2.0}, "fp32"),
}


@pytest.mark.parametrize("bf16, fp16, seconds, expected", AUTO_CASES.values(), ids=AUTO_CASES.keys())
def test_auto_follows_the_hardware_and_the_probe(monkeypatch, bf16, fp16, seconds, expected):
    """'auto': bf16 where native and at least 1.1x as fast as fp32, else fp16 on the same conditions, else fp32; only
    native types are timed, and the reason names the hardware, each speedup and the choice."""
    monkeypatch.setattr(hardware, "native_bf16", lambda device: (bf16, "bf16 check"))
    monkeypatch.setattr(hardware, "native_fp16", lambda device: (fp16, "fp16 check"))
    timed = []
    def fake_best_seconds(fns):
        timed.append(sorted(fns))
        return seconds
    monkeypatch.setattr(hardware, "best_seconds", fake_best_seconds)
    decision = choose_precision("auto", "cpu", lambda precision: None)
    assert timed == [sorted(seconds)]  # fp32 and the native types, in one interleaved probe
    assert decision["precision"] == expected and decision["setting"] == "auto"
    timings = {k: v for k, v in decision.items() if k.endswith("_step_s")}
    assert timings == {f"{name}_step_s": s for name, s in seconds.items()}
    assert decision["reason"].startswith("bf16 check; fp16 check; the probe ran ")
    assert decision["reason"].endswith(f"as fast as fp32 (1.1x needed), so {expected}")
    for name in set(seconds) - {"fp32"}:
        assert f"{name} {seconds['fp32'] / seconds[name]:.2f}x" in decision["reason"]


def test_a_t4_gets_fp16_when_the_probe_finds_it_faster(monkeypatch):
    """Colab's T4 (CUDA, compute capability 7.5, no bf16): 'auto' never times bf16, and takes fp16 when faster."""
    pretend_gpu(monkeypatch, "Tesla T4", (7, 5), bf16=False)
    def fake_best_seconds(fns):
        assert set(fns) == {"fp32", "fp16"}  # bf16 is not timed
        return {"fp32": 3.0, "fp16": 1.0}
    monkeypatch.setattr(hardware, "best_seconds", fake_best_seconds)
    decision = choose_precision("auto", "cuda", lambda precision: None)
    assert decision["precision"] == "fp16"
    assert decision["reason"] == ("Tesla T4 lacks native bf16; Tesla T4 (compute capability 7.5) has fp16 tensor cores;"
                                  " the probe ran fp16 3.00x as fast as fp32 (1.1x needed), so fp16")


def test_precision_of_reads_new_and_old_records():
    """Records name their precision; those from before fp16 was a choice say only whether bf16 was on."""
    assert precision_of({"setting": "auto", "precision": "fp16", "reason": "..."}) == "fp16"
    assert precision_of({"setting": "auto", "bf16": True, "reason": "..."}) == "bf16"
    assert precision_of({"setting": False, "bf16": False, "reason": "set explicitly"}) == "fp32"
    assert precision_of({"bf16": None}) == precision_of({}) == "fp32"


def test_best_seconds_times_each_function_after_a_warm_up():
    """Each function runs once to warm up and then `repeats` times; the best time is at least the true one."""
    calls = {"slow": 0, "fast": 0}

    def run(name, seconds):
        calls[name] += 1
        time.sleep(seconds)

    best = hardware.best_seconds({"slow": lambda: run("slow", 0.02), "fast": lambda: run("fast", 0)}, repeats=2)
    assert calls == {"slow": 3, "fast": 3}
    assert best["slow"] >= 0.02 and best["fast"] < best["slow"]


def test_trainer_probe_leaves_weights_gradients_and_generators_untouched(monkeypatch):
    """The Trainer's probe runs forward and backward in every precision (with dropout), yet weights, gradients and
    the random generator end as they would without it."""
    monkeypatch.setattr(hardware, "native_bf16", lambda device: (True, "pretend"))
    monkeypatch.setattr(hardware, "native_fp16", lambda device: (True, "pretend"))
    probed = tiny_trainer(TrainConfig(max_tokens=64, warmup=2, precision="auto"))
    assert probed.precision is None  # the constructor probes nothing: 'auto' is decided when training starts
    probed.start()
    rng_probed = torch.get_rng_state()
    plain = tiny_trainer(TrainConfig(max_tokens=64, warmup=2))
    assert {"fp32_step_s", "bf16_step_s", "fp16_step_s"} <= set(probed.precision)
    assert probed.scaler.is_enabled() == (probed.precision["precision"] == "fp16")
    assert plain.precision == {"setting": "fp32", "precision": "fp32", "reason": "set explicitly"}
    assert not plain.scaler.is_enabled()
    assert torch.equal(rng_probed, torch.get_rng_state())
    for (name, a), b in zip(plain.model.named_parameters(), probed.model.parameters()):
        assert torch.equal(a, b) and b.grad is None, name


def test_stop_when_ends_training_at_a_validation(tmp_path):
    """`stop_when` is asked after every validation; True ends the run there, with that checkpoint the latest."""
    t = tiny_trainer(TrainConfig(max_tokens=64, max_steps=50, warmup=2, eval_every=2), out_dir=tmp_path,
                     stop_when=lambda trainer: trainer.state.step >= 4)
    metrics = t.fit()
    assert t.state.step == 4 and [row["step"] for row in metrics] == [2, 4]
    assert (tmp_path / "checkpoints" / "latest").read_text() == "step-0000004"
    assert all(math.isfinite(row["train_loss"]) for row in metrics)


@pytest.mark.parametrize("chosen", ["bf16", "fp16"])
def test_resume_keeps_the_precision_the_run_started_with(monkeypatch, tmp_path, chosen):
    """A run whose probe chose bf16 (or fp16) resumes in it even where a new probe would say fp32; an fp16 run
    resumes with the scaler's state of its checkpoint."""
    monkeypatch.setattr(hardware, "native_bf16", lambda device: (chosen == "bf16", "pretend"))
    monkeypatch.setattr(hardware, "native_fp16", lambda device: (True, "pretend"))
    monkeypatch.setattr(hardware, "best_seconds", lambda fns: {name: 2.0 if name == "fp32" else 1.0 for name in fns})
    cfg = TrainConfig(max_tokens=64, max_steps=2, warmup=2, eval_every=2, precision="auto")
    first = tiny_trainer(cfg, out_dir=tmp_path)
    first.fit()
    assert first.precision["precision"] == chosen
    probes = []  # a new probe would now say fp32
    monkeypatch.setattr(hardware, "best_seconds",
                        lambda fns: probes.append(fns) or {name: 1.0 if name == "fp32" else 2.0 for name in fns})
    resumed = tiny_trainer(cfg, out_dir=tmp_path)
    resumed.resume()
    assert resumed.start() == first.precision and not probes  # the run keeps its own, without a probe
    assert resumed.scaler.is_enabled() == (chosen == "fp16")
    assert resumed.scaler.state_dict() == first.scaler.state_dict()


class PretendCompiled(torch.nn.Module):
    "Stands in for torch.compile's wrapper in tests that must not wait for a compile: runs the module as it is."

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.module = module

    def forward(self, *args):
        return self.module(*args)


def test_auto_compile_compiles_only_a_long_run_that_the_probe_finds_faster(monkeypatch):
    """'auto' decides when training starts: a run too short to repay compiling stays eager and compiles nothing; a
    long one compiles, and trains compiled where the probe times the compiled step faster (timings pretended)."""
    wrapped = []
    monkeypatch.setattr(trainer_module, "compile_dynamic",
                        lambda module: wrapped.append(module) or PretendCompiled(module))
    pretended = {"eager": 2.0, "compiled": 1.0}  # seconds a step
    monkeypatch.setattr(hardware, "best_seconds", lambda fns: {name: pretended[name] for name in fns})
    short = tiny_trainer(TrainConfig(max_tokens=64, max_steps=5, warmup=2, compile="auto"))
    assert short.compiling is None  # nothing is probed before training starts
    short.start()
    assert not short.compiling["compiled"] and "too few" in short.compiling["reason"]
    assert not wrapped and "compile_s" not in short.compiling and not isinstance(short.loss_fn, PretendCompiled)
    long = tiny_trainer(TrainConfig(max_tokens=64, max_minutes=60, warmup=2, compile="auto"))
    long.start()
    assert long.compiling["compiled"] and long.compiling["compiled_step_s"] == 1.0 and "compile_s" in long.compiling
    assert isinstance(long.loss_fn, PretendCompiled) and long.loss_fn.module is wrapped[-1]
    assert math.isfinite(long.train_step([long.sampler.batches(0)[0]]))
    slower = tiny_trainer(TrainConfig(max_tokens=64, max_minutes=60, warmup=2, compile="auto"))
    monkeypatch.setattr(hardware, "best_seconds", lambda fns: {name: 1.0 for name in fns})  # no faster compiled
    slower.start()
    assert not slower.compiling["compiled"] and "1.00x" in slower.compiling["reason"]
    assert not isinstance(slower.loss_fn, PretendCompiled)


def test_resume_keeps_the_compile_decision(monkeypatch, tmp_path):
    """The decision to compile sits in every checkpoint; a resumed 'auto' run keeps it without a new probe."""
    cfg = TrainConfig(max_tokens=64, max_steps=2, warmup=2, eval_every=2, compile="auto")
    first = tiny_trainer(cfg, out_dir=tmp_path)
    first.fit()
    path = first.latest_checkpoint() / "trainer.json"
    record = json.loads(path.read_text())
    assert record["compile"] == first.compiling and not first.compiling["compiled"]  # two steps: too short
    record["compile"] = {"setting": "auto", "compiled": True, "reason": "pretend: a long run's probe chose it"}
    path.write_text(json.dumps(record))
    monkeypatch.setattr(trainer_module, "compile_dynamic", PretendCompiled)
    monkeypatch.setattr(hardware, "best_seconds", lambda fns: pytest.fail("a resumed run probed again"))
    resumed = tiny_trainer(dataclasses.replace(cfg, max_steps=4), out_dir=tmp_path)
    resumed.resume()
    resumed.start()
    assert resumed.compiling == record["compile"] and isinstance(resumed.loss_fn, PretendCompiled)
    resumed.fit()
    assert resumed.state.step == 4


OLD_RECORDS = {  # trainer.json of runs from before fp16 was a choice: what they said → the precision they resume in
    "auto, bf16 on": ({"setting": "auto", "bf16": True, "float32_step_s": 2.0, "bf16_step_s": 1.0, "reason": "r"},
                      "auto", "bf16"),
    "auto, bf16 off": ({"setting": "auto", "bf16": False, "reason": "the CPU has neither AVX512-BF16 nor AMX"},
                       "auto", "fp32"),
    "no record, bf16 set": (None, True, "bf16"),
    "no record, bf16 auto": (None, "auto", "fp32"),
}


@pytest.mark.parametrize("record, bf16, expected", OLD_RECORDS.values(), ids=OLD_RECORDS.keys())
def test_resume_of_a_run_from_before_fp16(tmp_path, record, bf16, expected):
    """A checkpoint whose trainer.json has the older `bf16` record (or none) and no scaler resumes in the precision
    it trained in, and its train_config still reads as a TrainConfig."""
    first = tiny_trainer(TrainConfig(max_tokens=64, max_steps=2, warmup=2, eval_every=2), out_dir=tmp_path)
    first.fit()
    path = first.latest_checkpoint() / "trainer.json"
    state = json.loads(path.read_text())
    state["train_config"] = {k: v for k, v in state["train_config"].items() if k != "precision"} | {"bf16": bf16}
    state = {k: v for k, v in state.items() if k not in ("precision", "grad_scaler")}
    path.write_text(json.dumps(state | ({"precision": record} if record else {})))
    assert TrainConfig.from_dict(state["train_config"]).precision == {True: "bf16", "auto": "auto"}[bf16]
    resumed = tiny_trainer(TrainConfig(max_tokens=64, max_steps=4, warmup=2, eval_every=2, precision="auto"),
                           out_dir=tmp_path)
    resumed.resume()
    assert resumed.precision["precision"] == expected and not resumed.scaler.is_enabled()
    resumed.fit()
    assert resumed.state.step == 4
