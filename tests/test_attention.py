"""The fused and the explicit attention paths compute the same function, with correct gradients."""

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck
from torch.testing import assert_close

from conftest import D_MODEL, N_HEADS
from transformer import attention
from transformer.attention import (MultiHeadAttention, explicit_attention, fast_attention, padding_mask,
                                   subsequent_mask)

B, H, D_K = 3, 4, 8
TOL = dict(atol=1e-5, rtol=1e-5)


def qkv(t_q: int, t_k: int, seed: int = 0, dtype=torch.float32, requires_grad: bool = False):
    "Random queries (B, H, t_q, D_K), keys and values (B, H, t_k, D_K)."
    g = torch.Generator().manual_seed(seed)
    shapes = [(B, H, t_q, D_K), (B, H, t_k, D_K), (B, H, t_k, D_K)]
    return [torch.randn(s, generator=g, dtype=dtype).requires_grad_(requires_grad) for s in shapes]


def key_padding(t_k: int, lengths=(None, 3, 1)) -> torch.Tensor:
    "A (B, 1, 1, t_k) padding mask with real keys 0..lengths[b]-1 (None = all real), via `padding_mask`."
    tokens = torch.ones(B, t_k, dtype=torch.long)
    for b, n in enumerate(lengths):
        if n is not None:
            tokens[b, n:] = 0
    return padding_mask(tokens, pad_id=0)


def masks(t_q: int, t_k: int) -> dict[str, torch.Tensor | None]:
    "The mask kinds to compare: none, padding, subsequent (square only) and padding & subsequent."
    out = {"none": None, "padding": key_padding(t_k)}
    if t_q == t_k:
        out["subsequent"] = subsequent_mask(t_q)
        out["padding&subsequent"] = key_padding(t_k) & subsequent_mask(t_q)
    else:  # a causal-style band that still leaves every query at least one key
        out["rectangular"] = torch.ones(t_q, t_k, dtype=torch.bool).tril(diagonal=max(t_k - t_q, 0))[None, None]
    return out


# (1, 6): one query under BLAS_BMM_MIN_PRODUCTS (8 · 6 multiply-adds), the fused kernel; (1, 56): over it, written out
CASES = [(t_q, t_k, kind) for t_q, t_k in [(5, 5), (1, 6), (1, 56), (4, 7), (6, 3)] for kind in masks(t_q, t_k)]


@pytest.mark.parametrize("t_q,t_k,kind", CASES, ids=[f"{q}x{k}-{m}" for q, k, m in CASES])
def test_fast_attention_equals_explicit_attention(t_q, t_k, kind):
    """fast_attention, and SDPA itself (which fast_attention skips for one query on CPU once its products reach
    BLAS), give the written-out softmax(q kᵀ/√d_k) v."""
    q, k, v = qkv(t_q, t_k)
    mask = masks(t_q, t_k)[kind]
    out, weights = explicit_attention(q, k, v, mask)
    assert out.shape == (B, H, t_q, D_K) and weights.shape == (B, H, t_q, t_k)
    assert_close(fast_attention(q, k, v, mask), out, **TOL)
    assert_close(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), out, **TOL)


def test_explicit_attention_weights_are_a_distribution_over_allowed_keys():
    """Each row of the attention weights sums to 1 and is exactly 0 on masked keys."""
    q, k, v = qkv(5, 5)
    mask = key_padding(5) & subsequent_mask(5)
    _, weights = explicit_attention(q, k, v, mask)
    assert_close(weights.sum(-1), torch.ones(B, H, 5))
    assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


def test_padding_mask_and_subsequent_mask_shapes_and_values():
    """padding_mask is (B,1,1,T) True at real tokens; subsequent_mask is (1,1,T,T) lower-triangular."""
    tokens = torch.tensor([[5, 6, 0], [7, 0, 0]])
    assert padding_mask(tokens, 0).tolist() == [[[[True, True, False]]], [[[True, False, False]]]]
    sub = subsequent_mask(3)
    assert sub.shape == (1, 1, 3, 3) and sub.dtype == torch.bool
    assert sub[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]


@pytest.fixture
def mha() -> MultiHeadAttention:
    "A tiny MultiHeadAttention (d_model 32, 4 heads) with non-zero biases, in eval mode."
    torch.manual_seed(0)
    m = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    with torch.no_grad():
        m.in_proj.bias.normal_(std=0.2)
        m.out_proj.bias.normal_(std=0.2)
    return m


def mha_both_paths(m: MultiHeadAttention, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    "Outputs of `m` with record=False (fast path) and record=True (explicit path)."
    m.record = False
    fast = m(*args, **kwargs)
    m.record = True
    explicit = m(*args, **kwargs)
    m.record = False
    return fast, explicit


@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "padding&subsequent"])
def test_mha_self_attention_record_true_equals_false(mha, masked):
    """Self-attention gives the same output through the explicit (record) and the fused path."""
    x = torch.randn(B, 6, D_MODEL)
    mask = key_padding(6) & subsequent_mask(6) if masked else None
    fast, explicit = mha_both_paths(mha, x, mask=mask)
    assert fast.shape == x.shape
    assert_close(fast, explicit, **TOL)


@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "padding"])
def test_mha_cross_attention_record_true_equals_false(mha, masked):
    """Cross-attention (queries of length 4, memory of length 7) agrees on both paths."""
    x, memory = torch.randn(B, 4, D_MODEL), torch.randn(B, 7, D_MODEL)
    mask = key_padding(7) if masked else None
    fast, explicit = mha_both_paths(mha, x, memory, mask=mask)
    assert fast.shape == x.shape
    assert_close(fast, explicit, **TOL)


def test_mha_record_keeps_attention_weights(mha):
    """With record=True the layer stores (B, h, T_q, T_k) weights that are zero on masked keys."""
    x, memory = torch.randn(B, 4, D_MODEL), torch.randn(B, 7, D_MODEL)
    mask = key_padding(7)
    mha.record = True
    mha(x, memory, mask=mask)
    assert mha.weights.shape == (B, N_HEADS, 4, 7)
    assert_close(mha.weights.sum(-1), torch.ones(B, N_HEADS, 4))
    assert (mha.weights.masked_select(~mask.expand_as(mha.weights)) == 0).all()


@pytest.mark.parametrize("record", [False, True], ids=["fast", "explicit"])
def test_mha_rows_sharing_a_memory_row_equal_repeated_memory(mha, record):
    """G query rows per memory row (beam search's layout) give what the memory repeated G times gives."""
    G, T = 2, 3
    x, memory, mask = torch.randn(B * G, T, D_MODEL), torch.randn(B, 7, D_MODEL), key_padding(7)
    mha.record = record
    shared = mha(x, memory, mask=mask)
    shared_weights = mha.weights
    repeated = mha(x, memory.repeat_interleave(G, 0), mask=mask.repeat_interleave(G, 0))
    assert shared.shape == x.shape
    assert_close(shared, repeated, **TOL)
    if record:
        assert shared_weights.shape == (B * G, N_HEADS, T, 7)
        assert_close(shared_weights, mha.weights, **TOL)
    mha.record = False


def test_mha_rejects_query_rows_that_do_not_divide_among_memory_rows(mha):
    """5 query rows cannot share 3 memory rows: a ValueError says so."""
    with pytest.raises(ValueError, match="cannot share"):
        mha(torch.randn(5, 2, D_MODEL), torch.randn(3, 7, D_MODEL))


def test_mha_cross_attention_matches_separate_projections(mha):
    """Cross-attention uses rows 0:d of in_proj for queries and d:2d, 2d:3d for keys and values."""
    d = D_MODEL
    x, memory = torch.randn(B, 4, d), torch.randn(B, 7, d)
    w, b = mha.in_proj.weight, mha.in_proj.bias
    q = mha.split_heads(x @ w[:d].T + b[:d])
    k = mha.split_heads(memory @ w[d:2 * d].T + b[d:2 * d])
    v = mha.split_heads(memory @ w[2 * d:].T + b[2 * d:])
    out, _ = explicit_attention(q, k, v)
    expected = mha.out_proj(out.transpose(1, 2).reshape(B, 4, d))
    assert_close(mha(x, memory), expected, **TOL)


@pytest.mark.parametrize("attention", [explicit_attention, fast_attention], ids=["explicit", "fast"])
def test_attention_gradcheck_float64_with_mask(attention):
    """Analytic gradients of the attention function match finite differences (float64, masked)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 2, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 2, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, True, True, False, False], [True, True, True, True, True]])[:, None, None, :]
    mask = mask & torch.ones(3, 5, dtype=torch.bool).tril(diagonal=2)

    def f(q, k, v):
        out = attention(q, k, v, mask)
        return out[0] if isinstance(out, tuple) else out

    assert gradcheck(f, (q, k, v), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("record", [False, True], ids=["fast", "explicit"])
def test_mha_gradcheck_float64(record):
    """MultiHeadAttention's gradients w.r.t. inputs, memory and every parameter are right (float64)."""
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 2).double()
    m.record = record
    names = [n for n, _ in m.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for p in m.parameters())
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, True, True, True], [True, True, False, False]])[:, None, None, :]

    def f(x, memory, *ps):
        out = torch.func.functional_call(m, dict(zip(names, ps)), (x,), {"memory": memory, "mask": mask})
        return out

    def g(x, *ps):
        sub = subsequent_mask(3)
        return torch.func.functional_call(m, dict(zip(names, ps)), (x,), {"mask": sub})

    assert gradcheck(f, (x, memory, *params), eps=1e-6, atol=1e-5)
    assert gradcheck(g, (x, *params), eps=1e-6, atol=1e-5)


def test_fast_and_explicit_agree_on_fully_masked_query_rows():
    """A query that may attend to no key gets output 0 on both paths, never NaN."""
    q, k, v = qkv(3, 4)
    mask = torch.ones(B, 1, 3, 4, dtype=torch.bool)
    mask[0, :, 1, :] = False  # batch 0, query 1: every key masked
    out = explicit_attention(q, k, v, mask)[0]
    assert_close(fast_attention(q, k, v, mask), out)
    assert (out[0, :, 1] == 0).all() and torch.isfinite(out).all()


@pytest.mark.parametrize("d_k", [1, 3, 16])
def test_narrow_keys_fast_path_equals_explicit_path(d_k):
    """With d_k ≠ d_model / h (Table 3 (B)), self- and cross-attention through SDPA equal the explicit weights' path."""
    torch.manual_seed(d_k)
    mha = MultiHeadAttention(32, 4, d_k=d_k)
    assert mha.in_proj.out_features == 2 * 4 * d_k + 32
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    mask = torch.rand(2, 1, 5, 7) > 0.3
    mask[..., 0] = True
    fast = (mha(x), mha(x, memory, mask=mask))
    mha.record = True
    explicit = (mha(x), mha(x, memory, mask=mask))
    for a, b in zip(fast, explicit):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_bad_key_width_is_refused():
    with pytest.raises(ValueError, match="d_k must be a positive integer"):
        MultiHeadAttention(32, 4, d_k=0)


@pytest.mark.parametrize("bf16_matmul", [True, False], ids=["written-out", "fused"])
@pytest.mark.parametrize("t_q,t_k,kind", CASES, ids=[f"{q}x{k}-{m}" for q, k, m in CASES])
def test_bf16_fast_attention_by_either_path_matches_float32(t_q, t_k, kind, bf16_matmul, monkeypatch):
    """In bf16 on a CPU, fast_attention takes the written-out path where the CPU multiplies bf16 natively, else the
    fused kernel: either way its output and its gradients are the float32 ones, to bf16's precision."""
    monkeypatch.setattr(attention, "cpu_has_bf16_matmul", lambda: bf16_matmul)
    mask = masks(t_q, t_k)[kind]
    ref = qkv(t_q, t_k, requires_grad=True)
    low = [t.detach().bfloat16().requires_grad_() for t in ref]
    grad = torch.randn(B, H, t_q, D_K)
    explicit_attention(*ref, mask)[0].backward(grad)
    out = fast_attention(*low, mask)
    out.backward(grad.bfloat16())
    assert out.dtype == torch.bfloat16
    assert_close(out.float(), explicit_attention(*ref, mask)[0], atol=0.03, rtol=0.03)
    for a, b in zip(low, ref):
        assert_close(a.grad.float(), b.grad, atol=0.05, rtol=0.05)
