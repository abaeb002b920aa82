"""Chapter 9's "Train it here" on this machine: the recipe for a few minutes, averaged and scored, into a JSON record.

python scripts/train_here.py --minutes 3 --precision fp16 --seed 0 --out results/train-here/h200-fp16-seed0.json
(fp16 with a gradient scaler is what `auto` picks on a Colab T4, which has no bf16.)"""

import argparse
import dataclasses
import shlex
import sys
import tempfile
from pathlib import Path

from transformer.checkpoint import write_json
from transformer.run import load_average, load_run_config
from transformer.training import PRECISIONS
from transformer.translation_run import train_briefly


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, required=True, help="training minutes (validation not counted)")
    p.add_argument("--precision", default="auto", choices=PRECISIONS)
    p.add_argument("--seed", type=int, default=0, help="the training seed (the vocabulary does not depend on it)")
    p.add_argument("--config", default="configs/multi30k-de-en.toml")
    p.add_argument("--out", required=True, help="the JSON record to write")
    args = p.parse_args()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)  # before the minutes are spent
    recipe = load_run_config(args.config)
    recipe = dataclasses.replace(recipe, train=dataclasses.replace(recipe.train, precision=args.precision,
                                                                     seed=args.seed))
    load_at_start = load_average()
    brief = train_briefly(recipe, args.minutes, Path(tempfile.mkdtemp()) / "multi30k-here")
    test = brief.pop("test2016")
    record = brief | {"test2016": {k: test[k] for k in ("bleu", "line", "signature")},
                      "samples": [{"source": s, "reference": r, "hypothesis": h}
                                  for (s, r), h in zip(test["pairs"][:5], test["hypotheses"][:5])],
                      "load_average": {"start": load_at_start, "end": load_average()},
                      "command": shlex.join(["python", *sys.argv])}
    write_json(Path(args.out), record)
    print(f"{brief['steps']:,} steps, {brief['epochs']:.1f} epochs in {args.minutes} minutes "
          f"({brief['wall_minutes']:.1f} of wall time); test2016 BLEU {test['bleu']} -> {args.out}")


if __name__ == "__main__":
    main()
