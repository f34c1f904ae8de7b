"""Hands each notebook that nbval has executed to the smoke book build, so that ``make test``
and ``make test-system`` together execute every notebook once instead of twice.

When ``$ITLIN_TEST_BOOK_DIR`` is set (``make test`` sets it), this plugin collects the outputs of
every cell nbval runs; once all code cells of a notebook have passed, it stores the executed
notebook in the execution cache of the smoke book build (``$ITLIN_TEST_BOOK_DIR/_build/
.jupyter_cache``, see ``itlin_core.tools.execution.cache_executed``). The build
(``tests/test_book_build.py``, in ``make test-system``) then renders those notebooks from the
cache and executes only the ones that are missing. A notebook with a failing or skipped cell is not
cached (nbval reports it). Without the variable nothing is cached and the build executes all.

When the build runs in the same pytest session as the notebooks (a plain ``pytest tests book``),
it may start as soon as every notebook has been handed out: each worker lists the
notebooks it collected (``expected-<name>`` in ``$ITLIN_TEST_BOOK_DIR/_notebooks``) and marks each
notebook whose last cell has run, passed or not (``done-<name>``), and the build waits for these
marks (``itlin_core.tools.execution.wait_for_notebooks``).
"""

import os
import pathlib

import pytest


def pytest_configure(config):
    """Under pytest-xdist, each worker (and the notebook kernels and processes it starts) keeps to
    its own share of the CPU cores, as the book build's workers do
    (``itlin_core.tools.execution.core_share``): unpinned, two workers each running XLA's thread
    pool on every core slow each other down far beyond sharing (measured on 2 cores: the image
    teacher's step-size sweep at `smoke` took 13 s alone, 130 s beside a copy of itself, and 13 s
    with the two copies on one core each)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and count.isdigit():
        from itlin_core.tools import execution
        execution.pin_to(execution.core_share(int(worker[2:]), int(count)))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    """The kernel of a notebook starts in the setup of its first cell, with this process's
    environment: a notebook that spends its time in compiled loops rather than in compiling them
    gets XLA's optimisation level 1 instead of the suite's 0
    (``itlin_core.tools.execution.smoke_kernel_flags``); the other tests keep the suite's flags."""
    flags = os.environ.get("XLA_FLAGS")
    if flags is None or not _nbval_cell(item) or item.cell_num != 0:
        yield
        return
    from itlin_core.tools.execution import smoke_kernel_flags

    os.environ["XLA_FLAGS"] = smoke_kernel_flags(pathlib.Path(str(item.parent.fspath)).stem, flags)
    try:
        yield
    finally:
        os.environ["XLA_FLAGS"] = flags


_cells = {}     # notebook path -> {cell index: outputs or None (failed/skipped)}
_seconds = {}   # notebook path -> seconds spent in its cells


def _nbval_cell(item):
    return type(item).__name__ == "IPyNbCell" and hasattr(item, "test_outputs")


def pytest_collection_finish(session):
    """Lists the notebooks this session will run, for ``execution.wait_for_notebooks``."""
    book_dir = os.environ.get("ITLIN_TEST_BOOK_DIR")
    if not book_dir:
        return
    from itlin_core.tools.execution import mark_notebook

    for stem in {pathlib.Path(str(item.parent.fspath)).stem for item in session.items if _nbval_cell(item)}:
        mark_notebook(book_dir, stem, "expected")


def _as_output(out):
    """An nbval output (a NotebookNode with output_type set to the kernel's message type) as an
    nbformat v4 output."""
    import nbformat

    kind = out["output_type"]
    if kind == "stream":
        return nbformat.v4.new_output("stream", name=out["name"], text=out["text"])
    if kind == "execute_result":
        return nbformat.v4.new_output("execute_result", data=out["data"], metadata=out.get("metadata", {}),
                                      execution_count=out.get("execution_count"))
    return nbformat.v4.new_output("display_data", data=out["data"], metadata=out.get("metadata", {}))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    book_dir = os.environ.get("ITLIN_TEST_BOOK_DIR")
    if not book_dir or not _nbval_cell(item):
        return
    from itlin_core.tools.execution import cache_executed, mark_notebook

    report = outcome.get_result()
    path = pathlib.Path(str(item.parent.fspath))
    code_cells = [c for c in item.parent.nb.cells if c.cell_type == "code"]
    index = item.cell_num
    cells = _cells.setdefault(str(path), {})
    if report.when == "call":
        _seconds[str(path)] = _seconds.get(str(path), 0.0) + report.duration
        ok = report.passed and item.test_outputs is not None and not any(
            o["output_type"] not in ("stream", "display_data", "execute_result") for o in item.test_outputs)
        cells[index] = [_as_output(o) for o in item.test_outputs] if ok else None
    elif report.when == "setup" and not report.passed:     # skipped or failed before running
        cells[index] = None
    if report.when != "teardown" or len(cells) < len(code_cells):
        return
    if any(v is None for v in cells.values()):
        del _cells[str(path)]
        mark_notebook(book_dir, path.stem, "done")
        return
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cell.outputs, cell.execution_count = cells[i], i + 1
    cache_executed(pathlib.Path(book_dir) / "_build" / ".jupyter_cache", path, nb, _seconds[str(path)])
    del _cells[str(path)]
    mark_notebook(book_dir, path.stem, "done")
