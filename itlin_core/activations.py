r"""The one registry of activation functions, with their derivatives.

Every model and data set that names an activation (``"relu"``, ``"silu"``, ...) looks it up
here, so a name means the same function everywhere. :func:`activation_pair` also returns the
derivative, which the factorised mean-field NTK needs (:func:`itlin_core.mean_field_ntk`).

``"silu"`` carries a temperature ``beta``: ``SiLU_beta(z) = z sigmoid(beta z)``, which tends to
ReLU as ``beta -> inf`` (Arbel et al. 2023, §3.1).
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from ._validate import check_number


def _relu_pair(beta):
    return jax.nn.relu, lambda z: (z > 0).astype(z.dtype)


def _silu_pair(beta):
    check_number("the SiLU temperature beta", beta, minimum=0.0, strict=True, note=" (its limit inf is 'relu')")

    def silu(z):
        return z * jax.nn.sigmoid(beta * z)

    def dsilu(z):
        s = jax.nn.sigmoid(beta * z)
        return s + beta * z * s * (1.0 - s)

    return silu, dsilu


_PAIRS = {
    "relu": _relu_pair,
    "silu": _silu_pair,
    "tanh": lambda beta: (jnp.tanh, lambda z: 1.0 - jnp.tanh(z) ** 2),
    "gelu": lambda beta: (jax.nn.gelu, lambda z: jnp.vectorize(jax.grad(jax.nn.gelu))(z)),
    "erf": lambda beta: (jax.scipy.special.erf, lambda z: 2.0 / jnp.sqrt(jnp.pi) * jnp.exp(-z ** 2)),
    "identity": lambda beta: (lambda z: z, jnp.ones_like),
}

#: The names :func:`activation` and :func:`activation_pair` accept.
ACTIVATIONS = tuple(_PAIRS)


def activation_pair(name: str = "relu", beta: float = 1.0) -> tuple[Callable, Callable]:
    """``(gamma, gamma')``: the activation called ``name`` and its derivative (elementwise).
    ``beta`` is the SiLU temperature (ignored by the others).

    Raises:
      ValueError: an unknown name, or ``beta <= 0`` for ``"silu"``.

    Examples:
      ``SiLU(z) = z sigmoid(z)`` is 0 at 0 with slope ``sigmoid(0) = 1/2`` there, and the
      returned derivative agrees with autodiff:

      >>> import jax
      >>> import itlin_core as ic
      >>> g, dg = ic.activation_pair("silu", beta=1.0)
      >>> print(float(g(0.0)), float(dg(0.0)), round(float(dg(1.5) - jax.grad(g)(1.5)), 6))
      0.0 0.5 0.0
    """
    if name not in _PAIRS:
        raise ValueError(f"unknown activation {name!r}; use one of {', '.join(ACTIVATIONS)}.")
    return _PAIRS[name](beta)


def activation(name_or_fn, beta: float = 1.0) -> Callable:
    """The activation ``gamma`` called ``name_or_fn``, or ``name_or_fn`` itself if it is callable."""
    if callable(name_or_fn):
        return name_or_fn
    return activation_pair(name_or_fn, beta)[0]


__all__ = ["ACTIVATIONS", "activation", "activation_pair"]
