"""Unit tests run in float64 so that identities (Woodbury = primal, closed-form flow = simulated
flow) can be checked to tight tolerances; a few tests build float32 models explicitly."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ITLIN_PROGRESS", "off")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)


def pytest_collection_modifyitems(session, config, items):
    """The notebooks (nbval) run first, the whole-book build (tests/test_book_build.py) next and
    the unit tests last: under ``make test`` nbval hands each notebook it has executed to that
    build (``conftest.py`` at the repository root), which waits until every notebook has run and
    then only renders them. Under pytest-xdist (``-n auto --dist loadfile``) the build is handed
    out right after the notebooks, so that it and its browser tests overlap the unit tests on the
    other worker instead of running alone at the end."""
    def rank(item):
        if item.nodeid.startswith("tests/test_book_build.py"):
            return 1
        return 0 if item.nodeid.endswith(".ipynb") or ".ipynb::" in item.nodeid else 2

    items.sort(key=rank)
