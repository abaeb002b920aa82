"""The page's model and tokenizer. The full run's architecture exports to at most 10 MB, its tensors each stored
once; the page's JavaScript tokenizer (run by node) gives the `tokenizers` library's ids for Multi30k sentences and
for text with odd characters, and the same text back from any ids, broken UTF-8 included."""

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from transformer.data import load_split, train_bpe

NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed: apt-get install nodejs")
HERE = Path(__file__).resolve().parent
ODD = ["Ein  Mann\tläuft\u00a0schnell\u0085weg\ufeff!",
       "Straße, Größe, Öl, Ärger — „Zitat“ «x» ‚y‘",
       "😀👍🏽 café naïve e\u0301 ﬁ", "It's 'S he'll I'D we've they're  ", "<s> </s> <pad> <unk>",
       "1,000.50 € ½ ² ٣ Ⅻ", "中文 日本語 한국어 العربية עברית", "\u200dzero\u200bwidth\u2060", "   ", "",
       "a\r\nb\u2028c\u3000d\u1680e", "tab\t\t end \n", "\ufeffBOM first", "x\x00y\x7fz\x1b[0m"]


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory) -> Path:
    "A BPE tokenizer as the full run trains it: 8,000 tokens learned from Multi30k's training pairs."
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    train_bpe([s for pair in load_split("train") for s in pair], 8000).save(str(path))
    return path


def run_js(tokenizer_file: Path, texts: list[str], ids: list[list[int]]) -> dict:
    job = {"tokenizer": str(tokenizer_file), "texts": texts, "ids": ids}
    done = subprocess.run([NODE, str(HERE / "tokenizer_node.js")], input=json.dumps(job), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_node
def test_javascript_tokenizer_is_pythons(tokenizer_file):
    """600 validation sentences (German and English) and the odd texts encode to the same ids; 300 random id
    lists (many are broken UTF-8) and the sentences' own ids decode to the same text."""
    from transformer.data import read_tokenizer

    tokenizer = read_tokenizer(tokenizer_file)
    texts = [s for pair in load_split("val")[:300] for s in pair] + ODD
    rng = random.Random(0)
    noise = [[rng.randrange(tokenizer.get_vocab_size()) for _ in range(rng.randint(1, 12))] for _ in range(300)]
    python_ids = [e.ids for e in tokenizer.encode_batch(texts)]
    js = run_js(tokenizer_file, texts, python_ids + noise)
    mismatched = [(t, a, b) for t, a, b in zip(texts, js["ids"], python_ids) if a != b]
    assert not mismatched, mismatched[:3]
    decoded = tokenizer.decode_batch(python_ids + noise)
    mismatched = [(a, b) for a, b in zip(js["texts"], decoded) if a != b]
    assert not mismatched, mismatched[:3]
    assert any("\ufffd" in t for t in decoded[len(texts):])  # the random ids did break UTF-8 somewhere


def test_page_model_of_the_full_runs_architecture_fits_10_mb(tmp_path):
    """The `small` preset with 8,000 tokens (the full run's model) exports to at most 10 MB for the page: int8
    weights, the embedding stored once for the encoder, the step's input and its output projection."""
    pytest.importorskip("onnxruntime", reason="pip install -e '.[export]'")
    from transformer.checkpoint import save_model_files
    from transformer.export import OnnxTranslator
    from transformer.model import Transformer, TransformerConfig
    from transformer.web import export_web, web_model_size

    model = Transformer(TransformerConfig.preset("small", src_vocab_size=8000, tgt_vocab_size=8000)).eval()
    save_model_files(model, tmp_path)
    train_bpe(["ein test", "a test"], 300).save(str(tmp_path / "tokenizer.json"))
    web = export_web(tmp_path, tmp_path / "web")
    parameters = sum(p.numel() for p in model.parameters())  # the tied embedding counted once
    assert web_model_size(web) <= 10_000_000
    assert (web / "weights.bin").stat().st_size < parameters + model.src_pos.table.numel() * 4 + 200_000
    out = OnnxTranslator(web).translate_ids([[5, 6, 7]], max_extra=3)  # the graphs load and decode
    assert len(out) == 1 and len(out[0]) <= 3 + 1 + 3
