"""A user's configuration and model folders, read the way they mean: every TOML value of the wrong type or in the
wrong place is one line naming it and the file; model kinds are known in any process; the page's export keeps the
model's wiring and the caller's logging; every module says what it is responsible for."""

import ast
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

import transformer
from transformer.cli import main
from transformer.run import RunConfig, load_run_config

from corpus import write_corpus
from test_structure import import_graph

PACKAGE = Path(transformer.__file__).parent
ROOT = PACKAGE.parent


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    "Run the `transformer` command in this process: exit code, stdout, stderr."
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(code: int, err: str, *words: str) -> None:
    "A user mistake: exit code 2 and one line on stderr that names each of `words`."
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]


def config_file(folder: Path, text: str) -> Path:
    "A run configuration file `run.toml` in `folder` with `text`."
    path = folder / "run.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("field", ["norm_first", "tie_embeddings"])
def test_a_boolean_in_quotes_is_refused(tmp_path, field):
    """`norm_first = "false"` is a string, which Python takes for true: it built a pre-LN model, and
    `tie_embeddings = "false"` tied the embeddings."""
    path = config_file(tmp_path, f'preset = "tiny"\n[model]\n{field} = "false"\n')
    with pytest.raises(ValueError) as error:
        load_run_config(path)
    assert f"{path}: [model] {field} must be true or false" in str(error.value), error.value


@pytest.mark.parametrize("text, words", [
    ('[model]\nd_model = "32"', "[model] d_model must be an integer"),
    ('[model]\nn_heads = true', "[model] n_heads must be an integer"),
    ('[model]\ndropout = "0.1"', "[model] dropout must be a number"),
    ('[model]\npositional = 5', "[model] positional must be a string"),
    ('[train]\nmax_minutes = "5"', "[train] max_minutes must be a number"),
    ('[train]\nmax_steps = 4.5', "[train] max_steps must be an integer"),
    ('[data]\nvocab_size = "300"', "[data] vocab_size must be an integer"),
    ('[data]\nsrc_lang = 5', "[data] src_lang must be a string"),
    ('preset = 5', "preset must be a string"),
    ('kind = true', "kind must be a string"),
    ('kind = "decoder-only"\n[model]\nprompt_loss = "1"', "[model] prompt_loss must be a number"),
])
def test_every_field_type_is_checked(tmp_path, text, words):
    path = config_file(tmp_path, text + "\n")
    with pytest.raises(ValueError) as error:
        load_run_config(path)
    assert str(path) in str(error.value) and words in str(error.value), error.value


@pytest.mark.parametrize("text, words", [
    ('data = "x"', "data must be a table"),
    ("train = 5", "train must be a table"),
    ("model = [1]", "model must be a table"),
    ("[data]\ntrain_src = 5\ntrain_tgt = 6", "[data] train_src must be a string"),
])
def test_a_value_where_a_table_or_path_belongs_is_one_line(tmp_path, capsys, text, words):
    path = config_file(tmp_path, text + "\n")
    code, _, err = run_cli(capsys, "train", "--config", str(path), "--out", str(tmp_path / "run"))
    assert_one_line(code, err, words, str(path))


def test_task_in_the_model_table_says_where_it_goes(tmp_path, capsys):
    path = config_file(tmp_path, 'kind = "decoder-only"\n[model]\ntask = "language-model"\n')
    code, _, err = run_cli(capsys, "train", "--config", str(path), "--out", str(tmp_path / "run"))
    assert_one_line(code, err, "[model] task", "top of the file", str(path))


def test_vocab_size_in_the_model_table_says_where_it_goes(tmp_path):
    path = config_file(tmp_path, "[model]\nsrc_vocab_size = 300\n")
    with pytest.raises(ValueError, match=r"\[model\] src_vocab_size belongs in \[data\] as vocab_size"):
        load_run_config(path)


def test_the_source_language_alone_is_not_a_copy_task(tmp_path, capsys):
    """`--src-lang en` alone left the target at its default, en: an en→en model."""
    empty = tmp_path / "data"  # had the languages been accepted, training would stop here, on the missing files
    empty.mkdir()
    code, _, err = run_cli(capsys, "train", "--preset", "tiny", "--src-lang", "en", "--data-dir", str(empty),
                           "--out", str(tmp_path / "run"))
    assert_one_line(code, err, "src_lang and tgt_lang are both 'en'", "--tgt-lang")


@pytest.mark.parametrize("data, words", [
    ({"src_lang": "xx"}, "src_lang must be one of Multi30k's languages"),
    ({"tgt_lang": "de"}, "src_lang and tgt_lang are both 'de'"),
])
def test_the_language_pair_is_checked(data, words):
    with pytest.raises(ValueError, match=words):
        RunConfig.from_dict({"data": data})


def test_own_files_and_language_models_need_no_language_pair(tmp_path):
    files = {"train_src": "a", "train_tgt": "b", "src_lang": "x", "tgt_lang": "x"}  # codes only name the sides
    assert RunConfig.from_dict({"data": files}).train_src == "a"
    language_model = RunConfig.from_dict({"kind": "decoder-only", "task": "language-model",
                                          "data": {"src_lang": "en", "tgt_lang": "en"}})
    assert language_model.tgt_lang == "en"


FRESH_PROCESS = {  # each in a process that has imported nothing else
    "run configuration": "from transformer.run import RunConfig\nRunConfig(kind='decoder-only')",
    "model folder": "import sys\nfrom transformer.translation import load_translator\n"
                    "assert type(load_translator(sys.argv[1])[0]).__name__ == 'DecoderOnly'",
}


@pytest.mark.parametrize("use", FRESH_PROCESS)
def test_a_fresh_process_knows_every_model_kind(tmp_path, use):
    """The decoder-only kind was known only once something had imported `transformer.decoder_only`."""
    from transformer.checkpoint import save_model_files
    from transformer.data import train_bpe
    from transformer.decoder_only import DecoderOnly, DecoderOnlyConfig

    tokenizer = train_bpe(["der hund spielt", "the dog plays"], 100)
    save_model_files(DecoderOnly(DecoderOnlyConfig.preset("tiny", vocab_size=tokenizer.get_vocab_size())), tmp_path)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    done = subprocess.run([sys.executable, "-c", FRESH_PROCESS[use], str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr


# The package's layers, lowest first: a module imports from its own layer and the ones below it, never from above.
LAYERS = {
    "model": {"attention", "layers", "model", "decoder_only", "complexity"},
    "files": {"checkpoint", "model_folder", "data", "hub"},
    "training": {"training", "hardware", "budget", "distributed", "trainer", "run"},
    "inference": {"decoding", "fast_decoding", "translation", "scoring", "report", "export", "web", "parsing", "treebank",
                  "copy_task"},
    "application": {"translation_run", "cli", "viz"},  # a translation run: training with BLEU on validation
}


def test_no_module_imports_from_a_layer_above_its_own():
    """decoder_only reached up into checkpoint (to register its kind) and into decoding (its `generate`)."""
    level = {module: i for i, modules in enumerate(LAYERS.values()) for module in modules}
    graph = import_graph()
    assert not set(graph) - set(level) - {"_modidx"}, "place every module in a layer of LAYERS"
    upward = sorted(f"{m} → {n}" for m, imported in graph.items() for n in imported if level[n] > level[m])
    assert not upward, upward
    assert "decoder_only" in graph["checkpoint"]  # the files layer lists every model kind explicitly


def test_generate_lives_with_decoding():
    from transformer.decoding import generate, sampler
    assert generate.__module__ == sampler.__module__ == "transformer.decoding"


def test_the_report_of_a_decoder_only_model(tmp_path, capsys, monkeypatch):
    """`evaluate --report` scored a decoder-only model, then failed in `DecoderOnly.forward()` on the attention."""
    config = write_corpus(tmp_path)
    config.write_text('kind = "decoder-only"\n' + config.read_text())
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "train", "--config", "tiny.toml", "--out", "do", "--quiet")
    assert code == 0, err
    code, _, err = run_cli(capsys, "evaluate", "--model", "do/checkpoints/step-0000004", "--src", "valid.de",
                           "--ref", "valid.en", "--beam", "1", "--report", "report")
    assert code == 0, err
    attention = json.loads((tmp_path / "report/attention.json").read_text())
    tokens = len(attention["source_tokens"]) + len(attention["target_tokens"])
    assert attention["layers"] and all(len(w[0]) == len(w[0][0]) == tokens for w in attention["layers"].values())


def int8_step_graph(folder: Path, **sizes):
    "The int8 decoder step graph of a tiny encoder-decoder model with `sizes`, exported into `folder`."
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from transformer.export import export_onnx
    from transformer.model import Transformer, TransformerConfig

    model = Transformer(TransformerConfig.preset("tiny", dropout=0.0, **sizes)).eval()
    export_onnx(model, folder, int8=True)
    return onnx.load(str(folder / "decoder_step.onnx"))


def weight_read_by(step, node_name: str) -> str:
    "The weight input of the MatMulInteger node `node_name` of `step`."
    return next(n.input[1] for n in step.graph.node if n.name == node_name)


def test_the_output_projection_is_found_by_name(tmp_path):
    """With d_ff equal to the vocabulary, layer 0's first feed-forward matrix has the output projection's shape."""
    from transformer.web import tie_output_projection

    step = int8_step_graph(tmp_path, src_vocab_size=64, tgt_vocab_size=64, d_ff=64)
    feed_forward = "/decoder/layers.0/residual.2/feed_forward/linear1/MatMul_quant"
    own = weight_read_by(step, feed_forward)
    tie_output_projection(step)
    assert weight_read_by(step, feed_forward) == own
    assert weight_read_by(step, "/generator/MatMul_quant").endswith("table.weight_quantized_transposed")


def test_export_web_restores_the_callers_logging_level(tmp_path):
    pytest.importorskip("onnxruntime")
    from transformer.checkpoint import save_model_files
    from transformer.data import train_bpe
    from transformer.model import Transformer, TransformerConfig
    from transformer.web import export_web

    save_model_files(Transformer(TransformerConfig.preset("tiny", src_vocab_size=64, tgt_vocab_size=64)), tmp_path)
    train_bpe(["ein test", "a test"], 64).save(str(tmp_path / "tokenizer.json"))
    before = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        export_web(tmp_path, tmp_path / "web")
        assert logging.root.manager.disable == logging.CRITICAL
    finally:
        logging.disable(before)


def first_docstring_line(path: Path) -> str:
    "The first line of the module docstring of the file at `path`."
    return (ast.get_docstring(ast.parse(path.read_text())) or "").splitlines()[0]


@pytest.mark.parametrize("module", sorted(p.name for p in PACKAGE.glob("*.py") if not p.name.startswith("_")))
def test_every_module_says_what_it_is_responsible_for(module):
    """nbdev takes the docstring from the notebook's title cell: `# Title` then `> summary`; without a summary the
    first line was only the docs' address."""
    line = first_docstring_line(PACKAGE / module)
    assert "http" not in line and not line.startswith("Docs:"), line
    assert len(line.split()) >= 5 and line.endswith("."), line


# Test files that need what a plain runner lacks: the book's build, chromium, node with Multi30k, or a download.
NOT_PORTABLE = ("test_book.py", "test_chapters.py", "test_browser.py", "test_web.py", "test_data.py")


def portable_job() -> dict:
    "The CI job that runs the package's tests on several systems and Pythons."
    yaml = pytest.importorskip("yaml")
    jobs = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())["jobs"]
    return next(job for job in jobs.values() if "strategy" in job)


def test_ci_tests_the_package_on_macos_windows_and_the_newest_python():
    entries = portable_job()["strategy"]["matrix"]["include"]
    assert {"macos-latest", "windows-latest", "ubuntu-latest"} <= {entry["os"] for entry in entries}
    assert any(entry["python"] == "3.x" or Version(entry["python"]) > Version("3.11") for entry in entries)


def test_the_portable_job_runs_the_package_tests_without_the_book():
    """No chromium, node, Multi30k download or book build: those test files are left out, the book is not built."""
    commands = " ".join(step.get("run", "") for step in portable_job()["steps"])
    assert "python -m pytest" in commands and not {"scripts/test.sh", "scripts/book.sh"} & set(commands.split())
    assert {f"--ignore=tests/{name}" for name in NOT_PORTABLE} <= set(commands.split())


@pytest.mark.parametrize("kind", ["encoder-decoder", "decoder-only"])
def test_a_quoted_boolean_in_a_model_folder_is_refused(kind, tmp_path):
    """A hand-edited config.json with "norm_first": "false" was read as true (a non-empty string): a pre-LN model."""
    from transformer.checkpoint import CheckpointError, load_model_dir, model_classes, save_model_files

    config_class, model_class = model_classes(kind)
    size = {"vocab_size": 13} if kind == "decoder-only" else {"src_vocab_size": 13, "tgt_vocab_size": 13}
    save_model_files(model_class(config_class.preset("tiny", **size)), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))
    (tmp_path / "config.json").write_text(json.dumps(config | {"norm_first": "false"}), encoding="utf-8")
    with pytest.raises(CheckpointError, match=r"norm_first must be true or false, got 'false'"):
        load_model_dir(tmp_path)
