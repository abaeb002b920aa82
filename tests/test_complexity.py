"""Table 1's measurements: path lengths on tiny stacks, restricted attention = masked full attention, the unrolled
LSTM = PyTorch's, and FLOPs that grow as the paper's complexity column says."""

import math

import pytest
import torch

from transformer.complexity import (LocalSelfAttention, count_flops, depends_on_first, fit_exponent, make_layer,
                                    path_length)


@pytest.mark.parametrize("n", [2, 5, 9, 17])
def test_path_lengths_on_tiny_stacks(n):
    assert path_length("self-attention", n) == 1
    assert path_length("recurrent", n) == 1  # its path runs through n − 1 cell steps inside the one layer
    assert path_length("convolutional", n, k=5) == math.ceil((n - 1) / 2)
    assert path_length("restricted self-attention", n, r=3) == math.ceil((n - 1) / 3)


def test_dependence_is_one_way_for_a_causal_layer():
    """The LSTM runs left to right: the last position depends on the first, never the first on the last."""
    assert depends_on_first("recurrent", 1, 6)
    torch.manual_seed(0)
    layer = make_layer("recurrent", 8).double()
    x = torch.randn(1, 6, 8, dtype=torch.float64, requires_grad=True)
    layer(x)[0, 0].sum().backward()
    assert x.grad[0, 1:].abs().sum() == 0


@pytest.mark.parametrize("r", [1, 2, 6])
def test_restricted_attention_is_full_attention_with_a_band_mask(r):
    torch.manual_seed(r)
    local, x = LocalSelfAttention(16, 2, r), torch.randn(3, 11, 16)
    band = (torch.arange(11)[:, None] - torch.arange(11)).abs() <= r
    torch.testing.assert_close(local(x), local.attn(x, mask=band[None, None]), atol=1e-5, rtol=1e-5)


def test_unrolled_lstm_equals_the_fused_one():
    torch.manual_seed(0)
    layer, x = make_layer("recurrent", 12), torch.randn(2, 7, 12)
    torch.testing.assert_close(layer.unrolled(x), layer(x), atol=1e-5, rtol=1e-5)


def test_flops_grow_as_table_1_says():
    """Doubling n doubles the FLOPs of the recurrent, convolutional and restricted layers (to 1%); self-attention's grow
    faster than linearly and approach 4× once n ≫ d."""
    d = 16
    for kind in ("recurrent", "convolutional", "restricted self-attention"):
        layer = make_layer(kind, d)
        assert count_flops(layer, 256, d) == pytest.approx(2 * count_flops(layer, 128, d), rel=1e-2), kind
    attention = make_layer("self-attention", d)
    ratio = count_flops(attention, 256, d) / count_flops(attention, 128, d)
    assert 3.5 < ratio <= 4
    assert fit_exponent([1, 2, 4], [5, 20, 80]) == pytest.approx(2)


def test_unknown_layer_kind_and_bad_sizes():
    with pytest.raises(ValueError, match="unknown layer kind 'gru'"):
        make_layer("gru", 8)
    with pytest.raises(ValueError, match="kernel width k must be odd"):
        make_layer("convolutional", 8, k=4)
    with pytest.raises(ValueError, match="neighbourhood r must be at least 1"):
        LocalSelfAttention(8, 2, r=0)
