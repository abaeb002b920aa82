"""Hypothesis properties: causality, invariance to padding, and permutation equivariance of attention."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from conftest import BOS, D_MODEL, N_HEADS, PAD, VOCAB, make_config, make_model, randomize_vectors
from transformer.attention import MultiHeadAttention, padding_mask
from transformer.model import EncoderLayer

TOL = dict(atol=1e-5, rtol=1e-5)
FEW = settings(max_examples=20, deadline=None)

real_ids = st.integers(min_value=2, max_value=VOCAB - 1)   # never PAD (0) or BOS (1)
any_ids = st.integers(min_value=0, max_value=VOCAB - 1)


@pytest.fixture(scope="module", params=["post-LN", "pre-LN/learned"])
def model(request):
    "A tiny eval-mode model, built once per module: post-LN sinusoidal, or pre-LN with learned positions."
    if request.param == "post-LN":
        return randomize_vectors(make_model(seed=2, norm_first=False), seed=200)
    return randomize_vectors(make_model(seed=3, norm_first=True, positional="learned"), seed=201)


def as_batch(ids: list[int]) -> torch.Tensor:
    "A (1, T) long tensor."
    return torch.tensor([ids], dtype=torch.long)


@st.composite
def target_and_change(draw):
    "A target starting with BOS, a position i, and a second target equal up to i and arbitrary after it."
    n = draw(st.integers(min_value=2, max_value=10))
    tgt = [BOS] + draw(st.lists(real_ids, min_size=n - 1, max_size=n - 1))
    i = draw(st.integers(min_value=0, max_value=n - 2))
    tail = draw(st.lists(any_ids, min_size=n - 1 - i, max_size=n - 1 - i))  # may include PAD
    return tgt, tgt[: i + 1] + tail, i


@FEW
@given(data=target_and_change(), src=st.lists(real_ids, min_size=1, max_size=8))
@torch.no_grad()
def test_decoder_output_at_i_ignores_later_target_tokens(model, data, src):
    """Decoder output at positions ≤ i is unchanged when target tokens after i change."""
    tgt, changed, i = data
    src = as_batch(src)
    src_mask = padding_mask(src, PAD)
    memory = model.encode(src, src_mask)
    out = model.decode(as_batch(tgt), memory, src_mask)
    out_changed = model.decode(as_batch(changed), memory, src_mask)
    assert_close(out_changed[:, : i + 1], out[:, : i + 1], **TOL)


@FEW
@given(data=target_and_change(), src=st.lists(real_ids, min_size=1, max_size=8))
@torch.no_grad()
def test_logits_at_i_ignore_later_target_tokens(model, data, src):
    """The full model's logits at positions ≤ i do not depend on target tokens after i."""
    tgt, changed, i = data
    logits = model(as_batch(src), as_batch(tgt))
    logits_changed = model(as_batch(src), as_batch(changed))
    assert_close(logits_changed[:, : i + 1], logits[:, : i + 1], **TOL)


@st.composite
def padded_source(draw):
    "Real ids followed by ≥1 pads, and replacement ids (any, PAD included) for the padded positions."
    real = draw(st.lists(real_ids, min_size=1, max_size=8))
    n_pad = draw(st.integers(min_value=1, max_value=6))
    junk = draw(st.lists(any_ids, min_size=n_pad, max_size=n_pad))
    return real, n_pad, junk


@FEW
@given(data=padded_source())
@torch.no_grad()
def test_encoder_ignores_tokens_under_the_padding_mask(model, data):
    """Encoder outputs at real positions are unchanged when the ids at masked positions change."""
    real, n_pad, junk = data
    src = as_batch(real + [PAD] * n_pad)
    src_mask = padding_mask(src, PAD)
    changed = as_batch(real + junk)
    n = len(real)
    assert_close(model.encode(changed, src_mask)[:, :n], model.encode(src, src_mask)[:, :n], **TOL)


@FEW
@given(real=st.lists(real_ids, min_size=1, max_size=8), n_pad=st.integers(0, 4), more=st.integers(1, 6))
@torch.no_grad()
def test_encoder_ignores_appended_padding(model, real, n_pad, more):
    """Encoder outputs at real positions are unchanged when more padding is appended."""
    n = len(real)
    short = model.encode(as_batch(real + [PAD] * n_pad))
    long = model.encode(as_batch(real + [PAD] * (n_pad + more)))
    assert_close(long[:, :n], short[:, :n], **TOL)


@FEW
@given(real=st.lists(real_ids, min_size=1, max_size=8), tgt=st.lists(real_ids, min_size=0, max_size=6),
       more=st.integers(1, 6))
@torch.no_grad()
def test_logits_ignore_source_padding(model, real, tgt, more):
    """The full model's logits do not change when the source gets more padding."""
    tgt = as_batch([BOS] + tgt)
    assert_close(model(as_batch(real + [PAD] * more), tgt), model(as_batch(real), tgt), **TOL)


@FEW
@given(src=st.lists(real_ids, min_size=1, max_size=8), other=st.lists(real_ids, min_size=1, max_size=8))
@torch.no_grad()
def test_batching_with_padding_equals_encoding_alone(model, src, other):
    """A padded sequence in a batch is encoded as if it were alone (no leakage across the batch)."""
    total = max(len(src), len(other))
    batch = torch.tensor([s + [PAD] * (total - len(s)) for s in (src, other)])
    out = model.encode(batch)
    assert_close(out[0, : len(src)], model.encode(as_batch(src))[0], **TOL)
    assert_close(out[1, : len(other)], model.encode(as_batch(other))[0], **TOL)


@pytest.fixture(scope="module")
def mha() -> MultiHeadAttention:
    "A tiny eval-mode MultiHeadAttention with non-zero biases, built once per module."
    torch.manual_seed(4)
    return randomize_vectors(MultiHeadAttention(D_MODEL, N_HEADS), seed=202).eval()


@pytest.fixture(scope="module")
def encoder_layer():
    "A tiny eval-mode EncoderLayer (post-LN) with random biases and norms, built once per module."
    torch.manual_seed(5)
    return randomize_vectors(EncoderLayer(make_config()), seed=203).eval()


@st.composite
def sequence_and_permutation(draw):
    "A length T in [1, 9], a permutation of range(T), a batch seed, and per-position padding flags."
    t = draw(st.integers(min_value=1, max_value=9))
    perm = draw(st.permutations(range(t)))
    keep = draw(st.lists(st.booleans(), min_size=t, max_size=t).filter(any))  # ≥1 real key
    return torch.tensor(perm), torch.tensor(keep), draw(st.integers(0, 2**16))


@FEW
@given(data=sequence_and_permutation())
@torch.no_grad()
def test_self_attention_is_permutation_equivariant(mha, data):
    """Without positions, MultiHeadAttention(x[:, perm]) == MultiHeadAttention(x)[:, perm]."""
    perm, _, seed = data
    x = torch.randn(2, len(perm), D_MODEL, generator=torch.Generator().manual_seed(seed))
    assert_close(mha(x[:, perm]), mha(x)[:, perm], **TOL)


@FEW
@given(data=sequence_and_permutation())
@torch.no_grad()
def test_masked_self_attention_is_permutation_equivariant(mha, data):
    """Permuting inputs together with the key padding mask permutes the outputs the same way."""
    perm, keep, seed = data
    x = torch.randn(1, len(perm), D_MODEL, generator=torch.Generator().manual_seed(seed))
    mask = keep[None, None, None, :]
    assert_close(mha(x[:, perm], mask=mask[..., perm]), mha(x, mask=mask)[:, perm], **TOL)


@FEW
@given(data=sequence_and_permutation())
@torch.no_grad()
def test_encoder_layer_is_permutation_equivariant(encoder_layer, data):
    """An EncoderLayer (attention + FFN + norms, with a padding mask) is permutation-equivariant."""
    perm, keep, seed = data
    x = torch.randn(1, len(perm), D_MODEL, generator=torch.Generator().manual_seed(seed))
    mask = keep[None, None, None, :]
    assert_close(encoder_layer(x[:, perm], mask[..., perm]), encoder_layer(x, mask)[:, perm], **TOL)
