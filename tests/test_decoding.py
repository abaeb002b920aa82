"""Decoding: the KV cache, greedy decoding, beam search against exhaustive search, batching, limits, averaging."""

import itertools
import re
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from conftest import BOS, MULTI30K, PAD, make_model, needs_multi30k, padded_tokens, randomize_vectors
from transformer.attention import padding_mask
from transformer.decoding import beam_search, beam_steps, greedy_decode, length_penalty, output_limits, translate_ids
from transformer.model import KVCache, Transformer, TransformerConfig
from transformer.model_folder import save_average
from transformer.checkpoint import (CheckpointError, average_checkpoints, load_model_dir, save_model_files,
                                    write_atomically)

EOS = 2
TOL = dict(atol=1e-5, rtol=1e-5)


# --- helpers -----------------------------------------------------------------------------------------------------

def gnmt_penalty(n_tokens: int, alpha: float) -> float:
    "GNMT's length penalty ((5 + |y|) / 6)^α, written out here so that the tests do not trust the package's."
    return ((5 + n_tokens) / 6) ** alpha


def peaked_model(seed: int, vocab: int, scale: float = 5.0, **overrides) -> Transformer:
    "A tiny eval-mode model over `vocab` tokens whose (tied) embeddings are scaled up, so its outputs are peaked."
    torch.manual_seed(seed)
    cfg = TransformerConfig.preset("tiny", src_vocab_size=vocab, tgt_vocab_size=vocab, dropout=0.0, **overrides)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        model.src_embed.table.weight.mul_(scale)  # tied: also the target embeddings and the output layer
    return model


def sources(lengths: list[int], vocab: int, seed: int) -> torch.Tensor:
    "A right-padded batch of random word ids, each row `lengths[b]` words followed by </s>."
    g = torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths), max(lengths) + 1), PAD, dtype=torch.long)
    for b, n in enumerate(lengths):
        src[b, :n] = torch.randint(3, vocab, (n,), generator=g)
        src[b, n] = EOS
    return src


def unpadded(src: torch.Tensor, b: int) -> torch.Tensor:
    "Row b of a padded source batch alone, as a (1, S_b) tensor without padding."
    return src[b : b + 1, : int((src[b] != PAD).sum())]


@torch.no_grad()
def sequence_logprob(model: Transformer, src: torch.Tensor, outputs: list[list[int]]) -> torch.Tensor:
    """log p(y + </s> | src) for each y in `outputs` (all of one length): (N,) float64.

    The sum of the log-softmax over the whole vocabulary at each chosen token, as the decoders score it: ruling out
    <pad> and <s> (and, at the length limit, everything but </s>) sets those to -inf without renormalising, so a
    token the decoders may choose keeps its plain log-softmax value.
    """
    tgt_in = torch.tensor([[BOS, *y] for y in outputs])
    tgt_out = torch.tensor([[*y, EOS] for y in outputs])
    logp = model(src.expand(len(outputs), -1), tgt_in).double().log_softmax(-1)
    return logp.gather(-1, tgt_out[..., None]).squeeze(-1).sum(-1)


def exhaustive_best(model: Transformer, src: torch.Tensor, limit: int, alpha: float) -> tuple[list[int], float, float]:
    "The best output (words, then </s>; at most `limit` tokens) by length-normalised score, its score, the runner-up's."
    words = range(3, model.cfg.tgt_vocab_size)
    scored = []
    for n in range(limit):  # n words, then </s>: n + 1 ≤ limit tokens
        outputs = [list(y) for y in itertools.product(words, repeat=n)]
        logprobs = sequence_logprob(model, src, outputs)
        scored += [(lp.item() / gnmt_penalty(n + 1, alpha), y) for lp, y in zip(logprobs, outputs)]
    scored.sort(key=lambda s: s[0], reverse=True)
    return scored[0][1], scored[0][0], scored[1][0]


def forbid_eos(model: Transformer):
    "A forward hook on the output layer that makes </s> all but impossible; call .remove() on the result to undo."
    eos = torch.tensor([model.cfg.eos_id])
    return model.generator.register_forward_hook(lambda module, inputs, logits: logits.index_fill(-1, eos, -1e9))


@pytest.fixture(scope="module")
def model(ending_model) -> Transformer:
    "The shared model whose outputs end at different lengths (conftest's `ending_model`, read-only)."
    return ending_model


# --- the key-value cache ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["post_ln_model", "pre_ln_model", "narrow_key_model"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@torch.no_grad()
def test_cached_logits_equal_uncached_at_every_step(which, seed, request):
    """Decoding one token at a time through a KVCache gives, at every step, the full uncached decode's last logits."""
    model = request.getfixturevalue(which)
    src = padded_tokens([7, 4, 2], 7, seed=10 + seed)
    for b, n in enumerate([7, 4, 2]):
        src[b, n - 1] = EOS  # sources end with </s>, then padding
    prefix = padded_tokens([9, 9, 9], 9, seed=20 + seed, first=BOS)  # no padding inside a prefix
    src_mask = padding_mask(src, PAD)
    memory = model.encode(src, src_mask)
    cache = KVCache(model.cfg.n_decoder_layers)
    for t in range(prefix.size(1)):
        cached = model.generator(model.decode(prefix[:, t : t + 1], memory, src_mask, cache=cache))
        full = model.generator(model.decode(prefix[:, : t + 1], memory, src_mask))
        assert cached.shape == (3, 1, model.cfg.tgt_vocab_size)
        assert len(cache) == t + 1
        assert_close(cached[:, 0], full[:, -1], **TOL, msg=f"step {t}")


@torch.no_grad()
def test_cache_select_follows_reordered_rows(pre_ln_model):
    """After cache.select (rows reordered and repeated, as beam search does), decoding continues those rows."""
    model = pre_ln_model
    src = padded_tokens([6, 3, 5], 6, seed=30)
    prefix = padded_tokens([8, 8, 8], 8, seed=31, first=BOS)
    src_mask = padding_mask(src, PAD)
    memory = model.encode(src, src_mask)
    cache = KVCache(model.cfg.n_decoder_layers)
    model.decode(prefix[:, :4], memory, src_mask, cache=cache)
    rows = torch.tensor([2, 0, 2])
    cache.select(rows, memory_index=rows)
    cached = model.decode(prefix[rows, 4:], memory[rows], src_mask[rows], cache=cache)
    full = model.decode(prefix[rows], memory[rows], src_mask[rows])
    assert_close(cached, full[:, 4:], **TOL)


@pytest.mark.parametrize("which", ["post_ln_model", "pre_ln_model", "model", "narrow_key_model"])
def test_cached_greedy_equals_uncached_greedy(which, request):
    """Greedy decoding with the KV cache gives the same outputs as without it, sentence by sentence."""
    model = request.getfixturevalue(which)
    src = sources([6, 1, 3, 9], model.cfg.src_vocab_size, seed=5)
    cached = greedy_decode(model, src, max_extra=8)
    assert cached == greedy_decode(model, src, max_extra=8, use_cache=False)
    assert any(len(y) > 1 for y in cached)  # not trivially equal (empty outputs)


# --- beam search ---------------------------------------------------------------------------------------------------

def test_length_penalty_is_gnmt():
    """length_penalty is ((5 + |y|) / 6)^α for ints and tensors: 1 at α = 0 or |y| = 1, growing with |y| if α > 0."""
    assert length_penalty(1, 0.6) == 1.0 and length_penalty(7, 0.0) == 1.0
    assert length_penalty(7, 1.0) == pytest.approx(2.0)
    assert length_penalty(13, 0.5) == pytest.approx(3 ** 0.5)
    assert_close(length_penalty(torch.tensor([1.0, 7.0, 19.0]), 0.6), torch.tensor([1.0, 2 ** 0.6, 4 ** 0.6]))


def test_beam_size_one_equals_greedy(model):
    """With alpha = 0, beam search of width 1 is greedy decoding.

    Only with alpha = 0: with alpha > 0 the length penalty rewards length, and beam search may rightly keep going
    past a </s> that greedy decoding would take, to finish later with a better normalised score.
    Only a </s> among the k best extensions finishes a hypothesis; with k = 1 that is greedy's own choice.
    """
    src = sources([5, 2, 7, 4, 6, 3], model.cfg.src_vocab_size, seed=6)
    beam = [h[0].tokens for h in beam_search(model, src, beam_size=1, alpha=0.0, max_extra=6)]
    assert beam == greedy_decode(model, src, max_extra=6)


@torch.no_grad()
def test_beam_size_one_stays_on_the_greedy_path(model):
    """With alpha = 0, width-1 beam search returns greedy's output or a prefix of it that scores at least as well."""
    src = sources([5, 2, 7, 4, 6, 3], model.cfg.src_vocab_size, seed=6)
    greedy = greedy_decode(model, src, max_extra=6)
    for b, hyps in enumerate(beam_search(model, src, beam_size=1, alpha=0.0, max_extra=6)):
        best, g = hyps[0], greedy[b]
        assert best.tokens == g[: len(best.tokens)], b
        assert best.logprob >= sequence_logprob(model, unpadded(src, b), [g]).item() - 1e-4, b


def five_token_model(seed: int) -> Transformer:
    "A tiny untied model over <pad>, <s>, </s> and two words, randomised vectors, output layer ×4 (peaked)."
    torch.manual_seed(seed)
    cfg = TransformerConfig.preset("tiny", src_vocab_size=5, tgt_vocab_size=5, dropout=0.0, tie_embeddings=False)
    model = randomize_vectors(Transformer(cfg).eval(), seed=200 + seed)
    with torch.no_grad():
        model.generator.weight.mul_(4.0)
    return model


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_wide_beam_finds_the_exhaustive_optimum(alpha):
    """A beam wide enough to hold every prefix returns the best-scoring output over all of them, with its score.

    Vocabulary of 5: <pad>, <s>, </s> and two words. Sources of 1, 2 and 3 words (+ </s>) with max_extra 2 allow
    outputs of at most 4, 5 and 6 tokens (</s> included, forced at the limit): 15, 31 and 63 candidate outputs,
    scored as the decoders score them, and at most 2⁵ = 32 prefixes alive at once, so a beam of 32 is exhaustive.
    """
    not_greedy = narrow_misses = 0
    for seed in range(8):
        model = five_token_model(seed)
        src = sources([1, 2, 3], 5, seed=50 + seed)
        limits = output_limits(src, model, max_extra=2)
        assert limits.tolist() == [4, 5, 6]
        results = beam_search(model, src, beam_size=32, alpha=alpha, max_extra=2)
        narrow = beam_search(model, src, beam_size=2, alpha=alpha, max_extra=2)
        greedy = greedy_decode(model, src, max_extra=2)
        for b in range(src.size(0)):
            tokens, score, runner_up = exhaustive_best(model, src[b : b + 1], int(limits[b]), alpha)
            assert score - runner_up > 1e-4, "near tie: pick another seed"
            best = results[b][0]
            assert best.tokens == tokens, (seed, b)
            assert_close(best.score, score, **TOL)
            assert_close(best.logprob, score * gnmt_penalty(len(tokens) + 1, alpha), **TOL)
            assert narrow[b][0].score <= best.score + 1e-5  # a narrower beam never finds better
            not_greedy += tokens != greedy[b]
            narrow_misses += narrow[b][0].tokens != tokens
    # Otherwise greedy decoding, or a narrow beam, would pass this test too.
    assert not_greedy > 0 and narrow_misses > 0



@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_steps_retrace_the_search(model, alpha):
    """Every row of `beam_steps` extends a live prefix of the step before; the hypotheses that end are the ones
    beam search finished, each scored as the model scores it, and the best of them is what beam search returns."""
    src = sources([3, 5, 7], 30, seed=9)
    for b in range(src.size(0)):
        s = unpadded(src, b)
        rows = beam_steps(model, s, beam_size=3, alpha=alpha, max_extra=6)
        live = {(0, ())} | {(r["step"], tuple(r["tokens"])) for r in rows if not r["ended"]}
        assert all((r["step"] - 1, tuple(r["tokens"][:-1])) in live for r in rows)
        assert all(sum(1 for r in rows if r["step"] == t and not r["ended"]) <= 3 for t in range(1, rows[-1]["step"]))
        ended = [r for r in rows if r["ended"]]
        assert ended and all(r["tokens"][-1] == EOS and len(r["tokens"]) == r["step"] for r in ended)
        for r in ended:
            assert_close(r["logprob"], sequence_logprob(model, s, [r["tokens"][:-1]]).item(), atol=1e-4, rtol=0)
            assert_close(r["score"], r["logprob"] / gnmt_penalty(len(r["tokens"]), alpha), **TOL)
        found = beam_search(model, s, beam_size=3, alpha=alpha, max_extra=6, n_best=100)[0]
        assert sorted(r["tokens"][:-1] for r in ended) == sorted(h.tokens for h in found)
        assert max(ended, key=lambda r: r["score"])["tokens"][:-1] == found[0].tokens


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_early_exit_stops_where_the_best_extension_ends(model, alpha):
    """With `early_exit`, each sentence stops at the first step whose best extension ends (or at its limit), never
    later than the full search and never with a better hypothesis. Without a length penalty the full search's bound
    is that same rule, so the two stop together; with one, some sentence of this model stops sooner."""
    src = sources([3, 5, 7, 4, 6, 2, 8, 5], 30, seed=21)
    sooner = 0
    for b in range(src.size(0)):
        s = unpadded(src, b)
        trace = []  # per step of the full search: (best log-probability of those that end there, best live one)

        def watch(t, tokens, scores, finished):
            new = [h.logprob for h in finished[0] if len(h.tokens) == t]  # ended at step t: t tokens, then </s>
            trace.append((max(new, default=float("-inf")), scores.amax().item()))

        full = beam_search(model, s, beam_size=3, alpha=alpha, max_extra=6, watch=watch)[0][0]
        steps = []
        early = beam_search(model, s, beam_size=3, alpha=alpha, max_extra=6, early_exit=True,
                            watch=lambda t, *_: steps.append(t))[0][0]
        first_best_end = next((t for t, (ended, live) in enumerate(trace) if ended >= live), len(trace) - 1)
        assert len(steps) == min(first_best_end + 1, len(trace)), (b, trace)
        assert early.score <= full.score + 1e-6
        sooner += len(steps) < len(trace)
    if alpha == 0:
        assert sooner == 0
    else:
        assert sooner > 0, "no sentence stopped sooner: the test would pass without early_exit"


def test_beam_steps_follow_one_sentence(short_model):
    """A batch of two sentences is refused, naming the shape."""
    with pytest.raises(ValueError, match=r"one sentence: src must have shape \(1, S\), got \(2, 3\)"):
        beam_steps(short_model, torch.tensor([[5, 6, EOS], [7, 8, EOS]]))


# --- batching ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["post_ln_model", "pre_ln_model", "model"])
def test_sentence_alone_equals_sentence_in_padded_batch(which, request):
    """Greedy and beam search (also stopping early, with n_best 2) give each sentence the same output (and beam
    score) alone as in a padded batch."""
    model = request.getfixturevalue(which)
    src = sources([7, 1, 4, 2], model.cfg.src_vocab_size, seed=7)
    greedy = greedy_decode(model, src, max_extra=6)
    beam = beam_search(model, src, beam_size=3, alpha=0.6, max_extra=6, n_best=3)
    early = beam_search(model, src, beam_size=3, alpha=0.6, max_extra=6, n_best=2, early_exit=True)
    for b in range(src.size(0)):
        alone = unpadded(src, b)
        assert greedy_decode(model, alone, max_extra=6) == [greedy[b]], b
        for found, n_best, early_exit in ((beam, 3, False), (early, 2, True)):
            hyps = beam_search(model, alone, beam_size=3, alpha=0.6, max_extra=6, n_best=n_best,
                               early_exit=early_exit)[0]
            assert [h.tokens for h in hyps] == [h.tokens for h in found[b]], (b, early_exit)
            assert_close([h.score for h in hyps], [h.score for h in found[b]], atol=1e-4, rtol=0)


@pytest.mark.parametrize("use_cache", [True, False])
def test_finished_rows_leave_the_greedy_batch(ending_model, use_cache):
    """Once a quarter of the rows computed have ended, the model computes only the others (fewer rows per step, never
    more), and each sentence's output is still what it is alone."""
    model, src = ending_model, sources([6, 1, 3, 9, 2, 5, 8, 4], 30, seed=11)
    rows: list[int] = []
    hook = model.decoder.register_forward_pre_hook(lambda module, args: rows.append(args[0].size(0)))
    try:
        batch = greedy_decode(model, src, max_extra=8, use_cache=use_cache)
    finally:
        hook.remove()
    assert len({len(y) for y in batch}) > 2  # rows end at different steps: some leave
    assert rows[0] == src.size(0) > rows[-1] >= 1 and rows == sorted(rows, reverse=True), rows
    for b in range(src.size(0)):
        assert greedy_decode(model, unpadded(src, b), max_extra=8, use_cache=use_cache) == [batch[b]], b


# --- limits and n-best lists ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_outputs_respect_limits(model, alpha):
    """Outputs have at most limit - 1 words and no special tokens; n-best lists are distinct, sorted, consistent."""
    src = sources([6, 1, 3, 9, 2], model.cfg.src_vocab_size, seed=8)
    limits = output_limits(src, model, max_extra=4).tolist()
    results = beam_search(model, src, beam_size=4, alpha=alpha, max_extra=4, n_best=4)
    for y, limit in zip(greedy_decode(model, src, max_extra=4), limits):
        assert len(y) <= limit - 1 and all(3 <= t < model.cfg.tgt_vocab_size for t in y), y
    for hyps, limit in zip(results, limits):
        assert 1 <= len(hyps) <= 4
        tokens = [tuple(h.tokens) for h in hyps]
        assert len(set(tokens)) == len(tokens)
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        for h in hyps:
            assert len(h.tokens) <= limit - 1
            assert all(3 <= t < model.cfg.tgt_vocab_size for t in h.tokens), h.tokens
            assert h.logprob <= 0
            assert h.score == pytest.approx(h.logprob / gnmt_penalty(len(h.tokens) + 1, alpha), rel=1e-6)


@pytest.mark.parametrize("decoder", ["greedy", "beam"])
def test_outputs_stop_at_the_limit_without_eos(decoder):
    """A model that never chooses </s> gets it forced at the limit: source length + max_extra, capped by max_len."""
    model = peaked_model(seed=9, vocab=20, scale=3.0, max_len=12)
    hook = forbid_eos(model)
    try:
        src = sources([2, 5, 10, 11], 20, seed=9)  # 3, 6, 11 and 12 tokens with </s>: limits 9, 12, 12, 12
        assert output_limits(src, model, max_extra=6).tolist() == [9, 12, 12, 12]
        if decoder == "greedy":
            outputs = greedy_decode(model, src, max_extra=6)
        else:
            outputs = [h[0].tokens for h in beam_search(model, src, beam_size=3, max_extra=6)]
    finally:
        hook.remove()
    assert [len(y) for y in outputs] == [8, 11, 11, 11]
    assert all(3 <= t < 20 for y in outputs for t in y)


# --- translating many sentences ------------------------------------------------------------------------------------

@pytest.mark.parametrize("beam_size", [1, 3])
def test_translate_ids_keeps_order(model, beam_size):
    """translate_ids returns outputs in input order, each equal to decoding that sentence alone; [] gets a list."""
    g = torch.Generator().manual_seed(11)
    lengths = [5, 1, 8, 0, 3, 5, 2]
    sentences = [torch.randint(3, model.cfg.src_vocab_size, (n,), generator=g).tolist() for n in lengths]
    out = translate_ids(model, sentences, beam_size=beam_size, alpha=0.6, batch_size=3, max_extra=5)
    assert len(out) == len(sentences)
    for s, y in zip(sentences, out):
        src = torch.tensor([[*s, EOS]])
        if beam_size == 1:
            alone = greedy_decode(model, src, max_extra=5)[0]
        else:
            alone = beam_search(model, src, beam_size=beam_size, alpha=0.6, max_extra=5)[0][0].tokens
        assert isinstance(y, list)
        assert y == alone, s
    assert len(set(map(tuple, out))) > 1  # the outputs really differ, so a mix-up would show


# --- checkpoint averaging ------------------------------------------------------------------------------------------

def save(model: Transformer, folder: Path) -> Path:
    "Write `model` as a model folder; returns the folder."
    write_atomically(folder, lambda tmp: save_model_files(model, tmp))
    return folder


def test_average_of_identical_checkpoints_is_unchanged(tmp_path):
    """Averaging three copies of one checkpoint returns its weights exactly."""
    a = make_model(seed=12)
    folder = save(a, tmp_path / "a")
    avg = average_checkpoints([folder, folder, folder])
    assert not avg.training
    assert avg.state_dict().keys() == a.state_dict().keys()
    for name, w in a.state_dict().items():
        assert torch.equal(avg.state_dict()[name], w), name


def test_average_of_two_checkpoints_is_their_mean(tmp_path):
    """Averaging two checkpoints gives the mean of every weight, rounded once; tied weights stay tied."""
    a, b = make_model(seed=13), randomize_vectors(make_model(seed=14), seed=114)
    avg = average_checkpoints([save(a, tmp_path / "a"), save(b, tmp_path / "b")])
    for name, wa in a.state_dict().items():
        mean = ((wa.double() + b.state_dict()[name].double()) / 2).to(wa.dtype)
        assert torch.equal(avg.state_dict()[name], mean), name
    assert avg.generator.weight is avg.src_embed.table.weight


def test_average_of_mismatched_configs_is_an_error(tmp_path):
    """Checkpoints with different configurations cannot be averaged."""
    a, b = make_model(seed=15), make_model(seed=15, d_ff=32)
    with pytest.raises(CheckpointError, match="different model configurations"):
        average_checkpoints([save(a, tmp_path / "a"), save(b, tmp_path / "b")])


def test_average_of_no_checkpoints_is_an_error():
    """An empty list of checkpoints is an error, not an untrained model."""
    with pytest.raises(CheckpointError, match="no checkpoints to average"):
        average_checkpoints([])


def test_save_average_writes_a_loadable_model_folder(tmp_path):
    """save_average writes a model folder that load_model_dir reads back as the averaged model."""
    folders = [save(make_model(seed=16 + i), tmp_path / f"c{i}") for i in range(3)]
    out = save_average(folders, tmp_path / "avg")
    assert out == tmp_path / "avg" and (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["avg", "c0", "c1", "c2"]  # no temporary folder left
    loaded, expected = load_model_dir(out), average_checkpoints(folders)
    assert loaded.cfg == expected.cfg
    for name, w in expected.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], w), name


# --- bad input -----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def short_model() -> Transformer:
    "A tiny eval-mode model with a 16-position table (read-only)."
    return make_model(seed=17, max_len=16)


@pytest.mark.parametrize("kwargs,message", [
    (dict(beam_size=0), r"beam_size must be at least 1, got 0"),
    (dict(beam_size=-2), r"beam_size must be at least 1, got -2"),
    (dict(alpha=-0.1), r"alpha must not be negative, got -0.1"),
    (dict(max_extra=0), r"max_extra must be at least 1, got 0"),
], ids=["beam_size=0", "beam_size=-2", "alpha=-0.1", "max_extra=0"])
def test_beam_search_bad_arguments(short_model, kwargs, message):
    """Beam search rejects a beam smaller than 1, a negative alpha and max_extra below 1, naming the value."""
    with pytest.raises(ValueError, match=message):
        beam_search(short_model, torch.tensor([[5, 6, EOS]]), **kwargs)


def test_greedy_bad_max_extra(short_model):
    """Greedy decoding rejects max_extra below 1."""
    with pytest.raises(ValueError, match=r"max_extra must be at least 1, got 0"):
        greedy_decode(short_model, torch.tensor([[5, 6, EOS]]), max_extra=0)


def test_translate_ids_bad_beam_size(short_model):
    """translate_ids passes a bad beam size on to beam search's error."""
    with pytest.raises(ValueError, match=r"beam_size must be at least 1, got 0"):
        translate_ids(short_model, [[5, 6]], beam_size=0)


@pytest.mark.parametrize("shape", [(2, 0), (3,)], ids=["(2,0)", "1-D"])
@pytest.mark.parametrize("decoder", ["greedy", "beam"])
def test_source_of_wrong_shape(short_model, decoder, shape):
    """A source with no positions, or not (batch, length), is an error that shows its shape."""
    src = torch.full(shape, 5, dtype=torch.long)
    shown = re.escape(str(tuple(shape)))
    decode = greedy_decode if decoder == "greedy" else beam_search
    with pytest.raises(ValueError, match=rf"shape \(batch, length\) with length ≥ 1, got {shown}"):
        decode(short_model, src)


@pytest.mark.parametrize("decoder", ["greedy", "beam"])
def test_source_longer_than_positional_table(short_model, decoder):
    """A source longer than max_len is an error naming the length and the table size."""
    src = torch.full((1, 17), 5, dtype=torch.long)
    decode = greedy_decode if decoder == "greedy" else beam_search
    with pytest.raises(ValueError, match=r"sequence of 17 tokens is longer than the positional table \(max_len=16\)"):
        decode(short_model, src)


def test_dynamic_int8_decodes_like_float32_on_most_sentences():
    """int8 linear layers (self-attention's stacked Q/K/V too; cross-attention's, whose weight it slices, stays
    float32) in a copy of the model; on a copy-task model trained until it copies half of its validation sequences
    (a criterion, not a step count), greedy and beam outputs mostly equal float32's (the margin allows for kernels
    that round differently)."""
    from transformer.copy_task import copies_at_least, copy_data, train_copy_model
    from transformer.decoding import dynamic_int8

    model, metrics = train_copy_model(seed=0, max_steps=3000, eval_every=10, stop_when=copies_at_least(0.5))
    assert metrics[-1]["step"] < 3000  # stopped by the criterion
    int8 = dynamic_int8(model)
    assert type(int8.generator).__module__.startswith("torch.ao.nn.quantized.dynamic")
    assert type(int8.decoder.layers[0].feed_forward.linear1).__module__.startswith("torch.ao.nn.quantized.dynamic")
    assert type(int8.decoder.layers[0].cross_attn.in_proj) is torch.nn.Linear
    assert all(type(layer.self_attn.in_proj).__module__.startswith("torch.ao.nn.quantized.dynamic")
               for layer in [*int8.encoder.layers, *int8.decoder.layers])
    assert type(model.generator) is torch.nn.Linear  # the original is untouched
    test = [x[: 3 + i % 8] for i, (x, _) in enumerate(copy_data(7)["test"][:200])]
    for beam in (1, 4):
        same = sum(a == b for a, b in zip(translate_ids(model, test, beam), translate_ids(int8, test, beam)))
        print(f"beam {beam}: int8 = float32 on {same}/{len(test)}")
        assert same >= len(test) // 2, (beam, same)


@needs_multi30k
def test_dynamic_int8_costs_the_published_model_under_one_bleu():
    """On the committed German→English model, greedy int8 translations of the validation split score less than 1 BLEU
    below float32's (it prints both; int8 kernels round differently by CPU kind, hence a margin, not equality)."""
    from transformer.data import load_split
    from transformer.decoding import dynamic_int8
    from transformer.translation import bleu, load_translator, translate_text

    model, tokenizer = load_translator(Path(__file__).resolve().parents[1] / "models" / "multi30k-de-en")
    val = load_split("val", MULTI30K)
    scores = {}
    for name, decoder in (("float32", model), ("int8", dynamic_int8(model))):
        with torch.inference_mode():
            translations = translate_text(decoder, tokenizer, [source for source, _ in val], beam_size=1)
        scores[name] = bleu(translations, [target for _, target in val])[0]
    print(f"validation BLEU, greedy: {scores}")
    assert scores["int8"] > scores["float32"] - 1.0, scores
