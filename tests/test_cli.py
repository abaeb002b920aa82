"""The `transformer` command end to end, as a user runs it: a tiny model trained for a few steps on Multi30k,
resumed, averaged, evaluated with a report (which the last chapter's functions then draw), and used to translate;
and every user mistake ends in one line on stderr with exit code 2, never a traceback."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from corpus import write_corpus

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
EXE = Path(sys.executable).parent / "transformer"
TINY = """preset = "tiny"
[train]
max_tokens = 2048
max_steps = 4
warmup = 10
eval_every = 2
keep_last = 3
[data]
vocab_size = 300
"""

pytestmark = pytest.mark.skipif(not (os.environ.get("MULTI30K_DIR") or DATA.is_dir()),
                                reason="needs the Multi30k files (MULTI30K_DIR or ../shared/data/multi30k)")


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    "Run the installed `transformer` executable."
    env = {**os.environ, "MULTI30K_DIR": os.environ.get("MULTI30K_DIR", str(DATA))}
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, input=stdin, env=env, timeout=600)


def assert_user_error(result: subprocess.CompletedProcess, *words: str) -> None:
    "Exit code 2, one line on stderr that contains `words`, no traceback."
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    "A tiny run: 4 steps, then resumed to 6, averaged, and evaluated with a report on 40 test sentences."
    root = tmp_path_factory.mktemp("cli")
    (root / "tiny.toml").write_text(TINY)
    assert cli("train", "--config", str(root / "tiny.toml"), "--out", str(root / "run"), "--quiet").returncode == 0
    resumed = cli("train", "--config", str(root / "tiny.toml"), "--out", str(root / "run"), "--quiet", "--resume",
                  "--max-steps", "6")
    assert resumed.returncode == 0, resumed.stderr
    assert cli("average", "--run", str(root / "run"), "--last", "2", "--out", str(root / "avg")).returncode == 0
    from transformer.data import load_split
    pairs = load_split("test2016", os.environ.get("MULTI30K_DIR", str(DATA)))[:40]
    (root / "src.de").write_text("\n".join(s for s, _ in pairs) + "\n")
    (root / "ref.en").write_text("\n".join(r for _, r in pairs) + "\n")
    evaluated = cli("evaluate", "--model", str(root / "avg"), "--src", str(root / "src.de"), "--ref",
                    str(root / "ref.en"), "--beam", "2", "--report", str(root / "report"), "--output", str(root / "hyp.en"))
    assert evaluated.returncode == 0, evaluated.stderr
    (root / "evaluate.out").write_text(evaluated.stdout)
    return root


def test_train_writes_checkpoints_metrics_and_tokenizer(run):
    """Training keeps the last 3 checkpoints, each a self-contained model folder, plus metrics and the tokenizer."""
    checkpoints = sorted(p.name for p in (run / "run" / "checkpoints").glob("step-*"))
    assert checkpoints == ["step-0000002", "step-0000004", "step-0000006"]
    assert (run / "run" / "checkpoints" / "latest").read_text() == "step-0000006"
    for name in ("model.safetensors", "config.json", "tokenizer.json", "optimizer.safetensors", "trainer.json"):
        assert (run / "run" / "checkpoints" / "step-0000006" / name).is_file()
    metrics = (run / "run" / "metrics.csv").read_text().splitlines()
    assert metrics[0].startswith("step,") and "valid_bleu" in metrics[0] and len(metrics) == 1 + 3
    record = json.loads((run / "run" / "run.json").read_text())
    assert record["provenance"]["commit"] and record["train"]["precision"] == "auto"
    assert record["precision"]["setting"] == "auto" and record["precision"]["precision"] in ("bf16", "fp16", "fp32")
    assert record["precision"]["reason"] and "torch kernels" in record["provenance"]["machine"]
    assert record["train"]["compile"] == "auto" and not record["compile"]["compiled"]  # a few steps: not worth it
    assert "too few to repay compiling" in record["compile"]["reason"] and record["compile"]["eager_step_s"] > 0
    sessions = record["load_average"]  # trained, then resumed: two sessions, each with its load as it began and ended
    assert len(sessions) == 2 and all(sorted(s) == ["end", "start"] for s in sessions), sessions
    assert all(len(v) == 3 and min(v) >= 0 for s in sessions for v in s.values()), sessions


def test_evaluate_prints_score_and_signature_and_writes_report(run):
    """evaluate prints the sacreBLEU line and signature, writes the translations and the report files."""
    out = (run / "evaluate.out").read_text().splitlines()
    assert out[0].startswith("BLEU = ") and out[1].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert len((run / "hyp.en").read_text().splitlines()) == 40
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert summary["averaged_checkpoints"] == ["step-0000004", "step-0000006"]
    assert summary["train_steps"] == 6 and summary["sacrebleu_signature"] == out[1]
    assert {v["beam"] for v in summary["variants"]} == {1, 2}


def test_report_draws_with_the_chapter_functions(run):
    """The last chapter's code path: load the report, draw the curves and every attention grid."""
    pytest.importorskip("altair")
    from transformer.report import attention_grid, curves_chart, load_report
    report = load_report(run / "report")
    assert len(report["samples"]) == 20 and list(report["samples"].columns) == ["source", "reference", "translation"]
    curves_chart(report["metrics"]).to_dict()
    for kind in ("encoder", "decoder", "cross"):
        spec = attention_grid(report["attention"], kind).to_dict()
        assert spec["facet"]["row"]["field"] == "layer"


def test_translate_from_arguments_file_and_stdin(run):
    """translate reads sentences from arguments, a file, or standard input, one output line per sentence."""
    args = cli("translate", "--model", str(run / "avg"), "--beam", "1", "Ein Hund.", "Zwei Katzen schlafen.")
    assert args.returncode == 0 and len(args.stdout.splitlines()) == 2
    (run / "in.de").write_text("Ein Hund.\nZwei Katzen schlafen.\n")
    from_file = cli("translate", "--model", str(run / "avg"), "--beam", "1", "--input", str(run / "in.de"))
    from_stdin = cli("translate", "--model", str(run / "avg"), "--beam", "1", stdin="Ein Hund.\nZwei Katzen schlafen.\n")
    assert args.stdout == from_file.stdout == from_stdin.stdout
    early = cli("translate", "--model", str(run / "avg"), "--beam", "2", "--early-exit", "Ein Hund.", "Zwei Katzen.")
    assert early.returncode == 0 and len(early.stdout.splitlines()) == 2, early.stderr


def test_translate_with_workers_gives_the_same_lines(run):
    """--workers decodes batches at once on threads: the same translations, in order; 0 workers is refused."""
    sentences = ["Ein Hund.", "Zwei Katzen schlafen.", "Ein Mann fährt Rad.", "Kinder spielen."]
    serial = cli("translate", "--model", str(run / "avg"), "--beam", "2", "--batch-size", "1", *sentences)
    threaded = cli("translate", "--model", str(run / "avg"), "--beam", "2", "--batch-size", "1", "--workers", "2",
                   *sentences)
    assert serial.returncode == threaded.returncode == 0 and len(serial.stdout.splitlines()) == 4, serial.stderr
    assert threaded.stdout == serial.stdout
    assert_user_error(cli("translate", "--model", str(run / "avg"), "--workers", "0", "Ein Hund."), "workers")


@pytest.mark.parametrize("config, words", [
    ('preset = "tiny"\n[train]\nmax_stepz = 3\n', ["unknown", "max_stepz"]),
    ('preset = "tiny"\n[train]\nwarmup = -5\n', ["warmup"]),
    ('preset = "tiny"\n[model]\ndropout = 1.5\n', ["dropout"]),
    ('preset = "enormous"\n', ["enormous"]),
    ('preset = "tiny"\n[train\n', ["not valid TOML"]),
])
def test_bad_config(tmp_path, config, words):
    """A bad key or value in the run configuration is named in one line."""
    (tmp_path / "bad.toml").write_text(config)
    assert_user_error(cli("train", "--config", str(tmp_path / "bad.toml"), "--out", str(tmp_path / "out")), *words)


def test_missing_data(tmp_path):
    """A data folder without the Multi30k files names the missing file and says what to do."""
    (tmp_path / "data").mkdir()
    assert_user_error(cli("train", "--preset", "tiny", "--out", str(tmp_path / "out"), "--data-dir",
                          str(tmp_path / "data")), "train.de.gz", "not found")


def test_corrupt_data(tmp_path):
    """A data file with the wrong checksum is refused by name."""
    data = tmp_path / "data"
    shutil.copytree(Path(os.environ.get("MULTI30K_DIR", str(DATA))), data)
    (data / "train.en.gz").write_bytes((data / "train.en.gz").read_bytes()[:1000])
    assert_user_error(cli("train", "--preset", "tiny", "--out", str(tmp_path / "out"), "--data-dir", str(data)),
                      "train.en.gz", "SHA-256")


def test_tokenizer_that_does_not_match_the_model(run, tmp_path):
    """A model folder whose tokenizer has another vocabulary size is refused."""
    model = tmp_path / "model"
    shutil.copytree(run / "avg", model)
    from tokenizers import Tokenizer
    from transformer.data import train_bpe
    train_bpe(["ein kleiner test", "a small test"] * 50, vocab_size=280).save(str(model / "tokenizer.json"))
    assert Tokenizer.from_file(str(model / "tokenizer.json")).get_vocab_size() != 300
    assert_user_error(cli("translate", "--model", str(model), "Hallo"), "tokenizer", "do not belong together")


def test_config_that_does_not_match_the_weights(run, tmp_path):
    """A config.json that does not describe the weights is refused."""
    model = tmp_path / "model"
    shutil.copytree(run / "avg", model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "d_ff": 2 * config["d_ff"]}))
    assert_user_error(cli("translate", "--model", str(model), "Hallo"), "does not fit")


def test_truncated_checkpoint(run, tmp_path):
    """A truncated model.safetensors is reported as truncated or corrupt, for translate and for average."""
    model = tmp_path / "model"
    shutil.copytree(run / "avg", model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert_user_error(cli("translate", "--model", str(model), "Hallo"), "truncated or corrupt")
    assert_user_error(cli("average", "--checkpoints", str(model), str(run / "avg"), "--out", str(tmp_path / "a")),
                      "truncated or corrupt")


@pytest.mark.parametrize("args, words", [
    (["translate", "--model", "{run}/avg", "--beam", "0", "x"], ["--beam"]),
    (["translate", "--model", "{run}/avg", "--alpha", "-1", "x"], ["--alpha"]),
    (["translate", "--model", "{run}/nowhere", "x"], ["not found"]),
    (["translate", "--model", "{run}/avg", "--input", "{run}/missing.txt"], ["missing.txt"]),
    (["evaluate", "--model", "{run}/avg", "--src", "{run}/src.de"], ["--src and --ref"]),
    (["evaluate", "--model", "{run}/avg", "--src", "{run}/src.de", "--ref", "{run}/hyp.en", "--split", "val"],
     ["either --split"]),
    (["train", "--preset", "tiny", "--out", "{run}/run"], ["already holds a run", "--resume"]),
    (["train", "--preset", "tiny", "--out", "{run}/fresh", "--resume"], ["nothing to resume"]),
    (["average", "--run", "{run}/avg", "--out", "{run}/x"], ["no checkpoints"]),
])
def test_usage_errors(run, args, words):
    """Each mistake ends in one line naming it, exit code 2."""
    assert_user_error(cli(*[a.format(run=run) for a in args]), *words)


def test_too_long_sentence(run):
    """A sentence longer than the positional table is refused with its number and length."""
    long = " ".join(["Hund"] * 400)
    assert_user_error(cli("translate", "--model", str(run / "avg"), "Ein Hund.", long), "sentence 2", "at most 255")


@pytest.mark.parametrize("flags, words", [
    (["--precision", "maybe"], ["invalid choice: 'maybe'"]), (["--bf16", "maybe"], ["invalid choice: 'maybe'"]),
    (["--precision", "fp16", "--bf16", "on"], ["bf16 = True stands for precision 'bf16'", "precision is 'fp16'"])])
def test_bad_precision_flags_are_refused_before_any_work(tmp_path, flags, words):
    """--precision takes auto, bf16, fp16 or fp32, the older --bf16 auto, on or off; anything else, or the two
    flags disagreeing, is refused before anything is written."""
    refused = cli("train", "--preset", "tiny", "--out", str(tmp_path / "run"), *flags)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert all(w in refused.stderr for w in words), refused.stderr
    assert not (tmp_path / "run").exists()


def test_precision_fp16_end_to_end(tmp_path):
    """`--precision fp16` trains a tiny run with the gradient scaler (its scale in run.json's record, the metrics and
    the checkpoint); resumed with the older `--bf16 auto`, the run keeps fp16 and its scaler's state."""
    config = write_corpus(tmp_path)
    trained = cli("train", "--config", str(config), "--out", str(tmp_path / "run"), "--precision", "fp16",
                  "--max-steps", "2", "--quiet")
    assert trained.returncode == 0, trained.stderr
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["train"]["precision"] == "fp16"
    assert record["precision"] == {"setting": "fp16", "precision": "fp16", "reason": "set explicitly"}
    assert "loss_scale" in (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0]
    resumed = cli("train", "--config", str(config), "--out", str(tmp_path / "run"), "--bf16", "auto", "--resume",
                  "--max-steps", "4", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    before, after = (json.loads((tmp_path / "run" / "checkpoints" / f"step-{step:07d}" / "trainer.json").read_text())
                     for step in (2, 4))
    assert after["train_config"]["precision"] == "auto" and after["precision"]["precision"] == "fp16"
    assert after["grad_scaler"]["scale"] == before["grad_scaler"]["scale"] == 2.0**16  # no overflow in this run,
    assert after["grad_scaler"]["_growth_tracker"] == before["grad_scaler"]["_growth_tracker"] + 2  # and restored
