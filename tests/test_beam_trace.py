"""Chapter 5's picture of a beam: the committed trace is of the published model, and re-recording it gives it back."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from transformer.data import sha256
from transformer.hub import PUBLISHED_MODELS

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "results" / "beam-search.json"
MODEL = ROOT / "models" / "multi30k-de-en"


@pytest.fixture(scope="module")
def trace() -> dict:
    return json.loads(TRACE.read_text(encoding="utf-8"))


def plain(row: dict) -> tuple:
    "A row of the trace without its scores."
    return row["step"], row["tokens"], row["ended"], row["piece"], row["text"]


def test_the_trace_is_of_the_published_model(trace):
    """The picture names the published model: the trace's digest is the one the package downloads and checks."""
    published = PUBLISHED_MODELS[trace["model"]]["model.safetensors"]
    assert trace["model_sha256"] == published == sha256(MODEL / "model.safetensors"), \
        "the published model changed: run scripts/beam_trace.py and read chapter 5's paragraph again"


def test_recording_the_trace_again_gives_the_committed_one(trace, tmp_path):
    """scripts/beam_trace.py on the committed model chooses the same sentence (by the rule the file records) and
    writes the same steps, pieces and translations (scores ±1e-3)."""
    out = tmp_path / "trace.json"
    rule = trace["max_words"]
    chosen = ["--line", str(trace["line"])] if rule is None else ["--max-words", str(rule)]
    subprocess.run([sys.executable, str(ROOT / "scripts" / "beam_trace.py"), "--model", str(MODEL), *chosen,
                    "--beam", str(trace["beam"]), "--alpha", str(trace["alpha"]),
                    "--out", str(out)], check=True, capture_output=True, cwd=tmp_path)
    again = json.loads(out.read_text(encoding="utf-8"))
    for key in ("line", "source", "reference", "translation", "greedy", "greedy_tokens", "model_sha256"):
        assert again[key] == trace[key], key
    assert list(map(plain, again["steps"])) == list(map(plain, trace["steps"]))
    for new, old in zip(again["steps"], trace["steps"]):
        assert new["logprob"] == pytest.approx(old["logprob"], abs=1e-3)
        assert (new["score"] is None) == (old["score"] is None)
        assert new["score"] is None or new["score"] == pytest.approx(old["score"], abs=1e-3)

