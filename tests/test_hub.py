"""A trained model by name: scripts/release_model.py writes float16 files and registers their SHA-256; the package
downloads them (here from a web server on 127.0.0.1), caches them, refuses a corrupt or truncated download in one
line without leaving a file behind, names the published models when given an unknown one, and works offline once
cached. And the files committed under models/ match the package's registry."""

import ast
import http.server
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from transformer import hub
from transformer.checkpoint import load_model_dir, save_model_files
from transformer.cli import main
from transformer.data import sha256, train_bpe
from transformer.model import Transformer, TransformerConfig
from transformer.translation import load_translator, translate_text

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "release_model.py"
NAME = "tiny-de-en"
SENTENCES = ["ein hund läuft im park", "eine frau sitzt auf dem gras"]


def release_model(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    "A tiny float32 model folder, its published files written by the script, and the digests it registered."
    root = tmp_path_factory.mktemp("release")
    tokenizer = train_bpe(SENTENCES * 20 + ["the dog runs in the park", "a woman sits on the grass"] * 20, 300)
    size = tokenizer.get_vocab_size()
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=size, tgt_vocab_size=size)).eval()
    (root / "float32").mkdir()
    save_model_files(model, root / "float32")
    tokenizer.save(str(root / "float32" / "tokenizer.json"))
    notebook = shutil.copy(ROOT / "nbs" / "11b_hub.ipynb", root / "registry.ipynb")
    done = release_model(str(root / "float32"), str(root / "models" / NAME), "--notebook", str(notebook))
    assert done.returncode == 0, done.stderr
    cell = next("".join(c["source"]) for c in json.loads(Path(notebook).read_text())["cells"]
                if "PUBLISHED_MODELS: dict" in "".join(c["source"]))
    registry = ast.literal_eval(cell.split(" = ", 1)[1])
    return root / "float32", root / "models" / NAME, registry[NAME]


def test_release_writes_float16_files_and_registers_them(published):
    float32_dir, folder, digests = published
    assert digests == {f.name: sha256(f) for f in folder.iterdir()}
    assert set(digests) == {"config.json", "model.safetensors", "tokenizer.json"}
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}
    ratio = (folder / "model.safetensors").stat().st_size / (float32_dir / "model.safetensors").stat().st_size
    assert 0.45 < ratio < 0.55, ratio
    exact, loaded = load_model_dir(float32_dir), load_model_dir(folder)
    for (name, w), w16 in zip(exact.state_dict().items(), loaded.state_dict().values()):
        assert w16.dtype == torch.float32, name  # converted back for decoding
        torch.testing.assert_close(w16, w, rtol=1e-3, atol=1e-4)


class Server:
    "Serves the published files on 127.0.0.1, as a release would, whole or damaged, and records the requests."

    def __init__(self, folder: Path):
        self.files = {f"/{hub.asset_name(NAME, f.name)}": f.read_bytes() for f in folder.iterdir()}
        self.requests: list[str] = []
        self.damage = None  # None, "corrupt" or "truncated": what happens to model.safetensors
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.path)
                body = server.files.get(self.path)
                if body is None:
                    return self.send_error(404)
                damaged = self.path.endswith("model.safetensors") and server.damage
                if damaged == "corrupt":
                    body = body[:100] + bytes([body[100] ^ 1]) + body[101:]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2] if damaged == "truncated" else body)
                self.close_connection = True

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def server(published, tmp_path, monkeypatch):
    "The server, with the package's cache in an empty folder and the tiny model as the one published model."
    served = Server(published[1])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(hub.MODELS_URL_ENV, served.url)
    monkeypatch.setattr(hub, "PUBLISHED_MODELS", {NAME: published[2]})
    yield served
    served.httpd.shutdown()
    served.httpd.server_close()


def one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_good_download_is_cached_and_works_offline(server, published, capsys, monkeypatch):
    assert main(["translate", "--model", NAME, "--beam", "1", *SENTENCES]) == 0
    assert sorted(server.requests) == sorted(server.files)
    expected = translate_text(*load_translator(published[1]), SENTENCES, beam_size=1)
    assert capsys.readouterr().out.splitlines() == expected
    model, _ = load_translator(NAME)  # the Python API: no request this time
    assert len(server.requests) == len(server.files)
    assert next(model.parameters()).dtype == torch.float32
    monkeypatch.setenv(hub.MODELS_URL_ENV, "http://127.0.0.1:1")  # nothing listens there: offline
    assert main(["translate", "--model", NAME, "--beam", "1", *SENTENCES]) == 0
    assert capsys.readouterr().out.splitlines() == expected


def test_translate_int8_decodes_the_downloaded_model(server, capsys):
    assert main(["translate", "--model", NAME, "--int8", *SENTENCES]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(SENTENCES)


@pytest.mark.parametrize("damage, words", [("corrupt", "SHA-256"), ("truncated", "retrieval incomplete")])
def test_a_damaged_download_is_refused_and_leaves_nothing(server, capsys, damage, words):
    server.damage = damage
    err = one_line_error(capsys, ["translate", "--model", NAME, "ein hund"])
    assert words in err and "model.safetensors" in err, err
    folder = hub.cached_model_dir(NAME)
    assert not (folder / "model.safetensors").exists()
    assert not [p.name for p in folder.iterdir() if p.name not in hub.PUBLISHED_MODELS[NAME]]  # no partial file
    server.damage = None  # the next attempt downloads what is missing
    assert main(["translate", "--model", NAME, "ein hund"]) == 0


def test_an_unknown_name_lists_the_published_ones(server, capsys):
    err = one_line_error(capsys, ["translate", "--model", "multi30k-de-xx", "ein hund"])
    assert "multi30k-de-xx" in err and NAME in err, err
    assert server.requests == []


def test_a_damaged_cached_file_is_named(server, capsys):
    folder = hub.model_folder(NAME)
    (folder / "tokenizer.json").write_text("{}")
    err = one_line_error(capsys, ["translate", "--model", NAME, "ein hund"])
    assert "tokenizer.json" in err and "delete it" in err, err


def test_committed_files_match_the_registry(tmp_path):
    done = release_model("--check", "--assets", str(tmp_path / "assets"))
    assert done.returncode == 0, done.stderr
    assert hub.PUBLISHED_MODELS, "no published model in the registry"
    name, files = next(iter(hub.PUBLISHED_MODELS.items()))
    assert sorted(p.name for p in (tmp_path / "assets").iterdir()) == sorted(hub.asset_name(name, f) for f in files)
    models = shutil.copytree(ROOT / "models", tmp_path / "models")
    damaged = models / name / "config.json"
    damaged.write_text(damaged.read_text() + " ")
    done = release_model("--check", "--models", str(models))
    assert done.returncode == 1 and "config.json" in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_the_published_model_is_a_report_seed():
    """The published model is one of a report's seeds (issue 34): its decoding, tuned on val, is that seed's own, and
    of that report's seeds it has the highest tuned val BLEU."""
    published = (ROOT / "models" / "multi30k-de-en" / "decoding.json").read_bytes()
    matches = [p.parent.name for p in (ROOT / "results").glob("multi30k-de-en*/decoding.json")
               if p.read_bytes() == published]
    assert len(matches) == 1, f"the published decoding.json is not one report seed's: {matches or 'none'}"
    reports = [json.loads(p.read_text()) for p in (ROOT / "results").glob("multi30k-de-en*/summary.json")]
    siblings = next((r["seeds"] for r in reports if matches[0] in {s["report"] for s in r.get("seeds", [])}), None)
    assert siblings, f"{matches[0]} is no seed of any report's `seeds`"
    tuned = {s["report"]: json.loads((ROOT / "results" / s["report"] / "decoding.json").read_text())["best"]["bleu"]
             for s in siblings}
    assert max(tuned, key=tuned.get) == matches[0], tuned
