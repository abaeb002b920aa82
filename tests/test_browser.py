"""The translation box in a real browser: Debian's chromium, driven by playwright, loads a minimal site (the box's
page, its scripts, onnxruntime-web and a tiny model trained in seconds) from 127.0.0.1 and from file://, and
translates as PyTorch does, greedy and beam 4, token for token."""

import random
import shutil
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime", reason="pip install -e '.[export]'")
sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).is_file():
    pytest.skip("chromium is not installed: bash scripts/setup.sh installs Debian's", allow_module_level=True)
if shutil.which("npm") is None:
    pytest.skip("npm is not installed (it fetches onnxruntime-web): bash scripts/setup.sh installs it",
                allow_module_level=True)

from corpus import WORDS  # noqa: E402
from transformer.translation import load_translator, translate_text  # noqa: E402
from transformer.viz import write_vega_bundle  # noqa: E402
from transformer.web import JS_SOURCES, train_small_model, translate_box, write_model_assets  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = ["der hund spielt im park", "die katze sitzt auf gras", "ein kind läuft"]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, Path]:
    "A model folder trained in seconds on word-for-word pairs, and a site whose nbs/translate.html runs it in float32."
    root = tmp_path_factory.mktemp("browser")
    rng = random.Random(0)
    sentences = [[rng.choice(list(WORDS)) for _ in range(rng.randint(3, 9))] for _ in range(400)]
    pairs = [(" ".join(s), " ".join(WORDS[w] for w in s)) for s in sentences]
    model_dir = train_small_model(pairs, root / "model", steps=300, vocab_size=300)
    site = root / "site"
    write_model_assets(model_dir, site / "translate", "a tiny test model", int8=False)  # float32: as PyTorch
    for name in JS_SOURCES:
        shutil.copy(ROOT / "_extra/translate" / name, site / "translate" / name)
    write_vega_bundle(site / "_static/vega-bundle.js")
    (site / "nbs").mkdir()
    (site / "nbs/translate.html").write_text(
        '<!doctype html><html><head><meta charset="utf-8"><script src="../_static/vega-bundle.js"></script>'
        f"</head><body>{translate_box('../translate/')}</body></html>", encoding="utf-8")
    return model_dir, site


@pytest.fixture(scope="module")
def server(site):
    "The site served by http.server on 127.0.0.1 (a free port), in a thread."
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietHandler, directory=str(site[1])))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no line per request in the test output
        pass


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def translate_in_page(page, sentence: str, decoding: str) -> str:
    "Type `sentence`, choose `decoding` ('greedy' or 'beam'), press Translate and return the box's output."
    page.check(f".translate-decoding[value={decoding}]")
    page.fill(".translate-input", sentence)
    page.evaluate("document.querySelector('.translate-box').dataset.state = 'typed'")
    page.click(".translate-button")
    page.wait_for_selector(".translate-box[data-state=done], .translate-box[data-state=error]", timeout=60_000)
    assert page.get_attribute(".translate-box", "data-state") == "done", page.inner_text(".translate-status")
    return page.inner_text(".translate-output")


def open_box(browser, url: str):
    "A 1400 px wide page at `url` whose box has loaded its model."
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_selector(".translate-box[data-state=ready], .translate-box[data-state=error]", timeout=60_000)
    assert page.get_attribute(".translate-box", "data-state") == "ready", page.inner_text(".translate-status")
    assert not errors, errors
    return page


def test_page_translates_as_pytorch(site, server, browser):
    """Three typed sentences come out as PyTorch's greedy translations of the same model, and as its beam 4; the
    cross-attention map is drawn (one Vega chart) and the page names its model."""
    model, tokenizer = load_translator(site[0])
    page = open_box(browser, f"{server}/nbs/translate.html")
    assert "a tiny test model" in page.inner_text(".translate-about")
    greedy = [translate_in_page(page, s, "greedy") for s in SENTENCES]
    assert greedy == translate_text(model, tokenizer, SENTENCES, beam_size=1)
    beam = [translate_in_page(page, s, "beam") for s in SENTENCES]
    assert beam == [translate_text(model, tokenizer, [s], beam_size=4)[0] for s in SENTENCES]
    page.wait_for_selector(".translate-map svg, .translate-map canvas", timeout=30_000)
    page.close()


def test_page_works_from_file(site, browser):
    "Opened as a file, without a server (the built book read offline), the box loads and translates."
    model, tokenizer = load_translator(site[0])
    page = open_box(browser, (site[1] / "nbs/translate.html").as_uri())
    assert translate_in_page(page, SENTENCES[0], "greedy") == translate_text(model, tokenizer, SENTENCES[:1], 1)[0]
    page.close()
