"""Convolutions as matrix products ("im2col"), for the CNNs of :mod:`itlin_core.models`.

Conventions: NHWC images, HWIO kernels. Each function forms the ``kh * kw`` shifted copies of
its input and contracts them with the kernel in one matrix product. The sums are those of
``lax.conv_general_dilated`` (the ``*_lax`` references below; tests/test_models_cnn.py compares
values and gradients), but inside ``lax.scan`` on XLA:CPU, where the training loops run,
``lax.conv`` takes a slow path and these forms are several times faster (``python -m
itlin_core.tools.bench --conv`` measures both); on a GPU the two cost about the same.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _conv(x, w, b):
    """A stride-1 VALID convolution plus bias ``b`` (LeNet-50's), as one matrix product over the
    ``kh * kw`` shifted copies of the input."""
    kh, kw = w.shape[:2]
    ho, wo = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    patches = jnp.concatenate([x[:, i:i + ho, j:j + wo, :] for i in range(kh) for j in range(kw)], axis=-1)
    return patches @ w.reshape(-1, w.shape[-1]) + b


def _conv_lax(x, w, b):  # the reference _conv is tested against
    return jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")) + b


def _conv_padded(x, w, stride):
    """Convolution with ``k // 2`` zeros on every side (PyTorch's ``padding=k//2``; JAX's
    "SAME" pads asymmetrically when the stride is 2) and stride 1 or 2, without bias
    (ResNet-18's), as one matrix product over the ``k * k`` shifted and strided copies of the
    padded input."""
    kh, kw = w.shape[:2]
    ph, pw = kh // 2, kw // 2
    ho = (x.shape[1] + 2 * ph - kh) // stride + 1
    wo = (x.shape[2] + 2 * pw - kw) // stride + 1
    xp = jnp.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0))) if ph or pw else x
    patches = jnp.concatenate([xp[:, i:i + stride * (ho - 1) + 1:stride, j:j + stride * (wo - 1) + 1:stride, :]
                               for i in range(kh) for j in range(kw)], axis=-1)
    return patches @ w.reshape(-1, w.shape[-1])


def _conv_padded_lax(x, w, stride):  # the reference _conv_padded is tested against
    p = w.shape[0] // 2
    return jax.lax.conv_general_dilated(x, w, window_strides=(stride, stride), padding=((p, p), (p, p)),
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))
