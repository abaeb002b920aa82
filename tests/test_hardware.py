"""The machine's description, the bf16 decision ("auto" probes only where bf16 is native), and early stopping."""

import math
import time
from pathlib import Path

import pytest
import torch

import transformer.hardware as hardware
from transformer.model import Transformer, TransformerConfig
from transformer.trainer import TrainConfig, Trainer
from transformer.hardware import ISA_FLAGS, choose_bf16, cpu_isa, machine_description, native_bf16

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


def test_native_bf16_on_this_cpu_follows_its_instruction_sets():
    """The CPU has native bf16 exactly when it has AVX512-BF16 or AMX-BF16; the reason says which."""
    native, reason = native_bf16("cpu")
    assert native == bool({"AVX512-BF16", "AMX-BF16"} & set(cpu_isa()))
    assert ("has" if native else "neither") in reason
    assert native_bf16("meta") == (False, "no bf16 check for meta devices")


@pytest.mark.parametrize("value", ["maybe", 1, None, "Auto"])
def test_train_config_rejects_bad_bf16_values(value):
    with pytest.raises(ValueError, match=r'^bf16 must be true, false or "auto", got'):
        TrainConfig(bf16=value)


@pytest.mark.parametrize("setting", [True, False])
def test_explicit_bf16_never_probes(setting):
    """An explicit setting is obeyed as it is, whatever the hardware, without timing anything."""
    def step(bf16):
        raise AssertionError("probed")
    assert choose_bf16(setting, "cpu", step) == {"setting": setting, "bf16": setting, "reason": "set explicitly"}


def test_auto_without_native_bf16_stays_off_without_probing(monkeypatch):
    """Without bf16 hardware, 'auto' is off and says why, and never runs the (possibly very slow) bf16 step."""
    monkeypatch.setattr(hardware, "native_bf16", lambda device: (False, "no bf16 here"))
    def step(bf16):
        raise AssertionError("probed")
    assert choose_bf16("auto", "cpu", step) == {"setting": "auto", "bf16": False, "reason": "no bf16 here"}


@pytest.mark.parametrize("fp32_s, bf16_s, expected", [(2.0, 1.0, True), (1.1, 1.0, True), (1.09, 1.0, False),
                                                     (1.0, 3.0, False)])
def test_auto_with_native_bf16_follows_the_probe(monkeypatch, fp32_s, bf16_s, expected):
    """With bf16 hardware, 'auto' turns bf16 on only when the timed bf16 step is at least 1.1x as fast."""
    monkeypatch.setattr(hardware, "native_bf16", lambda device: (True, "the CPU has AVX512-BF16"))
    monkeypatch.setattr(hardware, "best_seconds", lambda fns: {"float32": fp32_s, "bf16": bf16_s})
    decision = choose_bf16("auto", "cpu", lambda bf16: None)
    assert decision["bf16"] is expected and decision["float32_step_s"] == fp32_s
    assert decision["reason"].startswith("the CPU has AVX512-BF16; the probe ran a bf16 step")
    assert decision["reason"].endswith(f"bf16 is {'on' if expected else 'off'}")


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
    """The Trainer's bf16 probe runs forward and backward (with dropout), yet weights, gradients and the random
    generator end as they would without it."""
    monkeypatch.setattr(hardware, "native_bf16", lambda device: (True, "pretend"))
    probed = tiny_trainer(TrainConfig(max_tokens=64, warmup=2, bf16="auto"))
    rng_probed = torch.get_rng_state()
    plain = tiny_trainer(TrainConfig(max_tokens=64, warmup=2, bf16=False))
    assert "float32_step_s" in probed.precision and probed.bf16 == probed.precision["bf16"]
    assert "float32_step_s" not in plain.precision
    assert torch.equal(rng_probed, torch.get_rng_state())
    for (name, a), b in zip(plain.model.named_parameters(), probed.model.parameters()):
        assert torch.equal(a, b) and b.grad is None, name


def test_stop_when_ends_training_at_a_validation(tmp_path):
    """`stop_when` is asked after every validation; True ends the run there, with that checkpoint the latest."""
    t = tiny_trainer(TrainConfig(max_tokens=64, max_steps=50, warmup=2, eval_every=2), out_dir=tmp_path,
                     stop_when=lambda trainer: trainer.step >= 4)
    metrics = t.fit()
    assert t.step == 4 and [row["step"] for row in metrics] == [2, 4]
    assert (tmp_path / "checkpoints" / "latest").read_text() == "step-0000004"
    assert all(math.isfinite(row["train_loss"]) for row in metrics)


def test_resume_keeps_the_precision_the_run_started_with(monkeypatch, tmp_path):
    """A run whose probe chose bf16 resumes in bf16 even where a new probe would say otherwise, and vice versa."""
    monkeypatch.setattr(hardware, "native_bf16", lambda device: (True, "pretend"))
    monkeypatch.setattr(hardware, "best_seconds", lambda fns: {"float32": 2.0, "bf16": 1.0})
    cfg = TrainConfig(max_tokens=64, max_steps=2, warmup=2, eval_every=2, bf16="auto")
    first = tiny_trainer(cfg, out_dir=tmp_path)
    first.fit()
    assert first.bf16 is True
    monkeypatch.setattr(hardware, "best_seconds", lambda fns: {"float32": 1.0, "bf16": 2.0})
    resumed = tiny_trainer(cfg, out_dir=tmp_path)
    assert resumed.bf16 is False  # what a new probe says ...
    resumed.resume()
    assert resumed.bf16 is True and resumed.precision == first.precision  # ... and what the run keeps
