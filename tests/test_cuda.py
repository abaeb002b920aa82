"""The paths that differ on a GPU: training (float32, bf16 autocast, fp16 with a gradient scaler), decoding and
averaging on CUDA agree with the CPU. Skipped where no CUDA GPU is visible; run on a GPU machine with
`python -m pytest tests/test_cuda.py`."""

import pytest
import torch

from transformer.decoding import translate_ids
from transformer.model import Transformer
from transformer.trainer import TrainConfig, Trainer

from conftest import make_config

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def pairs(n: int = 64) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(3, 50, (int(k),), generator=g).tolist() for k in torch.randint(3, 12, (n,), generator=g)]
    return [(s, s[::-1]) for s in seqs]


def trainer(device: str, precision: str, **kwargs) -> Trainer:
    torch.manual_seed(0)
    return Trainer(Transformer(make_config()), TrainConfig(max_tokens=256, max_steps=5, warmup=5, eval_every=5,
                                                           precision=precision), pairs(), pairs(16), device=device,
                   progress=False, **kwargs)


def trained(device: str, precision: str) -> Trainer:
    t = trainer(device, precision)
    t.fit()
    return t


def test_training_on_cuda_matches_the_cpu():
    cpu, gpu = trained("cpu", "fp32"), trained("cuda", "fp32")
    assert gpu.state.metrics[-1]["valid_loss"] == pytest.approx(cpu.state.metrics[-1]["valid_loss"], rel=1e-3)


def test_auto_decides_on_cuda_and_trains():
    t = trained("cuda", "auto")
    assert t.precision["setting"] == "auto" and "bf16" in t.precision["reason"] and "fp16" in t.precision["reason"]
    assert t.scaler.is_enabled() == (t.precision["precision"] == "fp16")
    assert torch.isfinite(torch.tensor(t.state.metrics[-1]["valid_loss"]))


def test_fp16_with_a_gradient_scaler_trains_on_cuda():
    """fp16 autocast with the scaler on CUDA: the validation loss after 5 steps is the float32 CPU run's, to fp16's
    precision, and the scale is recorded."""
    cpu, gpu = trained("cpu", "fp32"), trained("cuda", "fp16")
    assert gpu.scaler.is_enabled() and gpu.state.metrics[-1]["loss_scale"] >= 1.0
    assert gpu.state.metrics[-1]["valid_loss"] == pytest.approx(cpu.state.metrics[-1]["valid_loss"], rel=5e-2)


def test_fp16_overflow_skips_the_step_on_cuda():
    """An overflowing scale on CUDA: the fused Adam skips the update inside its kernel, the scale halves, no error."""
    t = trainer("cuda", "fp16")
    t.scaler = torch.amp.GradScaler("cuda", init_scale=2.0**40)
    before = {k: v.detach().clone() for k, v in t.model.named_parameters()}
    t.model.train()
    t.train_step([next(t.micro_batches())[0]])
    assert t.state.step == 1 and t.scaler.get_scale() == 2.0**39
    assert all(torch.equal(p, before[k]) for k, p in t.model.named_parameters())


def test_fp16_scaler_state_resumes_on_cuda(tmp_path):
    """The scaler's state is saved with every checkpoint and restored by resume on CUDA as on the CPU."""
    first = trainer("cuda", "fp16", out_dir=tmp_path)
    first.scaler = torch.amp.GradScaler("cuda", init_scale=2.0**22, growth_interval=2)  # skips, then growth
    first.fit()
    resumed = trainer("cuda", "fp16", out_dir=tmp_path)
    resumed.resume()
    assert resumed.scaler.state_dict() == first.scaler.state_dict()
    assert resumed.scaler.state_dict()["growth_interval"] == 2  # the checkpoint's, not a fresh scaler's 2,000


def test_decoding_on_cuda_matches_the_cpu():
    model = trained("cpu", "fp32").model.eval()
    src = [x for x, _ in pairs(8)]
    on_cpu = translate_ids(model, src, beam_size=3)
    assert translate_ids(model.to("cuda"), src, beam_size=3) == on_cpu
