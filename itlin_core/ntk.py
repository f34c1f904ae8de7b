r"""The empirical neural tangent kernel and the Jacobian it is built from.

Conventions (as in neural-tangents' ``empirical.py``):

* ``apply_fn(params, x) -> outputs`` with a leading batch axis; outputs are ``(N,)`` or
  ``(N, O)``. A vector of ``N`` scalars is treated as ``(N, 1)``.
* ``J`` is the Jacobian of the outputs flattened example-major (``f.reshape(-1)`` of an
  ``(N, O)`` array) with respect to the flattened parameters, shape ``(N*O, P)``; its rows are the
  *features* of the linearised model (Goldwaser and Ge, §2.1).
* The kernel ``J(x1) J(x2)^T`` is returned either as the trace over outputs, ``(N1, N2)`` (the
  default, as the papers' plots use), or as all output blocks, ``(N1, N2, O, O)``
  (``full=True``), which is what Gauss-Newton and the gradient flow of a vector-output model
  need; :func:`kernel_matrix` turns the blocks into the ``(N1*O, N2*O)`` matrix.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.flatten_util
import jax.numpy as jnp

PyTree = Any


def as_2d(out: jax.Array) -> jax.Array:
    """Outputs as (N, O): a vector of N scalars becomes (N, 1)."""
    return out[:, None] if out.ndim == 1 else out.reshape(out.shape[0], -1)


def empirical_ntk(apply_fn: Callable, params: PyTree, x1, x2=None, *, full: bool = False,
                  batch_size: int | None = None, method: str = "implicit") -> jax.Array:
    r"""Empirical neural tangent kernel ``J(x1) J(x2)^T`` at ``params``.

    .. math:: \hat\Theta(x_1, x_2)_{ij} = \sum_o \Big\langle \frac{\partial f_o(\theta, x_{1,i})}{\partial\theta},
              \frac{\partial f_o(\theta, x_{2,j})}{\partial\theta} \Big\rangle

    Goldwaser and Ge, eq. (5). For vector outputs the default sums over the output axis (the
    trace of the per-output block); ``full=True`` returns every block, shape ``(N1, N2, O, O)``.

    Numerical choice: no Jacobian is formed. The columns ``J(x2)^T e_j`` are
    pulled back with one ``vjp`` (vmapped over the ``N2*O`` unit cotangents)
    and pushed forward through ``J(x1)`` with ``jvp``; ``batch_size`` bounds
    how many columns are alive at once (``lax.map``), which bounds memory at
    ``batch_size * P`` numbers instead of ``N2*O*P``.

    Args:
      apply_fn: ``apply_fn(params, x) -> (N,)`` or ``(N, O)`` outputs.
      params: where the kernel is evaluated.
      x1, x2: inputs (leading axis = examples); ``x2=None`` means ``x1``.
      full: return the ``(N1, N2, O, O)`` blocks instead of the trace ``(N1, N2)``.
      batch_size: columns per chunk (``None``: all at once); implicit method only.
      method: ``"implicit"`` (default, no Jacobian) or ``"jacobian"`` (explicit Jacobians).

    Returns:
      ``(N1, N2)`` or, with ``full=True``, ``(N1, N2, O, O)``.

    Examples:
      The kernel of a model that is linear in its parameters is the Gram matrix of its features:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> x = jnp.array([[1.0, 0.0], [1.0, 2.0]])
      >>> print(ic.empirical_ntk(lambda w, x: x @ w, jnp.zeros(2), x))
      [[1. 1.]
       [1. 5.]]
    """
    if method not in ("implicit", "jacobian"):
        raise ValueError(f"method must be 'implicit' or 'jacobian', got {method!r}.")
    if x2 is None:
        x2 = x1
    if method == "jacobian":
        j1, j2 = flat_jacobian(apply_fn, params, x1), flat_jacobian(apply_fn, params, x2)
        n1, n2 = as_2d(apply_fn(params, x1)).shape[0], as_2d(apply_fn(params, x2)).shape[0]
        o = j1.shape[0] // n1
        blocks = (j1 @ j2.T).reshape(n1, o, n2, o).transpose(0, 2, 1, 3)
        return blocks if full else jnp.trace(blocks, axis1=2, axis2=3)
    f1 = lambda p: as_2d(apply_fn(p, x1))
    f2 = lambda p: as_2d(apply_fn(p, x2))
    out2, pullback = jax.vjp(f2, params)
    n2, o = out2.shape
    eye = jnp.eye(n2 * o, dtype=out2.dtype).reshape(n2 * o, n2, o)

    def column(cot):  # J1 J2^T cot, for one cotangent on x2's outputs
        (g,) = pullback(cot)
        return jax.jvp(f1, (params,), (g,))[1]  # (N1, O)

    if batch_size is None:
        cols = jax.vmap(column)(eye)
    else:
        cols = jax.lax.map(column, eye, batch_size=batch_size)
    # cols[j2*O + o2, i1, o1] = <d f_{o1}(x1_i1), d f_{o2}(x2_j2)>
    blocks = cols.reshape(n2, o, -1, o).transpose(2, 0, 3, 1)  # (N1, N2, O1, O2)
    if full:
        return blocks
    return jnp.trace(blocks, axis1=2, axis2=3)


def kernel_matrix(ntk_full: jax.Array) -> jax.Array:
    """Reshape full NTK blocks ``(N1, N2, O, O)`` to the ``(N1*O, N2*O)`` matrix ``J1 J2^T``
    acting on outputs flattened example-major (``f.reshape(-1)`` of an ``(N, O)`` array)."""
    if ntk_full.ndim != 4:
        raise ValueError(f"expected NTK blocks of shape (N1, N2, O, O), got shape {ntk_full.shape}.")
    n1, n2, o1, o2 = ntk_full.shape
    return ntk_full.transpose(0, 2, 1, 3).reshape(n1 * o1, n2 * o2)


def flat_jacobian(apply_fn: Callable, params: PyTree, x) -> jax.Array:
    """The explicit Jacobian ``J`` of the flattened outputs with respect to the
    flattened parameters, shape ``(N*O, P)``. Only for small problems and for
    teaching (the rest of the package never forms it)."""
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    return jax.jacrev(lambda v: as_2d(apply_fn(unravel(v), x)).reshape(-1))(flat)


def max_ntk_eigenvalue(apply_fn: Callable, params: PyTree, x, **kwargs) -> float:
    r"""The largest eigenvalue ``lambda_max`` of the empirical NTK ``J J^T`` on ``x`` (traced
    over outputs), a Python float. Gradient descent on the squared error ``1/2 ||f - y||^2`` of
    the model linearised at ``params`` is stable for learning rates below ``2 / lambda_max``,
    which is why the toy chapters set their rates as a fraction of ``1 / lambda_max``.
    Keyword arguments go to :func:`empirical_ntk`."""
    return float(jnp.linalg.eigvalsh(empirical_ntk(apply_fn, params, x, **kwargs))[-1])


__all__ = ["empirical_ntk", "kernel_matrix", "flat_jacobian", "max_ntk_eigenvalue"]
