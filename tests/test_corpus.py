"""Training on one's own parallel files through the command line, and one clear error for each kind of bad corpus."""

import gzip
import json

import pytest
import torch

from transformer.cli import main
from transformer.distributed import without_nproc

from corpus import write_corpus


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_own_corpus_end_to_end_in_three_commands(tmp_path, capsys, monkeypatch):
    """train on plain files (flags, not a config), average, evaluate on files: the README's three commands."""
    write_corpus(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.en.gz").write_bytes(gzip.compress((tmp_path / "train.en").read_bytes()))  # .gz works too
    code, out, err = run(capsys, "train", "--preset", "tiny", "--train-src", "train.de", "--train-tgt", "train.en.gz",
                         "--valid-src", "valid.de", "--valid-tgt", "valid.en", "--out", "mine", "--max-steps", "4",
                         "--precision", "fp32", "--quiet")
    assert code == 0, err
    assert "train: 400 lines, 400 pairs used" in err and "% step" in err  # the summary, then a line per validation
    record = json.loads((tmp_path / "mine/run.json").read_text())
    assert record["data"]["train_src"] == "train.de" and record["corpus"]["train"]["too_long"] == 0
    assert record["provenance"]["device"] == ("cuda:0" if torch.cuda.is_available() else "cpu")
    assert run(capsys, "average", "--run", "mine", "--last", "2", "--out", "mine/average")[0] == 0
    code, out, err = run(capsys, "evaluate", "--model", "mine/average", "--src", "valid.de", "--ref", "valid.en",
                         "--beam", "2")
    assert code == 0, err
    assert out.startswith("BLEU = ")


BAD = {  # name → (source bytes, target bytes or None for a missing file, what the one error line must say)
    "unequal line counts": (b"a b\nc d\n", b"x y\n", "has 2 lines but"),
    "non-UTF-8 bytes": (b"gut\nGr\xfc\xdfe\n", b"good\ngreetings\n", "line 2 holds the byte 0xfc"),
    "missing file": (b"a\n", None, "not found"),
    "empty file": (b"", b"x\n", "is empty"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_corpus_is_one_clear_error(tmp_path, capsys, case):
    src, tgt, expected = BAD[case]
    (tmp_path / "bad.src").write_bytes(src)
    if tgt is not None:
        (tmp_path / "bad.tgt").write_bytes(tgt)
    code, _, err = run(capsys, "train", "--preset", "tiny", "--train-src", str(tmp_path / "bad.src"), "--train-tgt",
                       str(tmp_path / "bad.tgt"), "--out", str(tmp_path / "run"), "--max-steps", "1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "run").exists()  # nothing was written
    code, _, err = run(capsys, "evaluate", "--model", str(tmp_path / "nowhere"), "--src", str(tmp_path / "bad.src"),
                       "--ref", str(tmp_path / "bad.tgt"))
    assert code == 2 and len(err.strip().splitlines()) == 1, err


def test_half_a_corpus_or_a_bad_device_is_refused(tmp_path, capsys):
    code, _, err = run(capsys, "train", "--train-src", "a.de", "--out", str(tmp_path / "r"))
    assert code == 2 and "train_src and train_tgt go together" in err
    if not torch.cuda.is_available():
        code, _, err = run(capsys, "train", "--device", "cuda", "--out", str(tmp_path / "r"))
        assert code == 2 and "sees no CUDA GPU" in err
    code, _, err = run(capsys, "train", "--nproc", "0", "--out", str(tmp_path / "r"))
    assert code == 2 and "--nproc must be at least 1" in err


def test_launched_processes_get_the_arguments_less_nproc():
    assert without_nproc(["train", "--nproc", "2", "--out", "x", "--nproc=3", "--quiet"]) == \
        ["train", "--out", "x", "--quiet"]
