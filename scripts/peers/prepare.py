"""The peers' data: Multi30k de→en split by the same byte-level BPE as ours (learned on the training pairs only), one
sentence per line with tokens separated by spaces, plus the shared vocabulary and the raw references for scoring.

    python scripts/peers/prepare.py --out runs/peers/joeynmt/data
"""
import argparse
import tomllib
from pathlib import Path

from tokenizers import Tokenizer

from transformer.data import SPECIAL_TOKENS, load_split, read_tokenizer, train_bpe

ROOT = Path(__file__).resolve().parents[2]
SPLITS = ("train", "val", "test2016", "test2017", "mscoco2017")


def our_vocab_size(config: Path = ROOT / "configs" / "multi30k-de-en.toml") -> int:
    "The BPE vocabulary size of our full run's configuration."
    return tomllib.loads(config.read_text())["data"]["vocab_size"]


def token_lines(tokenizer: Tokenizer, sentences: list[str]) -> list[str]:
    "Each sentence as its BPE tokens separated by spaces (byte-level tokens hold no spaces: Ġ marks one)."
    return [" ".join(e.tokens) for e in tokenizer.encode_batch(sentences)]


def write_vocab(tokenizer: Tokenizer, path: Path) -> None:
    "The shared vocabulary in id order, one token a line, without our special tokens (each toolkit adds its own)."
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    path.write_text("".join(f"{token}\n" for token, _ in vocab if token not in SPECIAL_TOKENS), "utf-8")


def prepare(out: Path, data_dir: str | None = None, eval_lines: int = 0) -> dict[str, int]:
    "Write tokenized splits, raw references, vocab.txt and tokenizer.json into `out`; returns pairs per split."
    out.mkdir(parents=True, exist_ok=True)
    pairs = {split: load_split(split, data_dir) for split in SPLITS}
    if eval_lines:  # smoke tests: the first lines of val and the test sets only (training data untouched)
        pairs = {split: p if split == "train" else p[:eval_lines] for split, p in pairs.items()}
    tokenizer_path = out / "tokenizer.json"
    if not tokenizer_path.is_file():  # learned once, on the training pairs only, exactly as `transformer train` does
        train_bpe([s for pair in pairs["train"] for s in pair], our_vocab_size()).save(str(tokenizer_path))
    tokenizer = read_tokenizer(tokenizer_path)
    for split, split_pairs in pairs.items():
        for side, lang in enumerate(("de", "en")):
            lines = token_lines(tokenizer, [p[side] for p in split_pairs])
            (out / f"{split}.{lang}").write_text("".join(line + "\n" for line in lines), "utf-8")
            (out / f"{split}.raw.{lang}").write_text("".join(p[side] + "\n" for p in split_pairs), "utf-8")
    write_vocab(tokenizer, out / "vocab.txt")
    return {split: len(p) for split, p in pairs.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the prepared files")
    parser.add_argument("--data-dir", help="Multi30k raw files (default: $MULTI30K_DIR, else downloaded)")
    parser.add_argument("--eval-lines", type=int, default=0, help="keep only the first N pairs of val and the test "
                        "sets (smoke tests; default: all)")
    args = parser.parse_args()
    counts = prepare(args.out, args.data_dir, args.eval_lines)
    print(", ".join(f"{split} {n:,} pairs" for split, n in counts.items()))
