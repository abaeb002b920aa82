"""Scoring as a user runs it (chapter 7c): decoding tuned on validation data and stored with the model, used by
evaluate and translate unless overridden; every test set present scored, missing ones named; seeds gathered."""

import csv
import json
import os
import shutil
from pathlib import Path

import pytest

from test_cli import DATA, TINY, assert_user_error, cli

pytestmark = pytest.mark.skipif(not (os.environ.get("MULTI30K_DIR") or DATA.is_dir()),
                                reason="needs the Multi30k files (MULTI30K_DIR or ../shared/data/multi30k)")
MULTI30K = Path(os.environ.get("MULTI30K_DIR", str(DATA)))


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    "A tiny model trained for 4 steps (seed 3) on 2,000 Multi30k pairs, validated on 30 (also the tuning files)."
    from transformer.data import load_split
    root = tmp_path_factory.mktemp("evaluation")
    for name, pairs in (("train", load_split("train", MULTI30K)[:2000]), ("dev", load_split("val", MULTI30K)[:30])):
        (root / f"{name}.de").write_text("\n".join(s for s, _ in pairs) + "\n")
        (root / f"{name}.en").write_text("\n".join(r for _, r in pairs) + "\n")
    (root / "tiny.toml").write_text(TINY + 'train_src = "train.de"\ntrain_tgt = "train.en"\nvalid_src = "dev.de"\n'
                                    'valid_tgt = "dev.en"\n')
    trained = cli("train", "--config", str(root / "tiny.toml"), "--out", str(root / "run"), "--quiet", "--seed", "3")
    assert trained.returncode == 0, trained.stderr
    return root


def test_seed_reaches_the_run(model):
    """--seed overrides the config's seed and is recorded in run.json."""
    assert json.loads((model / "run" / "run.json").read_text())["train"]["seed"] == 3


def test_tune_stores_the_best_setting_and_evaluate_uses_it(model, tmp_path):
    """tune prints the grid and the best setting, writes decoding.json; evaluate then decodes with it."""
    checkpoint = model / "run" / "checkpoints" / "step-0000004"
    folder = tmp_path / "model"
    shutil.copytree(checkpoint, folder)
    tuned = cli("tune", "--model", str(folder), "--src", str(model / "dev.de"), "--ref", str(model / "dev.en"),
                "--beam", "1", "2", "--alpha", "0.6", "1.4")
    assert tuned.returncode == 0, tuned.stderr
    lines = tuned.stdout.splitlines()
    assert len(lines) == 4 and lines[-1].startswith("best: beam ")  # greedy once, beam 2 with each α
    record = json.loads((folder / "decoding.json").read_text())
    assert record["tuned_on"] == "dev.de" and len(record["grid"]) == 3
    assert record["best"]["bleu"] == max(r["bleu"] for r in record["grid"])
    evaluated = cli("evaluate", "--model", str(folder), "--src", str(model / "dev.de"), "--ref", str(model / "dev.en"),
                    "--report", str(tmp_path / "report"))
    assert evaluated.returncode == 0, evaluated.stderr
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert (summary["beam_size"], summary["alpha"]) == (record["best"]["beam"], record["best"]["alpha"])
    assert summary["decoding"] == "tuned on dev.de" and summary["sacrebleu"] == {"dev.de": record["best"]["bleu"]}
    assert (tmp_path / "report" / "decoding.json").is_file()
    pytest.importorskip("altair")
    from transformer.report import decoding_chart
    decoding_chart(json.loads((tmp_path / "report" / "decoding.json").read_text())).to_dict()
    given = cli("evaluate", "--model", str(folder), "--src", str(model / "dev.de"), "--ref", str(model / "dev.en"),
                "--beam", "2", "--alpha", "1.4", "--report", str(tmp_path / "report2"))
    assert json.loads((tmp_path / "report2" / "summary.json").read_text())["decoding"] == "given"


def test_tuning_on_a_test_set_is_refused(model):
    """tune takes the validation split or the user's own files; a test split is not a choice."""
    refused = cli("tune", "--model", str(model / "run" / "checkpoints" / "step-0000004"), "--split", "test2016")
    assert refused.returncode == 2 and "invalid choice: 'test2016'" in refused.stderr
    assert_user_error(cli("tune", "--model", str(model / "run" / "checkpoints" / "step-0000004")), "either --split")


def test_every_present_test_set_is_scored_and_missing_ones_named(model, tmp_path):
    """With --skip-missing, splits the local folder lacks are named on stderr; without it, the missing file is."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("test_2016_flickr", "test_2017_mscoco"):
        for lang in ("de", "en"):
            (data / f"{name}.{lang}.gz").symlink_to(MULTI30K / f"{name}.{lang}.gz")
    checkpoint = str(model / "run" / "checkpoints" / "step-0000004")
    scored = cli("evaluate", "--model", checkpoint, "--data-dir", str(data), "--beam", "1", "--skip-missing",
                 "--split", "test2016", "mscoco2017", "test2018", "--report", str(tmp_path / "report"))
    assert scored.returncode == 0, scored.stderr
    out = scored.stdout.splitlines()
    assert out[0].startswith("test2016: BLEU = ") and out[1].startswith("mscoco2017: BLEU = ")
    assert out[2].startswith("nrefs:1") and len(out) == 3
    assert "test2018: skipped" in scored.stderr and "test_2018_flickr.de.gz" in scored.stderr
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert list(summary["sacrebleu"]) == ["test2016", "mscoco2017"]
    assert summary["test2016_sacrebleu"] == summary["sacrebleu"]["test2016"] and summary["seed"] == 3
    with open(model / "run" / "metrics.csv", newline="") as f:
        last = list(csv.DictReader(f))[-1]
    assert summary["epochs"] == float(last["epoch"])  # the last validation's epoch, fractional if it ended mid-epoch
    pytest.importorskip("altair")
    from transformer.report import recipe_row, validation_chart
    row = recipe_row(tmp_path / "report")
    assert row["steps"] == 4 and row["test2016"] == summary["sacrebleu"]["test2016"] and "mscoco2017" in row
    validation_chart({"tiny": tmp_path / "report"}).to_dict()
    assert_user_error(cli("evaluate", "--model", checkpoint, "--data-dir", str(data), "--split", "test2018"),
                      "test_2018_flickr.de.gz", "not found")
    assert_user_error(cli("evaluate", "--model", checkpoint, "--data-dir", str(data), "--split", "test2018",
                          "--skip-missing"), "nothing to evaluate", "test_2018_flickr")


def test_corrupt_decoding_record_is_refused(model, tmp_path):
    """A decoding.json that is not one is named in one line."""
    folder = tmp_path / "model"
    shutil.copytree(model / "run" / "checkpoints" / "step-0000004", folder)
    (folder / "decoding.json").write_text("{not json")
    assert_user_error(cli("translate", "--model", str(folder), "Hallo"), "decoding.json", "tune again")


def test_seeds_are_gathered_into_the_main_report(tmp_path):
    """record_seeds puts every sibling -seedN report's scores into the main summary."""
    from transformer.report import record_seeds
    for name, seed, score in (("run", 0, 40.0), ("run-seed1", 1, 41.5), ("run-seed2", 2, 39.5)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"seed": seed, "sacrebleu": {"test2016": score}}))
    seeds = record_seeds(tmp_path / "run")
    assert [(s["seed"], s["test2016"]) for s in seeds] == [(0, 40.0), (1, 41.5), (2, 39.5)]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["seeds"] == seeds
