"""What a user gives the commands, read as the user meant it: one output line per input line (split at \\n only,
a blank line left blank), NFD, a BOM or spaces translating as the plain sentence in Python and in the page's
JavaScript, an over-long sentence or bytes that are not UTF-8 named in one line; a resumed run only as it was
started; downloads that give up on a silent server and leave no partial files; and translating without loading
the training machinery."""

import codecs
import functools
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import unicodedata
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from corpus import write_corpus
from transformer import data
from transformer.checkpoint import save_model_files
from transformer.data import download_checked, read_parallel, sha256, train_bpe
from transformer.model import Transformer, TransformerConfig
from transformer.scoring import file_pairs
from transformer.translation import load_translator, translate_text

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXE = Path(sys.executable).parent / "transformer"
NODE = shutil.which("node")
PLAIN = "Ein kleines Mädchen läuft über die Straße."
GERMAN = [PLAIN, "Zwei Hunde spielen im Schnee.", "Ein Mann liest eine Zeitung.", "Das Ende."]


def cli(*args: str, stdin: bytes | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    "Run the installed `transformer` executable (this checkout's package: PYTHONPATH) on bytes of standard input."
    return subprocess.run([str(EXE), *args], capture_output=True, input=stdin if stdin is not None else b"",
                          timeout=timeout)


def one_line_error(result: subprocess.CompletedProcess, *words: str) -> str:
    "The single stderr line of a command that ended with exit code 2, checked for `words`."
    err = result.stderr.decode()
    assert result.returncode == 2, (result.returncode, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    "An untrained tiny model (64 positions) with a BPE tokenizer learned on a few German sentences."
    folder = tmp_path_factory.mktemp("model")
    tokenizer = train_bpe(GERMAN * 20, 300)
    size = tokenizer.get_vocab_size()
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=size, tgt_vocab_size=size, max_len=64))
    save_model_files(model.eval(), folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def translate(model_dir: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return cli("translate", "--model", str(model_dir), "--beam", "1", "--device", "cpu", *args, stdin=stdin)


def test_translate_gives_one_line_per_input_line(model_dir, tmp_path):
    """Four lines, one holding U+2028, one a form feed, \\x1c and \\x85, and a blank one, give four output lines,
    from a file and from standard input alike; the blank line's is empty, the others are their translations."""
    lines = ["Ein Hund.\u2028Zwei Katzen.", "Ein Mann\fliest\x1c die\x85 Zeitung.", "", "Das Ende."]
    text = ("\n".join(lines) + "\n").encode()
    (tmp_path / "in.de").write_bytes(text)
    from_file, from_stdin = translate(model_dir, "--input", str(tmp_path / "in.de")), translate(model_dir, stdin=text)
    assert from_file.returncode == from_stdin.returncode == 0, from_file.stderr
    out = from_file.stdout.decode().split("\n")[:-1]
    assert len(out) == 4 and out[2] == "", out
    model, tokenizer = load_translator(model_dir)
    assert out == translate_text(model, tokenizer, lines, beam_size=1)
    assert from_stdin.stdout == from_file.stdout


def test_empty_sentence_is_not_translated(model_dir):
    """An empty or blank sentence comes back empty (the untrained model says something for an empty source)."""
    model, tokenizer = load_translator(model_dir)
    assert translate_text(model, tokenizer, ["", " \t", "Das Ende."], beam_size=1)[:2] == ["", ""]


def test_nfd_bom_and_spaces_translate_as_the_plain_sentence(model_dir, tmp_path):
    """A sentence in NFD (as macOS writes it), after a BOM or between spaces translates as the plain NFC one, as
    an argument and from a file that starts with a UTF-8 BOM."""
    nfd = unicodedata.normalize("NFD", PLAIN)
    assert nfd != PLAIN
    args = translate(model_dir, PLAIN, nfd, "\ufeff" + PLAIN, f"  {PLAIN}\t")
    assert args.returncode == 0, args.stderr
    out = args.stdout.decode().splitlines()
    assert len(out) == 4 and len(set(out)) == 1, out
    (tmp_path / "mac.de").write_bytes(codecs.BOM_UTF8 + f"{nfd}\n".encode())
    assert translate(model_dir, "--input", str(tmp_path / "mac.de")).stdout.decode().splitlines() == out[:1]


def test_published_model_translates_nfd_as_nfc():
    """The published model (its tokenizer.json unchanged, pinned by SHA-256) gives the NFD sentence of the issue
    the NFC sentence's translation, not 'A small medium-sized contraption punched into the street.'."""
    from transformer.hub import PUBLISHED_MODELS

    folder = ROOT / "models" / "multi30k-de-en"
    assert sha256(folder / "tokenizer.json") == PUBLISHED_MODELS["multi30k-de-en"]["tokenizer.json"]
    model, tokenizer = load_translator(folder)
    nfc, nfd = translate_text(model, tokenizer, [PLAIN, unicodedata.normalize("NFD", PLAIN)])
    assert nfd == nfc and "girl" in nfc, (nfc, nfd)


@pytest.mark.skipif(NODE is None, reason="node is not installed: apt-get install nodejs")
def test_javascript_cleans_sentences_as_python(model_dir):
    """The page's tokenizer cleans a sentence before encoding it exactly as Python does: the same ids for NFD,
    BOMs and every character either language counts as white space at the ends."""
    from transformer.data import encode_sentences, read_tokenizer

    edges = ["\ufeff", " ", "\t", "\x1c", "\x1f", "\x85", "\u00a0", "\u2028", "\u3000", "\u200b", "\r\n"]
    texts = [unicodedata.normalize("NFD", PLAIN), *(f"{e}{PLAIN}{e}" for e in edges), "\ufeff \x85", "",
             "e\u0301 \u212b \uac00\u11a8 \u1e9b\u0323"]  # compositions NFC makes, Hangul and singletons included
    job = {"tokenizer": str(model_dir / "tokenizer.json"), "texts": texts, "ids": []}
    done = subprocess.run([NODE, str(HERE / "tokenizer_node.js")], input=json.dumps(job), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    python_ids = encode_sentences(read_tokenizer(model_dir / "tokenizer.json"), texts)
    assert json.loads(done.stdout)["sentences"] == python_ids
    assert python_ids[0] == python_ids[1] and python_ids[-3] == []


def test_one_over_long_sentence_leaves_the_others_translated(model_dir, tmp_path):
    """A sentence too long for the model is named on stderr in one line (exit code 2); every other line is
    translated, and its own output line stays, empty, so that the lines still match."""
    (tmp_path / "in.de").write_text(f"{GERMAN[1]}\n{'Hund ' * 100}\n{GERMAN[2]}\n", encoding="utf-8")
    result = translate(model_dir, "--input", str(tmp_path / "in.de"))
    one_line_error(result, "sentence 2 has", "at most 63")
    model, tokenizer = load_translator(model_dir)
    alone = translate_text(model, tokenizer, [GERMAN[1], GERMAN[2]], beam_size=1)
    assert result.stdout.decode().split("\n")[:-1] == [alone[0], "", alone[1]]


def test_input_that_is_not_utf8_is_named_with_its_line(model_dir, tmp_path):
    """Bytes that are not UTF-8 name the file (or standard input) and the line, in one line."""
    latin1 = "Grüße\n".encode() + "Müller\n".encode("latin-1")
    (tmp_path / "latin1.de").write_bytes(latin1)
    one_line_error(translate(model_dir, "--input", str(tmp_path / "latin1.de")), "latin1.de", "line 2", "0xfc")
    one_line_error(translate(model_dir, stdin=latin1), "standard input", "line 2")


def test_every_reader_of_user_text_splits_and_cleans_alike(tmp_path):
    """evaluate/tune's files (scoring.file_pairs) and a training corpus (read_parallel) are read as translate reads
    its input: a BOM dropped, lines split at \\n only; a training sentence is cleaned (NFC) as it is translated."""
    (tmp_path / "src.de").write_bytes(codecs.BOM_UTF8 + "Ein Hund.\u2028Zwei Katzen.\nDas Ende.\n".encode())
    (tmp_path / "ref.en").write_text("A dog. Two cats.\nThe end.\n", encoding="utf-8")
    assert file_pairs(tmp_path / "src.de", tmp_path / "ref.en")[0][0] == "Ein Hund.\u2028Zwei Katzen."
    (tmp_path / "mac.de").write_text(unicodedata.normalize("NFD", PLAIN) + "\n", encoding="utf-8")
    (tmp_path / "mac.en").write_text("A little girl runs across the street.\n", encoding="utf-8")
    assert read_parallel(tmp_path / "mac.de", tmp_path / "mac.en")[0][0][0] == PLAIN


def test_translate_loads_no_training_machinery(model_dir):
    """`transformer translate` and `import transformer.translation` load neither the trainer nor the
    data-parallel module (nor torch's elastic launcher)."""
    training = ["transformer.trainer", "transformer.distributed", "transformer.translation_run",
                "torch.distributed.elastic"]
    check = (f"import sys; {{}}; loaded = [m for m in {training!r} if m in sys.modules]; "
             "assert not loaded, loaded")
    run = ("from transformer.cli import main; "
           f"assert main(['translate', '--model', {str(model_dir)!r}, '--beam', '1', 'Ein Hund.']) == 0")
    for code in (run, "import transformer.translation"):
        done = subprocess.run([sys.executable, "-c", check.format(code)], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    "A tiny run of 4 steps on the generated corpus (its config: corpus/tiny.toml), in corpus/run."
    folder = tmp_path_factory.mktemp("corpus")
    config = write_corpus(folder)
    done = cli("train", "--config", str(config), "--out", str(folder / "run"), "--quiet", "--device", "cpu")
    assert done.returncode == 0, done.stderr
    return folder


@pytest.mark.parametrize("change, words", [
    (["--seed", "1"], ["train.seed is 0 there, 1 here"]),
    (["--config", "{folder}/smooth.toml"], ["train.label_smoothing is 0.1 there, 0.0 here"]),
    (["--config", "{folder}/swapped.toml"], ["data.train_src", "data.train_tgt"]),
    (["--config", "{folder}/batch.toml"], ["train.max_tokens is 256 there, 512 here"]),
])
def test_resume_with_other_settings_is_refused(trained, change, words):
    """Resuming with another seed, label smoothing, pair of files or batch size is refused in one
    line naming the settings, before the corpus is read; nothing of the run changes."""
    config = (trained / "tiny.toml").read_text()
    (trained / "smooth.toml").write_text(config.replace("[train]\n", "[train]\nlabel_smoothing = 0.0\n"))
    (trained / "swapped.toml").write_text(config.replace('"train.de"', '"x"').replace('"train.en"', '"train.de"')
                                          .replace('"x"', '"train.en"'))
    (trained / "batch.toml").write_text(config.replace("max_tokens = 256", "max_tokens = 512"))
    before = {p.name: p.stat().st_mtime_ns for p in (trained / "run").rglob("*")}
    args = [a.format(folder=trained) for a in change]
    base = [] if "--config" in args else ["--config", str(trained / "tiny.toml")]
    result = cli("train", *base, *args, "--out", str(trained / "run"), "--resume", "--quiet", "--device", "cpu")
    one_line_error(result, "holds a run with other settings", *words)
    assert {p.name: p.stat().st_mtime_ns for p in (trained / "run").rglob("*")} == before


def test_resume_without_config_continues_the_recorded_run(trained, tmp_path):
    """--resume without --config trains on as run.json records (not the defaults, Multi30k and the small
    preset), with a new budget, which run.json then records."""
    shutil.copytree(trained / "run", tmp_path / "run")
    for name in ("train.de", "train.en", "valid.de", "valid.en"):  # run.json names them by their full path
        assert (trained / name).is_file()
    result = cli("train", "--out", str(tmp_path / "run"), "--resume", "--max-steps", "6", "--quiet",
                 "--device", "cpu")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "run" / "checkpoints" / "step-0000006").is_dir()
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["train"]["max_steps"] == 6 and record["preset"] == "tiny"


def dead_pid() -> int:
    "The id of a process that has ended."
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture
def file_server(tmp_path):
    "A web server on 127.0.0.1 serving the folder tmp_path/served."
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *args: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield served, f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()


def test_download_removes_parts_that_interrupted_downloads_left(file_server, tmp_path):
    """The .part-PID file of a download whose process is gone is removed; a running process's is left alone."""
    served, url = file_server
    (served / "model.safetensors").write_bytes(b"weights" * 1000)
    target = tmp_path / "cache" / "model.safetensors"
    target.parent.mkdir()
    stale, live = target.with_suffix(f".part-{dead_pid()}"), target.with_suffix(f".part-{os.getppid()}")
    stale.write_bytes(b"half"), live.write_bytes(b"busy")
    download_checked(f"{url}/model.safetensors", target, sha256(served / "model.safetensors"), "--model")
    assert target.read_bytes() == b"weights" * 1000
    assert not stale.exists() and live.exists()


def test_an_interrupted_download_leaves_no_part(file_server, tmp_path, monkeypatch):
    """Ctrl-C in the middle of a download leaves no .part file behind."""
    served, url = file_server
    (served / "big.bin").write_bytes(b"x" * 100_000)

    def interrupted(source, target, *args):
        target.write(source.read(1000))
        raise KeyboardInterrupt

    monkeypatch.setattr(data, "shutil", SimpleNamespace(copyfileobj=interrupted))  # the download's copy only
    with pytest.raises(KeyboardInterrupt):
        download_checked(f"{url}/big.bin", tmp_path / "big.bin", "0" * 64, "--data-dir")
    assert list(tmp_path.glob("big.*")) == []


def test_a_silent_server_is_given_up(tmp_path):
    """`translate --model NAME` against a server that accepts the connection and never answers ends, after the
    download timeout, in one line with exit code 2 (it used to wait forever)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections are accepted by the kernel; nothing is ever sent back
    code = ("import sys; from transformer import data, hub; from transformer.cli import main; "
            "data.DOWNLOAD_TIMEOUT = 1; hub.PUBLISHED_MODELS = {'tiny-de-en': {'config.json': '0' * 64}}; "
            "sys.exit(main(['translate', '--model', 'tiny-de-en', 'Hallo']))")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "TRANSFORMER_MODELS_URL":
           f"http://127.0.0.1:{silent.getsockname()[1]}"}
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("the download waited on the silent server for a minute")
    finally:
        silent.close()
    one_line_error(done, "could not download", "timed out")
    assert not list(tmp_path.rglob("*.part-*"))


def test_generate_cleans_its_prompt_as_translate_cleans_sentences(tmp_path, capsys):
    """`generate --prompt` in NFD (as macOS writes it), with a BOM and spaces, continues as the plain NFC prompt does
    (it tokenized the raw text before: other ids, another continuation)."""
    from transformer.cli import main
    from transformer.decoder_only import DecoderOnly, DecoderOnlyConfig

    text = ["Ein kleines Mädchen läuft über die Straße.", "Zwei Hunde spielen im Schnee."] * 20
    tokenizer = train_bpe(text, 300)
    torch.manual_seed(0)
    model = DecoderOnly(DecoderOnlyConfig.preset("tiny", vocab_size=tokenizer.get_vocab_size(),
                                                 task="language-model"))
    save_model_files(model.eval(), tmp_path)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    prompt = "Ein kleines Mädchen läuft"
    outputs = []
    for given in (prompt, "\ufeff  " + unicodedata.normalize("NFD", prompt) + " "):
        assert main(["generate", "--model", str(tmp_path), "--prompt", given, "--greedy", "--max-new-tokens", "5"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[0].startswith(prompt)
