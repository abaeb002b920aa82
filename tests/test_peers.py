"""The peer toolkits' scripts (scripts/peers/), in the parts that need no toolkit installed: the recipes match our
`small` size and our vocabulary, the data survive the round trip through space-separated tokens, the budget leaves
validation out, tuning and the report carry what the chapter's table and chart read."""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from transformer.data import SPECIAL_TOKENS, train_bpe
from transformer.model import PRESETS

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "scripts" / "peers"
sys.path.insert(0, str(PEERS))

import budget  # noqa: E402
import pace  # noqa: E402
import prepare  # noqa: E402
import profile_peer  # noqa: E402
import report  # noqa: E402
import screen  # noqa: E402

SMALL = PRESETS["small"]
SENTENCES = ["Zwei junge Männer spielen Fußball.", "Two young men play football.", "Ein Hund läuft  im Schnee!",
             "A dog runs in the snow!", "Tabs\tand «quotes» stay."] * 20


def recipe(name: str) -> dict:
    return yaml.safe_load((PEERS / name).read_text())


def test_joeynmt_recipe_is_our_small_size_with_one_shared_vocabulary():
    model = recipe("joeynmt.yaml")["model"]
    assert model["tied_embeddings"] and model["tied_softmax"]
    for side, layers in (("encoder", "n_encoder_layers"), ("decoder", "n_decoder_layers")):
        part = model[side]
        assert part["type"] == "transformer" and part["num_layers"] == SMALL[layers]
        assert part["hidden_size"] == part["embeddings"]["embedding_dim"] == SMALL["d_model"]
        assert (part["num_heads"], part["ff_size"]) == (SMALL["n_heads"], SMALL["d_ff"])
    data = recipe("joeynmt.yaml")["data"]
    assert data["src"]["voc_file"] == data["trg"]["voc_file"] == "{data}/vocab.txt"
    assert data["src"]["level"] == data["trg"]["level"] == "word"  # our BPE tokens, read as they are


def test_opennmt_recipe_is_our_small_size_with_one_shared_vocabulary():
    cfg = recipe("opennmt.yaml")
    assert cfg["hidden_size"] == cfg["word_vec_size"] == SMALL["d_model"]
    assert (cfg["heads"], cfg["transformer_ff"]) == (SMALL["n_heads"], SMALL["d_ff"])
    assert (cfg["enc_layers"], cfg["dec_layers"]) == (SMALL["n_encoder_layers"], SMALL["n_decoder_layers"])
    assert cfg["share_vocab"] and cfg["share_embeddings"] and cfg["share_decoder_embeddings"]
    assert cfg["src_vocab"] == cfg["tgt_vocab"] == "{data}/vocab.txt"


def test_opennmt_shorter_warmup_keeps_the_recipes_peak_rate():
    "noam: factor · d^-0.5 · warmup^-0.5 at the peak; the FAQ's factor 2 and 8,000 warmup updates at d_model 256."
    cfg = recipe("opennmt.yaml")
    peak = cfg["learning_rate"] * SMALL["d_model"] ** -0.5 * cfg["warmup_steps"] ** -0.5
    assert math.isclose(peak, 2 * SMALL["d_model"] ** -0.5 * 8000 ** -0.5, rel_tol=1e-3)
    assert cfg["warmup_steps"] == 1000


def test_vocabulary_is_ours_without_our_special_tokens(tmp_path):
    assert prepare.our_vocab_size() == 8000  # the size configs/multi30k-de-en.toml gives our full run
    tokenizer = train_bpe(SENTENCES, vocab_size=300)
    prepare.write_vocab(tokenizer, tmp_path / "vocab.txt")
    tokens = (tmp_path / "vocab.txt").read_text("utf-8").splitlines()
    assert len(tokens) == len(set(tokens)) == tokenizer.get_vocab_size() - len(SPECIAL_TOKENS)
    assert not set(tokens) & set(SPECIAL_TOKENS) and all(t and not any(c.isspace() for c in t) for t in tokens)


def test_token_lines_come_back_as_the_same_text():
    tokenizer = train_bpe(SENTENCES, vocab_size=300)
    lines = prepare.token_lines(tokenizer, SENTENCES[:5])
    assert all("\n" not in line for line in lines) and lines[0].count(" ") >= 4
    assert report.detokenize(lines, tokenizer) == SENTENCES[:5]


def test_budget_leaves_excluded_time_out():
    clock = budget.Budget(minutes=0.2 / 60)  # 0.2 s
    assert not clock.spent()  # starts the clock
    clock.excluded(time.sleep)(0.4)  # validation: twice the budget, not counted
    assert not clock.spent() and clock.seconds() < 0.2
    time.sleep(0.3)
    assert clock.spent()


def test_a_validation_point_and_the_end_of_training_freeze_the_clock():
    clock = budget.Budget(minutes=1)
    clock.spent()
    time.sleep(0.05)

    def validate():  # a slow validation that saves a checkpoint (itself excluded) and records a point
        clock.excluded(time.sleep)(0.5)
        time.sleep(0.5)
        clock.validated(1, 4.0)
    clock.excluded(validate)()
    assert 0.05 <= clock.curve[0]["train_minutes"] * 60 < 0.5  # the point's time leaves its own validation out
    clock.stop()
    frozen = clock.seconds()
    time.sleep(0.1)
    assert clock.seconds() == frozen < 0.5


def test_budget_record_has_the_curve_and_speed(tmp_path):
    clock = budget.Budget(minutes=1)
    clock.spent()
    clock.steps, clock.tokens, clock.losses = 2, 1000, [9.0, 7.0]
    clock.validated(2, 5.123456, valid_ppl=167.9)
    clock.write(tmp_path / "training.json", toolkit="joeynmt", toolkit_version="2.3.0")
    record = json.loads((tmp_path / "training.json").read_text())
    assert record["steps"] == 2 and record["tokens_per_s"] > 1000 and record["train_loss_first_10"] == 8.0
    assert record["curve"] == [{"step": 2, "train_minutes": record["curve"][0]["train_minutes"],
                                "valid_loss": 5.12346, "valid_ppl": 167.9}]


def test_a_decay_placed_in_minutes_halves_the_rate_by_the_clock():
    settings = ["encoder_type=brnn", "start_decay_steps=48min", "decay_steps=3min", "seed=1"]
    kept, place = budget.minute_schedule(settings)
    assert kept == ["encoder_type=brnn", "seed=1"] and place == {"start_decay_steps": 48.0, "decay_steps": 3.0}
    in_updates = ["start_decay_steps=980", "decay_steps=60"]  # placed in updates: the toolkit's own, passed on
    assert budget.minute_schedule(in_updates) == (in_updates, {})
    factors = [budget.decay_scale(minute, start=48, every=3) for minute in (0, 47.9, 48, 50.9, 51, 59.9)]
    assert factors == [1, 1, 0.5, 0.5, 0.25, 1 / 16]  # as OpenNMT-py's rule in updates: halved at the start
    for bad in (["start_decay_steps=48min"], ["start_decay_steps=4x8min", "decay_steps=3min"],
                ["start_decay_steps=48min", "decay_steps=0min"]):
        with pytest.raises(SystemExit, match="minutes"):
            budget.minute_schedule(bad)


def test_a_pace_alternates_which_side_goes_first_and_reports_the_ratios_spread():
    assert [pace.side_order(i) for i in range(3)] == [("ours", "theirs"), ("theirs", "ours"), ("ours", "theirs")]
    rounds = [{"ours": 4000, "theirs": 2000}, {"ours": 3000, "theirs": 1000}, {"ours": 5000, "theirs": 2000}]
    summary = pace.pace_summary(rounds)  # ratios 2.0, 3.0, 2.5: a ratio is taken within a round, never across
    assert summary == {"repeats": 3, "ratio_median": 2.5, "ratio_spread": 1.0, "ours_median": 4000,
                       "theirs_median": 2000}
    with pytest.raises(ValueError, match="two rounds"):
        pace.pace_summary(rounds[:1])


def test_tuning_chooses_the_best_setting_on_val_with_our_bleu(tmp_path):
    tokenizer = train_bpe(SENTENCES, vocab_size=300)
    (tmp_path / "data").mkdir()
    tokenizer.save(str(tmp_path / "data" / "tokenizer.json"))
    references = ["Two young men play football.", "A dog runs in the snow!"]
    (tmp_path / "data" / "val.raw.en").write_text("".join(r + "\n" for r in references))
    (tmp_path / "hyp").mkdir()
    short = ["Two men play.", "A dog runs."]
    outputs = {(4, 0.6, "wu", "recipe"): short, (4, 1.0, "wu", "recipe"): references, (6, 1.0, "wu", "recipe"): references,
               (5, None, "avg", "recipe"): short, (4, 1.0, "wu", "averaged"): references,
               (6, 1.0, "wu", "averaged"): short, (5, None, "avg", "averaged"): references}
    for (beam, alpha, penalty, checkpoint), lines in outputs.items():
        path = report.hypothesis_file(tmp_path, "val", beam, alpha, penalty, checkpoint)
        path.write_text("".join(line + "\n" for line in prepare.token_lines(tokenizer, lines)))
    grid = report.tune(tmp_path, report.decoding_grid([4, 6], [1.0]) + report.decoding_grid([4], [0.6]))
    assert [(row["beam"], row["alpha"], row["val_bleu"]) for row in grid[:2]] == [(4, 1.0, 100.0), (6, 1.0, 100.0)]
    assert grid[2]["val_bleu"] < 100.0  # the shorter hypotheses score lower
    with pytest.raises(SystemExit, match="beam 6, α 0.6"):  # a translation that was never made: one clear line
        report.tune(tmp_path, report.decoding_grid([4, 6], [0.6, 1.0]))
    both = report.tune(tmp_path, report.decoding_grid([4, 6], [1.0], ("recipe", "averaged"), ("5:avg",)))
    assert len(both) == 6 and [(r["checkpoint"], r["beam"], r["length_penalty"]) for r in both[:4]] == [
        ("recipe", 4, "wu"), ("recipe", 6, "wu"), ("averaged", 4, "wu"), ("averaged", 5, "avg")]  # ties: the simpler
    assert both[3]["alpha"] is None and both[-1]["val_bleu"] < 100.0
    with pytest.raises(SystemExit, match="beam 5, α 1: "):  # 5:avg of the last checkpoint was made, 5:1.0 not
        report.tune(tmp_path, report.decoding_grid([4], [1.0], ("recipe",), ("5:avg", "5:1.0")))


def test_report_has_the_fields_the_chapter_reads():
    training = {"toolkit": "opennmt-py", "toolkit_version": "3.5.1", "train_minutes": 60.01, "budget_minutes": 60.0,
                "steps": 3000, "tokens": 14_400_000, "tokens_per_s": 4000, "checkpoint_choice": "the last checkpoint",
                "train_loss_first_10": 9.1, "train_loss_last_10": 3.2,
                "curve": [{"step": 250, "train_minutes": 5.0, "valid_loss": 3.1}]}
    grid = [{"checkpoint": "recipe", "beam": 6, "alpha": 1.2, "length_penalty": "wu", "val_bleu": 40.0},
            {"checkpoint": "averaged", "beam": 4, "alpha": 0.6, "length_penalty": "wu", "val_bleu": 39.0}]
    scores = {"test2016": 41.0, "test2017": 36.0, "mscoco2017": 28.0}
    record = report.peer_record(training, grid, scores, "nrefs:1|…", "bash scripts/peers/run.sh opennmt", "abc",
                                "some CPU", tokens_per_epoch=900_000, averaged=["model_step_2750.pt", "…"])
    assert record["checkpoint"] == "the last checkpoint" and record["averaged_checkpoints"][0] == "model_step_2750.pt"
    averaged = report.peer_record(training, grid[::-1], scores, "", "", "", "", 900_000, ["a.pt", "b.pt"])
    assert averaged["checkpoint"] == "the average of its last 2 checkpoints" and averaged["beam_size"] == 4
    for key in ("toolkit", "version", "train_minutes", "steps", "epochs", "tokens_per_s", "test2016_sacrebleu",
                "command", "commit", "machine", "validation_curve", "val_bleu_curve", "sacrebleu_signature"):
        assert key in record, key
    assert record["sacrebleu"] == scores and record["test2016_sacrebleu"] == 41.0
    assert (record["beam_size"], record["alpha"]) == (6, 1.2) and record["epochs"] == 16.0


def test_a_bleu_curve_puts_each_checkpoint_at_its_training_minutes(tmp_path):
    """Each kept checkpoint's greedy val translation is scored with our BLEU at the minutes of its validation point
    (the last one at the end of training); a checkpoint written where the run did not validate is refused."""
    tokenizer = train_bpe(SENTENCES, vocab_size=300)
    (tmp_path / "data").mkdir()
    tokenizer.save(str(tmp_path / "data" / "tokenizer.json"))
    references = ["Two young men play football.", "A dog runs in the snow!"]
    (tmp_path / "data" / "val.raw.en").write_text("".join(r + "\n" for r in references))
    (folder := tmp_path / "hyp" / "curve").mkdir(parents=True)
    for step, lines in {250: ["A dog.", "Men."], 500: ["Two men play.", "A dog runs."], 620: references}.items():
        (folder / budget.curve_name(step)).write_text("".join(line + "\n" for line in
                                                            prepare.token_lines(tokenizer, lines)))
    training = {"steps": 620, "train_minutes": 7.5,
                "curve": [{"step": 251, "train_minutes": 3.0}, {"step": 501, "train_minutes": 6.0}]}  # OpenNMT-py's
    curve = report.bleu_curve(tmp_path, training)
    assert [(p["step"], p["train_minutes"]) for p in curve] == [(250, 3.0), (500, 6.0), (620, 7.5)]
    assert curve[0]["val_bleu"] < curve[1]["val_bleu"] < curve[2]["val_bleu"] == 100.0
    (folder / budget.curve_name(300)).write_text((folder / budget.curve_name(250)).read_text())
    with pytest.raises(SystemExit, match=r"updates \[300\]"):
        report.bleu_curve(tmp_path, training)


def test_an_average_of_the_last_checkpoints_takes_the_newest():
    kept = [Path(f"model_step_{step}.pt") for step in (250, 500, 750)]
    assert budget.last_of(kept, 2) == kept[1:] and budget.last_of(kept, 0) == kept
    with pytest.raises(SystemExit, match="--last"):
        budget.last_of(kept, -1)


def test_an_epoch_counts_both_sides_with_one_end_symbol_each(tmp_path):
    (tmp_path / "train.de").write_text("Ein Hund .\nZwei\n")
    (tmp_path / "train.en").write_text("A Ġdog .\nTwo\n")
    assert report.epoch_tokens(tmp_path) == (4 + 2) * 2


def test_signature_warning_names_both_signatures(tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"sacrebleu_signature": "nrefs:1|version:2.6.0"}))
    assert report.signature_warning("nrefs:1|version:2.6.0", summary) is None
    warning = report.signature_warning("nrefs:1|version:2.7.0", summary)
    assert "2.7.0" in warning and "2.6.0" in warning


def test_run_names_the_toolkits_it_knows():
    done = subprocess.run(["bash", str(PEERS / "run.sh"), "fairseq"], capture_output=True, text=True)
    assert done.returncode == 2 and "joeynmt|opennmt" in done.stderr and "fairseq" in done.stderr


def test_a_changed_recipe_names_its_report():
    done = subprocess.run(["bash", str(PEERS / "run.sh"), "opennmt"], capture_output=True, text=True,
                          env=os.environ | {"PEER_SET": "seed=2"})  # not over the published recipe's report
    assert done.returncode == 2 and "name the report" in done.stderr


def test_evaluating_a_run_needs_a_trained_one(tmp_path):
    done = subprocess.run(["bash", str(PEERS / "run.sh"), "opennmt"], capture_output=True, text=True,
                          env=os.environ | {"PEER_EVALUATE_ONLY": "1", "PEER_OUT": str(tmp_path)})
    assert done.returncode == 2 and f"{tmp_path} holds no trained run" in done.stderr


def test_only_an_evaluation_resumes_and_it_keeps_finished_translations_only(tmp_path):
    done = subprocess.run(["bash", str(PEERS / "run.sh"), "joeynmt"], capture_output=True, text=True,
                          env=os.environ | {"PEER_RESUME": "1", "PEER_OUT": str(tmp_path)})  # training: afresh
    assert done.returncode == 2 and "PEER_EVALUATE_ONLY=1 too" in done.stderr
    (source := tmp_path / "val.de").write_text("a b\nc\n\nd\n")
    hypotheses = tmp_path / budget.hypothesis_name("val", 4, 0.6)
    assert not budget.decoded_already(hypotheses, source)
    hypotheses.write_text("x\ny\n")  # stopped halfway
    assert not budget.decoded_already(hypotheses, source)
    hypotheses.write_text("x\ny\n\nz\n")  # an empty translation is a line too
    assert budget.decoded_already(hypotheses, source)


def test_settings_change_only_what_the_recipe_has():
    cfg = {"training": {"random_seed": 42, "optimizer": "adam"}, "dropout": [0.1]}
    budget.apply_settings(cfg, ["training.random_seed=7", "dropout=[0.2]"])
    assert cfg == {"training": {"random_seed": 7, "optimizer": "adam"}, "dropout": [0.2]}
    for bad in ("training.random_sead=7", "seed=1", "training.random_seed.x=1"):  # a typo is an error, not a new key
        with pytest.raises(SystemExit, match="has no setting"):
            budget.apply_settings(cfg, [bad])
    budget.apply_settings(cfg, ["+training.warmup=300"])  # an option the recipe leaves at the toolkit's default
    assert cfg["training"]["warmup"] == 300
    with pytest.raises(SystemExit, match="already has setting 'dropout'"):
        budget.apply_settings(cfg, ["+dropout=0.3"])
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        budget.apply_settings(cfg, ["dropout"])


def test_each_decoding_setting_has_its_own_file():
    names = {budget.hypothesis_name("val", 5, a, p) for a in (0.6, 1.0) for p in ("wu", "avg")}
    assert names == {"val.b5.a0.6.tok", "val.b5.a1.tok", "val.b5.avg.tok"}  # avg has no α
    assert budget.hypothesis_name("test2016", 4, 1.2, "wu", "averaged") == "averaged.test2016.b4.a1.2.tok"
    with pytest.raises(ValueError, match="checkpoint is one of"):
        budget.hypothesis_name("val", 4, 1.0, "wu", "best")


def test_an_average_of_checkpoints_is_the_mean_of_each_weight():
    torch = pytest.importorskip("torch")
    states = [{"w": torch.tensor([1.0, 2.0]), "steps": torch.tensor(4)},
              {"w": torch.tensor([3.0, 6.0]), "steps": torch.tensor(6)}]
    averaged = budget.averaged_weights(states)
    assert torch.equal(averaged["w"], torch.tensor([2.0, 4.0])) and averaged["steps"].dtype == torch.int64
    with pytest.raises(SystemExit, match="not one model's"):
        budget.averaged_weights([states[0], {"v": torch.zeros(2), "steps": torch.tensor(1)}])
    with pytest.raises(SystemExit, match="at least 2"):
        budget.averaged_weights(states[:1])


def test_a_model_size_counts_a_tied_matrix_once_and_lands_in_the_report(tmp_path):
    torch = pytest.importorskip("torch")
    embedding, bias = torch.zeros(10, 4), torch.zeros(10)
    state = {"encoder.embedding": embedding, "decoder.embedding": embedding, "generator.weight": embedding,
             "generator.bias": bias, "decoder.layer": torch.zeros(4, 4)}
    assert budget.distinct_numbers(list(state.values())) == 40 + 10 + 16
    saved = tmp_path / "model.pt"  # as a checkpoint file holds it: the sharing survives saving and loading
    torch.save(state, saved)
    assert budget.distinct_numbers(list(torch.load(saved).values())) == 66
    (report_file := tmp_path / "seed-1.json").write_text(json.dumps({"seed": 1, "test2016": 40.0}))
    budget.add_parameters(report_file, 66)
    assert json.loads(report_file.read_text()) == {"seed": 1, "test2016": 40.0, "parameters": 66}


def test_a_toolkit_default_decoding_joins_the_grid_once():
    grid = report.decoding_grid([4, 6], [1.0], ("recipe", "averaged"), ("5:avg", "4:1.0"))
    assert len(grid) == 2 * 3
    assert {"checkpoint": "averaged", "beam": 5, "alpha": None, "length_penalty": "avg"} in grid
    assert report.parse_also("5:1.0") == (5, 1.0, "wu")
    for bad in ("5", "avg:5", "five:avg", "5:", "5:x"):
        with pytest.raises(SystemExit, match="BEAM:ALPHA or BEAM:avg"):
            report.parse_also(bad)


def test_the_chosen_setting_reaches_the_launcher_as_the_file_it_scores():
    for best in report.decoding_grid([4], [1.2], ("recipe", "averaged"), ("5:avg",)):
        checkpoint, beam, alpha, penalty = report.choice_line(best).split()  # as run.sh reads it
        decoded = budget.hypothesis_name("test2016", int(beam), float(alpha), penalty, checkpoint)  # the launcher's
        assert decoded == report.hypothesis_file(Path("."), "test2016", best["beam"], best["alpha"],
                                                 best["length_penalty"], best["checkpoint"]).name


def test_a_failed_decoding_stops_the_run_before_the_test_sets(tmp_path):
    venv, out = tmp_path / "venv", tmp_path / "run"
    calls = tmp_path / "calls.txt"
    (venv / "bin").mkdir(parents=True)
    (venv / ".peer-ready").touch()
    toolkit = venv / "bin" / "python"  # records each call; decoding the averaged checkpoint fails
    toolkit.write_text(f'#!/bin/sh\necho "$*" >> {calls}\ncase "$*" in *"--checkpoint averaged"*) exit 1;; esac\n')
    toolkit.chmod(0o755)
    (out / "model").mkdir(parents=True)
    (out / "training.json").write_text(json.dumps({"budget_minutes": 60.0, "settings": []}))
    for update in (250, 500):  # two kept checkpoints: the recipe's and their average are both decoded
        (out / "model" / f"{update}.ckpt").touch()
    done = subprocess.run(["bash", str(PEERS / "run.sh"), "joeynmt"], capture_output=True, text=True,
                          env=os.environ | {"PEER_EVALUATE_ONLY": "1", "PEER_OUT": str(out), "PEER_VENV": str(venv)})
    decoded = [line for line in calls.read_text().splitlines() if " decode " in line]
    side_by_side = len(os.sched_getaffinity(0)) >= 2  # run.sh: a decoder per checkpoint, each waited for
    assert done.returncode != 0 and ("decoding failed" in done.stderr or not side_by_side)
    assert any("--checkpoint recipe" in line for line in decoded)  # the other checkpoint was decoded
    assert not any("test2016" in line for line in decoded)  # no test set is translated with a choice half made


def test_a_run_folder_is_evaluated_only_by_the_command_that_trained_it():
    training = {"budget_minutes": 60.0, "settings": ["batch_size=2048", "seed=1"]}
    report.check_run(training, 60.0, ["batch_size=2048", "seed=1"])
    for minutes, settings in ((60.0, ["batch_size=2048", "seed=2"]), (30.0, ["batch_size=2048", "seed=1"])):
        with pytest.raises(SystemExit, match="another run's folder"):
            report.check_run(training, minutes, settings)


def test_a_run_seed_is_read_from_its_settings():
    assert report.seed_setting(["batch_size=2048", "seed=2"]) == 2
    assert report.seed_setting(["training.random_seed=7", "+model.x=1"]) == 7
    assert report.seed_setting(["warmup_steps=300"]) is None  # the recipe's own seed


def seed_report(seed: int, test2016: float, **changes) -> dict:
    "A seed's report as `report.peer_record` writes it, with only the fields `combined_record` reads."
    return {"toolkit": "opennmt-py", "version": "3.5.1", "architecture": "transformer", "seed": seed,
            "settings": ["batch_size=2048", f"seed={seed}", "keep_checkpoint=5"],
            "sacrebleu": {"test2016": test2016, "test2017": 36.0}, "checkpoint": "the average of its last 5",
            "averaged_checkpoints": ["a", "b", "c", "d", "e"], "train_minutes": 60.0, "budget_minutes": 60.0,
            "steps": 4400 + seed,
            "epochs": 17.0, "tokens_per_s": 4400, "commit": "abc", "machine": "some CPU",
            "load_average": {"start": [2.0, 1.0, 1.0], "end": [2.0, 2.0, 2.0]},
            "tuning": [{"checkpoint": "averaged", "beam": 5, "alpha": None, "length_penalty": "avg",
                        "val_bleu": 41.5},
                       {"checkpoint": "recipe", "beam": 4, "alpha": 1.0, "length_penalty": "wu", "val_bleu": 41.0}],
            **changes}


def test_a_toolkit_report_combines_its_seeds_its_screen_and_its_recipe():
    runs = {"results/peers/x/seed-1.json": seed_report(1, 40.0), "results/peers/x/seed-2.json": seed_report(2, 41.0)}
    screen = {"minutes": 30, "rows": [{"variant": "batch2k", "settings": ["batch_size=2048"], "val_bleu": 34.7,
                                       "steps": 2210},
                                      {"variant": "w300", "settings": ["warmup_steps=300"], "val_bleu": 33.3,
                                       "steps": 1091}]}
    recipe = seed_report(1, 39.9, tuning=[{"beam": 4, "alpha": 1.2, "val_bleu": 40.4}], machine="another CPU")
    record = report.combined_record(runs, screen, ("results/peers/x/recipe.json", recipe))
    assert record["sacrebleu"] == {"test2016": 40.5, "test2017": 36.0} and record["test2016_sacrebleu"] == 40.5
    assert [s["seed"] for s in record["seeds"]] == [1, 2] and record["seeds"][0]["test2016"] == 40.0
    assert record["seeds"][0]["val_bleu"] == 41.5 and record["seeds"][0]["val_bleu_grid"] == 41.0
    assert record["variant"] == "batch2k" and [r["variant"] for r in record["search"]] == ["batch2k", "w300"]
    assert record["settings"] == ["batch_size=2048", "keep_checkpoint=5"] and record["averaged_checkpoints"] == 5
    assert record["recipe_run"]["val_bleu_grid"] == 40.4 and record["steps"] == 4402
    assert [load["seed"] for load in record["load_average"]] == [1, 2] and record["parameters"] is None
    sized = {path: r | {"parameters": 7_577_600} for path, r in runs.items()}  # `parameters` adds it to each
    assert report.combined_record(sized, screen)["parameters"] == 7_577_600
    bad = [({"results/b.json": seed_report(2, 41.0, settings=["batch_size=4096", "seed=2"])}, "more than their seed"),
           ({"results/b.json": seed_report(2, 41.0, machine="another CPU")}, "different machines"),
           ({"results/b.json": seed_report(1, 41.0)}, "same seed"),
           ({"results/b.json": seed_report(2, 41.0, parameters=12_778_008)}, "differ in size")]
    for other, problem in bad:
        with pytest.raises(SystemExit, match=problem):
            report.combined_record({"results/a.json": seed_report(1, 40.0)} | other)
    with pytest.raises(SystemExit, match="not the screen's best variant, w300"):
        report.combined_record(runs, {"minutes": 30, "rows": screen["rows"][::-1]})
    added = {"variant": "batch2k-decay", "settings": ["batch_size=2048", "decay_steps=60"], "val_bleu": 35.0,
             "steps": 2300}  # a row screened after the runs, now the best
    later = {"minutes": 30, "rows": [added] + screen["rows"]}
    with pytest.raises(SystemExit, match="not the screen's best variant, batch2k-decay"):
        report.combined_record(runs, later)
    ran = report.combined_record(runs, later, variant="batch2k")  # the row they ran, named
    assert ran["variant"] == "batch2k" and [r["variant"] for r in ran["search"]][:2] == ["batch2k-decay", "batch2k"]
    with pytest.raises(SystemExit, match="not the screen's variant, w300"):
        report.combined_record(runs, later, variant="w300")
    with pytest.raises(SystemExit, match="no variant w600"):
        report.combined_record(runs, later, variant="w600")
    hour = ["batch_size=2048", "start_decay_steps=2173", "decay_steps=133", "keep_checkpoint=5"]  # placed anew
    decayed = {path: r | {"settings": hour + [f"seed={r['seed']}"]} for path, r in runs.items()}
    decay_row = {"variant": "decay", "settings": ["batch_size=2048", "start_decay_steps=980", "decay_steps=60"],
                 "val_bleu": 36.0, "steps": 1349}
    assert report.combined_record(decayed, {"minutes": 30, "rows": [decay_row]})["settings"] == sorted(hour)
    no_decay = {"variant": "decay", "settings": ["batch_size=2048", "start_decay_steps=980"], "val_bleu": 36.0,
                "steps": 1349}  # the hour sets a key the row never did
    with pytest.raises(SystemExit, match="not the screen's best variant, decay"):
        report.combined_record(decayed, {"minutes": 30, "rows": [no_decay]})
    joey = {path: r | {"settings": ["batch_size=2048", f"training.random_seed={r['seed']}",
                                    "training.keep_best_ckpts=5"]} for path, r in runs.items()}  # Joey NMT's keeping
    assert report.combined_record(joey, screen)["variant"] == "batch2k"
    changed = {path: seed_report(r["seed"], 40.0, settings=r["settings"] + ["dropout=0.3"]) for path, r in runs.items()}
    with pytest.raises(SystemExit, match="not the screen's best variant, batch2k"):  # a change the screen never ran
        report.combined_record(changed, screen)
    shorter = {"results/b.json": seed_report(2, 41.0, budget_minutes=30.0)}
    with pytest.raises(SystemExit, match="more than their seed"):
        report.combined_record({"results/a.json": seed_report(1, 40.0)} | shorter)
    alone = report.combined_record({"results/peers/x/recipe.json": recipe})
    assert alone["variant"] == "the published recipe" and alone["search"] == [] and alone["seeds"][0]["seed"] == 1


def test_screen_variants_change_real_settings_and_keep_or_say_their_peak_rate():
    screens = recipe("screens.yaml")
    for name, screen in screens.items():
        base = recipe(screen.get("recipe", f"{screen.get('toolkit', name)}.yaml"))
        assert len(screen["variants"]) >= 4 and screen["minutes"] < 60, name
        for variant, settings in screen["variants"].items():
            changed = budget.apply_settings(json.loads(json.dumps(base)), [str(s) for s in settings])
            assert (changed != base) == (variant != "recipe"), (name, variant)
    cfg = recipe("opennmt.yaml")  # noam: factor · warmup^-0.5 (· d^-0.5) at the peak
    for variant, settings in screens["opennmt"]["variants"].items():
        changed = budget.apply_settings(recipe("opennmt.yaml"), [str(s) for s in settings])
        ratio = changed["learning_rate"] * changed["warmup_steps"] ** -0.5 / (cfg["learning_rate"] *
                                                                             cfg["warmup_steps"] ** -0.5)
        assert math.isclose(ratio, 2.0 if "peak2x" in variant else 1.0, rel_tol=1e-3), variant


def test_the_recurrent_recipe_shares_our_vocabulary_and_one_embedding_matrix():
    cfg = recipe("opennmt-rnn.yaml")
    assert cfg["encoder_type"] == cfg["decoder_type"] == "rnn" and budget.architecture(cfg["encoder_type"]) == \
        "recurrent"
    assert cfg["share_vocab"] and cfg["share_embeddings"] and cfg["share_decoder_embeddings"]
    assert cfg["src_vocab"] == cfg["tgt_vocab"] == "{data}/vocab.txt" and cfg["word_vec_size"] == cfg["hidden_size"]
    assert budget.architecture(recipe("opennmt.yaml")["encoder_type"]) == "transformer"


def test_budget_records_the_load_when_training_starts_and_ends(tmp_path):
    clock = budget.Budget(minutes=1)
    clock.spent()
    clock.stop()
    clock.write(tmp_path / "training.json")
    load = json.loads((tmp_path / "training.json").read_text())["load_average"]
    assert set(load) == {"start", "end"} and all(len(v) == 3 and min(v) >= 0 for v in load.values())


def test_a_screen_row_has_what_chapter_9_reads():
    training = {"steps": 900, "tokens": 1_800_000, "train_minutes": 30.0, "tokens_per_s": 1000, "val_bleu": 31.4,
                "curve": [{"step": 750, "valid_loss": 2.5}], "load_average": {"start": [2.0, 1.9, 1.5],
                                                                               "end": [2.1, 2.0, 1.9]}}
    row = screen.variant_row("w300", ["warmup_steps=300"], training, tokens_per_epoch=900_000, commit="abc")
    assert {"variant", "settings", "val_bleu", "train_minutes", "steps", "epochs", "tokens_per_s", "load_average",
            "machine", "commit", "valid_loss"} <= set(row)
    assert (row["epochs"], row["valid_loss"], row["val_bleu"]) == (2.0, 2.5, 31.4)


def test_budget_profiles_updates_and_padding(tmp_path):
    clock = budget.Budget(minutes=1)
    clock.spent()
    clock.timed_update(time.sleep)(0.2)  # an update
    time.sleep(0.2)  # the toolkit making its next batch
    clock.count_positions(real=40, padded=100)
    clock.count_positions(real=20, padded=50)
    clock.stop()
    clock.write(tmp_path / "training.json")
    profile = json.loads((tmp_path / "training.json").read_text())["profile"]
    assert profile["padding_share"] == 0.6 and 0.3 < profile["update_share"] < 0.7


def test_a_profile_splits_the_gap_into_padding_and_time_per_position():
    def operators(matmul_us: float, other_us: float) -> list[dict]:
        return [{"operator": "aten::addmm", "self_us": matmul_us, "flops": 2e9},
                {"operator": "aten::layer_norm", "self_us": other_us, "flops": 0}]

    def window(seconds: float, real: int, padded: int) -> dict:
        return {"seconds": seconds, "positions": {"real": real, "padded": padded}}

    theirs = profile_peer.side(operators(3e6, 1e6), window(5.0, 40_000, 100_000), window(4.0, 40_000, 100_000), 10,
                               "theirs")
    mine = profile_peer.side(operators(1e6, 0.5e6), window(2.0, 45_000, 50_000), window(1.6, 45_000, 50_000), 10,
                             "ours")
    assert theirs["padding_share"] == 0.6 and theirs["ms_per_1k_positions"] == 40.0  # 4 s over 100,000, unprofiled
    assert theirs["profiled"]["ms_per_1k_positions"] == 50.0
    assert theirs["profiled"]["outside_operators_ms_per_1k_positions"] == 10.0  # 1 s of the 5 in no operator
    assert [k["kind"] for k in theirs["profiled"]["kinds"]] == ["matrix products", "layer norm"]
    assert theirs["profiled"]["matmul_gflops_per_s"] == round(2e9 / 3 / 1e9, 1)
    gap = profile_peer.gap(theirs, mine)
    assert gap["time_per_real_token"] == round((45_000 / 1.6) / (40_000 / 4), 2)
    assert math.isclose(gap["positions_per_real_token"] * gap["time_per_position"], gap["time_per_real_token"],
                        rel_tol=0.01)
    with pytest.raises(ValueError, match="no operator"):  # a profile read too early is an error, not a blank row
        profile_peer.side([], window(5.0, 4, 10), window(4.0, 4, 10), 10, "theirs")
