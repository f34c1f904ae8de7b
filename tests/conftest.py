"""Unit tests run in float64 so that identities (Woodbury = primal, closed-form flow = simulated
flow) can be checked to tight tolerances; a few tests build float32 models explicitly."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ITLIN_PROGRESS", "off")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)


def pytest_collection_modifyitems(session, config, items):
    """The notebooks (nbval) run first, the unit tests next and the whole-book build
    (tests/test_book_build.py) last: under ``make test`` nbval hands each notebook it has executed
    to that build (``conftest.py`` at the repository root), which then only renders them. Under
    pytest-xdist (``-n auto --dist loadfile``) the build starts when every other file has been
    handed out."""
    def rank(item):
        if item.nodeid.startswith("tests/test_book_build.py"):
            return 2
        return 0 if item.nodeid.endswith(".ipynb") or ".ipynb::" in item.nodeid else 1

    items.sort(key=rank)
