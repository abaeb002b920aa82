"""Shared fixtures: tiny deterministic models, padded token batches, the Multi30k folder, MHA's fast-path switch."""

import os
from pathlib import Path

import pytest
import torch

from transformer.model import Transformer, TransformerConfig

# The tensors here are tiny: extra intra-op threads only add overhead, and on a busy 2-core machine their
# spin-waiting made single tests 10x slower. One thread keeps the suite fast and its timing stable.
torch.set_num_threads(1)

VOCAB = 50
PAD, BOS, EOS = 0, 1, 2
D_MODEL, N_HEADS = 32, 4
MULTI30K = Path(os.environ.get("MULTI30K_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k")
needs_multi30k = pytest.mark.skipif(not MULTI30K.is_dir(), reason="needs the Multi30k files (MULTI30K_DIR)")


def make_config(**overrides) -> TransformerConfig:
    "The `tiny` preset (d_model 32, 4 heads, 2+2 layers) with a 50-token vocabulary and no dropout."
    kwargs = dict(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, dropout=0.0, attention_dropout=0.0, pad_id=PAD)
    return TransformerConfig.preset("tiny", **{**kwargs, **overrides})


def make_model(seed: int = 0, **overrides) -> Transformer:
    "A freshly initialised tiny `Transformer` in eval mode, reproducible from `seed`."
    torch.manual_seed(seed)
    return Transformer(make_config(**overrides)).eval()


def padded_tokens(lengths: list[int], total: int, seed: int = 0, first: int | None = None) -> torch.Tensor:
    "A (len(lengths), total) batch of random non-pad ids, row b real up to lengths[b] and PAD after it."
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(2, VOCAB, (len(lengths), total), generator=g)
    if first is not None:
        tokens[:, 0] = first
    for b, n in enumerate(lengths):
        tokens[b, n:] = PAD
    return tokens


def randomize_vectors(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Give every 1-D parameter (biases, LayerNorm gains and shifts) random values, in place.

    The model's own init leaves biases at 0 and LayerNorms at the identity, which would hide mistakes in them.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                noise = 0.2 * torch.randn(p.shape, generator=g)
                p.copy_(1.0 + noise if "norm" in name and name.endswith("weight") else noise)
    return model


@pytest.fixture(scope="session")
def post_ln_model() -> Transformer:
    "One shared tiny post-LN model, biases and norms randomised (read-only: tests must not mutate it)."
    return randomize_vectors(make_model(seed=0, norm_first=False), seed=100)


@pytest.fixture(scope="session")
def narrow_key_model() -> Transformer:
    "A tiny post-LN model whose queries and keys are 3 wide per head, values 8 (Table 3 (B)), vectors randomised."
    return randomize_vectors(make_model(seed=3, d_k=3), seed=102)


@pytest.fixture(scope="session")
def ending_model() -> Transformer:
    """A tiny post-LN model over 30 tokens, untied, with randomised vectors and </s> made likelier (read-only).

    Random models rarely choose </s>, so their outputs all run to the length limit; the +6 on the </s> logit makes
    greedy and beam outputs end at different lengths, some early and some late.
    """
    torch.manual_seed(1)
    cfg = TransformerConfig.preset("tiny", src_vocab_size=30, tgt_vocab_size=30, dropout=0.0, tie_embeddings=False)
    model = randomize_vectors(Transformer(cfg).eval(), seed=101)
    with torch.no_grad():
        model.generator.weight.mul_(2.0)
    bonus = torch.zeros(30).index_fill(0, torch.tensor([EOS]), 6.0)
    model.generator.register_forward_hook(lambda module, inputs, logits: logits + bonus)
    return model


@pytest.fixture(scope="session")
def pre_ln_model() -> Transformer:
    "One shared tiny pre-LN model, biases and norms randomised (read-only: tests must not mutate it)."
    return randomize_vectors(make_model(seed=1, norm_first=True), seed=101)


@pytest.fixture
def src_tokens() -> torch.Tensor:
    "Three padded sources of length 7 with 7, 4 and 2 real tokens."
    return padded_tokens([7, 4, 2], 7, seed=10)


@pytest.fixture
def tgt_tokens() -> torch.Tensor:
    "Three padded targets of length 6 starting with BOS, with 6, 3 and 5 real tokens."
    return padded_tokens([6, 3, 5], 6, seed=11, first=BOS)


@pytest.fixture
def no_mha_fastpath():
    "Disable torch.nn.MultiheadAttention's fused inference path for the test, restoring the setting after."
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(before)
