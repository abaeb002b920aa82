"""Bad configurations and bad inputs fail early with an error whose message names the problem."""

import pytest
import torch

from conftest import VOCAB, make_config, make_model
from transformer.attention import MultiHeadAttention, explicit_attention, fast_attention
from transformer.layers import (Embeddings, LearnedPositionalEncoding, ResidualConnection,
                                SinusoidalPositionalEncoding)
from transformer.model import Transformer, TransformerConfig


@pytest.fixture(scope="module")
def model() -> Transformer:
    "A tiny eval-mode model with max_len 16 (read-only)."
    return make_model(seed=0, max_len=16)


# --- configuration -------------------------------------------------------------------------------------------

def test_config_d_model_not_divisible_by_n_heads():
    """d_model=30 with 4 heads is rejected by the config, naming both numbers."""
    with pytest.raises(ValueError, match=r"d_model=30 must be divisible by n_heads=4"):
        make_config(d_model=30, n_heads=4)


def test_mha_d_model_not_divisible_by_n_heads():
    """MultiHeadAttention(30, 4) is rejected, naming both numbers."""
    with pytest.raises(ValueError, match=r"d_model=30 must be divisible by n_heads=4"):
        MultiHeadAttention(30, 4)


@pytest.mark.parametrize("p", [1.0, -0.1, 1.5], ids=["1.0", "-0.1", "1.5"])
@pytest.mark.parametrize("field", ["dropout", "attention_dropout"])
def test_config_dropout_outside_unit_interval(field, p):
    """dropout / attention_dropout outside [0, 1) is rejected, naming the field and the value."""
    with pytest.raises(ValueError, match=rf"^{field} must be in \[0, 1\), got {p}"):
        make_config(**{field: p})


@pytest.mark.parametrize("p", [1.0, -0.1], ids=["1.0", "-0.1"])
def test_module_dropout_outside_unit_interval(p):
    """Modules taking a dropout probability reject one outside [0, 1)."""
    with pytest.raises(ValueError, match=r"attention dropout must be in \[0, 1\)"):
        MultiHeadAttention(32, 4, dropout=p)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        SinusoidalPositionalEncoding(32, 16, dropout=p)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        LearnedPositionalEncoding(32, 16, dropout=p)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"):
        ResidualConnection(32, dropout=p)


def test_dropout_zero_is_accepted():
    """The boundary value 0.0 is a valid dropout probability."""
    assert make_config(dropout=0.0, attention_dropout=0.0).dropout == 0.0


def test_tie_embeddings_with_different_vocab_sizes():
    """Tied embeddings need one vocabulary: different sizes are rejected, naming both."""
    with pytest.raises(ValueError, match=r"tie_embeddings.*src_vocab_size=50.*tgt_vocab_size=60"):
        make_config(tgt_vocab_size=60, tie_embeddings=True)


def test_untied_embeddings_allow_different_vocab_sizes():
    """Without tying, source and target vocabularies may differ and the logits use the target one."""
    model = make_model(tgt_vocab_size=60, tie_embeddings=False)
    logits = model(torch.tensor([[3, 4]]), torch.tensor([[1, 59]]))
    assert logits.shape == (1, 2, 60)


def test_unknown_preset():
    """An unknown preset name is rejected, naming it and listing the known ones."""
    with pytest.raises(ValueError, match=r"unknown preset 'huge'.*'tiny'"):
        TransformerConfig.preset("huge")


@pytest.mark.parametrize("field", ["d_model", "n_heads", "n_encoder_layers", "d_ff", "max_len"])
def test_config_non_positive_sizes(field):
    """Sizes must be positive integers; the message names the field."""
    with pytest.raises(ValueError, match=rf"{field} must be a positive integer, got 0"):
        make_config(**{field: 0})


def test_config_unknown_positional():
    """positional must be 'sinusoidal' or 'learned'."""
    with pytest.raises(ValueError, match=r"positional must be 'sinusoidal' or 'learned', got 'rotary'"):
        make_config(positional="rotary")


def test_config_pad_id_outside_vocabulary():
    """pad_id must be a token id of the vocabularies."""
    with pytest.raises(ValueError, match=r"pad_id=50 is not a token id"):
        make_config(pad_id=VOCAB)


def test_sinusoidal_positions_need_even_d_model():
    """A sinusoidal model with odd d_model is rejected when built."""
    with pytest.raises(ValueError, match=r"even d_model, got 9"):
        Transformer(make_config(d_model=9, n_heads=3, positional="sinusoidal"))


# --- attention masks -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("attention", [explicit_attention, fast_attention], ids=["explicit", "fast"])
@pytest.mark.parametrize("shape", [(2, 1, 1, 4), (1, 1, 3, 3), (3, 5), (1, 1, 1, 1, 5)],
                         ids=["batch", "queries", "keys-2d", "too-many-dims"])
def test_attention_mask_of_wrong_shape(attention, shape):
    """A mask that does not broadcast to (B, h, T_q, T_k) = (3, 2, 4, 5) is rejected, showing both shapes."""
    q, k, v = torch.randn(3, 2, 4, 8), torch.randn(3, 2, 5, 8), torch.randn(3, 2, 5, 8)
    mask = torch.ones(shape, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"attention mask of shape .* does not broadcast .*\(3, 2, 4, 5\)"):
        attention(q, k, v, mask)


@pytest.mark.parametrize("attention", [explicit_attention, fast_attention], ids=["explicit", "fast"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8, torch.long])
def test_attention_mask_not_bool(attention, dtype):
    """A non-bool mask (additive float, 0/1 integers) is rejected, naming its dtype."""
    q = k = v = torch.randn(1, 2, 4, 8)
    mask = torch.ones(1, 1, 4, 4, dtype=dtype)
    with pytest.raises(TypeError, match=rf"attention mask must be a bool tensor.*{dtype}"):
        attention(q, k, v, mask)


def test_model_mask_of_wrong_shape(model):
    """A source mask built for another length is rejected by encode and by decode's cross-attention."""
    src = torch.tensor([[3, 4, 5]])
    with pytest.raises(ValueError, match=r"attention mask of shape \(1, 1, 1, 4\) does not broadcast"):
        model.encode(src, torch.ones(1, 1, 1, 4, dtype=torch.bool))
    memory = model.encode(src)
    with pytest.raises(ValueError, match=r"attention mask of shape \(1, 1, 1, 2\) does not broadcast"):
        model.decode(torch.tensor([[1, 6]]), memory, torch.ones(1, 1, 1, 2, dtype=torch.bool))


def test_model_mask_not_bool(model):
    """A float source mask is rejected by encode with a TypeError."""
    with pytest.raises(TypeError, match=r"attention mask must be a bool tensor"):
        model.encode(torch.tensor([[3, 4]]), torch.ones(1, 1, 1, 2))


def test_mha_input_of_wrong_width():
    """MultiHeadAttention rejects an input whose last dimension is not d_model."""
    with pytest.raises(ValueError, match=r"expected input of shape \(batch, length, 32\), got \(2, 5, 16\)"):
        MultiHeadAttention(32, 4)(torch.randn(2, 5, 16))


# --- token ids -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_non_integer_token_ids(model, dtype):
    """Float or bool token ids are rejected by encode, decode and forward, naming the dtype."""
    bad = torch.tensor([[1, 0, 1]]).to(dtype)
    good = torch.tensor([[3, 4, 5]])
    with pytest.raises(TypeError, match=rf"token ids must be an integer tensor, got {dtype}"):
        model.encode(bad)
    with pytest.raises(TypeError, match=rf"token ids must be an integer tensor, got {dtype}"):
        model(bad, good)
    with pytest.raises(TypeError, match=rf"token ids must be an integer tensor, got {dtype}"):
        model(good, bad)


def test_one_dimensional_token_ids_in_embeddings():
    """Embeddings reject (length,) ids, asking for (batch, length)."""
    with pytest.raises(ValueError, match=r"token ids must have shape \(batch, length\), got \(3,\)"):
        Embeddings(VOCAB, 32)(torch.tensor([3, 4, 5]))


def test_one_dimensional_source_ids_in_model(model):
    """model.encode and model(src, tgt) reject (length,) source ids with the (batch, length) message."""
    with pytest.raises(ValueError, match=r"token ids must have shape \(batch, length\)"):
        model.encode(torch.tensor([3, 4, 5]))
    with pytest.raises(ValueError, match=r"token ids must have shape \(batch, length\)"):
        model(torch.tensor([3, 4, 5]), torch.tensor([[1, 6]]))


def test_one_dimensional_target_ids_in_model(model):
    """model.decode and model(src, tgt) reject (length,) target ids with the (batch, length) message."""
    src = torch.tensor([[3, 4, 5]])
    with pytest.raises(ValueError, match=r"token ids must have shape \(batch, length\)"):
        model.decode(torch.tensor([1, 6]), model.encode(src), None)
    with pytest.raises(ValueError, match=r"token ids must have shape \(batch, length\)"):
        model(src, torch.tensor([1, 6]))


def test_three_dimensional_token_ids(model):
    """(batch, length, 1) ids are rejected by encode, showing the shape."""
    with pytest.raises(ValueError, match=r"token ids must have shape \(batch, length\), got \(1, 3, 1\)"):
        model.encode(torch.tensor([[[3], [4], [5]]]))


@pytest.mark.parametrize("bad_id,shown", [(VOCAB, rf"\[3, {VOCAB}\]"), (VOCAB + 7, rf"\[3, {VOCAB + 7}\]"),
                                          (-1, r"\[-1, 4\]")], ids=["=vocab", ">vocab", "negative"])
def test_token_ids_outside_vocabulary(model, bad_id, shown):
    """Ids ≥ vocab size (or negative) are rejected, naming the valid range and the observed one."""
    src = torch.tensor([[3, 4, bad_id]])
    with pytest.raises(ValueError, match=rf"token ids must lie in \[0, {VOCAB}\), got values in {shown}"):
        model.encode(src)
    with pytest.raises(ValueError, match=rf"token ids must lie in \[0, {VOCAB}\)"):
        model(torch.tensor([[3, 4]]), src)


# --- sequence length -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_sequence_longer_than_max_len(positional):
    """A source or target longer than max_len is rejected, naming the length and max_len."""
    model = make_model(max_len=8, positional=positional)
    ok, too_long = torch.full((1, 8), 3), torch.full((1, 9), 3)
    assert model(ok, ok).shape == (1, 8, VOCAB)  # exactly max_len fits
    msg = r"sequence of 9 tokens is longer than the positional table \(max_len=8\)"
    with pytest.raises(ValueError, match=msg):
        model.encode(too_long)
    with pytest.raises(ValueError, match=msg):
        model(ok, too_long)


@pytest.mark.parametrize("module", [SinusoidalPositionalEncoding, LearnedPositionalEncoding])
def test_positional_module_rejects_long_input(module):
    """The positional modules themselves reject inputs longer than their table."""
    with pytest.raises(ValueError, match=r"sequence of 5 tokens .* \(max_len=4\)"):
        module(32, 4)(torch.randn(1, 5, 32))
