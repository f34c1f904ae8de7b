"""Measures of how much the features (and the kernel they define) have changed."""

from __future__ import annotations

import jax.numpy as jnp


def kernel_distance(k1, k2):
    r"""Kernel distance of Fort et al. (2020): one minus the cosine similarity of two kernel
    matrices under the Frobenius inner product,

    .. math:: d(K_1, K_2) = 1 - \frac{\langle K_1, K_2\rangle_F}{\|K_1\|_F\,\|K_2\|_F} .

    It is 0 when one kernel is a positive multiple of the other (the features span the same
    geometry, only rescaled) and grows as the kernel changes shape; for PSD kernels it lies in
    [0, 1]. A fixed (lazy) kernel keeps it at 0 during training.
    """
    k1, k2 = jnp.asarray(k1), jnp.asarray(k2)
    if k1.shape != k2.shape:
        raise ValueError(f"kernels must have the same shape, got {k1.shape} and {k2.shape}.")
    num = jnp.vdot(k1, k2)
    return 1.0 - num / (jnp.linalg.norm(k1) * jnp.linalg.norm(k2))


def feature_alignment(w, centres):
    r"""Feature alignment of paper 000 eq. (11): for each feature (row of ``w``, shape
    ``(H, d)``), the largest cosine similarity with any of the cluster centres
    (rows of ``centres``, shape ``(C, d)``), ``a(w_i) = max_c <w_i, c> / (|w_i| |c|)``."""
    w, centres = jnp.asarray(w), jnp.asarray(centres)
    if w.ndim != 2 or centres.ndim != 2 or w.shape[1] != centres.shape[1]:
        raise ValueError(f"w must be (H, d) and centres (C, d) with the same d, got {w.shape} and {centres.shape}.")
    wn = w / jnp.linalg.norm(w, axis=1, keepdims=True)
    cn = centres / jnp.linalg.norm(centres, axis=1, keepdims=True)
    return jnp.max(wn @ cn.T, axis=1)


__all__ = ["kernel_distance", "feature_alignment"]
