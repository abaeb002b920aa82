"""The package's shape: its modules import one another without a cycle (lazy imports inside functions count too)."""

import ast
from pathlib import Path

import transformer

PACKAGE = Path(transformer.__file__).parent


def imports_of(path: Path) -> set[str]:
    "The package modules that the module at `path` imports anywhere in its text (relative or absolute imports)."
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from .x import y, from . import x
                names = [base] if base else [alias.name for alias in node.names]
                found |= {name.split(".")[0] for name in names}
            elif base.startswith("transformer."):
                found.add(base.split(".")[1])
            elif base == "transformer":
                found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[1] for alias in node.names if alias.name.startswith("transformer.")}
    return found


def import_graph() -> dict[str, set[str]]:
    "Module → the package's modules it imports (only modules that exist: `from . import __version__` is not one)."
    modules = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return {name: imports_of(path) & set(modules) - {name} for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    "One import cycle as a path (first module repeated at the end), or None."
    state: dict[str, str] = {}  # "open" while on the current path, "done" once finished

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [node, nxt] if nxt in path else [node, nxt]
            if nxt not in state and (cycle := visit(nxt, path + [node])):
                return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [])):
            return cycle
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_import_graph_sees_lazy_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from .model import X\ndef f():\n    from .decoder_only import Y\nimport transformer.data\n")
    assert imports_of(module) == {"model", "decoder_only", "data"}


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert {"model", "checkpoint", "decoding", "cli"} <= set(graph) and "checkpoint" in graph["trainer"]
    assert find_cycle(graph) is None, " → ".join(find_cycle(graph))


MAX_MODULE_LINES, MAX_TRAINER_LINES = 300, 160  # read in a sitting; a loop of a screen or two, not packed to fit


def class_lines(path: Path, name: str) -> int:
    "Lines from `class name` to its last statement, in the module at `path`."
    node = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == name)
    return node.end_lineno - node.lineno + 1


def code_lines(path: Path) -> int:
    "Lines of the module at `path` after its docstring (nbdev writes the notebook's title and summary there)."
    text = path.read_text()
    first = ast.parse(text).body[0]
    is_docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    return len(text.splitlines()) - (first.end_lineno if is_docstring else 0)


WIDER = {"model.py": 320}  # the configuration with its checks beside the model it builds: one chapter, one module


def test_modules_stay_small():
    sizes = {p.name: code_lines(p) for p in PACKAGE.glob("*.py") if p.name != "_modidx.py"}
    assert len(sizes) > 20 and not {name: n for name, n in sizes.items() if n > WIDER.get(name, MAX_MODULE_LINES)}
    assert 100 < class_lines(PACKAGE / "trainer.py", "Trainer") <= MAX_TRAINER_LINES


MAX_LINE = 118  # a module reads without packing: the book's 120-character column, less a margin


def long_lines(path: Path) -> list[int]:
    "Numbers of the lines over `MAX_LINE` characters in the module at `path`, but nbdev's generated `__all__`."
    text = path.read_text(encoding="utf-8")
    generated = {n for node in ast.parse(text).body if isinstance(node, ast.Assign)
                 and any(getattr(target, "id", None) == "__all__" for target in node.targets)
                 for n in range(node.lineno, node.end_lineno + 1)}
    return [i for i, line in enumerate(text.splitlines(), 1) if len(line) > MAX_LINE and i not in generated]


def test_no_packed_lines():
    "No line a person wrote is over 118 characters (nbdev's index `_modidx.py` and `__all__` lists are generated)."
    found = {p.name: lines for p in sorted(PACKAGE.glob("*.py")) if p.name != "_modidx.py" and (lines := long_lines(p))}
    assert not found, f"lines over {MAX_LINE} characters (module: line numbers): {found}"


def test_the_long_line_finder(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("__all__ = ['" + "a" * 130 + "']\nx = '" + "b" * 120 + "'\ny = 1\n", encoding="utf-8")
    assert long_lines(module) == [2]
