"""Model folders have one owner (issue 32): a downloaded model stays valid after `tune` by name; every command that
replaces a folder whole replaces only one it wrote itself (its owner file says so) and refuses any other in one line;
a crash while swapping a folder in loses nothing; evaluation and tuning read the language pair of the model's run;
`--output` keeps every split; averaging refuses checkpoints of different runs; export checks the tokenizer; and the
package names the encoding of every text file it opens."""

import ast
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from corpus import WORDS
from transformer import hub, scoring
from transformer.checkpoint import RunFolder, save_model_files, write_atomically
from transformer.cli import main
from transformer.data import sha256, train_bpe
from transformer.model import Transformer, TransformerConfig
from transformer.model_folder import OWNER_FILE, ModelFolder
from transformer.scoring import DECODING_FILE, decoding_settings

PACKAGE = Path(__file__).resolve().parents[1] / "transformer"
NAME = "tiny-de-en"
PUBLISHED_DECODING = {"tuned_on": "val", "best": {"beam": 6, "alpha": 1.4, "bleu": 40.0}, "grid": []}
PAIRS = [("der hund läuft im park", "the dog runs in-the park"), ("die frau sitzt", "the woman sits")]


@pytest.fixture(scope="module")
def tokenizer():
    "A BPE tokenizer of the tests' tiny German-English corpus (both sides)."
    return train_bpe([*WORDS, *WORDS.values(), *(s for pair in PAIRS for s in pair)] * 20, 300)


def write_model(folder: Path, tokenizer, seed: int = 0) -> Path:
    "A tiny random translation model folder with `tokenizer`, reproducible from `seed`."
    torch.manual_seed(seed)
    size = tokenizer.get_vocab_size()
    folder.mkdir(parents=True)
    save_model_files(Transformer(TransformerConfig.preset("tiny", src_vocab_size=size, tgt_vocab_size=size)), folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def write_run(root: Path, tokenizer, src: str = "de", tgt: str = "en", steps: int = 2) -> RunFolder:
    "A run folder as training leaves it (as far as these tests look): run.json with its languages, checkpoints."
    run = RunFolder(root)
    for step in range(1, steps + 1):
        write_model(run.checkpoints / f"step-{step:07d}", tokenizer)
    (run.checkpoints / "latest").write_text(f"step-{steps:07d}", encoding="utf-8")
    run.record.write_text(json.dumps({"data": {"src_lang": src, "tgt_lang": tgt}}), encoding="utf-8")
    return run


def write_pairs(folder: Path, pairs=PAIRS) -> tuple[Path, Path]:
    "A source file and a reference file of `pairs`."
    src, ref = folder / "src.txt", folder / "ref.txt"
    src.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    ref.write_text("".join(r + "\n" for _, r in pairs), encoding="utf-8")
    return src, ref


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    "The command line, in-process: (exit code, stdout, stderr)."
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def user_error(capsys, *argv) -> str:
    "The one line on stderr of a command that must end in a user error (exit code 2)."
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (code, err)
    return err


def folder_files(folder: Path) -> dict[str, bytes]:
    "Every file under `folder`, by relative path, with its bytes."
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# Item 1: tune by name ---------------------------------------------------------------------------------------------

@pytest.fixture
def published(tokenizer, tmp_path, monkeypatch) -> Path:
    "A published model with its tuned decoding (beam 6, α 1.4), served from a file:// release; the cache empty."
    folder = write_model(tmp_path / "release" / NAME, tokenizer)
    (folder / DECODING_FILE).write_text(json.dumps(PUBLISHED_DECODING), encoding="utf-8")
    assets = tmp_path / "assets"
    assets.mkdir()
    for f in folder.iterdir():
        shutil.copy(f, assets / hub.asset_name(NAME, f.name))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(hub.MODELS_URL_ENV, assets.as_uri())
    monkeypatch.setattr(hub, "PUBLISHED_MODELS", {NAME: {f.name: sha256(f) for f in folder.iterdir()}})
    return folder


def test_tune_by_name_is_refused_and_the_download_stays_valid(published, tmp_path, capsys):
    src, ref = write_pairs(tmp_path)
    err = user_error(capsys, "tune", "--model", NAME, "--src", src, "--ref", ref, "--beam", "1")
    assert "downloaded model" in err and "--out" in err, err
    folder = hub.download_model(NAME)  # every file still has its digest
    assert ModelFolder(folder).pinned == hub.PUBLISHED_MODELS[NAME]
    assert decoding_settings(folder) == {"beam": 6, "alpha": 1.4, "origin": "tuned on val"}


def test_tune_by_name_writes_a_tuned_copy_to_out(published, tmp_path, capsys):
    src, ref = write_pairs(tmp_path)
    code, out, err = run_cli(capsys, "tune", "--model", NAME, "--src", src, "--ref", ref, "--beam", "1",
                             "--out", tmp_path / "tuned")
    assert code == 0 and f"written to {tmp_path / 'tuned' / DECODING_FILE}" in out, err
    assert decoding_settings(tmp_path / "tuned") == {"beam": 1, "alpha": 0.6, "origin": "tuned on src.txt"}
    assert not ModelFolder(tmp_path / "tuned").pinned  # a copy of one's own: it may be tuned again
    assert run_cli(capsys, "tune", "--model", tmp_path / "tuned", "--src", src, "--ref", ref, "--beam", "1")[0] == 0
    assert decoding_settings(hub.download_model(NAME))["beam"] == 6
    code, out, _ = run_cli(capsys, "translate", "--model", tmp_path / "tuned", "der hund")
    assert code == 0 and len(out.splitlines()) == 1


# Item 2: write_atomically -----------------------------------------------------------------------------------------

def hidden_siblings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.parent.glob(f".{folder.name}.*"))


def test_a_failed_swap_keeps_the_old_folder(tmp_path, monkeypatch):
    folder = write_atomically(tmp_path / "model", lambda tmp: (tmp / "x.txt").write_text("old", encoding="utf-8"))
    real_replace = os.replace

    def failing_replace(src, dst):  # the rename of the new folder into place fails (a crash, a full disk)
        if ".tmp-" in str(src):
            raise OSError("no space left on device")
        real_replace(src, dst)
    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        write_atomically(folder, lambda tmp: (tmp / "x.txt").write_text("new", encoding="utf-8"))
    monkeypatch.undo()
    assert (folder / "x.txt").read_text(encoding="utf-8") == "old" and hidden_siblings(folder) == []


def test_a_crashed_swap_is_cleaned_up_by_the_next_write(tmp_path):
    folder = tmp_path / "model"
    for kind, text in (("old", "old"), ("tmp", "half")):  # killed between moving the old one aside and renaming
        (tmp_path / f".model.{kind}-99999").mkdir()
        (tmp_path / f".model.{kind}-99999" / "x.txt").write_text(text, encoding="utf-8")
    with pytest.raises(RuntimeError):
        write_atomically(folder, lambda tmp: (_ for _ in ()).throw(RuntimeError("crash")))
    assert (folder / "x.txt").read_text(encoding="utf-8") == "old" and hidden_siblings(folder) == []
    write_atomically(folder, lambda tmp: (tmp / "x.txt").write_text("new", encoding="utf-8"))
    assert (folder / "x.txt").read_text(encoding="utf-8") == "new" and hidden_siblings(folder) == []


# Item 3: replace only a folder the command wrote ------------------------------------------------------------------

def test_average_replaces_only_its_own_folder(tokenizer, tmp_path, capsys):
    run = write_run(tmp_path / "run", tokenizer)
    before = folder_files(run.root)
    err = user_error(capsys, "average", "--run", run.root, "--out", run.root)
    assert str(run.root) in err and "new or empty folder" in err, err
    assert folder_files(run.root) == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me", encoding="utf-8")
    user_error(capsys, "average", "--run", run.root, "--out", mine)
    assert folder_files(mine) == {"notes.txt": b"keep me"}
    for _ in range(2):  # a new folder, then the same one again: its own, replaced
        assert run_cli(capsys, "average", "--run", run.root, "--out", tmp_path / "avg")[0] == 0
    assert (tmp_path / "avg" / OWNER_FILE).is_file()


def test_evaluate_report_keeps_a_folder_of_other_files(tokenizer, tmp_path, capsys):
    model = write_model(tmp_path / "model", tokenizer)
    src, ref = write_pairs(tmp_path)
    results = tmp_path / "results"
    (results / "other-report").mkdir(parents=True)
    (results / "other-report" / "summary.json").write_text("{}", encoding="utf-8")
    evaluate = ("evaluate", "--model", model, "--src", src, "--ref", ref, "--beam", "1", "--report")
    err = user_error(capsys, *evaluate, results)
    assert "new or empty folder" in err, err
    assert folder_files(results) == {"other-report/summary.json": b"{}"}
    for _ in range(2):
        assert run_cli(capsys, *evaluate, results / "tiny")[0] == 0
    assert (results / "tiny" / "summary.json").is_file() and (results / "other-report" / "summary.json").is_file()
    user_error(capsys, *evaluate, model)  # a model folder is no report's
    assert not (model / "summary.json").exists()


# Item 4: export never writes over a model folder ------------------------------------------------------------------

def test_export_refuses_a_model_folder(tokenizer, tmp_path, capsys):
    model = write_model(tmp_path / "model", tokenizer)
    assert run_cli(capsys, "average", "--checkpoints", model, "--out", tmp_path / "avg")[0] == 0
    for target in (model, tmp_path / "avg"):
        before = folder_files(target)
        err = user_error(capsys, "export", "--model", model, "--format", "ctranslate2", "--out", target)
        assert "new or empty folder" in err, err
        assert folder_files(target) == before
    pytest.importorskip("ctranslate2")
    export = ("export", "--model", model, "--format", "ctranslate2", "--out", tmp_path / "ct2")
    for _ in range(2):  # an earlier export is replaced
        assert run_cli(capsys, *export)[0] == 0
    assert (tmp_path / "ct2" / "model.bin").is_file()


# Item 5: tune shows its grid before it stores the result ----------------------------------------------------------

def test_tune_prints_the_grid_before_it_writes(tokenizer, tmp_path, capsys):
    model = write_model(tmp_path / "model", tokenizer)
    (model / DECODING_FILE).mkdir()  # a decoding.json that cannot be written
    src, ref = write_pairs(tmp_path)
    code, out, err = run_cli(capsys, "tune", "--model", model, "--src", src, "--ref", ref, "--beam", "1", "2")
    assert code == 2 and err.count("\n") == 1, err
    assert out.startswith("beam 1, alpha 0.6: BLEU ") and "beam 2, alpha 0.6: BLEU " in out, out


# Item 6: the model's language pair --------------------------------------------------------------------------------

@pytest.fixture
def split_requests(monkeypatch) -> list[tuple]:
    "Multi30k splits as evaluate and tune load them: each request recorded, two sentence pairs returned."
    requests = []

    def load_split(split, data_dir=None, src="de", tgt="en"):
        requests.append((split, src, tgt))
        return PAIRS
    monkeypatch.setattr(scoring, "load_split", load_split)
    return requests


def test_evaluate_and_tune_read_the_pair_of_the_models_run(tokenizer, tmp_path, capsys, split_requests):
    run = write_run(tmp_path / "run-en-de", tokenizer, src="en", tgt="de")
    assert run_cli(capsys, "average", "--run", run.root, "--out", run.root / "average")[0] == 0
    for model in (run.latest(), run.root / "average"):
        assert run_cli(capsys, "evaluate", "--model", model, "--split", "test2016", "--beam", "1")[0] == 0
        assert run_cli(capsys, "tune", "--model", model, "--split", "val", "--beam", "1")[0] == 0
    assert split_requests == [("test2016", "en", "de"), ("val", "en", "de")] * 2


# Item 14: --output with several splits ----------------------------------------------------------------------------

def test_evaluate_output_keeps_every_split(tokenizer, tmp_path, capsys, split_requests):
    model = write_model(tmp_path / "model", tokenizer)
    code, _, err = run_cli(capsys, "evaluate", "--model", model, "--split", "test2016", "test2017", "--beam", "1",
                           "--output", tmp_path / "hyp.en")
    assert code == 0, err
    for split in ("test2016", "test2017"):
        assert len((tmp_path / f"hyp.{split}.en").read_text(encoding="utf-8").splitlines()) == len(PAIRS)
    code, _, err = run_cli(capsys, "evaluate", "--model", model, "--split", "val", "--beam", "1",
                           "--output", tmp_path / "val.en")
    assert code == 0 and len((tmp_path / "val.en").read_text(encoding="utf-8").splitlines()) == len(PAIRS), err


# Item 15: one run's checkpoints -----------------------------------------------------------------------------------

def test_average_refuses_checkpoints_of_different_runs(tokenizer, tmp_path, capsys):
    first, second = (write_run(tmp_path / name, tokenizer) for name in ("first", "second"))
    err = user_error(capsys, "average", "--checkpoints", first.latest(), second.latest(), "--out", tmp_path / "avg")
    assert "different runs" in err and "first" in err and "second" in err, err
    assert not (tmp_path / "avg").exists()
    assert run_cli(capsys, "average", "--checkpoints", *first.last(2), "--out", tmp_path / "avg")[0] == 0


# Item 20: export checks the tokenizer -----------------------------------------------------------------------------

@pytest.mark.parametrize("damage, words", [("corrupt", ["tokenizer.json", "not a valid tokenizer"]),
                                           ("another", ["tokenizer", "do not belong together"])])
def test_export_checks_the_tokenizer(tokenizer, tmp_path, capsys, damage, words):
    model = write_model(tmp_path / "model", tokenizer)
    if damage == "corrupt":
        (model / "tokenizer.json").write_text('{"model": ', encoding="utf-8")
    else:
        train_bpe(["ganz andere wörter", "quite other words"] * 20, 280).save(str(model / "tokenizer.json"))
    err = user_error(capsys, "export", "--model", model, "--format", "onnx", "--out", tmp_path / "out")
    assert all(w in err for w in words), err
    assert not (tmp_path / "out").exists()


# Item 24: every text file with its encoding -----------------------------------------------------------------------

def calls_without_encoding(source: str) -> list[int]:
    "Lines of open()/read_text()/write_text() calls in text mode that name no encoding (tar files aside)."
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in ("open", "read_text", "write_text"):
            continue
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "tarfile":
            continue
        modes = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
        modes += [k.value.value for k in node.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
        if any("b" in str(m) for m in modes) or any(k.arg == "encoding" for k in node.keywords):
            continue
        lines.append(node.lineno)
    return sorted(lines)


def test_every_text_file_names_its_encoding():
    found = {f.name: lines for f in sorted(PACKAGE.glob("*.py"))
             if (lines := calls_without_encoding(f.read_text(encoding="utf-8")))}
    assert found == {}, f"open()/read_text()/write_text() without encoding= (file: lines): {found}"
