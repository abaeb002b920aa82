"""The decoder-only model: its block stack equals torch's causal TransformerEncoder, it is causal, cached decoding
equals uncached decoding step by step, and it trains, translates and generates through the command line."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

from transformer.attention import subsequent_mask
from transformer.checkpoint import average_checkpoints, load_model_dir, save_model_files
from transformer.cli import main
from transformer.decoder_only import DecoderOnly, DecoderOnlyConfig
from transformer.decoding import generate, translate_ids
from transformer.run import RunConfig

from conftest import PAD, VOCAB, make_model
from corpus import write_corpus
from test_equivalence import copy_attention, copy_linear_or_norm

pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")


def make_decoder_only(seed: int = 0, **overrides) -> DecoderOnly:
    "A tiny decoder-only model without dropout, in eval mode."
    torch.manual_seed(seed)
    kwargs = dict(vocab_size=VOCAB, dropout=0.0, pad_id=PAD)
    return DecoderOnly(DecoderOnlyConfig.preset("tiny", **{**kwargs, **overrides})).eval()


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_block_stack_equals_torch_causal_transformer_encoder(norm_first):
    model = make_decoder_only(norm_first=norm_first)
    cfg = model.cfg
    layer = nn.TransformerEncoderLayer(cfg.d_model, cfg.n_heads, cfg.d_ff, dropout=0.0, batch_first=True,
                                       norm_first=norm_first)
    ref = nn.TransformerEncoder(layer, cfg.n_layers, enable_nested_tensor=False).eval()
    with torch.no_grad():
        for ours, theirs in zip(model.blocks, ref.layers, strict=True):
            copy_attention(theirs.self_attn, ours.self_attn)
            copy_linear_or_norm(theirs.linear1, ours.feed_forward.linear1)
            copy_linear_or_norm(theirs.linear2, ours.feed_forward.linear2)
            copy_linear_or_norm(theirs.norm1, ours.residual[0].norm)
            copy_linear_or_norm(theirs.norm2, ours.residual[1].norm)
        if norm_first:  # pre-LN ends in a final norm, as torch's encoder can
            ref.norm = nn.LayerNorm(cfg.d_model)
            copy_linear_or_norm(ref.norm, model.norm)
        x = torch.randn(3, 11, cfg.d_model)
        theirs = ref(x, mask=~subsequent_mask(11)[0, 0], is_causal=True)
        ours = model.stack(x, subsequent_mask(11))
    assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(length=st.integers(2, 16), cut=st.integers(1, 15), seed=st.integers(0, 2**16))
def test_logits_never_depend_on_later_tokens(length, cut, seed):
    cut = min(cut, length - 1)
    model = make_decoder_only(seed % 3)
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(3, VOCAB, (2, length), generator=g)
    changed = tokens.clone()
    changed[:, cut:] = torch.randint(3, VOCAB, (2, length - cut), generator=g)
    with torch.no_grad():
        assert_close(model(tokens)[:, :cut], model(changed)[:, :cut], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("prompt", [[], [7, 8, 9]], ids=["language model", "after a source"])
def test_cached_decoding_equals_the_full_pass_at_every_step(prompt):
    """Feeding one token at a time through the KV cache gives the logits a full pass gives, at every position."""
    model, cfg = make_decoder_only(1), make_decoder_only(1).cfg
    src = torch.tensor([[*prompt, cfg.eos_id]] * 2)
    tgt = torch.cat([torch.full((2, 1), cfg.bos_id), torch.randint(3, VOCAB, (2, 14))], dim=1)
    context, cache = model.start(src), model.new_cache()
    with torch.no_grad():
        full = model.generator(model.step(tgt, context))
        for t in range(tgt.size(1)):
            step = model.generator(model.step(tgt[:, t : t + 1], context, cache))[:, 0]
            assert_close(step, full[:, t], atol=1e-5, rtol=1e-5)


def test_generation_with_and_without_cache_and_seeds():
    model = make_decoder_only(2)
    for options in (dict(greedy=True), dict(temperature=0.8, top_k=10), dict(top_p=0.9)):
        cached = generate(model, [5, 6], n=3, max_new_tokens=15, seed=3, **options)
        assert cached == generate(model, [5, 6], n=3, max_new_tokens=15, seed=3, use_cache=False, **options)
    assert generate(model, [5], n=4, seed=1) != generate(model, [5], n=4, seed=2)


def test_generation_stops_where_the_context_ends():
    model = make_decoder_only(max_len=12)
    out = generate(model, [5, 6, 7], n=2, max_new_tokens=100, temperature=2.0)  # </s> <s> + 3: 7 of 12 positions
    assert all(len(s) <= 12 - 5 + 1 for s in out)


def test_beam_search_on_padded_batches_equals_one_sentence_at_a_time():
    model = make_decoder_only(3)
    sources = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15]]
    for beam in (1, 3):
        assert translate_ids(model, sources, beam_size=beam) == [translate_ids(model, [s], beam_size=beam)[0]
                                                                 for s in sources]


def test_checkpoint_round_trip_keeps_the_kind(tmp_path):
    model = make_decoder_only(4, prompt_loss=0.5)
    save_model_files(model, tmp_path)
    loaded = load_model_dir(tmp_path)
    assert isinstance(loaded, DecoderOnly) and loaded.cfg == model.cfg
    tokens = torch.randint(3, VOCAB, (2, 9))
    with torch.no_grad():
        assert_close(loaded(tokens), model(tokens))


def test_decoder_only_checkpoints_average_into_a_decoder_only_model(tmp_path):
    """Averaging builds the class of the checkpoints' kind: the mean of two decoder-only models, weight by weight."""
    models = [make_decoder_only(seed) for seed in (4, 5)]
    for i, model in enumerate(models):
        (tmp_path / str(i)).mkdir()
        save_model_files(model, tmp_path / str(i))
    mean = average_checkpoints([tmp_path / "0", tmp_path / "1"])
    assert isinstance(mean, DecoderOnly) and mean.cfg == models[0].cfg
    for name, w in mean.state_dict().items():
        expected = (models[0].state_dict()[name].double() + models[1].state_dict()[name].double()) / 2
        assert torch.equal(w, expected.to(w.dtype)), name


@pytest.mark.parametrize("bad, message", [
    (dict(prompt=list(range(3, 300))), "context holds 256"),
    (dict(top_p=0.0), "top_p must be in (0, 1]"),
    (dict(top_p=1.2), "top_p must be in (0, 1]"),
    (dict(temperature=0.0), "temperature must be positive"),
    (dict(temperature=-1.0), "temperature must be positive"),
    (dict(top_k=-2), "top_k must be"),
])
def test_bad_generation_settings_are_one_clear_error(bad, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        generate(make_decoder_only(), **{"prompt": [5], **bad})


def test_an_encoder_decoder_cannot_generate():
    with pytest.raises(ValueError, match="needs a decoder-only model"):
        generate(make_model(), [5])


def test_run_config_kinds_and_tasks():
    run = RunConfig.from_dict({"kind": "decoder-only", "task": "language-model", "model": {"n_layers": 2}})
    assert run.model_config(100).n_layers == 2 and run.model_config(100).kind == "decoder-only"
    with pytest.raises(ValueError, match="a language model needs kind = 'decoder-only'"):
        RunConfig.from_dict({"task": "language-model"})
    with pytest.raises(ValueError, match="kind must be"):
        RunConfig.from_dict({"kind": "encoder-only"})
    with pytest.raises(ValueError, match=r"unknown key\(s\) in \[model\]"):
        RunConfig.from_dict({"kind": "decoder-only", "model": {"n_encoder_layers": 2}})


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_train_translate_and_generate_through_the_command_line(tmp_path, capsys, monkeypatch):
    config = write_corpus(tmp_path)
    config.write_text('kind = "decoder-only"\n' + config.read_text().replace("[model]", "[model]\nprompt_loss = 1.0"))
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "train", "--config", "tiny.toml", "--out", "do", "--quiet")
    assert code == 0, err
    checkpoint = sorted((tmp_path / "do/checkpoints").iterdir())[-1]
    assert load_model_dir(checkpoint).cfg.prompt_loss == 1.0
    code, out, err = run(capsys, "translate", "--model", str(checkpoint), "der hund spielt", "--beam", "2")
    assert code == 0 and len(out.splitlines()) == 1, err
    code, out, err = run(capsys, "generate", "--model", str(checkpoint), "--prompt", "the dog", "-n", "3",
                         "--top-p", "0.9", "--seed", "5", "--max-new-tokens", "5")
    assert code == 0 and len(out.splitlines()) == 3 and all(line.startswith("the dog") for line in out.splitlines())
    assert run(capsys, "generate", "--model", str(checkpoint), "--prompt", "the dog", "-n", "3", "--top-p", "0.9",
               "--seed", "5", "--max-new-tokens", "5")[1] == out  # the seed repeats the samples
    for bad, message in ((["--top-p", "0"], "top_p must be in (0, 1]"), (["--temperature", "0"], "temperature"),
                         (["--prompt", "hund " * 400], "context holds")):
        code, _, err = run(capsys, "generate", "--model", str(checkpoint), *bad)
        assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err

    encoder_decoder = tmp_path / "ed"
    vocab = load_model_dir(checkpoint).cfg.vocab_size
    encoder_decoder.mkdir()
    save_model_files(make_model(src_vocab_size=vocab, tgt_vocab_size=vocab), encoder_decoder)
    (encoder_decoder / "tokenizer.json").write_bytes((checkpoint / "tokenizer.json").read_bytes())
    code, _, err = run(capsys, "generate", "--model", str(encoder_decoder))
    assert code == 2 and "generate needs a decoder-only one" in err and len(err.strip().splitlines()) == 1


def test_language_model_task_trains_on_the_target_side(tmp_path, capsys, monkeypatch):
    config = write_corpus(tmp_path)
    config.write_text('kind = "decoder-only"\ntask = "language-model"\n' + config.read_text())
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "train", "--config", "tiny.toml", "--out", "lm", "--quiet")
    assert code == 0, err
    metrics = (tmp_path / "lm/metrics.csv").read_text()
    assert "valid_ppl" in metrics and "valid_bleu" not in metrics.splitlines()[0]  # no translation to score
    checkpoint = sorted((tmp_path / "lm/checkpoints").glob("step-*"))[-1]
    assert load_model_dir(checkpoint).cfg.task == "language-model"
    (tmp_path / "src.txt").write_text("der hund spielt\n")
    for command in (["translate", "der hund spielt"], ["evaluate", "--src", "src.txt", "--ref", "src.txt"]):
        code, _, err = run(capsys, command[0], "--model", str(checkpoint), *command[1:])
        assert code == 2 and "language-model model, which cannot translate" in err, err
        assert len(err.strip().splitlines()) == 1
    code, out, err = run(capsys, "generate", "--model", str(checkpoint), "--prompt", "the", "--max-new-tokens", "3")
    assert code == 0 and out.startswith("the"), err
