"""Training: batching, the loss, gradient accumulation, exact resumption and checkpoints that fail loudly."""

import csv
import hashlib
import json
import math
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors import safe_open

import transformer.checkpoint as checkpoint_module
from transformer.checkpoint import CheckpointError, load_model_dir, read_config, save_model_files, write_atomically
from transformer.model import Transformer, TransformerConfig
from transformer.trainer import NonFiniteLossError, TrainConfig, Trainer
from transformer.training import TokenBatchSampler, evaluate, label_smoothed_loss, label_smoothing, make_batch, noam_rate
from transformer.run import RunConfig

V = 20  # vocabulary: 0 = pad, 1 = <s>, 2 = </s>, 3..19 = words


# --- helpers -----------------------------------------------------------------------------------------------------

def make_pairs(n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    "n random (source, target) id lists of 1 to 8 words each, without special tokens."
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        a, b = (int(torch.randint(1, 9, (1,), generator=g)) for _ in range(2))
        pairs.append((torch.randint(3, V, (a,), generator=g).tolist(), torch.randint(3, V, (b,), generator=g).tolist()))
    return pairs


def model_config(**overrides) -> TransformerConfig:
    "The tiny preset over the V-word vocabulary, without dropout unless overridden."
    return TransformerConfig.preset("tiny", **{"src_vocab_size": V, "tgt_vocab_size": V, "dropout": 0.0, **overrides})


def new_trainer(cfg: TrainConfig, pairs, seed: int = 0, model_cfg: TransformerConfig | None = None,
                model: Transformer | None = None, **kwargs) -> Trainer:
    "A Trainer over a model freshly initialised from torch seed `seed` (or over `model`), without a progress bar."
    torch.manual_seed(seed)
    if model is None:
        model = Transformer(model_cfg or model_config())
    return Trainer(model, cfg, pairs, progress=False, **kwargs)


def params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def assert_same_params(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def assert_same_optimizer(a: torch.optim.Optimizer, b: torch.optim.Optimizer) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    as_json = lambda groups: json.loads(json.dumps(groups))  # a resumed Adam holds betas as a list, not a tuple
    assert as_json(sa["param_groups"]) == as_json(sb["param_groups"])
    assert sa["state"].keys() == sb["state"].keys()
    for i in sa["state"]:
        assert sa["state"][i].keys() == sb["state"][i].keys()
        for k in sa["state"][i]:
            assert torch.equal(sa["state"][i][k], sb["state"][i][k]), (i, k)


TIMING = {"train_minutes", "tokens_per_s"}  # metrics that depend on the wall clock


def without_timing(metrics: list[dict]) -> list[dict]:
    "Metrics rows minus the wall-clock fields, which differ from run to run."
    return [{k: v for k, v in row.items() if k not in TIMING} for row in metrics]


def file_hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(folder).iterdir())}


CHECKPOINT_FILES = {"model.safetensors", "config.json", "optimizer.safetensors", "rng.safetensors", "trainer.json"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    "A complete training checkpoint of the tiny model after two steps (read-only: copy it before corrupting it)."
    out = tmp_path_factory.mktemp("run")
    t = new_trainer(TrainConfig(max_tokens=64, max_steps=2, warmup=2, eval_every=2), make_pairs(12, 0), out_dir=out)
    t.fit()
    return t.latest_checkpoint()


@pytest.fixture
def checkpoint_copy(checkpoint, tmp_path) -> Path:
    "A private copy of `checkpoint`, in a run folder of its own (`latest` points at it), that a test may damage."
    folder = tmp_path / "checkpoints" / checkpoint.name
    shutil.copytree(checkpoint, folder)
    (tmp_path / "checkpoints" / "latest").write_text(checkpoint.name)
    return folder


# --- batches -----------------------------------------------------------------------------------------------------

def test_make_batch_adds_specials_and_padding():
    """make_batch appends </s> to sources and targets, prepends <s> to decoder inputs, and pads with pad_id."""
    cfg = model_config()
    b = make_batch([([5, 6, 7], [8]), ([9], [10, 11])], cfg)
    assert b.src.tolist() == [[5, 6, 7, 2], [9, 2, 0, 0]]
    assert b.tgt_in.tolist() == [[1, 8, 0], [1, 10, 11]]
    assert b.tgt_out.tolist() == [[8, 2, 0], [10, 11, 2]]
    assert b.n_tgt_tokens == 5 and b.n_src_tokens == 6
    assert b.src_mask.shape == (2, 1, 1, 4) and b.tgt_mask.shape == (2, 1, 3, 3)
    assert b.tgt_mask[1, 0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    with pytest.raises(ValueError, match="no sentence pairs"):
        make_batch([], cfg)


# --- TokenBatchSampler -------------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(1, 30), st.integers(1, 30)), min_size=1, max_size=60),
       max_tokens=st.integers(1, 120), seed=st.integers(0, 5), epoch=st.integers(0, 3))
def test_sampler_covers_every_index_once_within_budget(lengths, max_tokens, seed, epoch):
    """Every index appears once per epoch; each batch's padded size fits max_tokens on both sides, unless alone."""
    batches = TokenBatchSampler(lengths, max_tokens, seed=seed).batches(epoch)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert b
        for side in (0, 1):
            assert len(b) * max(lengths[i][side] for i in b) <= max_tokens or len(b) == 1


def test_sampler_is_a_function_of_seed_and_epoch():
    """The same (seed, epoch) gives the same batches; another epoch or seed reorders them."""
    lengths = [(1 + i % 13, 2 + (i * 7) % 11) for i in range(300)]
    s = TokenBatchSampler(lengths, max_tokens=60, seed=3)
    assert s.batches(0) == TokenBatchSampler(lengths, max_tokens=60, seed=3).batches(0) == s.batches(0)
    assert s.batches(0) != s.batches(1)
    assert s.batches(0) != TokenBatchSampler(lengths, max_tokens=60, seed=4).batches(0)
    unshuffled = TokenBatchSampler(lengths, max_tokens=60, shuffle=False)
    assert unshuffled.batches(0) == unshuffled.batches(1)


def test_sampler_padding_ratio_beats_unsorted_batches():
    """Grouping by length wastes much less padding than batches of the same sizes drawn in random order."""
    g = torch.Generator().manual_seed(0)
    src = torch.randint(2, 40, (2000,), generator=g)
    lengths = list(zip(src.tolist(), (src + torch.randint(-3, 4, (2000,), generator=g)).clamp(min=1).tolist()))
    s = TokenBatchSampler(lengths, max_tokens=400, seed=0)
    sizes = [len(b) for b in s.batches(0)]
    order, start, padded, total = torch.randperm(len(lengths), generator=g).tolist(), 0, 0, 0
    for n in sizes:  # the sampler's batch sizes, filled with random sentences
        batch = [lengths[i] for i in order[start : start + n]]
        start += n
        for side in (0, 1):
            longest = max(x[side] for x in batch)
            total += n * longest
            padded += n * longest - sum(x[side] for x in batch)
    assert 0.0 <= s.padding_ratio(0) < 0.1 < padded / total


@pytest.mark.parametrize("max_tokens", [0, -5])
def test_sampler_rejects_non_positive_max_tokens(max_tokens):
    """max_tokens < 1 is rejected, naming the value."""
    with pytest.raises(ValueError, match=rf"max_tokens must be positive, got {max_tokens}"):
        TokenBatchSampler([(3, 3)], max_tokens)


# --- loss and learning rate ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.5, 0.9])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_label_smoothed_loss_matches_cross_entropy(seed, smoothing):
    """The smoothed sum equals F.cross_entropy(label_smoothing, ignore_index, sum); the NLL sum equals it at eps 0."""
    g = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(40, 11, generator=g, dtype=torch.float64)
    target = torch.randint(0, 11, (40,), generator=g)
    target[::3] = 0  # padding
    loss, nll = label_smoothed_loss(logits, target, smoothing, ignore_index=0)
    expected = F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=0, reduction="sum")
    torch.testing.assert_close(loss.double(), expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(nll.double(), F.cross_entropy(logits, target, ignore_index=0, reduction="sum"),
                               rtol=1e-6, atol=1e-6)
    no_ignore, _ = label_smoothed_loss(logits, target, smoothing)
    torch.testing.assert_close(no_ignore.double(), F.cross_entropy(logits, target, label_smoothing=smoothing,
                                                                   reduction="sum"), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.5])
def test_label_smoothed_loss_gradient_matches_autograd_of_cross_entropy(smoothing, dtype):
    """The hand-written gradient p - q equals autograd's through F.cross_entropy, for loss and NLL weighted apart."""
    g = torch.Generator().manual_seed(3)
    base = 3 * torch.randn(30, 13, generator=g, dtype=torch.float64)
    target = torch.randint(0, 13, (30,), generator=g)
    target[::4] = 0  # padding
    ours_in = base.to(dtype).clone().requires_grad_()
    ref_in = ours_in.detach().double().clone().requires_grad_()
    loss, nll = label_smoothed_loss(ours_in, target, smoothing, ignore_index=0)
    (0.7 * loss + 1.9 * nll).backward()
    ref = (0.7 * F.cross_entropy(ref_in, target, label_smoothing=smoothing, ignore_index=0, reduction="sum")
           + 1.9 * F.cross_entropy(ref_in, target, ignore_index=0, reduction="sum"))
    ref.backward()
    assert ours_in.grad.dtype == dtype
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float64 else dict(rtol=2e-2, atol=1e-2)  # 16-bit
    torch.testing.assert_close(ours_in.grad.double(), ref_in.grad, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_label_smoothed_loss_is_finite_for_extreme_logits(dtype):
    """Logits of ±1e4 in float32, bfloat16 or float16 give finite sums, in float32, equal to a float64 reference."""
    logits = torch.tensor([[1e4, -1e4, 0.0, -1e4], [-1e4, -1e4, -1e4, 1e4], [1e4, 1e4, -1e4, -1e4]], dtype=dtype)
    target = torch.tensor([1, 3, 2])
    loss, nll = label_smoothed_loss(logits, target, 0.1)
    assert loss.dtype == nll.dtype == torch.float32
    assert torch.isfinite(loss) and torch.isfinite(nll)
    reference = logits.double()
    torch.testing.assert_close(loss.double(), F.cross_entropy(reference, target, label_smoothing=0.1, reduction="sum"),
                               rtol=1e-5, atol=1e-2)
    torch.testing.assert_close(nll.double(), F.cross_entropy(reference, target, reduction="sum"), rtol=1e-5, atol=1e-2)


@pytest.mark.parametrize("smoothing", [-0.1, 1.0, 1.5])
def test_label_smoothed_loss_rejects_smoothing_outside_unit_interval(smoothing):
    """Smoothing outside [0, 1) is rejected, naming the value."""
    with pytest.raises(ValueError, match=rf"label smoothing must be in \[0, 1\), got {smoothing}"):
        label_smoothed_loss(torch.zeros(2, 5), torch.tensor([1, 2]), smoothing)


def test_noam_rate_warms_up_then_decays():
    """The rate grows linearly to its peak at step `warmup`, then decays as 1/sqrt(step)."""
    d, w = 512, 4000
    assert noam_rate(1, d, w) == pytest.approx(d ** -0.5 * w ** -1.5)
    assert noam_rate(w, d, w) == pytest.approx(d ** -0.5 * w ** -0.5)
    assert noam_rate(2 * w, d, w) == pytest.approx(noam_rate(w, d, w) / math.sqrt(2))
    assert noam_rate(0, d, w) == noam_rate(1, d, w)
    assert noam_rate(10, d, w, factor=2.0) == pytest.approx(2 * noam_rate(10, d, w))


# --- TrainConfig ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value, message", [
    ("max_tokens", 0, "must be a positive integer"), ("accumulate", -1, "must be a positive integer"),
    ("max_steps", 0, "must be a positive integer"), ("warmup", 0, "must be a positive integer"),
    ("keep_last", 0, "must be a positive integer"), ("max_tokens", 2.5, "must be a positive integer"),
    ("max_minutes", -1.0, "must not be negative"), ("lr_factor", -0.5, "must not be negative"),
    ("clip_grad_norm", -1.0, "must not be negative"), ("eval_every", -1, "must not be negative"),
    ("label_smoothing", 1.0, r"must be in \[0, 1\)"), ("label_smoothing", -0.1, r"must be in \[0, 1\)"),
])
def test_train_config_rejects_bad_values(field, value, message):
    """Non-positive sizes, negative amounts and smoothing outside [0, 1) are rejected, naming the field and value."""
    with pytest.raises(ValueError, match=rf"^{field} {message}, got {value}"):
        TrainConfig(**{field: value})
    with pytest.raises(ValueError, match=rf"^{field} {message}"):
        TrainConfig.from_dict({field: value})


def test_train_config_from_dict():
    """from_dict round-trips asdict and rejects unknown keys, naming each of them."""
    cfg = TrainConfig(max_tokens=100, accumulate=3, precision="bf16", seed=7)
    assert TrainConfig.from_dict(asdict(cfg)) == cfg
    assert TrainConfig.from_dict({}) == TrainConfig()
    with pytest.raises(ValueError, match=r"unknown training setting\(s\): lr, max_tokenz"):
        TrainConfig.from_dict({"max_tokenz": 5, "lr": 1.0, "accumulate": 2})


@pytest.mark.parametrize("bf16, precision", [(True, "bf16"), (False, "fp32"), ("auto", "auto")])
def test_train_config_reads_the_older_bf16_key(bf16, precision):
    """Configs and checkpoints from before fp16 was a choice say `bf16` (true, false or "auto"): it maps to a
    precision, also next to a `precision` that agrees with it; a run's TOML default stays "auto" with either key."""
    assert TrainConfig.from_dict({"bf16": bf16}) == TrainConfig(precision=precision)
    assert TrainConfig.from_dict({"bf16": bf16, "precision": precision}).precision == precision
    assert RunConfig.from_dict({"train": {"bf16": bf16}}).train.precision == precision
    assert RunConfig.from_dict({}).train.precision == "auto" and RunConfig.from_dict(
        {"train": {"precision": "fp16"}}).train.precision == "fp16"


@pytest.mark.parametrize("settings, message", [
    ({"bf16": True, "precision": "fp16"}, r"^bf16 = True stands for precision 'bf16', but precision is 'fp16': "
                                          r"give precision alone"),
    ({"bf16": "auto", "precision": "fp32"}, r"^bf16 = 'auto' stands for precision 'auto', but precision is 'fp32'"),
    ({"bf16": "yes"}, r'^bf16 must be true, false or "auto", got \'yes\''),
    ({"bf16": 1}, r'^bf16 must be true, false or "auto", got 1'),
    ({"precision": "float16"}, r"^precision must be auto, bf16, fp16 or fp32, got 'float16'"),
])
def test_train_config_refuses_bad_or_disagreeing_precision_settings(settings, message):
    """A bad value, or bf16 and precision that disagree, is one error naming both."""
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_dict(settings)
    with pytest.raises(ValueError, match=message.replace("^", "^the configuration: ")):
        RunConfig.from_dict({"train": settings})


def test_trainer_rejects_empty_training_set():
    """A Trainer without training pairs is rejected."""
    with pytest.raises(ValueError, match="no training pairs"):
        Trainer(Transformer(model_config()), TrainConfig(), [], progress=False)


# --- gradient accumulation ---------------------------------------------------------------------------------------

def test_accumulated_micro_batches_equal_one_big_batch():
    """Three micro-batches in one train_step take the same optimizer step as one batch of all their sentences."""
    pairs = make_pairs(12, 1)
    cfg = TrainConfig(warmup=1, max_tokens=1000)  # a large first-step rate, so that a wrong step shows
    accumulated, single = new_trainer(cfg, pairs), new_trainer(cfg, pairs)
    before = params(single.model)
    assert_same_params(params(accumulated.model), before)
    # Adam's first step is about lr·sign(gradient): it would blow rounding noise in gradients that are zero in exact
    # arithmetic (the key biases') up to ±lr. A large ε makes the step proportional to the gradient instead.
    for t in (accumulated, single):
        t.optimizer.param_groups[0]["eps"] = 1e-2
    micro = [list(range(a, b)) for a, b in ((0, 3), (3, 8), (8, 12))]  # sentence indices of each micro-batch
    sizes = {make_batch([pairs[i] for i in m], accumulated.model.cfg).n_tgt_tokens for m in micro}
    assert len(sizes) > 1  # unequal micro-batches: per-batch averaging would show
    loss_acc = accumulated.train_step(micro)
    loss_one = single.train_step([list(range(12))])

    assert loss_acc == pytest.approx(loss_one, rel=1e-5)
    after = params(single.model)
    assert max((after[k] - before[k]).abs().max().item() for k in after) > 1e-2  # the step did move the weights
    for name, p in accumulated.model.named_parameters():
        torch.testing.assert_close(p, after[name], atol=1e-6, rtol=1e-5, msg=lambda m: f"{name}: {m}")
    # Adam's first moment is 0.1 × the gradient: the accumulated gradient equals the big batch's.
    state_acc, state_one = accumulated.optimizer.state_dict()["state"], single.optimizer.state_dict()["state"]
    for i in state_one:
        torch.testing.assert_close(state_acc[i]["exp_avg"], state_one[i]["exp_avg"], atol=1e-8, rtol=1e-4)
    for t in (accumulated, single):
        assert t.state.step == 1 and t.scheduler.last_epoch == 1
        assert t.optimizer.param_groups[0]["lr"] == pytest.approx(noam_rate(2, 32, 1))
        assert all(p.grad is None for p in t.model.parameters())


# --- compiling the step --------------------------------------------------------------------------------------------

def test_compiled_step_computes_the_eager_loss_and_gradients():
    """compile="on": the trainer's step runs through torch.compile (inductor); on a batch, its loss and gradients are
    the eager step's up to rounding, and training goes on over batches of other shapes."""
    pairs = make_pairs(40, 3)
    t = new_trainer(TrainConfig(max_tokens=64, max_steps=4, warmup=2, compile="on"), pairs, seed=5)
    t.start()
    assert t.compiling == {"setting": "on", "compiled": True, "reason": "set explicitly"}
    assert isinstance(t.loss_fn, torch._dynamo.eval_frame.OptimizedModule)
    batch = make_batch(pairs[:6], t.model.cfg)
    found = {}
    for name, loss_fn in (("eager", t.loss_fn._orig_mod), ("compiled", t.loss_fn)):
        loss, _ = loss_fn(batch.src, batch.tgt_in, batch.tgt_out, batch.target_rows)
        loss.backward()
        found[name] = [loss.detach(), *(p.grad.clone() for p in t.model.parameters())]
        t.model.zero_grad(set_to_none=True)
    for name, compiled, eager in zip(["loss", *(n for n, _ in t.model.named_parameters())], *found.values()):
        torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5, msg=name)
    shapes, stream = set(), t.micro_batches()
    for indices, _ in (next(stream) for _ in range(4)):
        shapes.add(make_batch([pairs[i] for i in indices], t.model.cfg).tgt_in.shape)
        assert math.isfinite(t.train_step([indices]))
    assert len(shapes) > 1  # the graph met other shapes


# --- exact resumption --------------------------------------------------------------------------------------------

RESUME_CASES = {
    # 20 pairs at max_tokens 24 make 7 micro-batches an epoch: steps of 2 straddle epochs; step 6 is mid-epoch 1
    "mid_epoch": dict(n_pairs=20, cfg=dict(accumulate=2, eval_every=3), steps=12, half=6),
    # 16 pairs make 6 micro-batches an epoch: 3 steps; checkpoints at each epoch's end, step 3 ends epoch 0
    "epoch_end": dict(n_pairs=16, cfg=dict(accumulate=2, eval_every=0), steps=9, half=3),
    # fp16 from a scale so large that the first steps overflow and are skipped, then grows every 3 steps: the
    # scaler's state (scale, growth tracker, interval) must travel with the checkpoint
    "fp16": dict(n_pairs=20, cfg=dict(accumulate=2, eval_every=3, precision="fp16"), steps=12, half=6,
                 scaler=dict(init_scale=2.0**22, growth_interval=3)),
}


@pytest.mark.parametrize("case", RESUME_CASES.values(), ids=RESUME_CASES.keys())
def test_resume_is_exact(case, tmp_path):
    """Training N/2 steps, resuming in a new process-like Trainer and training to N equals training N straight."""
    pairs, valid = make_pairs(case["n_pairs"], 0), make_pairs(6, 99)
    model_cfg = model_config(dropout=0.1)
    cfg = TrainConfig(max_tokens=24, warmup=4, lr_factor=2.0, max_steps=case["steps"], keep_last=10, **case["cfg"])

    straight = new_trainer(cfg, pairs, seed=0, model_cfg=model_cfg, valid_pairs=valid)
    if "scaler" in case:
        straight.scaler = torch.amp.GradScaler("cpu", **case["scaler"])
    straight.fit()

    first = new_trainer(replace(cfg, max_steps=case["half"]), pairs, seed=0, model_cfg=model_cfg,
                        valid_pairs=valid, out_dir=tmp_path)
    if "scaler" in case:
        first.scaler = torch.amp.GradScaler("cpu", **case["scaler"])
    first.fit()
    state = json.loads((first.latest_checkpoint() / "trainer.json").read_text())
    n_batches = len(first.sampler.batches(state["epoch"]))
    assert state["step"] == case["half"]
    assert straight.state.step * cfg.accumulate > 2 * n_batches  # the run spans more than two epochs
    if cfg.eval_every:
        assert 0 < state["position"] < n_batches  # the checkpoint falls mid-epoch
    else:
        assert state["position"] == n_batches  # the checkpoint falls on an epoch's end

    # Another seed: a different initialisation and dropout stream unless resume restores them.
    resumed = new_trainer(cfg, pairs, seed=12345, model_cfg=model_cfg, valid_pairs=valid, out_dir=tmp_path)
    assert resumed.resume() == first.latest_checkpoint()
    resumed.fit()

    assert resumed.state.step == straight.state.step == case["steps"]
    assert (resumed.state.epoch, resumed.state.position, resumed.state.tokens_seen) == (straight.state.epoch, straight.state.position,
                                                                      straight.state.tokens_seen)
    assert_same_params(params(resumed.model), params(straight.model))
    assert_same_optimizer(resumed.optimizer, straight.optimizer)
    assert resumed.scheduler.state_dict() == straight.scheduler.state_dict()
    assert resumed.scaler.state_dict() == straight.scaler.state_dict()
    assert without_timing(resumed.state.metrics) == without_timing(straight.state.metrics)
    if "scaler" in case:  # steps were skipped, and the checkpoint's scale is not the default one
        assert straight.optimizer.state_dict()["state"][0]["step"] < straight.state.step
        assert state["grad_scaler"]["scale"] != torch.amp.GradScaler("cpu").get_scale()
        assert state["grad_scaler"]["growth_interval"] == 3
    assert [row["step"] for row in straight.state.metrics][-1] == case["steps"]
    assert all("valid_loss" in row for row in straight.state.metrics)


def test_checkpoint_between_evaluations_keeps_running_train_loss(tmp_path):
    """A checkpoint written between evaluations carries the running train loss, so the next row is the same."""
    cfg = TrainConfig(max_tokens=24, warmup=2, eval_every=10)
    pairs = make_pairs(20, 0)
    t = new_trainer(cfg, pairs, out_dir=tmp_path)
    t.model.train()
    stream = t.micro_batches()
    for _ in range(3):
        t.train_step([next(stream)[0]])
    t.save_checkpoint()
    resumed = new_trainer(cfg, pairs, seed=1, out_dir=tmp_path)
    resumed.resume()
    assert without_timing([resumed.validate_and_save()]) == without_timing([t.validate_and_save()])
    assert resumed.state.metrics[-1]["train_loss"] > 0


# --- checkpoint files ----------------------------------------------------------------------------------------------

def test_checkpoint_files(tmp_path, monkeypatch):
    """Checkpoints are step-NNNNNNN folders of safetensors and JSON; `latest` names the newest; keep_last are kept."""
    vocab = tmp_path / "vocab.json"  # an extra file that every checkpoint carries
    vocab.write_text(json.dumps({"words": list(range(V))}))
    out = tmp_path / "run"
    t = new_trainer(TrainConfig(max_tokens=64, max_steps=4, warmup=2, eval_every=1, keep_last=2), make_pairs(12, 0),
                    out_dir=out, extra_files=[vocab])
    t.fit()
    ckpts = out / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["latest", "step-0000003", "step-0000004"]  # no temporaries
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "metrics.csv"]
    assert [int(row["step"]) for row in csv.DictReader((out / "metrics.csv").read_text().splitlines())] == [1, 2, 3, 4]
    assert (ckpts / "latest").read_text().strip() == "step-0000004"
    assert t.latest_checkpoint() == ckpts / "step-0000004"

    for folder in (ckpts / "step-0000003", ckpts / "step-0000004"):
        assert {p.name for p in folder.iterdir()} == CHECKPOINT_FILES | {vocab.name}
        assert (folder / vocab.name).read_bytes() == vocab.read_bytes()
        for name in ("config.json", "trainer.json", vocab.name):
            json.loads((folder / name).read_text())  # plain JSON
        for name in ("model.safetensors", "optimizer.safetensors", "rng.safetensors"):
            with safe_open(str(folder / name), framework="pt") as f:
                assert list(f.keys())
    state = json.loads((ckpts / "step-0000004" / "trainer.json").read_text())
    assert state["step"] == 4 and state["train_config"] == asdict(t.cfg)
    assert read_config(ckpts / "step-0000004") == t.model.cfg
    with safe_open(str(ckpts / "step-0000004" / "model.safetensors"), framework="pt") as f:
        assert set(f.keys()) <= set(t.model.state_dict())  # tied weights are stored once

    # Nothing is unpickled on the way back: loading works with torch.load and pickle disabled.
    def refuse(*args, **kwargs):
        raise AssertionError("a checkpoint must not need unpickling")
    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr("pickle.load", refuse)
    monkeypatch.setattr("pickle.loads", refuse)
    assert_same_params(params(load_model_dir(ckpts / "step-0000004")), params(t.model))
    other = new_trainer(t.cfg, make_pairs(12, 0), seed=5, out_dir=out)
    other.resume()
    assert_same_params(params(other.model), params(t.model))
    assert_same_optimizer(other.optimizer, t.optimizer)


def test_save_model_files_round_trip(tmp_path):
    """save_model_files then load_model_dir gives back the same weights and config, in eval mode."""
    torch.manual_seed(3)
    model = Transformer(model_config(tie_embeddings=False, positional="learned")).train()
    save_model_files(model, tmp_path)
    loaded = load_model_dir(tmp_path)
    assert loaded.cfg == model.cfg and not loaded.training
    assert_same_params(params(loaded), params(model))


# --- corrupt or mismatched checkpoints ----------------------------------------------------------------------------

def test_truncated_weights_raise_checkpoint_error(checkpoint_copy, checkpoint):
    """A model.safetensors cut to half its size is reported as truncated, by load_model_dir and by resume."""
    path = checkpoint_copy / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.safetensors is truncated or corrupt"):
        load_model_dir(checkpoint_copy)
    t = new_trainer(TrainConfig(max_tokens=64), make_pairs(12, 0), out_dir=checkpoint_copy.parent.parent)
    with pytest.raises(CheckpointError, match=r"truncated or corrupt"):
        t.resume()


def test_missing_config_raises_checkpoint_error(checkpoint_copy):
    """A folder without config.json is not a checkpoint, and the error says which file is missing."""
    (checkpoint_copy / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"is not a checkpoint: config\.json is missing"):
        load_model_dir(checkpoint_copy)


def test_missing_weights_raise_checkpoint_error(checkpoint_copy):
    """A folder without model.safetensors is not a checkpoint, and the error says which file is missing."""
    (checkpoint_copy / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"is not a checkpoint: model\.safetensors is missing"):
        load_model_dir(checkpoint_copy)


@pytest.mark.parametrize("content, detail", [
    (lambda d: {**d, "d_model": 30}, "d_model=30 must be divisible by n_heads=4"),
    (lambda d: {**d, "dropout": 1.5}, r"dropout must be in \[0, 1\)"),
    (lambda d: {**d, "n_layers": 6}, "n_layers"),
    (lambda d: "{not json", ""),
    (lambda d: [1, 2], ""),
], ids=["indivisible", "dropout", "unknown_key", "not_json", "not_a_dict"])
def test_invalid_config_raises_checkpoint_error(checkpoint_copy, content, detail):
    """A config.json that is not valid JSON or not a valid configuration is reported, with the reason."""
    path = checkpoint_copy / "config.json"
    new = content(json.loads(path.read_text()))
    path.write_text(new if isinstance(new, str) else json.dumps(new))
    with pytest.raises(CheckpointError, match=rf"config\.json is not a valid model configuration: .*{detail}"):
        load_model_dir(checkpoint_copy)


def test_weights_that_do_not_fit_the_config_raise_checkpoint_error(checkpoint_copy):
    """Weights of a d_model-64 model under the d_model-32 config.json are reported as not fitting."""
    torch.manual_seed(0)
    save_model_files(Transformer(model_config(d_model=64)), checkpoint_copy)
    (checkpoint_copy / "config.json").write_text(json.dumps(model_config().to_dict()))
    with pytest.raises(CheckpointError, match=r"model\.safetensors does not fit the model of its config\.json"):
        load_model_dir(checkpoint_copy)


def test_resume_with_another_model_config_raises_checkpoint_error(checkpoint_copy):
    """Resuming a d_model-32 checkpoint into a d_model-64 model is refused before anything is loaded."""
    t = new_trainer(TrainConfig(max_tokens=64), make_pairs(12, 0), model_cfg=model_config(d_model=64),
                    out_dir=checkpoint_copy.parent.parent)
    before = params(t.model)
    with pytest.raises(CheckpointError, match="was trained with a different model configuration"):
        t.resume()
    assert_same_params(params(t.model), before)
    assert t.state.step == 0


@pytest.mark.parametrize("name", ["trainer.json", "optimizer.safetensors", "rng.safetensors"])
@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_incomplete_training_checkpoint_raises_checkpoint_error(checkpoint_copy, name, damage):
    """Without an intact trainer, optimizer or RNG file, the model still loads but resuming says what is wrong."""
    path = checkpoint_copy / name
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    load_model_dir(checkpoint_copy)
    t = new_trainer(TrainConfig(max_tokens=64), make_pairs(12, 0), out_dir=checkpoint_copy.parent.parent)
    with pytest.raises(CheckpointError, match="is not a complete training checkpoint"):
        t.resume()


@pytest.mark.parametrize("key", ["scheduler", "tokens_seen"])
def test_trainer_json_missing_a_field_raises_checkpoint_error(checkpoint_copy, key):
    """A trainer.json that lacks a field (say, one written before tokens_seen existed) is a CheckpointError."""
    path = checkpoint_copy / "trainer.json"
    state = json.loads(path.read_text())
    assert key in state
    del state[key]
    path.write_text(json.dumps(state))
    t = new_trainer(TrainConfig(max_tokens=64), make_pairs(12, 0), out_dir=checkpoint_copy.parent.parent)
    with pytest.raises(CheckpointError, match="is not a complete training checkpoint"):
        t.resume()


def test_resume_without_checkpoint_raises_checkpoint_error(tmp_path, checkpoint_copy):
    """Resuming from an empty run folder, or from a `latest` naming a deleted folder, is a clear error."""
    t = new_trainer(TrainConfig(max_tokens=64), make_pairs(12, 0), out_dir=tmp_path / "empty")
    with pytest.raises(CheckpointError, match="no checkpoint to resume from"):
        t.resume()
    shutil.rmtree(checkpoint_copy)
    t = new_trainer(TrainConfig(max_tokens=64), make_pairs(12, 0), out_dir=checkpoint_copy.parent.parent)
    with pytest.raises(CheckpointError, match="no checkpoint to resume from"):
        t.resume()
    with pytest.raises(CheckpointError, match="no checkpoint to resume from"):
        t.resume(tmp_path / "nowhere")


def test_resume_without_out_dir_raises_checkpoint_error():
    """A Trainer without an out_dir has no checkpoint to resume from: CheckpointError, not a TypeError."""
    t = new_trainer(TrainConfig(max_tokens=64), make_pairs(12, 0))
    with pytest.raises(CheckpointError, match="no checkpoint to resume from"):
        t.resume()


# --- atomic writes -----------------------------------------------------------------------------------------------

def test_write_atomically_leaves_previous_folder_on_crash(tmp_path):
    """If writing fails midway, the previous folder is untouched and loads; the new content never appears."""
    torch.manual_seed(0)
    good = Transformer(model_config())
    folder = write_atomically(tmp_path / "model", lambda tmp: save_model_files(good, tmp))
    before = file_hashes(folder)

    def crash(tmp: Path) -> None:
        torch.manual_seed(1)
        save_model_files(Transformer(model_config()), tmp)
        (tmp / "model.safetensors").write_bytes(b"half a file")
        raise RuntimeError("killed while writing")

    with pytest.raises(RuntimeError, match="killed while writing"):
        write_atomically(folder, crash)
    assert file_hashes(folder) == before
    assert_same_params(params(load_model_dir(folder)), params(good))

    new = write_atomically(folder, lambda tmp: (tmp / "x.txt").write_text("new"))  # a later write replaces it whole
    assert new == folder and sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert [p.name for p in folder.iterdir()] == ["x.txt"]


def test_failed_checkpoint_keeps_latest(tmp_path, monkeypatch):
    """A save_checkpoint that fails after writing the model leaves `latest` and the previous checkpoint intact."""
    cfg = TrainConfig(max_tokens=64, max_steps=2, warmup=2, eval_every=1)
    pairs = make_pairs(12, 0)
    t = new_trainer(cfg, pairs, out_dir=tmp_path)
    t.fit()
    ckpts = tmp_path / "checkpoints"
    good = ckpts / "step-0000002"
    before = file_hashes(good)
    saved_params = params(t.model)

    def failing_save_file(tensors, filename, *args, **kwargs):
        assert (Path(filename).parent / "model.safetensors").is_file()  # the model was written first
        raise OSError(28, "No space left on device")

    t.model.train()
    t.train_step([next(t.micro_batches())[0]])
    monkeypatch.setattr(checkpoint_module, "save_file", failing_save_file)
    with pytest.raises(OSError, match="No space left"):
        t.save_checkpoint()
    monkeypatch.undo()

    assert (ckpts / "latest").read_text() == "step-0000002" and t.latest_checkpoint() == good
    assert not (ckpts / "step-0000003").exists()
    assert sorted(p.name for p in ckpts.glob("step-*")) == ["step-0000001", "step-0000002"]
    assert file_hashes(good) == before
    fresh = new_trainer(cfg, pairs, seed=9, out_dir=tmp_path)
    assert fresh.resume() == good and fresh.state.step == 2
    assert_same_params(params(fresh.model), saved_params)


# --- non-finite loss ---------------------------------------------------------------------------------------------

def poison_batch_loss(monkeypatch, from_call: int) -> None:
    "Make the trainer's batch_loss return an infinite loss from its `from_call`-th call on."
    calls = [0]
    real = Transformer.batch_loss

    def patched(*args, **kwargs):
        calls[0] += 1
        loss, nll = real(*args, **kwargs)
        return (loss * math.inf, nll) if calls[0] >= from_call else (loss, nll)

    monkeypatch.setattr(Transformer, "batch_loss", patched)


def test_non_finite_loss_stops_training(tmp_path, monkeypatch):
    """An infinite loss raises NonFiniteLossError naming the step and the last checkpoint; nothing is updated."""
    cfg = TrainConfig(max_tokens=32, accumulate=2, max_steps=2, warmup=2, eval_every=2)
    t = new_trainer(cfg, make_pairs(12, 0), out_dir=tmp_path)
    t.fit()
    good = tmp_path / "checkpoints" / "step-0000002"
    assert t.latest_checkpoint() == good
    snapshot, on_disk, optimizer_before = params(t.model), file_hashes(good), t.optimizer.state_dict()

    t.cfg = replace(cfg, max_steps=4)  # train on, into a loss that turns infinite
    poison_batch_loss(monkeypatch, from_call=2)  # step 3's second micro-batch: the first one's gradient is in
    with pytest.raises(NonFiniteLossError, match=r"the loss became inf at step 3: training stopped before applying "
                                                 r"it\. The last checkpoint \(.*step-0000002\) is intact"):
        t.fit()
    assert t.state.step == 2 and len(t.state.metrics) == 1
    assert t.optimizer.param_groups[0]["lr"] == pytest.approx(noam_rate(3, 32, 2))
    assert t.optimizer.state_dict()["state"][0]["step"] == optimizer_before["state"][0]["step"] == 2
    assert_same_params(params(t.model), snapshot)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step-0000002"]
    assert file_hashes(good) == on_disk
    assert_same_params(params(load_model_dir(good)), snapshot)
    with pytest.raises(NonFiniteLossError, match="at step 3"):  # a direct train_step says the same
        t.train_step([next(t.micro_batches())[0]])
    assert_same_params(params(t.model), snapshot)


def test_non_finite_loss_without_checkpoint_says_so(monkeypatch):
    """Without any checkpoint written, the error says there is none yet."""
    t = new_trainer(TrainConfig(max_tokens=32, max_steps=2, warmup=2), make_pairs(12, 0))
    poison_batch_loss(monkeypatch, from_call=1)
    with pytest.raises(NonFiniteLossError, match=r"at step 1: .*\(none written yet\)"):
        t.fit()


def test_recovery_after_non_finite_loss_is_clean(tmp_path, monkeypatch):
    """After NonFiniteLossError, resuming the last checkpoint on the same model trains exactly like a fresh resume."""
    cfg = TrainConfig(max_tokens=32, accumulate=2, max_steps=4, warmup=2, eval_every=2)
    pairs = make_pairs(12, 0)
    failed = new_trainer(cfg, pairs, out_dir=tmp_path)
    poison_batch_loss(monkeypatch, from_call=6)
    with pytest.raises(NonFiniteLossError):
        failed.fit()
    monkeypatch.undo()

    retry_cfg = replace(cfg, lr_factor=0.5)  # the error message's advice: a smaller lr_factor
    again = new_trainer(retry_cfg, pairs, model=failed.model, out_dir=tmp_path)
    again.resume()
    again.fit()
    fresh = new_trainer(retry_cfg, pairs, seed=7, out_dir=tmp_path)
    fresh.resume(tmp_path / "checkpoints" / "step-0000002")
    fresh.fit()
    assert_same_params(params(again.model), params(fresh.model))


# --- evaluation, bf16, fp16, time limit ------------------------------------------------------------------------------

def test_evaluate_reports_token_mean_nll_and_perplexity():
    """evaluate's loss is the NLL per target token over all pairs, ppl = exp(loss), and the model's mode is kept."""
    torch.manual_seed(0)
    model = Transformer(model_config(dropout=0.3)).train()
    pairs = make_pairs(15, 4)
    result = evaluate(model, pairs, max_tokens=20)
    assert model.training
    assert result["ppl"] == pytest.approx(math.exp(result["loss"]), rel=1e-12)
    model.eval()
    with torch.no_grad():
        batch = make_batch(pairs, model.cfg)
        nll = model.batch_loss(batch, label_smoothing(0.1))[1].item()
    assert result["loss"] == pytest.approx(nll / batch.n_tgt_tokens, rel=1e-5)
    assert 1.0 < result["ppl"] < 5 * V


def test_bf16_training_runs_on_cpu():
    """bf16 autocast trains a couple of steps on CPU with finite losses and finite, updated weights."""
    t = new_trainer(TrainConfig(max_tokens=64, max_steps=2, warmup=2, precision="bf16", eval_every=1),
                    make_pairs(12, 0), valid_pairs=make_pairs(4, 5))
    before = params(t.model)
    metrics = t.fit()
    assert t.state.step == 2 and [row["step"] for row in metrics] == [1, 2]
    assert all(math.isfinite(row["train_loss"]) and math.isfinite(row["valid_loss"]) for row in metrics)
    after = params(t.model)
    assert all(torch.isfinite(p).all() for p in after.values())
    assert any(not torch.equal(after[k], before[k]) for k in after)


def cpu_autocasts_fp16() -> bool:
    "Whether this torch autocasts matrix products to float16 on the CPU."
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            return (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float16
    except RuntimeError:
        return False


needs_cpu_fp16 = pytest.mark.skipif(not cpu_autocasts_fp16(), reason="this torch cannot autocast fp16 on the CPU")


def reverse_pairs(n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    "n sequences of 3 to 8 of the words 3..12, each paired with itself reversed: a task a tiny model learns."
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(3, 13, (int(k),), generator=g).tolist() for k in torch.randint(3, 9, (n,), generator=g)]
    return [(s, s[::-1]) for s in seqs]


@needs_cpu_fp16
def test_fp16_with_a_gradient_scaler_learns_on_cpu():
    """fp16 autocast with the gradient scaler learns to reverse sequences: the validation loss falls from about
    ln 10 (a guess among 10 words) to a quarter of it, well within a generous cap; the scale is in every row."""
    def learned(t: Trainer) -> bool:
        return t.state.metrics[-1]["valid_loss"] < 0.25 * math.log(10)

    t = new_trainer(TrainConfig(max_tokens=512, max_steps=1000, warmup=100, lr_factor=0.25, eval_every=25,
                                precision="fp16"), reverse_pairs(2000, 0), model_cfg=model_config(),
                    valid_pairs=reverse_pairs(200, 1), stop_when=learned)
    metrics = t.fit()  # about 200 steps on this project's machines (AVX-512 or AVX2 kernels)
    assert t.scaler.is_enabled() and learned(t) and metrics[0]["valid_loss"] > 0.8 * math.log(10)
    assert t.state.step < 1000 and all(row["loss_scale"] >= 1.0 for row in metrics)


@needs_cpu_fp16
def test_fp16_overflow_skips_the_step_without_raising():
    """A scale so large that the scaled gradients overflow float16: the scaler skips the update (weights and Adam's
    state untouched), halves its scale, and the step still counts; the next step, at a scale that fits, applies."""
    t = new_trainer(TrainConfig(max_tokens=64, warmup=2, precision="fp16"), make_pairs(12, 0))
    t.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40)
    t.model.train()
    stream, before = t.micro_batches(), params(t.model)
    loss = t.train_step([next(stream)[0]])
    assert math.isfinite(loss) and t.state.step == 1 and t.scheduler.last_epoch == 1
    assert t.scaler.get_scale() == 2.0**39
    assert_same_params(params(t.model), before)
    assert all(int(state["step"]) == 0 for state in t.optimizer.state.values())
    t.scaler.update(2.0**10)  # a scale that fits
    t.train_step([next(stream)[0]])
    assert any(not torch.equal(p, before[k]) for k, p in params(t.model).items())
    assert all(int(state["step"]) == 1 for state in t.optimizer.state.values())


@needs_cpu_fp16
def test_fp16_non_finite_loss_still_stops_training(monkeypatch):
    """In fp16 too, a non-finite *loss* is an error, not a step for the scaler to skip."""
    t = new_trainer(TrainConfig(max_tokens=32, max_steps=2, warmup=2, precision="fp16"), make_pairs(12, 0))
    poison_batch_loss(monkeypatch, from_call=1)
    with pytest.raises(NonFiniteLossError, match=r"at step 1: "):
        t.fit()


@needs_cpu_fp16
def test_fp16_clips_the_unscaled_gradient(monkeypatch):
    """With clipping, the scaler unscales the gradients first: the norm that is clipped is the fp32 run's, not 2^16
    times it."""
    norms = {}

    def recording(real):
        def clip(parameters, max_norm):
            norms[precision] = real(parameters, max_norm).item()
        return clip

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording(torch.nn.utils.clip_grad_norm_))
    for precision in ("fp32", "fp16"):
        t = new_trainer(TrainConfig(max_tokens=64, warmup=2, clip_grad_norm=1e-3, precision=precision),
                        make_pairs(12, 0))
        t.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, enabled=precision == "fp16")
        t.train_step([next(t.micro_batches())[0]])
    assert norms["fp16"] == pytest.approx(norms["fp32"], rel=0.02)


def test_max_minutes_stops_training_early(tmp_path):
    """A tiny max_minutes stops training after a few steps, and a final checkpoint is still written."""
    t = new_trainer(TrainConfig(max_tokens=64, max_steps=200, max_minutes=1e-4, warmup=2), make_pairs(12, 0),
                    out_dir=tmp_path)
    metrics = t.fit()
    assert 1 <= t.state.step < 200
    assert t.state.train_seconds >= 60 * 1e-4
    assert metrics[-1]["step"] == t.state.step
    assert t.latest_checkpoint() == tmp_path / "checkpoints" / f"step-{t.state.step:07d}"
    assert json.loads((t.latest_checkpoint() / "trainer.json").read_text())["step"] == t.state.step


def test_cooldown_takes_the_rate_linearly_to_zero_over_the_last_part_of_the_steps():
    """cooldown 0.5 of 8 steps: the paper's rate for steps 1-4, then × 1 - used / 0.5 (the rate after step s is the one
    step s + 1 uses, once s of the 8 steps are done)."""
    t = new_trainer(TrainConfig(max_tokens=24, max_steps=8, warmup=3, eval_every=1, cooldown=0.5), make_pairs(20, 0))
    rates = [row["lr"] for row in t.fit()]
    assert rates == pytest.approx([noam_rate(s + 1, 32, 3) * min(1.0, (1 - s / 8) / 0.5) for s in range(1, 9)])
    assert rates[3] == pytest.approx(noam_rate(5, 32, 3)) and rates[-1] == 0.0


def test_cooldown_with_a_time_budget_follows_the_clock():
    """With max_minutes, the used fraction is the clock's when it is ahead of the steps': half of the minutes spent
    after 1 of 3 steps halves the rate at least (cooldown over the whole run)."""
    t = new_trainer(TrainConfig(max_tokens=24, max_steps=3, max_minutes=1.0, warmup=3, eval_every=1, cooldown=1.0),
                    make_pairs(20, 0))
    t.state.train_seconds = 30.0  # half of the budget already spent
    rates = [row["lr"] for row in t.fit()]
    assert 0 < rates[0] <= 0.5 * noam_rate(2, 32, 3)
    assert rates[0] < noam_rate(2, 32, 3) * (1 - 1 / 3)  # below what the steps alone would give


def test_cooldown_outside_0_1_is_refused():
    with pytest.raises(ValueError, match="cooldown must be a fraction"):
        TrainConfig(cooldown=1.5)


def test_metrics_rows():
    """Each evaluation row holds step, fractional epoch, train loss, the scheduled lr, time, and on_eval's values."""
    pairs = make_pairs(20, 0)  # 7 micro-batches an epoch at max_tokens 24
    t = new_trainer(TrainConfig(max_tokens=24, max_steps=5, warmup=3, eval_every=2), pairs,
                    valid_pairs=make_pairs(5, 1), on_eval=lambda tr: {"extra": float(tr.state.step)})
    metrics = t.fit()
    assert [row["step"] for row in metrics] == [2, 4, 5]  # the last one at the end of training
    assert [row["epoch"] for row in metrics] == pytest.approx([2 / 7, 4 / 7, 5 / 7])
    assert [row["lr"] for row in metrics] == pytest.approx([noam_rate(s + 1, 32, 3) for s in (2, 4, 5)])
    assert [row["extra"] for row in metrics] == [2.0, 4.0, 5.0]
    for row in metrics:
        assert set(row) == {"step", "epoch", "train_loss", "lr", "valid_loss", "valid_ppl", "extra"} | TIMING
        assert math.isfinite(row["train_loss"]) and row["valid_ppl"] == pytest.approx(math.exp(row["valid_loss"]))
        assert row["tokens_per_s"] > 0
