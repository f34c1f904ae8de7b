"""The ``Examples:`` in the docstrings run as doctests: every module of itlin_core, and the main
public functions must have at least one example."""

import doctest
import importlib
import pathlib

import pytest

import itlin_core as ic

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODULES = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                 for p in (ROOT / "itlin_core").rglob("*.py") if not p.name.endswith("bench.py"))
MAIN = ["linearise", "empirical_ntk", "make_il_step", "gn_step", "gradient_flow"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name):
        if test.examples and test.name.startswith(name):
            runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples failed in {name}"


@pytest.mark.parametrize("fn", MAIN)
def test_main_functions_have_examples(fn):
    doc = getattr(ic, fn).__doc__
    assert "Examples:" in doc and ">>>" in doc, f"ic.{fn} has no runnable example"


def test_every_public_name_has_a_runnable_example():
    """Every name of ``itlin_core.__all__`` shows a runnable example (``>>>``) in its docstring,
    run by test_docstring_examples_run."""
    import inspect

    missing = [name for name in ic.__all__ if ">>>" not in (inspect.getdoc(getattr(ic, name)) or "")]
    assert not missing, f"public names without a runnable example: {missing}"



def book_names_the_notebooks_call():
    """``(module, name)`` for every function or class of the book layer that a chapter's code
    calls as ``module.name`` (the modules a notebook imports from ``itlin_core.book``)."""
    import inspect
    import json
    import re

    found = set()
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        for module, name in re.findall(r"\b([a-z_]+)\.([A-Za-z_]\w*)\s*\(", code):
            try:
                obj = getattr(importlib.import_module(f"itlin_core.book.{module}"), name, None)
            except ModuleNotFoundError:
                continue
            if inspect.isfunction(obj) or inspect.isclass(obj):
                found.add((module, name))
    return sorted(found)


def test_every_book_name_a_notebook_calls_has_a_runnable_example():
    """A reader who meets ``figure_data.write_figure_csv(...)`` in a chapter finds in its
    docstring a short example that runs (test_docstring_examples_run runs it)."""
    import inspect

    names = book_names_the_notebooks_call()
    assert len(names) > 50, names     # the scan found the chapters' calls
    missing = [f"{m}.{n}" for m, n in names
               if ">>>" not in (inspect.getdoc(getattr(importlib.import_module(f"itlin_core.book.{m}"), n)) or "")]
    assert not missing, f"book-layer names a notebook calls without a runnable example: {missing}"
