"""A tiny generated parallel corpus and a run configuration over it, for tests that train through the CLI."""

import random
from pathlib import Path

WORDS = dict(zip("der hund katze mann frau kind spielt läuft sitzt im park auf gras".split(),
                 "the dog cat man woman child plays runs sits in-the park on grass".split()))


def write_corpus(folder: Path, dropout: float = 0.0, n_train: int = 400, n_valid: int = 40) -> Path:
    "Write train/valid .de/.en files (word-for-word 'translations') and tiny.toml into `folder`; return its path."
    rng = random.Random(0)
    for split, n in (("train", n_train), ("valid", n_valid)):
        sentences = [[rng.choice(list(WORDS)) for _ in range(rng.randint(3, 9))] for _ in range(n)]
        (folder / f"{split}.de").write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
        (folder / f"{split}.en").write_text("".join(" ".join(WORDS[w] for w in s) + "\n" for s in sentences),
                                            encoding="utf-8")
    config = folder / "tiny.toml"
    config.write_text(f"""preset = "tiny"
[model]
dropout = {dropout}
[train]
max_tokens = 256
max_steps = 4
warmup = 10
eval_every = 2
precision = "fp32"
compile = "off"
[data]
vocab_size = 300
train_src = "train.de"
train_tgt = "train.en"
valid_src = "valid.de"
valid_tgt = "valid.en"
""")
    return config
