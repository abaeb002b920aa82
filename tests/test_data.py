"""Multi30k files (download, checksum, cache, local folder, clear errors) and the shared BPE vocabulary."""

import gzip
import re
import shutil
import urllib.request

import pytest

from conftest import MULTI30K as DATA, needs_multi30k as needs_data
from transformer import data
from transformer.data import (DataError, check_tokenizer, encode_pairs, load_split, multi30k_file, read_lines,
                              sha256, train_bpe)
from transformer.model import TransformerConfig


@pytest.fixture
def no_data_dir(monkeypatch, tmp_path):
    "No MULTI30K_DIR, and an empty cache in a temporary XDG_CACHE_HOME."
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


@needs_data
def test_download_checks_and_caches(no_data_dir, monkeypatch):
    """A file is downloaded once into the cache, checked, and read from the cache afterwards."""
    url = DATA.as_uri()  # a file:// URL stands in for the GitHub repository
    path = multi30k_file("val.de.gz", url=url)
    assert path == no_data_dir / "cache" / "transformer" / "multi30k" / "val.de.gz"
    assert sha256(path) == data.MULTI30K_SHA256["val.de.gz"]
    monkeypatch.setattr(urllib.request, "urlretrieve", lambda *a: pytest.fail("downloaded twice"))
    assert multi30k_file("val.de.gz", url=url) == path


def test_failed_download_leaves_nothing(no_data_dir):
    """A download that fails says so and leaves no partial file."""
    with pytest.raises(DataError, match="could not download .*val.en.gz.*--data-dir"):
        multi30k_file("val.en.gz", url=(no_data_dir / "nowhere").as_uri())
    assert not any((no_data_dir / "cache").rglob("*val.en*"))


@needs_data
def test_corrupt_download_is_refused(no_data_dir, tmp_path):
    """A downloaded file with the wrong content fails its checksum, naming the file."""
    fake = tmp_path / "mirror"
    fake.mkdir()
    (fake / "val.de.gz").write_bytes(b"not the dataset")
    with pytest.raises(DataError, match=r"downloaded val.de.gz has SHA-256 .* corrupt"):
        multi30k_file("val.de.gz", url=fake.as_uri())
    assert not any((no_data_dir / "cache").rglob("val.de*"))  # nothing corrupt is left in the cache


def test_missing_local_file_names_it(tmp_path):
    """A data folder without the file names the file and says where to get it."""
    with pytest.raises(DataError, match=r"train.en.gz not found in .*download it from https://.*multi30k"):
        multi30k_file("train.en.gz", data_dir=tmp_path)


@needs_data
def test_environment_variable_points_at_a_folder(monkeypatch, tmp_path):
    """MULTI30K_DIR is used when no folder is passed; a bad file there is refused by name."""
    shutil.copy(DATA / "val.de.gz", tmp_path / "val.de.gz")
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path))
    assert multi30k_file("val.de.gz") == tmp_path / "val.de.gz"
    (tmp_path / "val.en.gz").write_bytes(gzip.compress(b"A dog.\n"))
    with pytest.raises(DataError, match="val.en.gz has SHA-256"):
        multi30k_file("val.en.gz")


def test_mismatched_line_counts(monkeypatch, tmp_path):
    """Source and target files of different lengths are refused, naming both."""
    for name, text in (("val.de.gz", b"Ein Hund.\nZwei Katzen.\n"), ("val.en.gz", b"A dog.\n")):
        (tmp_path / name).write_bytes(gzip.compress(text))
    monkeypatch.setattr(data, "MULTI30K_SHA256", {**data.MULTI30K_SHA256, "val.de.gz": sha256(tmp_path / "val.de.gz"),
                                                  "val.en.gz": sha256(tmp_path / "val.en.gz")})
    with pytest.raises(DataError, match="val.de.gz has 2 lines but val.en.gz has 1"):
        load_split("val", tmp_path)


def test_unknown_split_and_file():
    """Unknown names are errors that list the choices."""
    with pytest.raises(DataError, match="unknown split 'dev'.*train, val, test2016, test2017, mscoco2017, test2018"):
        load_split("dev")
    with pytest.raises(DataError, match="unknown Multi30k file"):
        multi30k_file("train.xx.gz")


@needs_data
def test_splits_have_the_published_sizes():
    """29,000 / 1,014 / 1,000 pairs, German first."""
    sizes = {name: len(load_split(name, DATA)) for name in ("train", "val", "test2016", "test2017", "mscoco2017")}
    assert sizes == {"train": 29000, "val": 1014, "test2016": 1000, "test2017": 1000, "mscoco2017": 461}
    assert load_split("val", DATA)[0][0].startswith("Eine Gruppe von Männern")


@pytest.fixture(scope="module")
def tokenizer():
    sentences = (read_lines(DATA / "train.de.gz")[:3000] + read_lines(DATA / "train.en.gz")[:3000]
                 if DATA.is_dir() else ["Ein Hund läuft über die Wiese.", "A dog runs across the meadow."] * 200)
    return train_bpe(sentences, vocab_size=600)


def test_round_trip(tokenizer):
    """Decoding an encoded sentence gives the sentence back, for any text (byte-level BPE)."""
    texts = ["Zwei junge weiße Männer sind im Freien.", "A man in an orange hat starring at something.",
             "Ünïcødé ☃ — 42€ 漢字", "  leading and  double spaces ", "", "x"]
    if DATA.is_dir():
        texts += [s for pair in load_split("val", DATA) for s in pair]
    assert tokenizer.decode_batch([e.ids for e in tokenizer.encode_batch(texts)], skip_special_tokens=False) == texts


def test_special_tokens_and_config_check(tokenizer):
    """<pad>, <s>, </s> are 0, 1, 2; a model config of another size or other special ids is refused."""
    assert [tokenizer.token_to_id(t) for t in ("<pad>", "<s>", "</s>")] == [0, 1, 2]
    size = tokenizer.get_vocab_size()
    check_tokenizer(tokenizer, TransformerConfig.preset("tiny", src_vocab_size=size, tgt_vocab_size=size))
    with pytest.raises(ValueError, match="do not belong together"):
        check_tokenizer(tokenizer, TransformerConfig.preset("tiny", src_vocab_size=size + 1, tgt_vocab_size=size + 1))
    with pytest.raises(ValueError, match="special tokens"):
        check_tokenizer(tokenizer, TransformerConfig.preset("tiny", src_vocab_size=size, tgt_vocab_size=size,
                                                            bos_id=2, eos_id=1))


def test_encode_pairs_adds_no_specials(tokenizer):
    """encode_pairs returns plain ids; make_batch adds <s> and </s> later."""
    pairs = encode_pairs(tokenizer, [("Ein Hund.", "A dog.")])
    assert pairs and all(0 not in ids and 1 not in ids and 2 not in ids for pair in pairs for ids in pair)


@needs_data
def test_vocabulary_is_built_on_training_sentences_only(monkeypatch, tmp_path):
    """The command line's training learns its BPE vocabulary from the training split, never val or test."""
    from transformer import translation_run as translation
    from transformer.run import RunConfig
    seen = []

    def spy(sentences, vocab_size):
        seen.extend(sentences)
        return train_bpe(sentences[:2000], vocab_size)

    monkeypatch.setattr(translation, "train_bpe", spy)
    monkeypatch.setattr(translation.Trainer, "fit", lambda self: [])
    run = RunConfig.from_dict({"preset": "tiny", "data": {"vocab_size": 300}, "train": {"compile": "off"}})
    translation.train_run(run, tmp_path / "run", DATA, progress=False)
    train = {s for pair in load_split("train", DATA) for s in pair}
    held_out = {s for split in ("val", "test2016") for pair in load_split(split, DATA) for s in pair} - train
    assert set(seen) == train and not set(seen) & held_out


def test_every_upstream_file_has_its_checksum():
    """Every file of the release is known by its SHA-256 (the shared folder's SHA256SUMS lists the upstream sums),
    and every split's German and English files are among them."""
    assert all(re.fullmatch("[0-9a-f]{64}", digest) for digest in data.MULTI30K_SHA256.values())
    for stem in data.MULTI30K_SPLITS.values():
        assert {f"{stem}.de.gz", f"{stem}.en.gz"} <= set(data.MULTI30K_SHA256)
    sums = DATA / "SHA256SUMS"
    if sums.is_file():
        listed = dict(reversed(line.split()) for line in sums.read_text().splitlines() if line.strip())
        assert listed == data.MULTI30K_SHA256


def test_a_split_missing_from_a_local_folder_names_the_file_and_its_source(tmp_path):
    """A local folder without a split's files (the shared folder has no test2018) says which file is missing and
    where it comes from."""
    with pytest.raises(DataError, match=r"test_2018_flickr\.de\.gz not found in .*raw\.githubusercontent\.com/multi30k"):
        load_split("test2018", tmp_path)
