r"""The curvature of one linearised problem, and the learning rates that solve it stably.

Within one linearisation the model is affine in the parameters,
:math:`f^{\mathrm{lin}}_s(\theta) = f(\theta_s) + J_s(\theta - \theta_s)`, so the Hessian of the
linearised loss :math:`\mathcal L_s(\theta) = \ell(f^{\mathrm{lin}}_s(\theta), y)` is exactly

.. math:: \nabla^2 \mathcal L_s(\theta) = J_s^\top \, \nabla^2_f \ell \, J_s ,

the (generalised) Gauss-Newton matrix of the loss at the anchor. For the squared error it does
not depend on :math:`\theta` at all; for the softmax cross-entropy :math:`\nabla^2_f \ell =
\operatorname{diag}(p) - p p^\top` changes with the proxy's probabilities ``p`` but stays
bounded by its value's largest eigenvalue times :math:`J_s^\top J_s`. Gradient descent on a
quadratic with largest curvature :math:`\kappa_{\max}` converges if and only if
:math:`\eta < 2 / \kappa_{\max}`; Goldwaser and Ge's argument that IL with a large ``K`` solves
each linearisation "as gradient flow would" needs the learning rate well inside that bound,
and the bound changes at every relinearisation as the features (hence :math:`J_s`) change.

Conventions: the loss is ``loss_fn(outputs, targets) -> scalar`` as everywhere in
``itlin_core`` (a mean over the batch for :func:`itlin_core.softmax_cross_entropy`, a sum for
:func:`itlin_core.squared_error`), so :math:`\kappa_{\max}` is measured for the loss the
training step differentiates. Nothing here forms ``J`` or a parameter-sized matrix: each
iteration is one Jacobian-vector product, one Hessian-vector product in output space and one
vector-Jacobian product.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ._validate import check_key, check_examples, check_whole, is_traced

PyTree = Any


def max_curvature(apply_fn: Callable, loss_fn: Callable, params: PyTree, x, y, *, iterations: int = 20,
                  key=None) -> jax.Array:
    r"""The largest eigenvalue :math:`\kappa_{\max}` of the Hessian of the linearised loss at its
    anchor ``params``: :math:`J^\top \nabla^2_f \ell\, J` (the Gauss-Newton matrix of ``loss_fn``).

    Computed by ``iterations`` steps of power iteration on Gauss-Newton-vector products
    (``jax.linearize`` of the model, a Hessian-vector product of ``loss_fn`` in output space,
    ``jax.vjp`` back), from a fixed random start. Numerical choice: the matrix is positive
    semi-definite, so power iteration converges to :math:`\kappa_{\max}` from below and the
    returned Rayleigh quotient never overestimates it; 20 iterations give a few digits when the
    top of the spectrum is separated (it usually is: one outlier per class), which is all a
    learning-rate bound needs. It is jittable and can be vmapped over stacked parameters.

    Args:
      apply_fn: ``apply_fn(params, x) -> outputs``.
      loss_fn: ``loss_fn(outputs, targets) -> scalar``, twice differentiable in ``outputs``.
      params: the anchor :math:`\theta_s`.
      x, y: the batch whose loss is measured (examples on the leading axis).
      iterations: power-iteration steps (a positive integer).
      key: the start vector's random key (default ``jax.random.key(0)``).

    Returns:
      A scalar array, :math:`\kappa_{\max}`.

    Raises:
      ValueError: ``iterations`` not a positive integer, or an empty batch.

    Examples:
      For ``f(theta, x) = x @ theta`` and ``1/2 ||f - y||^2`` the Gauss-Newton matrix is
      ``X^T X``; with ``X = diag(1, 3)`` its largest eigenvalue is 9:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> X = jnp.diag(jnp.array([1.0, 3.0]))
      >>> lam = ic.max_curvature(lambda th, x: x @ th, ic.squared_error, jnp.zeros(2), X, jnp.zeros(2))
      >>> print(round(float(lam), 4), round(float(ic.stable_lr(lam, safety=1.0)), 4))
      9.0 0.2222
    """
    iterations = check_whole("iterations", iterations, 1)
    check_examples("x", x)
    flat0, unravel = ravel_pytree(params)
    out, jvp_fn = jax.linearize(lambda p: apply_fn(p, x), params)
    _, vjp_fn = jax.vjp(lambda p: apply_fn(p, x), params)
    grad_out = jax.grad(lambda o: loss_fn(o, y))

    def ggn(v):   # J^T H J v, flat in and out
        jv = jvp_fn(unravel(v))
        hjv = jax.jvp(grad_out, (out,), (jv,))[1]
        return ravel_pytree(vjp_fn(hjv)[0])[0]

    key = jax.random.key(0) if key is None else check_key(key)
    v = jax.random.normal(key, flat0.shape, flat0.dtype)
    v = v / jnp.linalg.norm(v)

    def body(_, v):
        w = ggn(v)
        return w / jnp.maximum(jnp.linalg.norm(w), jnp.finfo(w.dtype).tiny)

    v = jax.lax.fori_loop(0, iterations - 1, body, v)
    return jnp.vdot(v, ggn(v))


def stable_lr(lam_max, *, safety: float = 0.5):
    r"""The learning rate ``safety * 2 / lam_max``: a fraction ``safety`` of the largest rate at
    which gradient descent on a quadratic of curvature ``lam_max`` still converges.

    ``safety = 1`` is the edge of stability itself; the book's image chapters use ``0.5``,
    leaving room for the growth of :math:`\kappa_{\max}` between two measurements. Works on
    numbers and arrays.

    Raises:
      ValueError: ``safety`` not in (0, 1], or a concrete ``lam_max`` (a number or an array) that
        is not positive and finite everywhere (under ``jit`` it is not checked).

    Examples:
      >>> import itlin_core as ic
      >>> ic.stable_lr(100.0)
      0.01
    """
    if isinstance(safety, bool) or not isinstance(safety, (int, float)) or not 0 < safety <= 1:
        raise ValueError(f"safety must be a number in (0, 1] (1 is the edge of stability), got {safety!r}.")
    if isinstance(lam_max, (int, float)) and not isinstance(lam_max, bool):
        if not (math.isfinite(lam_max) and lam_max > 0):
            raise ValueError(f"lam_max must be a positive finite curvature, got {lam_max!r}.")
        return safety * 2.0 / lam_max
    if is_traced(lam_max):
        return safety * 2.0 / lam_max
    lam = np.asarray(lam_max)
    if lam.dtype.kind not in "iuf" or not lam.size or not np.all(np.isfinite(lam) & (lam > 0)):
        raise ValueError(f"lam_max must be a positive finite curvature (or an array of them), got {lam_max!r}.")
    return safety * 2.0 / jnp.asarray(lam_max)


__all__ = ["max_curvature", "stable_lr"]
