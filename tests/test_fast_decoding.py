"""FastDecoder and TracedDecoder: their caches and steps against the model's own decoding, and their errors."""

import os
import subprocess
import sys

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from torch.testing import assert_close

from conftest import BOS, EOS, PAD, padded_tokens
from transformer.decoder_only import DecoderOnly, DecoderOnlyConfig
from transformer import attention
from transformer.decoding import beam_search, dynamic_int8, greedy_decode, translate_ids
from transformer.fast_decoding import (FastDecoder, PackedProjection, StaticKVCache, TracedDecoder,
                                      faster_projection)
from transformer.model import Transformer

TOL = dict(atol=1e-5, rtol=1e-5)
MODELS = ["post_ln_model", "pre_ln_model", "narrow_key_model", "ending_model"]


def ended_sources(lengths: list[int], seed: int) -> torch.Tensor:
    "A right-padded batch of random ids below 30 (every fixture's vocabulary has them), each row ending in </s>."
    src = padded_tokens([n + 1 for n in lengths], max(lengths) + 1, seed=seed) % 27 + 3  # no specials inside
    for b, n in enumerate(lengths):
        src[b, n], src[b, n + 1 :] = EOS, PAD
    return src


@torch.inference_mode()
def steps_by_hand(decoder: FastDecoder, src: torch.Tensor, prefix: torch.Tensor,
                  cache: StaticKVCache | None = None, context: tuple | None = None) -> torch.Tensor:
    "Logits (B, T, V) of feeding `prefix` (B, T) to `decoder` one position at a time, continuing `cache`."
    context = context or decoder.start(src)
    cache = cache if cache is not None else decoder.new_cache()
    return torch.stack([decoder.generator(decoder.step(prefix[:, t : t + 1], context, cache))[:, 0]
                        for t in range(prefix.size(1))], dim=1)


@pytest.mark.parametrize("which", MODELS)
@pytest.mark.parametrize("capacity", [1, 3, 64])
def test_static_steps_equal_the_whole_decode(which, capacity, request):
    """Step by step through a StaticKVCache (buffers doubled along the way, or never), each position's logits are
    the whole decoder's, which reads every position at once under the causal mask."""
    model = request.getfixturevalue(which)
    decoder = FastDecoder(model, compile=False, capacity=capacity)
    src = ended_sources([7, 3, 1], seed=capacity)
    prefix = padded_tokens([9, 9, 9], 9, seed=20 + capacity, first=BOS) % 27 + 3
    prefix[:, 0] = BOS
    cache = decoder.new_cache()
    stepped = steps_by_hand(decoder, src, prefix, cache)
    with torch.inference_mode():
        whole = model(src, prefix)
    assert_close(stepped, whole, **TOL)
    assert len(cache) == 9 and cache.capacity >= 9 and cache.buffers[0][0].shape[2] == cache.capacity


def test_static_cache_select_follows_reordered_rows(pre_ln_model):
    """After each pair of `select`s (rows reordered and repeated, some sentences gone, as beam search does), moved in
    one `arrange`, decoding continues exactly those rows: through fresh buffers, doubled ones, and the spares of the
    arrange before (same rows, fewer)."""
    model, decoder = pre_ln_model, FastDecoder(pre_ln_model, compile=False, capacity=2)
    src = ended_sources([6, 3, 5], seed=30)
    prefix = padded_tokens([10, 10, 10], 10, seed=31, first=BOS) % 27 + 3
    prefix[:, 0] = BOS
    keep = {4: [2, 0, 2], 6: [1, 2], 7: [1, 1, 0], 8: [2]}  # at length t: these rows; spares reused at 7 and 8
    memory, src_mask = decoder.start(src)
    cache, track, start = decoder.new_cache(), torch.arange(3), 0
    for t in [*keep, 10]:
        stepped = steps_by_hand(decoder, src, prefix[track, start:t], cache, (memory[track], src_mask[track]))
        if t in keep:
            rows = torch.tensor(keep[t])
            reused = cache.spares and cache.spares[0][0].untyped_storage().data_ptr()
            with torch.inference_mode():  # as in the searches: the spares were made in inference mode
                cache.select(rows.flip(0))  # two selects, as a beam search step that also drops a sentence …
                cache.select(torch.arange(len(rows)).flip(0), memory_index=rows)  # … keep `rows` in all
                assert torch.equal(cache.pending, rows)  # nothing copied yet
                cache.arrange()
            assert cache.pending is None
            assert not reused or cache.buffers[0][0].untyped_storage().data_ptr() == reused
            track, start = track[rows], t
    assert cache.capacity == 16 and len(track) == 1
    with torch.inference_mode():
        whole = model(src[track], prefix[track])
    assert_close(stepped, whole[:, 8:], **TOL)


@pytest.mark.parametrize("which", MODELS)
def test_fast_searches_find_what_the_model_finds(which, request):
    """Greedy decoding and beam search through an eager FastDecoder give the model's own outputs and scores."""
    model = request.getfixturevalue(which)
    decoder = FastDecoder(model, compile=False, capacity=4)
    src = ended_sources([6, 1, 3, 9, 2], seed=5)
    greedy = greedy_decode(decoder, src, max_extra=8)
    assert greedy == greedy_decode(model, src, max_extra=8)
    assert any(len(y) > 1 for y in greedy)  # not trivially equal (empty outputs)
    ours = beam_search(decoder, src, 3, n_best=2, max_extra=8)
    theirs = beam_search(model, src, 3, n_best=2, max_extra=8)
    assert [[h.tokens for h in s] for s in ours] == [[h.tokens for h in s] for s in theirs]
    scores = [torch.tensor([[h.score for h in s] for s in found]) for found in (ours, theirs)]
    assert_close(*scores, **TOL)


def assert_traced_whole(counters: dict) -> None:
    "Dynamo traced every frame it tried whole: no graph break, and no frame it gave up on and ran eagerly."
    gave_up = dict(counters["unimplemented"])  # e.g. an error raised while tracing symbolic shapes
    assert not counters["graph_break"] and not gave_up, (dict(counters["graph_break"]), gave_up)
    assert counters["frames"]["ok"] == counters["frames"]["total"], dict(counters["frames"])


def test_compiled_decoder_finds_what_the_model_finds_without_graph_breaks(ending_model):
    """The compiled step (torch.compile, inductor) gives the model's greedy and beam outputs, and traces whole: no
    graph break (e.g. a token check that reads values), no frame given up on (e.g. a shape check that symbolic shapes
    could not decide), and a few graphs, not one per step: beam search's for the first shapes, for any shapes, and
    for a batch dimension of 1 (always specialised: its last sentence); greedy's (one query per key row) for any
    shapes and for its last row, once finished rows leave the batch."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    decoder = FastDecoder(ending_model)
    src = ended_sources([6, 1, 3, 9, 2, 7, 4, 8], seed=6)  # 8 sentences × 4 beams once raised while tracing
    ours, theirs = beam_search(decoder, src, 4, max_extra=8), beam_search(ending_model, src, 4, max_extra=8)
    assert [h[0].tokens for h in ours] == [h[0].tokens for h in theirs]  # first: its first graph is beam search's
    assert greedy_decode(decoder, src, max_extra=8) == greedy_decode(ending_model, src, max_extra=8)
    shorter = src[:4, :8]  # another batch size and source length: the same graph
    assert greedy_decode(decoder, shorter, max_extra=8) == greedy_decode(ending_model, shorter, max_extra=8)
    counters = torch._dynamo.utils.counters
    assert_traced_whole(counters)
    assert counters["stats"]["unique_graphs"] <= 5, dict(counters["stats"])
    half = FastDecoder(ending_model, torch.bfloat16)  # bf16 traces whole too, where attention asks about the CPU
    greedy_decode(half, src, max_extra=8), beam_search(half, src, 4, max_extra=8)
    assert_traced_whole(counters)


STEPPED_ERROR = """
import torch
from transformer.fast_decoding import FastDecoder
from transformer.model import Transformer, TransformerConfig
torch.manual_seed(0)
model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=30, tgt_vocab_size=30, dropout=0.0)).eval()
src, tgt = torch.randint(3, 30, (3, 7)), torch.randint(3, 30, (3, 6))
decoder = FastDecoder(model)
with torch.inference_mode():
    context, cache = decoder.start(src), decoder.new_cache()
    stepped = torch.cat([decoder.step(tgt[:, t : t + 1], context, cache) for t in range(6)], dim=1)
    print((decoder.generator(stepped) - model(src, tgt)).abs().max().item())
"""


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() != "AVX512", reason="needs AVX-512 to force AVX2 below")
def test_compiled_decoder_is_right_when_avx2_is_forced_after_a_native_compile(tmp_path):
    """Compiled natively (AVX-512) and then, in a process with ATEN_CPU_CAPABILITY=avx2, compiled again with the same
    inductor disk cache: both give the model's logits. Without `compile_options` the second loaded the first's
    kernels, built for AVX2, and its logits were off by about 5 (or NaN)."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    env.pop("ATEN_CPU_CAPABILITY", None)
    for capability in (None, "avx2"):
        forced = env if capability is None else {**env, "ATEN_CPU_CAPABILITY": capability}
        done = subprocess.run([sys.executable, "-c", STEPPED_ERROR], env=forced, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        assert float(done.stdout.split()[-1]) < 1e-4, (capability, done.stdout)


def test_translate_ids_takes_a_fast_decoder(ending_model):
    """`translate_ids` (sorting, batching, order restored) decodes through a FastDecoder as through the model."""
    sentences = [[5, 9, 4], [7], [3, 3, 8, 12, 6], [20, 11]]
    for beam in (1, 3):
        assert (translate_ids(FastDecoder(ending_model, compile=False), sentences, beam, batch_size=3)
                == translate_ids(ending_model, sentences, beam, batch_size=3))


def test_bf16_decoder_is_a_bf16_copy_close_to_float32(post_ln_model):
    """In bf16 the decoder holds a bf16 copy (the model stays float32); its logits stay within bf16's rounding of
    float32's, and its searches end within their limits."""
    half = FastDecoder(post_ln_model, dtype=torch.bfloat16, compile=False)
    assert half.model.generator.weight.dtype == torch.bfloat16 and next(half.parameters()).dtype == torch.bfloat16
    assert post_ln_model.generator.weight.dtype == torch.float32
    src = ended_sources([5, 2, 7], seed=8)
    prefix = padded_tokens([6, 6, 6], 6, seed=9) % 27 + 3
    prefix[:, 0] = BOS
    logits = steps_by_hand(half, src, prefix)
    with torch.inference_mode():
        reference = post_ln_model(src, prefix)
    assert logits.dtype == torch.bfloat16
    assert (logits.float() - reference).abs().max() < 0.05 * reference.abs().max()
    for y, n in zip(greedy_decode(half, src, max_extra=4), [5, 2, 7]):
        assert len(y) <= n + 4


def test_bad_use_is_refused_clearly(post_ln_model):
    """A decoder-only model, an integer dtype, several tokens in one step, no cache, a capacity of 0: each named."""
    decoder_only = DecoderOnly(DecoderOnlyConfig.preset("tiny", vocab_size=30))
    with pytest.raises(ValueError, match="encoder-decoder models; this one is decoder-only"):
        FastDecoder(decoder_only)
    with pytest.raises(ValueError, match="dtype must be one of"):
        FastDecoder(post_ln_model, dtype=torch.int8)
    decoder = FastDecoder(post_ln_model, compile=False)
    src = ended_sources([4, 2], seed=1)
    with pytest.raises(ValueError, match=r"one token per row .* got ids of shape \(2, 3\)"):
        decoder.step(torch.full((2, 3), BOS), decoder.start(src), decoder.new_cache())
    with pytest.raises(ValueError, match="on its own cache .* cache NoneType"):
        greedy_decode(decoder, src, use_cache=False)
    with pytest.raises(ValueError, match="capacity must be at least 1"):
        greedy_decode(FastDecoder(post_ln_model, compile=False, capacity=0), src)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this PyTorch has no oneDNN")
def test_packed_projection_equals_the_layer_and_follows_its_weight(post_ln_model):
    """The packed output projection gives the layer's logits for rows and for sequences, and after the (tied) weight
    changes in place it repacks; `pack` forces either choice, recorded with a reason."""
    model = Transformer(post_ln_model.cfg).eval()
    model.load_state_dict(post_ln_model.state_dict())
    packed = PackedProjection(model.generator)
    hidden = torch.randn(2, 5, model.cfg.d_model)
    for h in (hidden, hidden[:, 0]):
        assert_close(packed(h), model.generator(h), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        model.generator.weight.mul_(-2.0)
    assert_close(packed(hidden), model.generator(hidden), atol=1e-5, rtol=1e-5)
    chosen, why = faster_projection(model.generator, pack=True)
    assert isinstance(chosen, PackedProjection) and why == {"packed": True, "reason": "asked to"}
    assert faster_projection(model.generator, pack=False)[0] is model.generator
    probed = faster_projection(model.generator)[1]
    assert probed["plain_ms"] > 0 and probed["packed_ms"] > 0 and "as fast as plain" in probed["reason"]


def test_projections_that_cannot_be_packed_stay_as_they_are(ending_model, post_ln_model):
    """A layer with a hook (ending_model's </s> bonus), with a bias, in bf16 or quantized to int8 is kept, with a
    reason, even when packing is asked for; the decoder then finds what the model finds."""
    from transformer.decoding import dynamic_int8
    biased = torch.nn.Linear(8, 16)
    layers = [ending_model.generator, biased, torch.nn.Linear(8, 16, bias=False).to(torch.bfloat16),
              dynamic_int8(post_ln_model).generator]
    for layer in layers:
        kept, why = faster_projection(layer, pack=True)
        assert kept is layer and not why["packed"] and why["reason"], type(layer)
    decoder = FastDecoder(ending_model, compile=False, pack=True)
    assert decoder.generator is ending_model.generator
    src = torch.tensor([[5, 9, 12, EOS], [8, 3, EOS, PAD]])
    assert greedy_decode(decoder, src, max_extra=6) == greedy_decode(ending_model, src, max_extra=6)


def decoders(model: Transformer) -> dict[str, Transformer]:
    "The model itself and its int8 copy: the two a TracedDecoder is checked against."
    return {"float32": model, "int8": dynamic_int8(model)}


@pytest.mark.parametrize("which", MODELS)
def test_traced_searches_find_what_the_model_finds(which, request):
    """Greedy decoding and beam search through a TracedDecoder give the eager outputs and scores, float32 and int8."""
    src = ended_sources([6, 1, 3, 9, 2], seed=5)
    for weights, model in decoders(request.getfixturevalue(which)).items():
        traced = TracedDecoder(model)
        greedy = greedy_decode(traced, src, max_extra=8)
        assert greedy == greedy_decode(model, src, max_extra=8), weights
        ours, theirs = (beam_search(m, src, 3, n_best=2, max_extra=8) for m in (traced, model))
        assert [[h.tokens for h in s] for s in ours] == [[h.tokens for h in s] for s in theirs], weights
        scores = [torch.tensor([[h.score for h in s] for s in found]) for found in (ours, theirs)]
        assert_close(*scores, **TOL)
        assert {key[1] for key in traced.graphs if key[0] == "step"} == {1, 3}  # a query row a memory row, or 3


def test_one_traced_graph_serves_other_batches_lengths_and_positions(post_ln_model):
    """A graph traced on one batch gives the whole decode's logits (cached equals uncached) for batches of other
    sizes, source lengths and prefix lengths."""
    traced = TracedDecoder(post_ln_model)
    for lengths, steps, seed in (([5, 2, 7], 6, 3), ([9], 4, 4), ([1, 3, 4, 8, 2], 9, 5)):
        src = ended_sources(lengths, seed=seed)
        prefix = padded_tokens([steps] * len(lengths), steps, seed=seed + 10) % 27 + 3
        prefix[:, 0] = BOS
        with torch.inference_mode():
            reference = post_ln_model(src, prefix)
        assert_close(steps_by_hand(traced, src, prefix), reference, **TOL)
    assert sorted(key[0] for key in traced.graphs) == ["encoder", "step"]  # one of each


def test_traced_graphs_follow_attentions_path_choice(ending_model, monkeypatch):
    """Where attention's written-out path starts at a few keys, a decode meets both paths: each gets its own graph,
    and the outputs stay the eager ones."""
    monkeypatch.setattr(attention, "BLAS_BMM_MIN_PRODUCTS", 3 * min(ending_model.decoder.layers[0].self_attn.d_k,
                                                                  ending_model.decoder.layers[0].self_attn.d_v))
    traced, src = TracedDecoder(ending_model), ended_sources([6, 1, 3, 9, 2], seed=7)
    assert greedy_decode(traced, src, max_extra=8) == greedy_decode(ending_model, src, max_extra=8)
    assert {key[3] for key in traced.graphs if key[0] == "step"} == {False, True}  # fused below 3 keys, then written out


def test_traced_decoder_is_shared_by_workers(ending_model):
    """Two threads decoding through one TracedDecoder at once (tracing included) find what the eager model finds."""
    sentences = [[5, 9, 4], [7], [3, 3, 8, 12, 6], [20, 11], [4, 4, 4, 9], [13, 5]]
    int8 = dynamic_int8(ending_model)
    traced = TracedDecoder(int8)
    with ThreadPoolExecutor(2) as pool:
        found = list(pool.map(lambda s: translate_ids(traced, [s], 2), sentences))
    assert found == [translate_ids(int8, [s], 2) for s in sentences]


def test_traced_decoder_refuses_a_decoder_only_model():
    """A decoder-only model is named as what a TracedDecoder cannot decode."""
    with pytest.raises(ValueError, match="encoder-decoder models; this one is decoder-only"):
        TracedDecoder(DecoderOnly(DecoderOnlyConfig.preset("tiny", vocab_size=30)))
