"""The paths that differ on a GPU: training (float32 and bf16 autocast), decoding and averaging on CUDA agree with
the CPU. Skipped where no CUDA GPU is visible; run on a GPU machine with `python -m pytest tests/test_cuda.py`."""

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


def trained(device: str, bf16: bool | str) -> Trainer:
    torch.manual_seed(0)
    t = Trainer(Transformer(make_config()), TrainConfig(max_tokens=256, max_steps=5, warmup=5, eval_every=5,
                                                        bf16=bf16), pairs(), pairs(16), device=device, progress=False)
    t.fit()
    return t


def test_training_on_cuda_matches_the_cpu():
    cpu, gpu = trained("cpu", False), trained("cuda", False)
    assert gpu.metrics[-1]["valid_loss"] == pytest.approx(cpu.metrics[-1]["valid_loss"], rel=1e-3)


def test_bf16_auto_decides_on_cuda_and_trains():
    t = trained("cuda", "auto")
    assert t.precision["setting"] == "auto" and "bf16" in t.precision["reason"]
    assert torch.isfinite(torch.tensor(t.metrics[-1]["valid_loss"]))


def test_decoding_on_cuda_matches_the_cpu():
    model = trained("cpu", False).model.eval()
    src = [x for x, _ in pairs(8)]
    on_cpu = translate_ids(model, src, beam_size=3)
    assert translate_ids(model.to("cuda"), src, beam_size=3) == on_cpu
