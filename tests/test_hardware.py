"""The machine's description, the bf16 decision ("auto" probes only where bf16 is native), and early stopping."""

import math
import time
from pathlib import Path

import pytest
import torch

import transformer.training as training
from transformer.model import Transformer, TransformerConfig
from transformer.trainer import TrainConfig, Trainer
from transformer.training import ISA_FLAGS, choose_bf16, cpu_isa, machine_description, native_bf16

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
    monkeypatch.setattr(training, "native_bf16", lambda device: (False, "no bf16 here"))
    def step(bf16):
        raise AssertionError("probed")
    assert choose_bf16("auto", "cpu", step) == {"setting": "auto", "bf16": False, "reason": "no bf16 here"}


@pytest.mark.parametrize("fp32_s, bf16_s, expected", [(0.03, 0.01, True), (0.01, 0.03, False)])
def test_auto_with_native_bf16_follows_the_probe(monkeypatch, fp32_s, bf16_s, expected):
    """With bf16 hardware, 'auto' turns bf16 on only when the timed bf16 step is at least 10% faster."""
    monkeypatch.setattr(training, "native_bf16", lambda device: (True, "the CPU has AVX512-BF16"))
    calls = []

    def step(bf16):
        calls.append(bf16)
        time.sleep(bf16_s if bf16 else fp32_s)

    decision = choose_bf16("auto", "cpu", step)
    assert decision["bf16"] is expected and calls.count(True) == calls.count(False) >= 2
    assert decision["float32_step_s"] == pytest.approx(fp32_s, rel=0.5, abs=0.01)
    assert f"bf16 is {'on' if expected else 'off'}" in decision["reason"]


def test_trainer_probe_leaves_weights_gradients_and_generators_untouched(monkeypatch):
    """The Trainer's bf16 probe runs forward and backward (with dropout), yet weights, gradients and the random
    generator end as they would without it."""
    monkeypatch.setattr(training, "native_bf16", lambda device: (True, "pretend"))
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
