"""Unit tests run in float64 so that identities (Woodbury = primal, closed-form flow = simulated
flow) can be checked to tight tolerances; a few tests build float32 models explicitly."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ITLIN_PROGRESS", "off")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
