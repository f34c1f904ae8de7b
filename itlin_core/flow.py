r"""Closed-form gradient flow of a linear(ised) model under the squared error.

Goldwaser and Ge 2024, Lemma 3.2.1 and App. B (eqs. (14)-(24)). For ``L = 1/2 ||f - Y||^2`` (a sum) and
a model that is linear in its parameters with Jacobian ``J`` on the training inputs and
kernel ``Theta = J J^T``, gradient flow ``d theta/dt = -J^T (f_t - Y)`` gives

.. math::
    f_t(X) &= Y + e^{-\Theta t}\,(f_0(X) - Y), \\
    f_t(x) &= f_0(x) - \Theta(x, X)\,\Theta^{-1}\big(I - e^{-\Theta t}\big)(f_0(X) - Y), \\
    \theta_t &= \theta_0 - J^\top \Theta^{-1}\big(I - e^{-\Theta t}\big)(f_0(X) - Y).

Time ``t`` is in units of learning rate x steps: gradient descent with step ``eta`` for ``n``
steps approximates the flow at ``t = eta * n``. At ``t = inf`` the model interpolates the
training data with the minimum-norm change of parameters.

Numerical choice: ``Theta = V diag(ev) V^T`` by ``eigh``; the factor
``(1 - e^{-ev t}) / ev`` is evaluated as ``-expm1(-ev t) / ev``, which keeps its digits for
small ``ev t`` and tends to ``t`` as ``ev -> 0``; eigen-directions below a relative cut-off
are treated as exactly null (their factor is ``t``, or ``0`` at ``t = inf``, the
pseudo-inverse), so a near-singular NTK gives finite, correct answers.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from ._linalg import check_kernel, psd_eigh
from ._validate import check_examples, check_finite, is_traced
from .ntk import as_2d, empirical_ntk, kernel_matrix

PyTree = Any


def _decay_factors(ev, t, cutoff):
    """g(ev, t) = (1 - exp(-ev t)) / ev, with its limits: t for ev -> 0, 1/ev for t = inf."""
    t = jnp.asarray(t, ev.dtype)
    small = ev <= cutoff
    safe_ev = jnp.where(small, 1.0, ev)
    inf_t = jnp.isinf(t)
    g_big = jnp.where(inf_t, 1.0 / safe_ev, -jnp.expm1(-safe_ev * jnp.where(inf_t, 0.0, t)) / safe_ev)
    g_small = jnp.where(inf_t, 0.0, t)
    return jnp.where(small, g_small, g_big)


def _kernel_and_outputs(ntk, f0, name):
    """Kernel as a square matrix on flattened outputs, f0 as (N, O)."""
    f0 = jnp.asarray(f0)
    f2 = as_2d(f0)
    n, o = f2.shape
    ntk = jnp.asarray(ntk)
    if ntk.ndim == 4:
        if ntk.shape[:2] != (n, n) or ntk.shape[2:] != (o, o):
            raise ValueError(f"{name} of shape {ntk.shape} does not match f0_train of shape {f0.shape}: "
                             f"expected (N, N, O, O) = {(n, n, o, o)}.")
        return kernel_matrix(ntk), f2, True
    if ntk.ndim != 2 or ntk.shape != (n, n):
        raise ValueError(f"{name} must be (N, N) or (N, N, O, O) with N = {n} training points "
                         f"(the length of f0_train), got shape {ntk.shape}.")
    return ntk, f2, False


def gradient_flow(ntk_train, f0_train, y_train, t, ntk_test_train=None, f0_test=None, *,
                  rcond: float | None = None):
    r"""Function-space gradient flow of a linear(ised) model in closed form (Goldwaser and Ge 2024,
    Lemma 3.2.1).

    Args:
      ntk_train: ``Theta(X, X)``: ``(N, N)`` (the same kernel for every output, e.g. scalar
        outputs) or the full blocks ``(N, N, O, O)`` from ``empirical_ntk(..., full=True)``.
      f0_train: outputs at ``t = 0`` on the training inputs, ``(N,)`` or ``(N, O)``.
      y_train: targets, same shape as ``f0_train``.
      t: a time (float, may be ``math.inf``) or a 1-D array of times.
      ntk_test_train: ``Theta(X*, X)``: ``(M, N)`` or ``(M, N, O, O)``; optional.
      f0_test: outputs at ``t = 0`` on the test inputs, needed with ``ntk_test_train``.
      rcond: eigenvalues below ``rcond * max eigenvalue`` count as zero, a number in [0, 1)
        (default ``N*O * machine epsilon``).

    ``ntk_train`` is checked, not repaired, as by :func:`itlin_core.kernel_solve`: real, finite,
    symmetric and positive semi-definite within a relative tolerance (``max(1e-5, n eps)`` for
    float32, ``max(1e-10, n eps)`` for float64), and not all zero (when concrete). Concrete
    ``f0_train``, ``y_train`` and ``f0_test`` with NaN or infinity are refused (ValueError).

    Returns:
      ``(f_train_t, f_test_t)`` with a leading time axis when ``t`` is an array;
      ``f_test_t`` is ``None`` without test inputs. Shapes follow ``f0_train``/``f0_test``.

    Examples:
      With a one-point kernel ``Theta = 2`` the residual decays like ``exp(-2 t)``; at
      ``t = inf`` the model interpolates the target:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> f_t, _ = ic.gradient_flow(jnp.array([[2.0]]), jnp.array([0.0]), jnp.array([1.0]), jnp.array([0.5, jnp.inf]))
      >>> print(jnp.round(f_t[:, 0], 4))
      [0.6321 1.    ]
    """
    check_examples("f0_train", jnp.asarray(f0_train))
    check_finite("f0_train", jnp.asarray(f0_train))
    check_finite("y_train", jnp.asarray(y_train))
    kmat, f2, full = _kernel_and_outputs(ntk_train, f0_train, "ntk_train")
    y2 = as_2d(jnp.asarray(y_train))
    if y2.shape != f2.shape:
        raise ValueError(f"y_train must have the shape of f0_train {jnp.shape(f0_train)}, "
                         f"got {jnp.shape(y_train)}.")
    if (ntk_test_train is None) != (f0_test is None):
        raise ValueError("give both ntk_test_train and f0_test, or neither.")
    n, o = f2.shape
    # Work on (N*O,) when the kernel couples outputs, else on (N, O) columns sharing one kernel.
    r0 = (f2 - y2).reshape(-1) if full else (f2 - y2)
    ev, vecs, cutoff = psd_eigh(kmat, rcond, check="ntk_train")   # real, symmetric, PSD: checked, not repaired
    if not is_traced(ev) and float(ev[-1]) == 0:
        raise ValueError("ntk_train is all zeros: the model's outputs do not depend on its parameters, so there is "
                         "no flow to follow (every direction is null); pass the kernel J J^T of the model.")
    coeff = vecs.T @ r0  # components of the initial residual along the eigenvectors

    if ntk_test_train is not None:
        f0t = check_finite("f0_test", jnp.asarray(f0_test))
        ft2 = as_2d(f0t)
        kt = check_kernel("ntk_test_train", ntk_test_train, square=False)
        m = ft2.shape[0]
        if full:
            if kt.shape != (m, n, o, o):
                raise ValueError(f"ntk_test_train must have shape (M, N, O, O) = {(m, n, o, o)}, got {kt.shape}.")
            kt = kernel_matrix(kt)
        elif kt.shape != (m, n) or ft2.shape[1] != o:
            raise ValueError(f"ntk_test_train must have shape (M, N) = {(m, n)} and f0_test (M, O) with "
                             f"O = {o}, got {kt.shape} and {f0t.shape}.")
        kt_v = kt @ vecs

    def at(tt):
        g = _decay_factors(ev, tt, cutoff)
        # f_t(X) - f_0(X) = -Theta Theta^+ (I - e^{-Theta t}) r0 = -V diag(ev * g) V^T r0
        shrink = (ev * g).reshape((-1,) + (1,) * (coeff.ndim - 1))
        ftr = f2 - (vecs @ (shrink * coeff)).reshape(f2.shape)
        out_tr = ftr.reshape(jnp.shape(f0_train))
        if ntk_test_train is None:
            return out_tr, None
        gg = g.reshape((-1,) + (1,) * (coeff.ndim - 1))
        fte = ft2 - (kt_v @ (gg * coeff)).reshape(ft2.shape)
        return out_tr, fte.reshape(jnp.shape(f0_test))

    if isinstance(t, (str, bytes)) or t is None:
        raise ValueError(f"t must be a time >= 0 (or math.inf) or a 1-D array of them, got {t!r}.")
    t_arr = jnp.asarray(t)
    if not jnp.issubdtype(t_arr.dtype, jnp.number) or jnp.issubdtype(t_arr.dtype, jnp.complexfloating):
        raise ValueError(f"t must be a time >= 0 (or math.inf) or a 1-D array of them, got {t!r}.")
    if t_arr.ndim == 0:
        if not is_traced(t_arr) and not bool(t_arr >= 0):
            raise ValueError(f"t must be >= 0 (or math.inf), got {t!r}.")
        return at(t_arr)
    if t_arr.ndim != 1:
        raise ValueError(f"t must be a number or a 1-D array of times, got shape {t_arr.shape}.")
    if not is_traced(t_arr) and not bool(jnp.all(t_arr >= 0)):   # NaN fails this too
        raise ValueError(f"every time in t must be a number >= 0 (math.inf is allowed, NaN is not), got {t!r}.")
    return jax.vmap(at)(t_arr)


def gradient_flow_params(apply_fn: Callable, params0: PyTree, x, y, t, *, rcond: float | None = None) -> PyTree:
    r"""Parameter-space gradient flow of the model linearised at ``params0`` (Goldwaser and Ge
    2024, App. B, eq. (23)):

    .. math:: \theta_t = \theta_0 - J^\top\,\Theta^{+}\big(I - e^{-\Theta t}\big)\,(f_0(X) - Y),

    with ``J`` the Jacobian at ``params0`` on ``x`` and ``Theta = J J^T`` (all output blocks).
    At ``t = inf`` this is ``theta_0 - J^+ r``, the undamped Gauss-Newton step
    (:func:`itlin_core.gn_step` with ``lr=1``). ``t`` is a single time.

    Examples:
      For ``x @ theta`` with the one example ``x = (1, 1)``, target 2 and ``theta_0 = 0``,
      ``Theta = 2`` and ``theta_t = (1 - e^{-2t}) (1, 1)``; at ``t = inf`` it is the
      minimum-norm solution ``(1, 1)``:

      >>> import math
      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> x, y, lin = jnp.array([[1.0, 1.0]]), jnp.array([2.0]), lambda th, x: x @ th
      >>> for t in (0.5, math.inf):
      ...     print(jnp.round(ic.gradient_flow_params(lin, jnp.zeros(2), x, y, t), 4))
      [0.6321 0.6321]
      [1. 1.]
    """
    check_examples("x", x)
    out, pullback = jax.vjp(lambda p: as_2d(apply_fn(p, x)), params0)
    y2 = as_2d(jnp.asarray(y))
    if y2.shape != out.shape:
        raise ValueError(f"y must match the model outputs {out.shape}, got {jnp.shape(y)}.")
    if jnp.ndim(t) != 0 or (not is_traced(t) and not float(t) >= 0):     # NaN and -inf fail too
        raise ValueError(f"t must be a single time >= 0 (or math.inf), got {t!r}.")
    kmat = kernel_matrix(empirical_ntk(apply_fn, params0, x, full=True))
    ev, vecs, cutoff = psd_eigh(kmat, rcond)
    g = _decay_factors(ev, t, cutoff)
    a = vecs @ (g * (vecs.T @ (out - y2).reshape(-1)))
    (d,) = pullback(a.reshape(out.shape))
    return jax.tree.map(jnp.subtract, params0, d)


__all__ = ["gradient_flow", "gradient_flow_params"]
