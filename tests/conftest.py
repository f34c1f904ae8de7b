"""Unit tests run in float64 so that identities (Woodbury = primal, closed-form flow = simulated
flow) can be checked to tight tolerances; a few tests build float32 models explicitly."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ITLIN_PROGRESS", "off")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)


def pytest_collection_modifyitems(session, config, items):
    """The whole-book build (tests/test_book_build.py) is the longest file by far: run it first, so
    that under pytest-xdist (`make test` runs `-n auto --dist loadfile`) one worker builds the book
    while the others take every other file, instead of the build starting last."""
    items.sort(key=lambda item: 0 if item.nodeid.startswith("tests/test_book_build.py") else 1)
