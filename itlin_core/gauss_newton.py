r"""Gauss-Newton, damped Gauss-Newton and truncated Gauss-Newton (Goldwaser and Ge, §2.3, §3.3).

For the squared error ``L = 1/2 ||f(theta, X) - Y||^2`` with residual ``r = f(theta, X) - Y``
and Jacobian ``J`` (``N*O x P``), the damped Gauss-Newton direction is (Goldwaser and Ge, eq. (10))

.. math:: d = (J^\top J + \lambda I)^{-1} J^\top r = J^\top (J J^\top + \lambda I)^{-1} r .

The second (kernel, or Woodbury / push-through) form is the one computed here: in
over-parameterised networks ``N*O << P``, so we solve an ``N*O x N*O`` system with the
empirical NTK ``J J^T`` instead of a ``P x P`` one, and apply ``J^T`` with one VJP.
With ``lambda = 0`` the solve uses the pseudo-inverse of ``J J^T``, giving the
minimum-norm step ``J^+ r``: the limit of gradient flow on the linearised model
(Goldwaser and Ge, Lemma 3.2.1 and App. B), which is also ``(J^T J)^{-1} J^T r`` whenever ``J^T J`` is invertible.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._linalg import check_kernel, check_psd, kernel_solve, solve
from ._validate import (K_NEVER, check_damping, check_examples, check_finite, check_number, check_whole,
                        is_traced)
from .linearise import linearised_objective, linearised_value_and_grad, tree_vdot
from .ntk import as_2d, empirical_ntk, kernel_matrix

PyTree = Any


def _solve_dtype(dtype):
    if dtype is None:
        return None
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float64 and not jax.config.jax_enable_x64:
        raise ValueError(
            "a float64 solve needs 64-bit JAX: call jax.config.update('jax_enable_x64', True) "
            "at the start of the program, or use solve_dtype=None.")
    return dtype


def gn_direction(apply_fn: Callable, params: PyTree, x, y, damping=0.0, *, solve_dtype=None,
                 rcond: float | None = None, ntk_batch_size: int | None = None,
                 ntk_method: str = "auto", ntk_fn: Callable | None = None) -> PyTree:
    r"""Damped Gauss-Newton direction ``(J^T J + lambda I)^{-1} J^T (f(x) - y)`` (Goldwaser and Ge, eq. (10)).

    Computed in kernel form ``J^T (J J^T + lambda I)^{-1} r`` (see the module docstring):
    the empirical NTK with all output blocks (:func:`itlin_core.empirical_ntk` with
    ``full=True``), an ``eigh`` solve (:func:`kernel_solve`), and one VJP for ``J^T``.
    No ``P x P`` matrix and no Jacobian is formed.

    Args:
      apply_fn, params: the model and where to linearise it.
      x, y: inputs and targets; ``apply_fn(params, x)`` must have ``y``'s shape
        (``(N,)`` and ``(N, 1)`` count as the same). Outside ``jit``, NaN or infinity in either
        is refused (ValueError).
      damping: ``lambda >= 0`` or a callable ``eigenvalues of J J^T -> lambda``.
      solve_dtype: e.g. ``jnp.float64`` to do the kernel solve in double precision
        (needs ``jax_enable_x64``); the direction is returned in the parameters' dtype.
      rcond: relative eigenvalue cut-off of the pseudo-inverse (see :func:`kernel_solve`).
      ntk_batch_size: passed to :func:`itlin_core.empirical_ntk` as ``batch_size``.
      ntk_method: passed to :func:`itlin_core.empirical_ntk` as ``method``; the default
        ``"auto"`` picks the fastest exact method for the sizes (per-example Jacobians unless the
        model couples its examples).
      ntk_fn: optional ``ntk_fn(params, x) -> J J^T`` that replaces the generic empirical NTK
        by a model-specific formula (e.g. :func:`itlin_core.mean_field_ntk`, which uses the
        factorised kernel of a one-hidden-layer network); it must return the ``(N*O, N*O)``
        matrix (or ``(N, N)`` for a single output, or full ``(N, N, O, O)`` blocks). The rest
        of the step (residual, solve, ``J^T`` by VJP) is unchanged.

    Returns:
      The direction ``d``, a pytree like ``params``; the GN update is ``params - lr * d``.

    Examples:
      For ``theta x`` with ``x = 2``, ``y = 4`` at ``theta = 0``: ``J J^T = 4`` and ``r = -4``, so
      ``d = 2 r / (4 + lambda)``; undamped, ``theta - d = 2`` fits exactly, and ``lambda = 4`` halves the step:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> f, x, y = lambda th, x: th * x, jnp.array([2.0]), jnp.array([4.0])
      >>> print([round(float(ic.gn_direction(f, jnp.zeros(()), x, y, lam)), 4) for lam in (0.0, 4.0)])
      [-2.0, -1.0]
    """
    check_damping(damping)
    check_examples("x", x)
    check_finite("x", x)
    check_finite("y", y)
    dtype = _solve_dtype(solve_dtype)
    out, pullback = jax.vjp(lambda p: as_2d(apply_fn(p, x)), params)
    y2 = jnp.asarray(y)
    y2 = as_2d(y2) if y2.ndim else y2
    if y2.shape != out.shape:
        raise ValueError(
            f"targets y must match the model outputs: outputs have shape {out.shape}, "
            f"y has shape {jnp.shape(y)}.")
    r = (out - y2).reshape(-1)
    if ntk_fn is None:
        kmat = kernel_matrix(empirical_ntk(apply_fn, params, x, full=True, batch_size=ntk_batch_size,
                                           method=ntk_method))
    else:
        kmat = ntk_fn(params, x)
        kmat = kernel_matrix(kmat) if kmat.ndim == 4 else kmat
        if kmat.shape != (r.size, r.size):
            raise ValueError(f"ntk_fn returned a kernel of shape {kmat.shape}; expected "
                             f"({r.size}, {r.size}) for {out.shape[0]} examples x {out.shape[1]} outputs.")
    if dtype is not None:
        kmat, r = kmat.astype(dtype), r.astype(dtype)
    a = solve(kmat, r, damping, rcond)
    (d,) = pullback(a.reshape(out.shape).astype(out.dtype))
    return d


def gn_step(apply_fn: Callable, params: PyTree, x, y, lr: float = 1.0, damping=0.0, **kwargs) -> PyTree:
    """One (damped) Gauss-Newton update ``params - lr * gn_direction(...)`` (Goldwaser and Ge,
    Alg. 1, eq. (10)).

    ``lr = 1, damping = 0`` is the full Gauss-Newton step, which lands on the minimum-norm
    minimiser of the linearised squared error. Keyword arguments go to :func:`gn_direction`.

    Examples:
      For a model that is linear in its parameters, one undamped step solves least squares
      exactly (here the two points lie on the line ``y = 1 + 2 x``):

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> x, y = jnp.array([0.0, 1.0]), jnp.array([1.0, 3.0])
      >>> line = lambda p, x: p["a"] + p["b"] * x
      >>> p = ic.gn_step(line, {"a": jnp.zeros(()), "b": jnp.zeros(())}, x, y)
      >>> print(round(float(p["a"]), 5), round(float(p["b"]), 5))
      1.0 2.0
    """
    check_number("lr (the step size)", lr, minimum=0.0, strict=True)
    d = gn_direction(apply_fn, params, x, y, damping, **kwargs)
    return optax.tree_utils.tree_add_scale(params, -lr, d)


def gn_iterate(apply_fn: Callable, params: PyTree, x, y, num_steps: int, *, lr: float = 1.0, damping=0.0,
               **kwargs) -> PyTree:
    """``num_steps`` (damped) Gauss-Newton updates from ``params`` (:func:`gn_step`), as one
    ``lax.scan``; returns the final parameters. Jittable and vmappable (e.g. over dampings or
    initialisations). Keyword arguments go to :func:`gn_direction`.

    Examples:
      On ``f(theta) = theta^2`` with target 4 a Gauss-Newton step is
      ``theta - (theta^2 - 4) / (2 theta) = (theta + 4 / theta) / 2``, Heron's iteration for ``sqrt(4)``:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> sq, x, y = lambda th, x: th ** 2 * x, jnp.array([1.0]), jnp.array([4.0])
      >>> print([round(float(ic.gn_iterate(sq, jnp.array(1.0), x, y, n)), 4) for n in (1, 2, 3, 5)])
      [2.5, 2.05, 2.0006, 2.0]
    """
    num_steps = check_whole("num_steps", num_steps, 0)
    check_damping(damping)
    check_number("lr (the step size)", lr, minimum=0.0, strict=True)
    body = lambda p, _: (gn_step(apply_fn, p, x, y, lr=lr, damping=damping, **kwargs), None)
    return jax.lax.scan(body, params, None, length=num_steps)[0]


class TGNResult(NamedTuple):
    """Result of one truncated Gauss-Newton step.

    Attributes:
      params: the approximate minimiser of the (proximal) linearised objective.
      num_steps: inner optimiser steps taken.
      grad_norm_ratio: ``||grad|| / ||grad at the anchor||`` at the end (the tolerance
        ``beta`` of Goldwaser and Ge's Algorithm 2 is a bound on this ratio).
      objective: the linearised objective at ``params``.

    Examples:
      With damping 1 the objective ``1/2 (theta - 1)^2 + 1/2 theta^2`` has gradient ``2 theta - 1``;
      one gradient step of rate 1/2 from 0 lands on its minimiser 1/2, where it is 1/4:

      >>> import jax.numpy as jnp, optax
      >>> import itlin_core as ic
      >>> r = ic.tgn_step(lambda th, x: th * x, jnp.zeros(()), jnp.ones(1), jnp.ones(1), loss_fn=ic.squared_error,
      ...                 optimizer=optax.sgd(0.5), num_steps=5, damping=1.0, rtol=1e-6)
      >>> print(float(r.params), int(r.num_steps), float(r.grad_norm_ratio), float(r.objective))
      0.5 1 0.0 0.25
    """

    params: PyTree
    num_steps: jax.Array
    grad_norm_ratio: jax.Array
    objective: jax.Array


def tgn_step(apply_fn: Callable, params: PyTree, x, y, *, loss_fn: Callable,
             optimizer: optax.GradientTransformation, num_steps: int, damping: float = 0.0,
             rtol: float = 0.0) -> TGNResult:
    r"""Truncated Gauss-Newton step (Goldwaser and Ge, Algorithm 2, §3.2, §4.3): linearise at ``params`` and
    minimise the convex linearised objective approximately with an optax optimiser,

    .. math:: \min_\theta\; \ell\big(f^{\mathrm{lin}}(\theta, X), Y\big) + \tfrac{\lambda}{2}\|\theta - \theta_s\|^2,

    stopping after ``num_steps`` inner steps or once ``||grad|| <= rtol * ||grad at theta_s||``,
    whichever comes first (a ``lax.while_loop``). With the squared error and ``rtol -> 0`` this
    is the damped GN step (eq. (10)); with softmax cross-entropy it is the paper's
    "solve the convex problem with Adam" baseline (Figs. 3, 8, 9 bottom).

    Examples:
      Gradient descent of rate 1/2 on ``1/2 (theta - 1)^2`` halves the gradient at every step, so
      ``rtol = 1e-3`` stops it after 10 steps (``2^-10 < 1e-3 < 2^-9``):

      >>> import jax.numpy as jnp, optax
      >>> import itlin_core as ic
      >>> r = ic.tgn_step(lambda th, x: th * x, jnp.zeros(()), jnp.ones(1), jnp.ones(1), loss_fn=ic.squared_error,
      ...                 optimizer=optax.sgd(0.5), num_steps=50, rtol=1e-3)
      >>> print(int(r.num_steps), round(float(r.params), 4), float(r.grad_norm_ratio) == 2.0 ** -10)
      10 0.999 True
    """
    check_damping(damping)
    num_steps = check_whole("num_steps", num_steps, 1, K_NEVER)   # an int32 counter counts the steps
    if not is_traced(rtol) and (isinstance(rtol, bool) or not isinstance(rtol, numbers.Real)
                                or not math.isfinite(rtol) or rtol < 0):
        raise ValueError(f"rtol must be a finite number >= 0 (0: run all num_steps), got {rtol!r}.")
    objective = linearised_objective(apply_fn, loss_fn, damping)
    vg = linearised_value_and_grad(apply_fn, loss_fn, damping)
    value_and_grad = lambda p: vg(p, params, x, y)

    def norm(g):
        return jnp.sqrt(tree_vdot(g, g))

    v0, g0 = value_and_grad(params)
    g0_norm = norm(g0)

    def cond(c):
        i, _, _, _, g_norm = c
        return (i < num_steps) & (g_norm > rtol * g0_norm)

    def body(c):
        i, p, s, g, _ = c
        updates, s = optimizer.update(g, s, p)
        p = optax.apply_updates(p, updates)
        v, g = value_and_grad(p)
        return i + 1, p, s, g, norm(g)

    init = (jnp.zeros((), jnp.int32), params, optimizer.init(params), g0, g0_norm)
    i, p, _, _, g_norm = jax.lax.while_loop(cond, body, init)
    return TGNResult(params=p, num_steps=i, grad_norm_ratio=g_norm / g0_norm,
                     objective=objective(p, params, x, y)[0])


def gd_steps_to_tolerance(ntk, residual, lr: float, rtol: float, max_steps: int = 10 ** 9) -> int | None:
    r"""How many gradient-descent steps from the anchor solve the linearised squared error to the
    tolerance of truncated Gauss-Newton (Goldwaser and Ge, Algorithm 2; Gratton et al. 2007).

    TGN accepts a step ``s`` once the residual of the normal equations, which is the gradient of
    the linearised loss ``1/2 ||r + J s||^2`` at ``theta_s + s``, satisfies
    ``||J^T (r + J s)|| <= rtol ||J^T r||``. Gradient descent with learning rate ``lr`` on that
    loss keeps the residual in output space at ``r_k = (I - lr Theta)^k r`` with ``Theta = J J^T``
    (the empirical NTK at the anchor), and ``||J^T v||^2 = v^T Theta v``; with
    ``Theta = sum_i sigma_i u_i u_i^T``,

    .. math:: \frac{\|g_k\|^2}{\|g_0\|^2}
              = \frac{\sum_i \sigma_i (1 - \eta\sigma_i)^{2k} (u_i^\top r)^2}{\sum_i \sigma_i (u_i^\top r)^2} ,

    which no longer needs the Jacobian, only the kernel's spectrum and the residual. This returns
    the smallest ``k`` at which the ratio is ``<= rtol``, so IL with ``K >= k`` steps between
    refreshes (plain gradient descent, this learning rate) performs TGN steps with tolerance
    ``rtol`` (``0`` when ``rtol >= 1``), or ``None`` when no ``k <= max_steps`` reaches it.
    For small ``rtol`` it is about ``log(1/rtol) / (lr sigma_min)``, ``sigma_min`` the smallest
    eigenvalue on which ``r`` has a component: the slowest direction decides.

    Numerical choice: the eigendecomposition and the ratio in float64 NumPy, the ratio in log
    space (terms underflow for large ``k``), and bisection on ``k`` (every term is
    non-increasing in ``k`` for ``0 < lr sigma_max <= 2``, which is required).

    Args:
      ntk: the ``(M, M)`` kernel ``J J^T`` at the anchor (``ic.empirical_ntk(..., full=True)``
        reshaped to a matrix, or ``ic.kernel_matrix``); real, finite, symmetric and positive
        semi-definite within the tolerance of :func:`itlin_core.kernel_solve` (checked, not repaired).
      residual: ``f(theta_s, X) - Y``, ``M`` numbers in the kernel's order.
      lr: the inner gradient descent's learning rate, ``0 < lr * sigma_max <= 2``.
      rtol: TGN's tolerance ``beta >= 0``.
      max_steps: the largest number of steps considered.

    Example:
      >>> import numpy as np
      >>> gd_steps_to_tolerance(np.diag([1.0, 0.1]), np.ones(2), lr=0.5, rtol=0.1)
      22
    """
    dtype = check_kernel("ntk", ntk, square=False).dtype
    theta = np.asarray(ntk, dtype=np.float64)
    r = np.asarray(residual, dtype=np.float64).reshape(-1)
    if theta.ndim != 2 or theta.shape[0] != theta.shape[1] or theta.shape[0] != r.size:
        raise ValueError(f"ntk must be a square (M, M) matrix matching residual's M = {r.size} numbers, got shape "
                         f"{theta.shape}.")
    for name, v in (("lr", lr), ("rtol", rtol)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {v!r}.")
    max_steps = check_whole("max_steps", max_steps, 0)
    if rtol < 0:
        raise ValueError(f"rtol must be >= 0, got {rtol!r}.")
    check_kernel("ntk", ntk)            # symmetric within a tolerance; then positive semi-definite
    sigma, u = np.linalg.eigh((theta + theta.T) / 2)
    check_psd("ntk", sigma, dtype)
    sigma = np.clip(sigma, 0.0, None)
    if lr <= 0 or lr * sigma.max() > 2:
        raise ValueError(f"lr must satisfy 0 < lr * sigma_max <= 2 (gradient descent on the linearised loss "
                         f"converges); got lr = {lr!r}, sigma_max = {sigma.max():.4g}.")
    weight = sigma * (u.T @ r) ** 2
    keep = weight > 0
    if not keep.any() or rtol >= 1:
        return 0
    log_w = np.log(weight[keep])
    with np.errstate(divide="ignore"):
        log_f = np.log(np.abs(1 - lr * sigma[keep]))      # -inf where lr * sigma == 1: solved in one step
    log_total = np.logaddexp.reduce(log_w)

    def ratio_ok(k):
        terms = log_w if k == 0 else log_w + 2 * k * log_f
        if rtol == 0:
            return bool(np.all(terms == -np.inf))
        return 0.5 * (np.logaddexp.reduce(terms) - log_total) <= math.log(rtol)

    if not ratio_ok(max_steps):
        return None
    lo, hi = 0, max_steps            # ratio_ok(hi) holds; find the smallest such k
    while lo < hi:
        mid = (lo + hi) // 2
        if ratio_ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def damping_min_eigenvalue(alpha: float = 1.0, floor: float = 1e-7) -> Callable:
    """Arbel et al.'s damping rule ``lambda = max(floor, alpha * smallest eigenvalue of J J^T)``
    as a callable for ``gn_direction(..., damping=...)``.

    Examples:
      The rule picks the smallest eigenvalue, floored at ``1e-7``; for ``theta x`` with one example
      ``x = 2``, ``J J^T = 4`` is that eigenvalue, and ``lambda = 4`` halves the undamped direction -2:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> rule = ic.damping_min_eigenvalue(alpha=1.0)
      >>> print(float(rule(jnp.array([4.0, 9.0]))), round(float(rule(jnp.array([0.0, 9.0]))), 10))
      4.0 1e-07
      >>> d = ic.gn_direction(lambda th, x: th * x, jnp.zeros(()), jnp.array([2.0]), jnp.array([4.0]), rule)
      >>> print(round(float(d), 4))
      -1.0
    """
    check_number("alpha (the multiple of the smallest eigenvalue)", alpha, minimum=0.0)
    check_number("floor (the smallest damping)", floor, minimum=0.0)
    return lambda ev: jnp.maximum(floor, alpha * ev[0])


__all__ = ["gn_direction", "gn_step", "gn_iterate", "kernel_solve", "tgn_step", "TGNResult", "gd_steps_to_tolerance",
           "damping_min_eigenvalue"]
