"""Symmetric eigendecomposition of a kernel matrix, shared by the GN solve and the flow."""

from __future__ import annotations

import jax.numpy as jnp


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
