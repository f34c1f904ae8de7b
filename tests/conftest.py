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


#: The unit-test files that take longest under ``make test`` (worker-seconds on this 2-core
#: machine, 2026-11-29: test_image_runs about 120 s down to test_core_stability about 18 s). They
#: start first among the unit tests, so that the files left for the end are short ones and the two
#: workers finish together (longest first, the classic rule for sharing jobs between machines).
UNIT_SLOWEST_FIRST = ("test_image_runs", "test_core_linearise", "test_doctests", "test_models_cnn",
                      "test_mean_field", "test_core_gauss_newton", "test_widgets_exercises",
                      "test_bad_input_properties", "test_relinearise", "test_core_iterative",
                      "test_explore_checkers", "test_core_stability")


def pytest_collection_modifyitems(session, config, items):
    """The notebooks (nbval) run first, longest first (:data:`SMOKE_SLOWEST_FIRST`), then the unit
    tests, the longest files first (:data:`UNIT_SLOWEST_FIRST`), so that the two workers of
    ``make test`` (``-n auto --dist loadfile``) finish together. Under ``make test-system`` the
    book build (tests/test_book_build.py, which renders the notebooks ``make test`` executed)
    starts first, as the longest file, beside the other system tests on the other worker."""
    def rank(item):
        if item.nodeid.startswith("tests/test_book_build.py"):
            return (1, 0)
        if item.nodeid.endswith(".ipynb") or ".ipynb::" in item.nodeid:
            stem = item.nodeid.split(".ipynb")[0].rsplit("/", 1)[-1]
            return (0, SMOKE_SLOWEST_FIRST.index(stem) + 1 if stem in SMOKE_SLOWEST_FIRST else 0)
        stem = item.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
        return (2, UNIT_SLOWEST_FIRST.index(stem) if stem in UNIT_SLOWEST_FIRST else len(UNIT_SLOWEST_FIRST))

    items.sort(key=rank)
