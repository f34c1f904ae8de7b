"""Sphinx additions for the rendered book, loaded through `sphinx.local_extensions` in _config.yml.

**MathJax served with the book.** Sphinx loads MathJax from a CDN by default, so a reader who
opens the built HTML offline sees raw TeX. ``_config.yml`` sets ``mathjax_path`` to
``mathjax/tex-mml-chtml.js`` (relative to ``_static``), and this extension copies MathJax 3.2.2
from the ``django-static-mathjax`` package (pinned in requirements.txt) into
``_static/mathjax`` when the HTML build finishes: the combined TeX/MathML/CHTML file and the
parts it loads on demand (TeX extensions, CHTML fonts, menu and accessibility), about 8 MB.

**NamedTuple fields on the API pages.** autodoc documents each field of a NamedTuple as a
member whose docstring is Python's "Alias for field number N"; the classes document their
fields in an ``Attributes:`` section instead, so those members are skipped.

**Solutions hidden for a class.** ``itlin_hide_solutions: true``, or the environment variable
``ITLIN_HIDE_SOLUTIONS=1`` (what ``make book SOLUTIONS=hide`` sets),
removes every solution from the pages, including the code cells of gated solutions
(``solution-start``/``solution-end``), which sphinx-exercise's own ``hide_solutions`` leaves
on the page. The cells are still executed, so the build still checks them.

**Figures on a phone.** ``static/itlin.css`` keeps figures and slider frames at least 640 px
wide on narrow screens, scrolling inside their own box, so their text stays readable.

**Duplicated inline scripts.** Inline scripts appear twice on every page. Under Sphinx 7.4 (the version Jupyter Book 1
pins), an extension that calls ``app.add_js_file(None, body=...)`` once the HTML builder exists
(sphinx-togglebutton and sphinx-thebe do, in ``builder-inited`` and ``env-before-read-docs``)
has the script registered with the builder as filename ``None`` and again, when writing starts,
from the registry as filename ``''``. The two do not compare equal, so both copies are written.
The duplicate of sphinx-thebe's ``const THEBE_JS_URL = ...`` then makes every page throw
"SyntaxError: Identifier 'THEBE_JS_URL' has already been declared" in the browser.

**Execution status in words.** myst-nb's execution table marks each notebook with an emoji
(a green tick or a red cross), which a browser without an emoji font draws as an empty box;
``ExecutionStatusInWords`` writes them as "passed" and "failed".

**Measured costs.** The directive ``{itlin-measured-costs}`` writes the tables of measured GPU
costs on the page "Running the chapters on a GPU" at build time, from the committed records and
saved timings (``itlin_core.tools.costs``), so that no time on that page is typed by hand.

This extension drops the second copy of any script with the same source, body and attributes
from each page's ``script_files`` just before the page is rendered. The browser test in
tests/test_book_build.py fails if a page logs a JavaScript error.
"""

from __future__ import annotations

import os
import pathlib
import shutil

from docutils import nodes
from sphinx.errors import ExtensionError
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util.docutils import SphinxDirective

#: What tex-mml-chtml.js needs beside itself (relative to MathJax's es5 folder).
MATHJAX_FILES = ["tex-mml-chtml.js", "input/tex", "input/mml", "output/chtml", "ui", "a11y", "sre"]
MATHJAX_PATH = "mathjax/tex-mml-chtml.js"


def mathjax_source() -> pathlib.Path:
    """MathJax's es5 folder inside the installed django-static-mathjax package."""
    try:
        import mathjax
    except ImportError:
        raise ExtensionError("MathJax is not installed: the book serves its own copy so that maths renders "
                             "offline; install it with `pip install -r requirements.txt` "
                             "(package django-static-mathjax).") from None
    es5 = pathlib.Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    if not (es5 / MATHJAX_FILES[0]).is_file():
        raise ExtensionError(f"the installed MathJax package has no {MATHJAX_FILES[0]} under {es5}; "
                             "reinstall django-static-mathjax (see requirements.txt).")
    return es5


def solutions_from_environment(app, config):
    value = os.environ.get("ITLIN_HIDE_SOLUTIONS", "").strip().lower()
    if value in ("1", "true", "yes"):
        config.itlin_hide_solutions = True
    elif value not in ("", "0", "false", "no"):
        raise ExtensionError(f"ITLIN_HIDE_SOLUTIONS must be 1 (hide the solutions) or 0, got {value!r}.")


def check_mathjax_path(app, config):
    if config.mathjax_path != MATHJAX_PATH:
        raise ExtensionError(f"_config.yml must set sphinx.config.mathjax_path to {MATHJAX_PATH!r} (the copy "
                             f"this extension serves), not {config.mathjax_path!r}.")
    mathjax_source()   # fail at the start of a build, not after it


def copy_mathjax(app, exception):
    """Copy MathJax into ``_static/mathjax`` (through a temporary folder, then renamed, so an
    interrupted copy never leaves half a MathJax behind)."""
    if exception is not None or app.builder.format != "html":
        return
    es5 = mathjax_source()
    target = pathlib.Path(app.outdir) / "_static" / "mathjax"
    staging = target.with_name("mathjax.partial")
    shutil.rmtree(staging, ignore_errors=True)
    for name in MATHJAX_FILES:
        src, dst = es5 / name, staging / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy2(src, dst)
    shutil.copy2(es5.parent / "LICENSE", staging / "LICENSE")
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)


def _script_key(js):
    filename = getattr(js, "filename", js)
    attributes = getattr(js, "attributes", {}) or {}
    return (str(filename or ""), getattr(js, "priority", None),
            tuple(sorted((k, str(v)) for k, v in attributes.items())))


def dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        key = _script_key(js)
        if key not in seen:
            seen.add(key)
            unique.append(js)
    if len(unique) != len(scripts):
        context["script_files"] = unique


def skip_namedtuple_aliases(app, what, name, obj, skip, options):
    doc = getattr(obj, "__doc__", None) or ""
    if what == "class" and doc.startswith("Alias for field number"):
        return True
    return None


def hide_solutions(app, doctree):
    """Remove every solution (gated ones are one node once sphinx-exercise has joined them)."""
    if not app.config.itlin_hide_solutions:
        return
    from sphinx_exercise.nodes import solution_end_node, solution_node, solution_start_node

    for node in list(doctree.findall(lambda n: isinstance(n, (solution_node, solution_start_node, solution_end_node)))):
        node.parent.remove(node)


def add_static_css(app):
    app.config.html_static_path.append(str(pathlib.Path(__file__).parent / "static"))
    app.add_css_file("itlin.css")


class ExecutionStatusInWords(SphinxPostTransform):
    """The status column of myst-nb's execution table in words instead of emoji."""

    default_priority = 9    # after myst-nb's ExecutionStatsPostTransform (8), which fills the table
    WORDS = {"\u2705": "passed", "\u274c": "failed"}

    def run(self, **kwargs) -> None:
        for entry in self.document.findall(nodes.entry):
            for text in list(entry.findall(nodes.Text)):
                if text.astext().strip() in self.WORDS:
                    text.parent.replace(text, nodes.Text(self.WORDS[text.astext().strip()]))


class MarkdownFromResults(SphinxDirective):
    """A directive whose content is Markdown computed at build time from ``book/results``
    (:meth:`markdown`), parsed as if written on the page; the page is rebuilt whenever
    ``book/results`` changes (``make book`` clears the cache then)."""

    has_content = False

    def markdown(self) -> str:
        raise NotImplementedError

    def run(self):
        from docutils.statemachine import StringList

        self.env.note_dependency(str(pathlib.Path(self.env.srcdir) / "book" / "results"))
        box = nodes.container()
        self.state.nested_parse(StringList(self.markdown().splitlines(), source=self.name), self.content_offset, box)
        return box.children


class MeasuredCosts(MarkdownFromResults):
    """``{itlin-measured-costs}``: the GPU page's tables of measured costs, computed from the
    committed records and saved timings (:func:`itlin_core.tools.costs.costs_markdown`), so that no
    time or memory figure on the page is typed by hand."""

    optional_arguments = 1     # the preset, default colab

    def markdown(self):
        from itlin_core.tools import costs

        return costs.costs_markdown(self.arguments[0] if self.arguments else "colab")


class NewestCheck(MarkdownFromResults):
    """``{itlin-newest-check}``: the status of the last Colab-like check
    (:func:`itlin_core.tools.newest.status_markdown` of ``book/results/newest.json``)."""

    def markdown(self):
        from itlin_core.tools import newest

        return newest.status_markdown(pathlib.Path(self.env.srcdir) / "book" / "results" / "newest.json")


def setup(app):
    app.add_directive("itlin-measured-costs", MeasuredCosts)
    app.add_directive("itlin-newest-check", NewestCheck)
    app.add_post_transform(ExecutionStatusInWords)
    # late priority: after extensions that add page-specific scripts in html-page-context
    app.connect("html-page-context", dedupe_scripts, priority=900)
    app.connect("config-inited", check_mathjax_path)
    app.connect("build-finished", copy_mathjax)
    app.connect("autodoc-skip-member", skip_namedtuple_aliases)
    app.add_config_value("itlin_hide_solutions", False, "env")
    app.connect("config-inited", solutions_from_environment)
    app.connect("builder-inited", add_static_css)
    app.connect("doctree-read", hide_solutions)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
