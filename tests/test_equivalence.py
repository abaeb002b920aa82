"""Our Transformer computes the same function as torch.nn.Transformer given the same weights."""

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from conftest import PAD
from transformer.attention import subsequent_mask
from transformer.model import Transformer

TOL = dict(atol=1e-5, rtol=1e-5)

# nn.Transformer warns that pre-LN encoders cannot use nested tensors; irrelevant here.
pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")


def copy_attention(dst: nn.MultiheadAttention, src) -> None:
    "Copy our fused-projection `MultiHeadAttention` into torch's `MultiheadAttention` (same layout)."
    dst.in_proj_weight.copy_(src.in_proj.weight)
    dst.in_proj_bias.copy_(src.in_proj.bias)
    dst.out_proj.weight.copy_(src.out_proj.weight)
    dst.out_proj.bias.copy_(src.out_proj.bias)


def copy_linear_or_norm(dst: nn.Module, src: nn.Module) -> None:
    "Copy weight and bias of a Linear or LayerNorm."
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)


def reference_for(model: Transformer, norm_first: bool | None = None) -> nn.Transformer:
    "An eval-mode `nn.Transformer` holding `model`'s weights (optionally with a different `norm_first`)."
    cfg = model.cfg
    norm_first = cfg.norm_first if norm_first is None else norm_first
    ref = nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.d_ff,
                         dropout=0.0, batch_first=True, norm_first=norm_first)
    with torch.no_grad():
        for ours, theirs in zip(model.encoder.layers, ref.encoder.layers, strict=True):
            copy_attention(theirs.self_attn, ours.self_attn)
            copy_linear_or_norm(theirs.linear1, ours.feed_forward.linear1)
            copy_linear_or_norm(theirs.linear2, ours.feed_forward.linear2)
            copy_linear_or_norm(theirs.norm1, ours.residual[0].norm)
            copy_linear_or_norm(theirs.norm2, ours.residual[1].norm)
        for ours, theirs in zip(model.decoder.layers, ref.decoder.layers, strict=True):
            copy_attention(theirs.self_attn, ours.self_attn)
            copy_attention(theirs.multihead_attn, ours.cross_attn)
            copy_linear_or_norm(theirs.linear1, ours.feed_forward.linear1)
            copy_linear_or_norm(theirs.linear2, ours.feed_forward.linear2)
            copy_linear_or_norm(theirs.norm1, ours.residual[0].norm)
            copy_linear_or_norm(theirs.norm2, ours.residual[1].norm)
            copy_linear_or_norm(theirs.norm3, ours.residual[2].norm)
        if cfg.norm_first:
            copy_linear_or_norm(ref.encoder.norm, model.encoder.norm)
            copy_linear_or_norm(ref.decoder.norm, model.decoder.norm)
        else:  # the paper's post-LN stack has no final norm; nn.Transformer always adds one
            ref.encoder.norm = None
            ref.decoder.norm = None
    return ref.eval()


def reference_outputs(model: Transformer, ref: nn.Transformer, src: torch.Tensor, tgt: torch.Tensor):
    "Memory and decoder output of `ref` on our embedded inputs, with masks in torch's True = blocked convention."
    src_x = model.src_pos(model.src_embed(src))
    tgt_x = model.tgt_pos(model.tgt_embed(tgt))
    src_pad, tgt_pad = src == PAD, tgt == PAD
    causal = ~subsequent_mask(tgt.size(1))[0, 0]
    memory = ref.encoder(src_x, src_key_padding_mask=src_pad)
    out = ref.decoder(tgt_x, memory, tgt_mask=causal, tgt_key_padding_mask=tgt_pad,
                      memory_key_padding_mask=src_pad)
    return memory, out


def real(x: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    "The rows of `x` (B, T, ...) at non-pad positions of `tokens` (B, T), flattened to (n_real, ...)."
    return x[tokens != PAD]


@pytest.fixture(params=[False, True], ids=["post-LN", "pre-LN"])
def model(request, post_ln_model, pre_ln_model) -> Transformer:
    "The shared tiny model of each normalisation order."
    return pre_ln_model if request.param else post_ln_model


def test_padded_sources_and_targets_really_are_padded(src_tokens, tgt_tokens):
    """The fixtures exercise padding: some rows end in PAD, and every row starts with a real token."""
    assert (src_tokens == PAD).any() and (tgt_tokens == PAD).any()
    assert (src_tokens[:, 0] != PAD).all() and (tgt_tokens[:, 0] != PAD).all()


@torch.no_grad()
def test_encoder_memory_matches_nn_transformer(model, src_tokens, tgt_tokens, no_mha_fastpath):
    """Encoder memory equals nn.TransformerEncoder's at real source positions."""
    ref = reference_for(model)
    memory_ref, _ = reference_outputs(model, ref, src_tokens, tgt_tokens)
    assert_close(real(model.encode(src_tokens), src_tokens), real(memory_ref, src_tokens), **TOL)


@torch.no_grad()
def test_decoder_output_matches_nn_transformer(model, src_tokens, tgt_tokens, no_mha_fastpath):
    """Decoder output (given our memory) equals nn.TransformerDecoder's at real target positions."""
    ref = reference_for(model)
    _, out_ref = reference_outputs(model, ref, src_tokens, tgt_tokens)
    src_mask = src_tokens != PAD
    memory = model.encode(src_tokens)
    out = model.decode(tgt_tokens, memory, src_mask[:, None, None, :])
    assert_close(real(out, tgt_tokens), real(out_ref, tgt_tokens), **TOL)


@torch.no_grad()
def test_generator_logits_match_nn_transformer(model, src_tokens, tgt_tokens, no_mha_fastpath):
    """Logits from our decoder output equal the generator applied to nn.Transformer's decoder output."""
    ref = reference_for(model)
    _, out_ref = reference_outputs(model, ref, src_tokens, tgt_tokens)
    memory = model.encode(src_tokens)
    out = model.decode(tgt_tokens, memory, (src_tokens != PAD)[:, None, None, :])
    assert_close(real(model.generator(out), tgt_tokens), real(model.generator(out_ref), tgt_tokens), **TOL)


@torch.no_grad()
def test_full_forward_logits_equal_generator_of_reference(model, src_tokens, tgt_tokens, no_mha_fastpath):
    """model(src, tgt) equals model.generator(nn.Transformer output) at real target positions."""
    ref = reference_for(model)
    _, out_ref = reference_outputs(model, ref, src_tokens, tgt_tokens)
    logits = model(src_tokens, tgt_tokens)
    assert logits.shape == (*tgt_tokens.shape, model.cfg.tgt_vocab_size)
    assert_close(real(logits, tgt_tokens), real(model.generator(out_ref), tgt_tokens), **TOL)


@torch.no_grad()
def test_full_forward_matches_nn_transformer_forward(model, src_tokens, tgt_tokens, no_mha_fastpath):
    """model(src, tgt) equals generator(nn.Transformer.forward(...)) called through its own forward."""
    ref = reference_for(model)
    src_pad, tgt_pad = src_tokens == PAD, tgt_tokens == PAD
    out_ref = ref(model.src_pos(model.src_embed(src_tokens)), model.tgt_pos(model.tgt_embed(tgt_tokens)),
                  tgt_mask=nn.Transformer.generate_square_subsequent_mask(tgt_tokens.size(1)).isinf(),
                  src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
    logits = model(src_tokens, tgt_tokens)
    assert_close(real(logits, tgt_tokens), real(model.generator(out_ref), tgt_tokens), **TOL)
