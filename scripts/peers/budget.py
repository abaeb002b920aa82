"""The training-time budget and the record that both peer launchers share (the standard library at import: it runs
inside each toolkit's own virtual environment). Training time is counted as ours is: wall time from the first
training batch, less the time spent validating and saving checkpoints; the budget is checked before every batch, so
a run ends at most one step after the budget is spent, through the toolkit's own end of training (which saves a last
checkpoint)."""
import argparse
import json
import os
import sys
import time
from statistics import fmean
from pathlib import Path


def mean(values: list[float]) -> float | None:
    "The mean of `values` rounded to 4 places, or None if there are none."
    return round(fmean(values), 4) if values else None


class Budget:
    "Training seconds against a limit, with time spent in validation or saving left out, and the validation curve."

    def __init__(self, minutes: float):
        if not minutes > 0:
            raise ValueError(f"the training budget must be a positive number of minutes, got {minutes!r}")
        self.limit = 60 * minutes
        self.started: float | None = None  # perf_counter at the first training batch
        self.paused = 0.0  # seconds spent in validation and checkpoint saving
        self.pause_started: float | None = None  # perf_counter when the pause under way began (None: training)
        self.stopped: float | None = None  # training seconds when training ended
        self.steps = self.tokens = 0  # optimizer steps; source + target tokens, each side with one end symbol
        self.curve: list[dict] = []
        self.losses: list[float] = []  # training loss of every update, as the toolkit reports it (label-smoothed)
        self.load_average: dict[str, list[float]] = {}  # os.getloadavg() when training began and when it ended
        self.positions = {"real": 0, "padded": 0}  # token positions the model computed: all, and those not padding
        self.update_seconds = 0.0  # inside the toolkit's forward, backward and optimizer step; the rest is data

    def seconds(self) -> float:
        "Training seconds so far (frozen during a pause and once training has ended)."
        if self.stopped is not None:
            return self.stopped
        now = self.pause_started if self.pause_started is not None else time.perf_counter()
        return 0.0 if self.started is None else now - self.started - self.paused

    def stop(self) -> None:
        "Training has ended: later time does not count."
        if self.stopped is None:
            self.stopped = self.seconds()
            self.load_average["end"] = [round(load, 2) for load in os.getloadavg()]

    def spent(self) -> bool:
        "Whether the budget is used up; the first call starts the clock."
        if self.started is None:
            self.started = time.perf_counter()
            self.load_average["start"] = [round(load, 2) for load in os.getloadavg()]
        return self.seconds() >= self.limit

    def excluded(self, fn):
        "`fn` wrapped so that the time it takes does not count as training time."
        def wrapper(*args, **kwargs):
            if self.pause_started is not None:  # inside another excluded call (saving during validation)
                return fn(*args, **kwargs)
            self.pause_started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.paused += time.perf_counter() - self.pause_started
                self.pause_started = None
        return wrapper

    def timed_update(self, fn):
        "`fn` (the toolkit's update: forward, backward, optimizer step) wrapped to add its time to update_seconds."
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.update_seconds += time.perf_counter() - start
        return wrapper

    def count_positions(self, real: int, padded: int) -> None:
        "Add one batch's token positions: `real` ones and all `padded` ones the model computes (both sides)."
        self.positions["real"] += real
        self.positions["padded"] += padded

    def validated(self, step: int, valid_loss: float, **extra: float) -> None:
        "Add a point to the validation curve (`valid_loss`: mean negative log-likelihood per target token)."
        self.curve.append({"step": step, "train_minutes": round(self.seconds() / 60, 3),
                           "valid_loss": round(valid_loss, 5), **extra})

    def profile(self) -> dict[str, float | None]:
        "Where training time went: the share spent in updates, and the share of computed positions that are padding."
        seconds, padded = self.seconds(), self.positions["padded"]
        return {"update_share": round(self.update_seconds / seconds, 3) if seconds else None,
                "padding_share": round(1 - self.positions["real"] / padded, 3) if padded else None}

    def write(self, path: Path, **facts) -> None:
        "Write what the run measured, with `facts` such as the toolkit's version and the checkpoint to decode."
        record = {"train_minutes": round(self.seconds() / 60, 2), "budget_minutes": self.limit / 60,
                  "steps": self.steps, "tokens": self.tokens,
                  "tokens_per_s": round(self.tokens / max(self.seconds(), 1e-9)),
                  "train_loss_first_10": mean(self.losses[:10]), "train_loss_last_10": mean(self.losses[-10:]),
                  "load_average": self.load_average, "profile": self.profile(), **facts, "curve": self.curve}
        Path(path).write_text(json.dumps(record, indent=1) + "\n")


CHECKPOINTS = ("recipe", "averaged")  # what a run translates: the checkpoint its recipe translates, or an average


def runner_arguments(description: str) -> argparse.Namespace:
    "The launchers' command line: `train` (config, data, output, minutes), `decode`, `average`, `curve`, the size."
    parser = argparse.ArgumentParser(description=description)
    commands = parser.add_subparsers(dest="command", required=True)
    training = commands.add_parser("train")
    training.add_argument("--config", type=Path, required=True)
    training.add_argument("--data", type=Path, required=True)
    training.add_argument("--out", type=Path, required=True)
    training.add_argument("--minutes", type=float, required=True)
    training.add_argument("--valid-every", type=int, default=0,
                          help="validate every N updates (default: the recipe's)")
    training.add_argument("--set", dest="settings", nargs="*", default=[], metavar="KEY=VALUE",
                          help="change the recipe (a screen's variant, a seed): apply_settings says how")
    decoding = commands.add_parser("decode")
    decoding.add_argument("--out", type=Path, required=True)
    decoding.add_argument("--splits", nargs="+", required=True)
    decoding.add_argument("--beams", type=int, nargs="+", required=True)
    decoding.add_argument("--alphas", type=float, nargs="+", required=True)
    decoding.add_argument("--length-penalty", choices=("wu", "avg"), default="wu",
                          help="GNMT's penalty with each α (wu), or OpenNMT-py's default: the mean log-probability")
    decoding.add_argument("--checkpoint", choices=CHECKPOINTS, default="recipe",
                          help="the checkpoint the recipe translates, or the average that `average` wrote")
    decoding.add_argument("--keep-existing", action="store_true",
                          help="skip a setting whose hypotheses are complete already: an evaluation resumed")
    averaging = commands.add_parser("average", help="average the checkpoints the run kept (OUT/averaged.json)")
    averaging.add_argument("--out", type=Path, required=True)
    averaging.add_argument("--last", type=int, default=0, help="average only the last N kept (default: all)")
    curve = commands.add_parser("curve", help="translate val greedily with every kept checkpoint (OUT/hyp/curve)")
    curve.add_argument("--out", type=Path, required=True)
    counting = commands.add_parser("parameters", help="add the trained model's size to the run's report")
    counting.add_argument("--out", type=Path, required=True)
    counting.add_argument("--report", type=Path, required=True, help="the run's report (report.py write)")
    return parser.parse_args()


def distinct_numbers(tensors: list) -> int:
    "How many numbers the weights hold, a matrix shared by embeddings and output layer (one storage) counted once."
    return sum({tensor.untyped_storage().data_ptr(): tensor.numel() for tensor in tensors}.values())


def write_json(path: Path, record: dict) -> None:
    "Write `record` to `path` (folders made), readable and ending in a newline."
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")


def add_parameters(report: Path, parameters: int) -> None:
    "Record the trained model's parameter count in a run's report, which keeps everything else it says."
    write_json(report, json.loads(report.read_text()) | {"parameters": parameters})
    print(f"{report}: {parameters:,} parameters", file=sys.stderr)


def architecture(encoder_type: str) -> str:
    "'transformer' or 'recurrent', from the encoder type a recipe names (rnn, brnn, gru, lstm: recurrent)."
    return "transformer" if encoder_type == "transformer" else "recurrent"


def hypothesis_name(split: str, beam: int, alpha: float, length_penalty: str = "wu",
                    checkpoint: str = "recipe") -> str:
    "The file name of a split's token hypotheses at one decoding setting (`avg` takes no α) of one checkpoint."
    if checkpoint not in CHECKPOINTS:
        raise ValueError(f"checkpoint is one of {CHECKPOINTS}, got {checkpoint!r}")
    penalty = "avg" if length_penalty == "avg" else f"a{alpha:g}"
    return ("averaged." if checkpoint == "averaged" else "") + f"{split}.b{beam}.{penalty}.tok"


def last_of(paths: list[Path], last: int) -> list[Path]:
    "The last `last` of `paths` (oldest first), or all of them when `last` is 0."
    if last < 0:
        raise SystemExit(f"--last takes a number of checkpoints (0: all), got {last}")
    return paths[-last:] if last else paths


def decoded_already(hypotheses: Path, source: Path) -> bool:
    "Whether `hypotheses` is a finished translation of `source` (one line for each of its lines), not a stopped one."
    lines = lambda path: len(path.read_text(encoding="utf-8").splitlines())  # noqa: E731
    return hypotheses.is_file() and lines(hypotheses) == lines(source)


MINUTE_PLACED = ("start_decay_steps", "decay_steps")  # OpenNMT-py's exponential decay, placeable by the clock


def minute_schedule(settings: list[str]) -> tuple[list[str], dict[str, float]]:
    """`settings` less a decay placed in training minutes, and that place ({} if none). `start_decay_steps=48.08min
    decay_steps=2.94min` places OpenNMT-py's halvings by the budget's clock, as our cooldown is placed, not by
    updates, whose number per minute differs between machines of one kind."""
    kept, place = [], {}
    for setting in settings:
        key, _, value = setting.partition("=")
        if key not in MINUTE_PLACED or not value.endswith("min"):
            kept.append(setting)
            continue
        try:
            place[key] = float(value.removesuffix("min"))
        except ValueError:
            raise SystemExit(f"{key} in minutes is a number then 'min' ({key}=12.5min), got {value!r}") from None
    if place and (set(place) != set(MINUTE_PLACED) or place["start_decay_steps"] < 0 or place["decay_steps"] <= 0):
        raise SystemExit(f"a decay placed in minutes needs start_decay_steps=Nmin (N ≥ 0) and "
                         f"decay_steps=Mmin (M > 0), got {place}")
    return kept, place


def decay_scale(minute: float, start: float, every: float, rate: float = 0.5) -> float:
    "The learning rate's factor at training `minute`: × `rate` at `start` and every `every` after (OpenNMT-py's)."
    return rate ** (max(minute - start + every, 0) // every)


def curve_name(step: int) -> str:
    "The file, under OUT/hyp/curve, of val translated greedily by the checkpoint written at update `step`."
    return f"val.step{step}.b1.tok"


def curve_step(name: str) -> int:
    "The update of a `curve_name` file."
    return int(name.removeprefix("val.step").removesuffix(".b1.tok"))


def averaged_weights(states: list[dict]) -> dict:
    "The element-wise mean of several state dicts of one model, each weight in its own dtype (torch imported here)."
    import torch

    if len(states) < 2:
        raise SystemExit(f"an average needs at least 2 checkpoints, got {len(states)}")
    if any(sorted(state) != sorted(states[0]) for state in states):
        raise SystemExit("the checkpoints' weights differ in their names: they are not one model's")
    return {name: torch.stack([state[name].double() for state in states]).mean(0).to(weight.dtype)
            for name, weight in states[-1].items()}


def save_average(out: Path, paths: list[Path], average, name: str, how_to_keep: str) -> None:
    """Write `average(paths)` (a checkpoint in the toolkit's own format) as OUT/model/NAME, never half-written, and
    list in OUT/averaged.json the checkpoints it averages; `how_to_keep` says which setting keeps more of them."""
    import torch

    if len(paths) < 2:
        raise SystemExit(f"{out / 'model'} keeps {len(paths)} checkpoint(s): {how_to_keep} so that a run keeps "
                         "several to average")
    output = out / "model" / name
    partial = output.with_name(output.name + ".partial")
    torch.save(average(paths), partial)
    partial.replace(output)
    (out / "averaged.json").write_text(json.dumps(
        {"checkpoint": str(output), "averaged": [path.name for path in paths]}, indent=1) + "\n")
    print(f"averaged {len(paths)} checkpoints → {output}", file=sys.stderr)


def fill_config(template: Path, data: Path, out: Path) -> dict:
    "The recipe with the data and output folders filled in (PyYAML: in both toolkits' environments)."
    import yaml

    text = template.read_text().replace("{data}", str(data.resolve())).replace("{out}", str(out.resolve()))
    return yaml.safe_load(text)


def apply_settings(cfg: dict, settings: list[str]) -> dict:
    """`cfg` with each `dotted.key=value` set (a YAML value). The key must be in the recipe, so that a typo is a clear
    error; `+dotted.key=value` adds one it lacks (an option of the toolkit that the recipe leaves at its default)."""
    import yaml

    for setting in settings:
        key, sep, value = setting.partition("=")
        adding = key.startswith("+")
        key = key.removeprefix("+")
        if not sep or not key:
            raise SystemExit(f"a setting is KEY=VALUE or +KEY=VALUE, got {setting!r}")
        *parents, leaf = key.split(".")
        node = cfg
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or (leaf in node) == adding:
            problem = "already has" if adding else "has no"
            raise SystemExit(f"the recipe {problem} setting {key!r} (a typo? '+KEY=VALUE' adds one it lacks)")
        node[leaf] = yaml.safe_load(value)
    return cfg
