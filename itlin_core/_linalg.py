"""Symmetric eigen-solves with a kernel matrix, shared by Gauss-Newton, the gradient flow and
the least-squares metrics (one place for the cut-off rule of the pseudo-inverse)."""

from __future__ import annotations

import jax.numpy as jnp

from ._validate import check_damping, is_traced


def psd_eigh(kmat, rcond=None):
    """``(ev, vecs, cutoff)`` for a symmetric PSD matrix: ``eigh`` of its symmetric part,
    eigenvalues clipped at 0 (rounding can make tiny ones negative), and the absolute
    cut-off ``rcond * max(ev)`` below which an eigenvalue counts as zero
    (default ``rcond = n * machine epsilon``, as in ``numpy.linalg.pinv``-style rules)."""
    kmat = 0.5 * (kmat + kmat.T)
    ev, vecs = jnp.linalg.eigh(kmat)
    ev = jnp.clip(ev, 0.0, None)
    if rcond is None:
        rcond = kmat.shape[0] * jnp.finfo(kmat.dtype).eps
    return ev, vecs, rcond * jnp.max(ev)


def kernel_solve(kmat, rhs, damping=0.0, *, rcond: float | None = None):
    r"""Solve ``(K + lambda I) a = rhs`` for a symmetric positive semi-definite ``K`` by ``eigh``.

    ``damping`` is a number ``lambda >= 0`` or a callable ``eigenvalues -> lambda`` (eigenvalues
    of ``K`` in ascending order, clipped at 0); e.g. Arbel et al.'s rule
    ``lambda ev: jnp.maximum(1e-7, ev[0])`` (alpha = 1 times the smallest eigenvalue, floored).
    Directions whose ``eigenvalue + lambda`` is below ``rcond * max eigenvalue`` (default
    ``rcond = n * machine epsilon``) are dropped (pseudo-inverse), so an undamped,
    numerically singular ``K`` gives the minimum-norm solution instead of infinities.
    ``rhs`` may have extra trailing axes (several right-hand sides).

    Examples:
      With ``K = diag(2, 0)`` the undamped solve drops the null direction (the minimum-norm
      solution), and ``lambda = 2`` divides by ``(4, 2)``:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> K, rhs = jnp.diag(jnp.array([2.0, 0.0])), jnp.array([4.0, 1.0])
      >>> print(ic.kernel_solve(K, rhs).tolist(), ic.kernel_solve(K, rhs, damping=2.0).tolist())
      [2.0, 0.0] [1.0, 0.5]
    """
    damping = check_damping(damping)
    ev, vecs, cutoff = psd_eigh(kmat, rcond)
    lam = damping(ev) if callable(damping) else damping
    if callable(damping):
        lam = jnp.asarray(lam)
        if not is_traced(lam) and not (lam.shape == () and bool(jnp.isfinite(lam)) and float(lam) >= 0):
            raise ValueError(f"damping: the callable must return one finite number >= 0 for the eigenvalues "
                             f"of the kernel, got {lam!r}.")
    denom = ev + lam
    keep = denom > cutoff
    inv = jnp.where(keep, 1.0 / jnp.where(keep, denom, 1.0), 0.0)
    if callable(damping):   # under jit: a negative or NaN lambda gives NaN, never a silent zero step
        inv = jnp.where(jnp.isfinite(lam) & (lam >= 0), inv, jnp.nan)
    coeff = vecs.T @ rhs
    return vecs @ (inv.reshape((-1,) + (1,) * (coeff.ndim - 1)) * coeff)
