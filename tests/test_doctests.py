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

