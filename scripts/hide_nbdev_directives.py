"""Sphinx extension of the book: nbdev's `#|` directive lines (`#| export`, `#| default_exp ...`) drive the export of
the package and stay in the notebooks, but a reader of the rendered page does not need them."""

from docutils import nodes


def is_directive(line: str) -> bool:
    "An nbdev directive line: a comment that starts with `#|`."
    return line.lstrip().startswith("#|")


def hide_directives(app, doctree: nodes.document) -> None:
    "Drop the directive lines from the source of every code cell (not from outputs or prose)."
    for block in list(doctree.findall(nodes.literal_block)):
        parent = block.parent
        if not (isinstance(parent, nodes.container) and "cell_input" in parent.get("classes", [])):
            continue
        lines = block.astext().splitlines()
        kept = [line for line in lines if not is_directive(line)]
        if len(kept) < len(lines):
            text = "\n".join(kept).lstrip("\n")
            block.rawsource = text
            block.children = [nodes.Text(text)]


def setup(app):
    app.connect("doctree-read", hide_directives)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
