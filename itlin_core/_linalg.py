"""Symmetric eigen-solves with a kernel matrix, shared by Gauss-Newton, the gradient flow and
the least-squares metrics (one place for the cut-off rule of the pseudo-inverse, and for the
checks of a kernel that a caller passes in)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ._validate import check_damping, check_finite, check_number, is_traced


def kernel_tol(dtype, n: int) -> float:
    """The relative tolerance of the kernel checks: ``max(1e-5, n * eps)`` for float32 (and
    narrower types), ``max(1e-10, n * eps)`` for float64 (``eps`` the dtype's machine epsilon)."""
    dtype = jnp.dtype(dtype)
    return max(1e-10 if dtype == jnp.float64 else 1e-5, n * float(jnp.finfo(dtype).eps))


def check_kernel(name: str, kmat, *, square: bool = True):
    """``kmat`` as a real floating-point array (integers are converted), or TypeError/ValueError
    unless it is real and (with ``square``) an ``(n, n)`` matrix; when it is concrete, also unless
    it is finite and symmetric within :func:`kernel_tol` (``max |K - K^T| <= tol * max |K|``).
    Whether it is positive semi-definite is checked on its eigenvalues (:func:`psd_eigh`)."""
    try:
        kmat = jnp.asarray(kmat)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an array of real numbers, got {type(kmat).__name__}.") from None
    if jnp.issubdtype(kmat.dtype, jnp.integer):
        kmat = kmat.astype(jnp.result_type(float))
    if not jnp.issubdtype(kmat.dtype, jnp.floating):
        raise TypeError(f"{name} must hold real numbers, got dtype {kmat.dtype} (a kernel J J^T is real, "
                        "symmetric and positive semi-definite).")
    if square and (kmat.ndim != 2 or kmat.shape[0] != kmat.shape[1] or not kmat.size):
        raise ValueError(f"{name} must be a square (n, n) matrix with n >= 1, got shape {kmat.shape}.")
    if is_traced(kmat):
        return kmat
    a = np.asarray(kmat)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} holds NaN or infinite entries; a kernel must be finite.")
    if square and a.size:
        top, asym, tol = float(np.max(np.abs(a))), float(np.max(np.abs(a - a.T))), kernel_tol(a.dtype, a.shape[0])
        if asym > tol * top:
            raise ValueError(f"{name} is not symmetric: max |K - K^T| = {asym:.3g} exceeds the tolerance {tol:.3g} x "
                             f"max |K| = {tol * top:.3g} ({a.dtype}); a kernel J J^T is symmetric (if the asymmetry "
                             "is rounding, pass (K + K.T) / 2).")
    return kmat


def check_rcond(rcond):
    """``None`` or a finite number in [0, 1) (at 1 every direction would be cut off); else ValueError."""
    if rcond is not None and not is_traced(rcond):
        try:
            check_number("rcond", rcond, minimum=0.0)
            ok = float(rcond) < 1
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"rcond (the relative eigenvalue cut-off of the pseudo-inverse) must be a number in "
                             f"[0, 1) (at 1 every direction is cut off), or None for n * machine epsilon; got {rcond!r}.")
    return rcond


def check_psd(name: str, ev, dtype) -> None:
    """ValueError when the smallest of the (concrete, ascending) eigenvalues ``ev`` of a kernel is
    below ``-tol * max |ev|`` (:func:`kernel_tol`): it is not positive semi-definite."""
    ev = np.asarray(ev)
    if ev.size:
        lo, top, tol = float(ev.min()), float(np.max(np.abs(ev))), kernel_tol(dtype, ev.size)
        if lo < -tol * top:
            raise ValueError(f"{name} is not positive semi-definite: its smallest eigenvalue {lo:.3g} is below "
                             f"-{tol:.3g} x its largest magnitude {top:.3g} (the tolerance for {jnp.dtype(dtype)}); "
                             "a kernel J J^T has no negative eigenvalues.")


def psd_eigh(kmat, rcond=None, *, check: str | None = None):
    """``(ev, vecs, cutoff)`` for a symmetric PSD matrix: ``eigh`` of its symmetric part,
    eigenvalues clipped at 0 (rounding can make tiny ones negative), and the absolute
    cut-off ``rcond * max(ev)`` below which an eigenvalue counts as zero
    (default ``rcond = n * machine epsilon``, as in ``numpy.linalg.pinv``-style rules).

    With ``check`` (the argument's name) a kernel the caller passed in is checked first
    (:func:`check_kernel`) and, when concrete, refused if its smallest eigenvalue is below
    ``-tol * max |eigenvalue|`` (:func:`kernel_tol`): it is not positive semi-definite."""
    check_rcond(rcond)
    if check:
        kmat = check_kernel(check, kmat)
    kmat = 0.5 * (kmat + kmat.T)
    ev, vecs = jnp.linalg.eigh(kmat)
    if check and not is_traced(ev):
        check_psd(check, ev, kmat.dtype)
    ev = jnp.clip(ev, 0.0, None)
    if rcond is None:
        rcond = kmat.shape[0] * jnp.finfo(kmat.dtype).eps
    return ev, vecs, rcond * jnp.max(ev)


def solve(kmat, rhs, damping=0.0, rcond=None, *, check: str | None = None):
    """:func:`kernel_solve` without the checks of the kernel (for kernels this package computes,
    ``J J^T``, PSD by construction) unless ``check`` names it; with ``check``, an all-zero kernel
    solved without damping is refused (every direction is null, the answer would be 0)."""
    damping = check_damping(damping)
    ev, vecs, cutoff = psd_eigh(kmat, rcond, check=check)
    if check and (jnp.ndim(rhs) < 1 or jnp.shape(rhs)[0] != ev.shape[0]):
        raise ValueError(f"rhs must have the kernel's n = {ev.shape[0]} rows on its leading axis, got shape "
                         f"{jnp.shape(rhs)}.")
    lam = damping(ev) if callable(damping) else damping
    if callable(damping):
        lam = jnp.asarray(lam)
        if not is_traced(lam) and not (lam.shape == () and bool(jnp.isfinite(lam)) and float(lam) >= 0):
            raise ValueError(f"damping: the callable must return one finite number >= 0 for the eigenvalues "
                             f"of the kernel, got {lam!r}.")
    if check and not is_traced(ev) and not is_traced(lam) and ev.size and float(ev[-1]) == 0 and float(lam) == 0:
        raise ValueError(f"{check} is all zeros: every direction is null, so the undamped solve has nothing to "
                         "invert (its pseudo-inverse would return 0); pass a nonzero kernel, or damping > 0.")
    denom = ev + lam
    keep = denom > cutoff
    inv = jnp.where(keep, 1.0 / jnp.where(keep, denom, 1.0), 0.0)
    if callable(damping):   # under jit: a negative or NaN lambda gives NaN, never a silent zero step
        inv = jnp.where(jnp.isfinite(lam) & (lam >= 0), inv, jnp.nan)
    coeff = vecs.T @ rhs
    return vecs @ (inv.reshape((-1,) + (1,) * (coeff.ndim - 1)) * coeff)


def kernel_solve(kmat, rhs, damping=0.0, *, rcond: float | None = None):
    r"""Solve ``(K + lambda I) a = rhs`` for a symmetric positive semi-definite ``K`` by ``eigh``.

    ``damping`` is a number ``lambda >= 0`` or a callable ``eigenvalues -> lambda`` (eigenvalues
    of ``K`` in ascending order, clipped at 0); e.g. Arbel et al.'s rule
    ``lambda ev: jnp.maximum(1e-7, ev[0])`` (alpha = 1 times the smallest eigenvalue, floored).
    Directions whose ``eigenvalue + lambda`` is below ``rcond * max eigenvalue`` (default
    ``rcond = n * machine epsilon``; else a number in [0, 1)) are dropped (pseudo-inverse), so an
    undamped, numerically singular ``K`` gives the minimum-norm solution instead of infinities.
    ``rhs`` may have extra trailing axes (several right-hand sides).

    ``K`` is checked, not repaired: it must be real, square and finite, symmetric and positive
    semi-definite within the relative tolerance ``tol = max(1e-5, n eps)`` for float32
    (``max(1e-10, n eps)`` for float64): ``max |K - K^T| <= tol max |K|`` and smallest
    eigenvalue ``>= -tol`` times the largest magnitude (within it, its symmetric part is used
    and eigenvalues are clipped at 0). An all-zero ``K`` needs ``damping > 0``. Under ``jit``
    only the dtype and shapes are checked.

    Raises:
      TypeError: a complex (or boolean) kernel.
      ValueError: a kernel that is not square, finite, symmetric or PSD, an all-zero kernel
        without damping, ``rhs`` without the kernel's ``n`` rows or (when concrete) with NaN or
        infinity, a bad ``damping`` or ``rcond``.

    Examples:
      With ``K = diag(2, 0)`` the undamped solve drops the null direction (the minimum-norm
      solution), and ``lambda = 2`` divides by ``(4, 2)``:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> K, rhs = jnp.diag(jnp.array([2.0, 0.0])), jnp.array([4.0, 1.0])
      >>> print(ic.kernel_solve(K, rhs).tolist(), ic.kernel_solve(K, rhs, damping=2.0).tolist())
      [2.0, 0.0] [1.0, 0.5]
    """
    return solve(kmat, check_finite("rhs", jnp.asarray(rhs)), damping, rcond, check="kmat")
