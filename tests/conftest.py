"""Unit tests run in float64 so that identities (Woodbury = primal, closed-form flow = simulated
flow) can be checked to tight tolerances; a few tests build float32 models explicitly."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ITLIN_PROGRESS", "off")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)


#: The notebooks in the order nbval starts them, longest first at `smoke` (as ``make test`` timed
#: them on this 2-core machine on 2026-11-29, with the recorded smoke sweeps read back:
#: refresh_rules about 60 s down to conclusion about 10 s), so that the worker which hands out the
#: last notebook is not left running a long one while the book build on the other worker waits
#: for it. A notebook missing here starts first (it may be long).
SMOKE_SLOWEST_FIRST = ("refresh_rules", "resnet_mnist", "linearisation", "digits_cnn", "iterative_linearisation",
                       "gauss_newton", "mean_field_gn", "gradient_flow", "cifar_damping", "cifar_features",
                       "quintic_damping", "xor_features", "mean_field_images", "cifar_few_updates",
                       "mean_field_scaling", "conclusion")


def pytest_collection_modifyitems(session, config, items):
    """The notebooks (nbval) run first, longest first (:data:`SMOKE_SLOWEST_FIRST`), so that the
    two workers of ``make test`` (``-n auto --dist loadfile``) finish them together, then the unit
    tests. Under ``make test-system`` the book build (tests/test_book_build.py, which renders the
    notebooks ``make test`` executed) starts first, as the longest file, beside the other system
    tests on the other worker."""
    def rank(item):
        if item.nodeid.startswith("tests/test_book_build.py"):
            return (1, 0)
        if item.nodeid.endswith(".ipynb") or ".ipynb::" in item.nodeid:
            stem = item.nodeid.split(".ipynb")[0].rsplit("/", 1)[-1]
            return (0, SMOKE_SLOWEST_FIRST.index(stem) + 1 if stem in SMOKE_SLOWEST_FIRST else 0)
        return (2, 0)

    items.sort(key=rank)
