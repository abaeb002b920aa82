"""Train Joey NMT 2.3 under the training-time budget and decode with its own beam search; runs in Joey NMT's own
virtual environment (scripts/peers/run.sh makes it).

    python joeynmt_run.py train --config joeynmt.yaml --data DATA --out OUT --minutes 60
    python joeynmt_run.py decode --out OUT --splits val --beams 4 6 --alphas 0.6 1.0 [--checkpoint averaged]
    python joeynmt_run.py average --out OUT     # the checkpoints Joey kept (keep_best_ckpts), averaged
"""
import argparse
import sys
from pathlib import Path

import joeynmt
import joeynmt.builders
import joeynmt.training
import torch
import yaml
from torch.optim.lr_scheduler import ReduceLROnPlateau
from joeynmt.loss import XentLoss
from joeynmt.prediction import predict, prepare
from joeynmt.config import parse_global_args
from joeynmt.helpers import make_model_dir
from joeynmt.helpers_for_ddp import get_logger
from joeynmt.training import TrainManager, train

from budget import (Budget, apply_settings, architecture, averaged_weights, decoded_already, fill_config,
                    hypothesis_name, last_of, runner_arguments, save_average)


class PlateauWithoutVerbose(ReduceLROnPlateau):
    "Joey NMT 2.3's plateau schedule passes verbose=False, which torch 2.13 no longer takes; nothing else changes."

    def __init__(self, optimizer, verbose: bool = False, **kwargs):
        super().__init__(optimizer, **kwargs)


joeynmt.builders.ReduceLROnPlateau = PlateauWithoutVerbose


def instrument(budget: Budget) -> list:
    "Patch Joey's `TrainManager` to stop at the budget and to record the curve; returns a list that gets the trainer."
    trainers: list = []
    train_step, validate, add_report = TrainManager._train_step, TrainManager._validate, TrainManager._add_report
    train_and_validate = TrainManager.train_and_validate

    timed_step = budget.timed_update(train_step)  # forward, backward and the optimizer's step

    def budgeted_step(self, batch):
        if not trainers:
            trainers.append(self)
        tokens_before = budget.tokens
        if budget.spent():  # this update still runs; the loop then ends as it does at max_updates
            self.stats.is_max_update = True
        result = timed_step(self, batch)
        budget.losses.append(float(result[0]))  # per target token (normalization: tokens)
        budget.tokens += int(batch.src_length.sum()) + int(batch.ntokens)  # both sides, each with its </s>
        budget.count_positions(budget.tokens - tokens_before, batch.src.numel() + batch.trg.numel())
        budget.steps = self.stats.steps + 1
        return result

    def unsmoothed_validation(self, valid_data):  # loss and perplexity as ours reports them: without smoothing
        smoothed = self.model.loss_function
        self.model._loss_function = XentLoss(pad_index=smoothed.pad_index, smoothing=0.0)
        try:
            return validate(self, valid_data)
        finally:
            self.model._loss_function = smoothed

    def scored_only(*args, **kwargs):  # val's loss only: its greedy translations (BLEU on tokens) were never used
        kwargs["args"] = kwargs["args"]._replace(return_prob="ref", return_attention=True)  # Joey: score the refs
        scores, *_ = predict(*args, **kwargs)
        return scores, [], [], [], [], []  # no references, translations or attention to log or store

    def recorded_report(self, valid_scores, new_best=False):
        budget.validated(self.stats.steps, valid_scores["loss"], valid_ppl=round(valid_scores["ppl"], 4),
                         epoch=self.stats.epochs)
        return add_report(self, valid_scores, new_best)

    def validated_at_the_end(self, train_data, valid_data):  # a last point on the curve, as ours has
        train_and_validate(self, train_data, valid_data)
        budget.stop()
        if self.stats.steps % self.args.validation_freq:
            self._validate(valid_data)

    TrainManager._train_step = budgeted_step
    TrainManager.train_and_validate = validated_at_the_end
    TrainManager._validate = budget.excluded(unsmoothed_validation)
    TrainManager._save_checkpoint = budget.excluded(TrainManager._save_checkpoint)
    TrainManager._add_report = recorded_report
    joeynmt.training.predict = scored_only  # what `_validate` calls; the test sets' `test` keeps its own
    return trainers


def run_training(args: argparse.Namespace) -> None:
    "Train for `args.minutes` of training time and write training.json."
    cfg = apply_settings(fill_config(args.config, args.data, args.out), args.settings)
    if args.valid_every:  # smoke tests validate more often than the recipe
        cfg["training"]["validation_freq"] = cfg["training"]["logging_freq"] = args.valid_every
    model_dir = Path(cfg["model_dir"])
    make_model_dir(model_dir, overwrite=True)  # as `python -m joeynmt train` does
    (args.out / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    get_logger("", log_file=str(model_dir / "train.log"))
    budget = Budget(args.minutes)
    trainers = instrument(budget)
    train(rank=0, world_size=1, cfg=cfg, skip_test=True)
    budget.stop()  # in case the toolkit ended training before the budget did
    trainer = trainers[0]
    budget.write(args.out / "training.json", toolkit="joeynmt", toolkit_version=joeynmt.__version__,
                 epochs=trainer.stats.epochs, checkpoint=str(args.out / "model" / "best.ckpt"),
                 checkpoint_choice="best validation perplexity (the recipe's early-stopping checkpoint)",
                 settings=args.settings, architecture=architecture(cfg["model"]["encoder"]["type"]),
                 threads=torch.get_num_threads())


def kept_checkpoints(out: Path) -> list[Path]:
    "The checkpoints Joey NMT kept (its `keep_best_ckpts` best by validation perplexity), by update, oldest first."
    return sorted((path for path in (out / "model").glob("*.ckpt") if path.stem.isdigit() and not path.is_symlink()),
                  key=lambda path: int(path.stem))


def averaged_checkpoint(paths: list[Path]) -> dict:
    "The weights' mean over Joey NMT checkpoints, as its scripts/average_checkpoints.py takes it: all it translates."
    return {"model_state": averaged_weights([torch.load(path, map_location="cpu", weights_only=True)["model_state"]
                                             for path in paths])}


def run_averaging(args: argparse.Namespace) -> None:
    "Average the kept checkpoints' weights; OUT/averaged.json says which."
    save_average(args.out, last_of(kept_checkpoints(args.out), args.last), averaged_checkpoint, "averaged.ckpt",
                 "set training.keep_best_ckpts")


def run_decoding(args: argparse.Namespace) -> None:
    "Translate each split with each beam size and α; token hypotheses go to OUT/hyp (`hypothesis_name`)."
    if args.length_penalty != "wu":
        raise SystemExit("Joey NMT has one length penalty, GNMT's with α: --length-penalty avg is OpenNMT-py's")
    cfg = yaml.safe_load((args.out / "config.yaml").read_text())
    if args.checkpoint == "averaged" and not (args.out / "averaged.json").is_file():
        raise SystemExit(f"{args.out} has no averaged checkpoint: run `average --out {args.out}` first")
    cfg["testing"]["load_model"] = str(args.out / "model" / ("averaged.ckpt" if args.checkpoint == "averaged"
                                                            else "best.ckpt"))
    data = Path(cfg["data"]["dev"]).parent
    (args.out / "hyp").mkdir(exist_ok=True)
    for split in args.splits:
        cfg["data"]["test"] = str(data / split)
        parsed = parse_global_args(cfg, rank=0, mode="test")
        model, _, _, split_data = prepare(parsed, rank=0, mode="test")
        for beam in args.beams:
            for alpha in args.alphas:
                path = args.out / "hyp" / hypothesis_name(split, beam, alpha, checkpoint=args.checkpoint)
                if args.keep_existing and decoded_already(path, data / f"{split}.de"):
                    continue
                settings = parsed.test._replace(beam_size=beam, beam_alpha=alpha)
                hypotheses = predict(model=model, data=split_data, device=parsed.device, n_gpu=0, rank=0,
                                     compute_loss=False, normalization="tokens", args=settings,
                                     autocast=parsed.autocast)[2]
                path.write_text("".join(h + "\n" for h in hypotheses), "utf-8")
                print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    parsed_args = runner_arguments(__doc__.splitlines()[0])
    {"train": run_training, "decode": run_decoding, "average": run_averaging}[parsed_args.command](parsed_args)
