"""Sphinx extension of the book: every inline script of a page once.

Sphinx 7.4 (Jupyter Book 1 needs Sphinx 7) writes an inline script twice when an extension adds it after the HTML
builder started (`app.add_js_file(None, body=...)` in `builder-inited` or `env-before-read-docs`): the builder keeps
it under the file name None, and `prepare_writing` adds it again from the registry under the file name '', which
compares unequal. sphinx-thebe's `const THEBE_JS_URL = ...` then runs twice on every page and the second throws
"SyntaxError: Identifier 'THEBE_JS_URL' has already been declared" (sphinx-togglebutton's `var togglebuttonSelector`
is doubled too, silently). Naming those scripts '' before the pages are written lets `prepare_writing` see that it
has them already."""

from sphinx.application import Sphinx


def name_inline_scripts(app: Sphinx, builder) -> None:
    "Rename the builder's inline scripts (file name None) to '', the name `prepare_writing` gives them."
    scripts = getattr(builder, "_js_files", None)  # the HTML builders' list of scripts (Sphinx 7.4)
    if scripts is None:
        return
    renamed = [type(js)("", priority=js.priority, **js.attributes) if js.filename is None else js for js in scripts]
    scripts[:] = list(dict.fromkeys(renamed))  # the same script once, in the order first added


def setup(app: Sphinx):
    app.connect("write-started", name_inline_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
