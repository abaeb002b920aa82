"""Train OpenNMT-py 3.5 under the training-time budget and decode with its own beam search; runs in OpenNMT-py's own
virtual environment (scripts/peers/run.sh makes it).

    python opennmt_run.py train --config opennmt.yaml --data DATA --out OUT --minutes 60
    python opennmt_run.py decode --out OUT --splits val --beams 4 6 --alphas 0.6 1.0 [--checkpoint averaged]
    python opennmt_run.py average --out OUT [--last 5]  # the kept checkpoints' average (OpenNMT-py's average_models)
    python opennmt_run.py curve --out OUT        # val translated greedily by every kept checkpoint, for the BLEU curve
    python opennmt_run.py parameters --out OUT --report REPORT  # the trained model's size, into its report
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # before torch loads: see README.md
import onmt  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from onmt.bin.average_models import average_models  # noqa: E402
from onmt.bin.train import _get_parser, train  # noqa: E402
from onmt.models.model_saver import ModelSaver  # noqa: E402
from onmt.trainer import Trainer  # noqa: E402

from budget import (  # noqa: E402
    Budget, add_parameters, apply_settings, architecture, curve_name, decay_scale, decoded_already, distinct_numbers,
    fill_config, hypothesis_name, last_of, minute_schedule, runner_arguments, save_average)


def instrument(budget: Budget, decay_place: dict[str, float], decay_rate: float) -> list:
    """Patch OpenNMT-py's `Trainer` to stop at the budget, to record the curve and to decay the rate by the clock
    where `decay_place` says (`minute_schedule`); returns a list that gets the trainer."""
    trainers: list = []
    accum_batches, validate, gradient_accumulation = Trainer._accum_batches, Trainer.validate, \
        Trainer._gradient_accumulation

    def budgeted_batches(self, iterator):  # the training loop ends when batches run out, then saves a checkpoint
        if not trainers:
            trainers.append(self)
            pad = self.valid_loss.padding_idx  # validation loss as ours reports it: without label smoothing
            self.valid_loss.criterion = torch.nn.CrossEntropyLoss(ignore_index=pad, reduction="sum")
            if decay_place:  # the factor read at each update: from the training minutes, not the update's number
                self.optim._learning_rate_decay_fn = lambda _update: decay_scale(
                    budget.seconds() / 60, decay_place["start_decay_steps"], decay_place["decay_steps"], decay_rate)
        for batches, normalization in accum_batches(self, iterator):
            if budget.spent():
                budget.stop()
                return
            for batch in batches:  # both sides, each with one end symbol (OpenNMT-py gives the source none)
                targets = batch["tgt"][:, 1:, 0]  # what the decoder predicts: after the start symbol
                real = int(batch["srclen"].sum()) + int(targets.ne(pad).sum())
                budget.tokens += real + len(batch["srclen"])
                budget.count_positions(real, batch["src"][:, :, 0].numel() + targets.numel())
            yield batches, normalization

    def counted_accumulation(self, true_batches, normalization, total_stats, report_stats):
        before = (report_stats.loss, report_stats.n_words)
        gradient_accumulation(self, true_batches, normalization, total_stats, report_stats)
        words = report_stats.n_words - before[1]
        if words > 0:  # a report resets the statistics between updates, never inside one
            budget.losses.append((report_stats.loss - before[0]) / words)
        budget.steps = self.optim.training_step - 1

    def recorded_validation(self, valid_iter, moving_average=None):
        stats = validate(self, valid_iter, moving_average)
        budget.validated(self.optim.training_step, stats.xent(), valid_ppl=round(stats.ppl(), 4),
                         valid_accuracy=round(stats.accuracy(), 3), learning_rate=self.optim.learning_rate())
        return stats

    Trainer._accum_batches = budgeted_batches
    Trainer._gradient_accumulation = budget.timed_update(counted_accumulation)  # forward, backward, optimizer
    Trainer.validate = budget.excluded(recorded_validation)
    ModelSaver.save = budget.excluded(ModelSaver.save)
    return trainers


def run_training(args: argparse.Namespace) -> None:
    "Train for `args.minutes` of training time and write training.json."
    (args.out / "model").mkdir(parents=True, exist_ok=True)
    if leftovers := kept_checkpoints(args.out):  # they would join this run's average
        raise SystemExit(f"{args.out / 'model'} already holds {len(leftovers)} checkpoint(s) of an earlier run "
                         f"({leftovers[-1].name}, …): give this run its own folder (PEER_OUT) or delete them")
    toolkit_settings, decay_place = minute_schedule(args.settings)  # a decay placed in minutes is ours to apply
    cfg = apply_settings(fill_config(args.config, args.data, args.out), toolkit_settings)
    if args.valid_every:  # smoke tests validate more often than the recipe
        cfg["valid_steps"] = args.valid_every
    config = args.out / "config.yaml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    budget = Budget(args.minutes)
    trainers = instrument(budget, decay_place, cfg.get("learning_rate_decay", 0.5))  # OpenNMT-py's default: 0.5
    train(_get_parser().parse_args(["-config", str(config)]))
    budget.stop()  # in case the toolkit ended training before the budget did
    steps = trainers[0].optim.training_step - 1
    last = args.out / "model" / f"model_step_{steps}.pt"
    budget.write(args.out / "training.json", toolkit="opennmt-py", toolkit_version=onmt.__version__,
                 checkpoint=str(last), checkpoint_choice="the last checkpoint (as the recipe translates)",
                 settings=args.settings, architecture=architecture(cfg["encoder_type"]),
                 moving_average=cfg.get("average_decay", 0), threads=torch.get_num_threads())


def kept_checkpoints(out: Path) -> list[Path]:
    "The checkpoints a run kept (`keep_checkpoint` of them), oldest first."
    return sorted((out / "model").glob("model_step_*.pt"), key=lambda path: int(path.stem.rsplit("_", 1)[1]))


def run_averaging(args: argparse.Namespace) -> None:
    "Average the kept checkpoints with OpenNMT-py's own `average_models`; OUT/averaged.json says which."
    save_average(args.out, last_of(kept_checkpoints(args.out), args.last),
                 lambda paths: average_models([str(p) for p in paths]), "averaged.pt",
                 "set keep_checkpoint and save_checkpoint_steps")


def decoded_checkpoint(out: Path, checkpoint: str) -> str:
    "The file of the run's last checkpoint (what the recipe translates), or of the average of its kept ones."
    if checkpoint == "recipe":
        return str(out / "model" / Path(json.loads((out / "training.json").read_text())["checkpoint"]).name)
    if not (out / "averaged.json").is_file():
        raise SystemExit(f"{out} has no averaged checkpoint: run `average --out {out}` first")
    return str(out / "model" / Path(json.loads((out / "averaged.json").read_text())["checkpoint"]).name)


def translate(model: str, source: Path, output: Path, beam: int, length_penalty: str = "none",
              alpha: float = 0.0) -> None:
    "Translate the token lines of `source` into `output` with OpenNMT-py's own beam search."
    subprocess.run([sys.executable, "-m", "onmt.bin.translate", "-model", model, "-src", str(source), "-output",
                    str(output), "-beam_size", str(beam), "-length_penalty", length_penalty, "-alpha", str(alpha),
                    "-batch_type", "tokens", "-batch_size", "2048"], check=True)
    print(f"wrote {output}", file=sys.stderr)


def data_folder(out: Path) -> Path:
    "The folder of the run's token files (where its config found the vocabulary)."
    return Path(yaml.safe_load((out / "config.yaml").read_text())["src_vocab"]).parent


def run_decoding(args: argparse.Namespace) -> None:
    "Translate each split with each beam size and α; token hypotheses go to OUT/hyp (`hypothesis_name`)."
    model = decoded_checkpoint(args.out, args.checkpoint)
    data = data_folder(args.out)
    (args.out / "hyp").mkdir(exist_ok=True)
    alphas = args.alphas if args.length_penalty == "wu" else args.alphas[:1]  # avg has no α
    for split in args.splits:
        for beam in args.beams:
            for alpha in alphas:
                path = args.out / "hyp" / hypothesis_name(split, beam, alpha, args.length_penalty, args.checkpoint)
                if args.keep_existing and decoded_already(path, data / f"{split}.de"):
                    continue
                translate(model, data / f"{split}.de", path, beam, args.length_penalty, alpha)


def run_curve(args: argparse.Namespace) -> None:
    "Translate val greedily (beam 1, as our run's validation BLEU) with every kept checkpoint, into OUT/hyp/curve."
    (folder := args.out / "hyp" / "curve").mkdir(parents=True, exist_ok=True)
    source = data_folder(args.out) / "val.de"
    for checkpoint in kept_checkpoints(args.out):
        translate(str(checkpoint), source, folder / curve_name(int(checkpoint.stem.rsplit("_", 1)[1])), beam=1)


def run_counting(args: argparse.Namespace) -> None:
    "Add the trained model's parameter count (its last checkpoint's weights, generator included) to the report."
    checkpoint = torch.load(decoded_checkpoint(args.out, "recipe"), map_location="cpu", weights_only=False)
    weights = {**checkpoint["model"], **{f"generator.{k}": v for k, v in checkpoint["generator"].items()}}
    add_parameters(args.report, distinct_numbers([tensor for name, tensor in weights.items()
                                                  if not name.endswith(".pe")]))  # a Transformer's position table


if __name__ == "__main__":
    parsed_args = runner_arguments(__doc__.splitlines()[0])
    {"train": run_training, "decode": run_decoding, "average": run_averaging,
     "curve": run_curve, "parameters": run_counting}[parsed_args.command](parsed_args)
