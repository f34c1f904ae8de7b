r"""The data pipeline of training: which examples each step sees, and how images are prepared.

Convention: a *batch source* maps the step index ``i`` (an int32, traced inside the compiled
training loop) to a batch ``(x_b, y_b)``, and depends on nothing else, so that step ``i`` sees
the same batch in an uninterrupted run and in one resumed from a checkpoint. The sources built
here are :class:`Batches`: a jittable function ``fn(data, i)`` together with its ``data``,
which :func:`itlin_core.train` passes to the compiled loop as an argument (not as a constant
baked into the program, which for a data set of images would make every compilation copy it).
Calling a :class:`Batches` with ``i`` gives the batch directly.

Images are NHWC (``(N, H, W, C)``); uint8 pixels are mapped to [0, 1] before normalisation.
The augmentation is the standard CIFAR10 one (random crops with zero padding, horizontal flips),
drawn per step from a key folded with the step index.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True, eq=False)
class Batches:
    """A batch source: ``fn(data, i) -> (x_b, y_b)`` (jittable, pure) and its ``data``.
    ``batches(i)`` returns batch ``i`` (and can be jitted like any function of ``i``)."""

    fn: Callable
    data: Any

    def __call__(self, i):
        return self.fn(self.data, i)


def _whole(data, i):
    return data


def full_batch(x, y) -> Batches:
    """The whole data set at every step (full-batch gradient descent)."""
    return Batches(_whole, (x, y))


def _check_pair(x, y):
    nx, ny = np.shape(x)[:1], np.shape(y)[:1]
    if nx != ny or not nx:
        raise ValueError(f"x and y must have the same number of examples (leading axis), got shapes "
                         f"{np.shape(x)} and {np.shape(y)}.")
    return nx[0]


@functools.lru_cache(maxsize=None)
def _minibatch_fn(batch_size: int) -> Callable:
    """The batch function of :func:`minibatches` for one batch size (one function object per
    size, so the compiled training loop is reused)."""

    def fn(data, i):
        key, x, y = data
        n = x.shape[0]
        per_epoch = n // batch_size
        epoch, j = i // per_epoch, i % per_epoch
        perm = jax.random.permutation(jax.random.fold_in(key, epoch), n)
        idx = jax.lax.dynamic_slice_in_dim(perm, j * batch_size, batch_size)
        return x[idx], y[idx]

    return fn


def minibatches(key, x, y, batch_size: int) -> Batches:
    """Minibatches ``i -> (x_b, y_b)``: each epoch is a fresh random permutation (derived from
    ``key`` and the epoch number); a last incomplete batch of an epoch is dropped so every batch
    has ``batch_size`` examples.

    Raises:
      ValueError: ``x`` and ``y`` hold different numbers of examples, or ``batch_size`` is not
        between 1 and that number.
    """
    n = _check_pair(x, y)
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must be an integer between 1 and the number of examples ({n}), "
                         f"got {batch_size!r}.")
    return Batches(_minibatch_fn(int(batch_size)), (key, x, y))


@functools.lru_cache(maxsize=None)
def _augmented_fn(batch_size: int, padding: int, flip: bool, scale: bool) -> Callable:
    base = _minibatch_fn(batch_size)

    def fn(data, i):
        k_perm, k_aug, x, y, mean, std = data
        xb, yb = base((k_perm, x, y), i)
        xb = augment(jax.random.fold_in(k_aug, i), xb, padding, flip)
        return (normalise(xb, mean, std) if scale else xb), yb

    return fn


def augmented_minibatches(key, x, y, batch_size: int, *, padding: int = 4, flip: bool = True,
                          mean=None, std=None) -> Batches:
    """Like :func:`minibatches`, with :func:`augment` applied to each batch using the key
    ``fold_in(key, i)`` and then, if ``mean``/``std`` are given, :func:`normalise`. Batch ``i``
    depends only on ``key`` and ``i``, so a run resumed from step ``i`` sees exactly the batches
    of an uninterrupted one. Keep ``x`` as uint8 (4x less memory) and pass the statistics."""
    if (mean is None) != (std is None):
        raise ValueError("give both mean and std (to normalise) or neither.")
    _check_images(x, "x")
    k_perm, k_aug = jax.random.split(key)
    minibatches(k_perm, x, y, batch_size)    # checks x, y and batch_size now, not at the first step
    scale = mean is not None
    data = (k_perm, k_aug, x, y, jnp.asarray(mean if scale else 0.0, jnp.float32),
            jnp.asarray(std if scale else 1.0, jnp.float32))
    return Batches(_augmented_fn(int(batch_size), int(padding), bool(flip), scale), data)


def split_microbatches(batch, size: int):
    """Reshape every array of ``batch`` (a pytree with a common leading axis of ``n`` examples)
    to ``(n // size, size, ...)``: chunks for gradient accumulation (``microbatch`` in
    :func:`itlin_core.linearised_value_and_grad`).

    Raises:
      ValueError: ``n`` is not a multiple of ``size``.
    """
    n = jax.tree.leaves(batch)[0].shape[0]
    if n % size:
        raise ValueError(f"the batch of {n} examples is not a multiple of microbatch={size}; "
                         "choose a microbatch that divides the batch size.")
    return jax.tree.map(lambda a: a.reshape((n // size, size) + a.shape[1:]), batch)


# --------------------------------------------------------------------------- images

def _check_images(images, name="images"):
    """A batch of NHWC images; a batch that looks channels-first (1 or 3 channels on axis 1, a
    wider last axis) is refused, since every augmentation would act on the wrong axes."""
    shape = jnp.shape(images)
    if len(shape) != 4:
        raise ValueError(f"{name} must be a batch of images (N, H, W, C), got shape {shape}.")
    if shape[1] in (1, 3) and shape[3] > 4:
        raise ValueError(f"{name} looks channels-first (NCHW), shape {shape}; images here are (N, H, W, C): "
                         "pass images.transpose(0, 2, 3, 1).")


def random_crop(key, images, padding: int = 4):
    """Random translation: pad each image with ``padding`` zeros on every side and take a
    window of the original size at an offset drawn uniformly from ``{0, ..., 2 padding}^2``,
    independently per image (``vmap``). ``images``: (N, H, W, C). Jittable; pure in ``key``.

    Zero is black for raw pixels, as in the usual CIFAR10 pipeline (pad, then normalise);
    applied after :func:`normalise` the padding is the mean colour instead.
    """
    _check_images(images)
    if padding < 0:
        raise ValueError(f"padding must be >= 0, got {padding}.")
    h, w, c = images.shape[1:]

    def one(k, img):
        padded = jnp.pad(img, ((padding, padding), (padding, padding), (0, 0)))
        dy, dx = jax.random.randint(k, (2,), 0, 2 * padding + 1)
        return jax.lax.dynamic_slice(padded, (dy, dx, 0), (h, w, c))

    return jax.vmap(one)(jax.random.split(key, images.shape[0]), images)


def random_flip(key, images):
    """Mirror each image left-right (the width axis of NHWC) with probability 1/2,
    independently per image. Jittable; pure in ``key``."""
    _check_images(images)
    flip = jax.random.bernoulli(key, 0.5, (images.shape[0],))
    return jnp.where(flip[:, None, None, None], images[:, :, ::-1, :], images)


def augment(key, images, padding: int = 4, flip: bool = True):
    """The standard CIFAR10 augmentation (used by Goldwaser and Ge, Figs. 3 and 10):
    :func:`random_crop` with ``padding`` then, if ``flip``, :func:`random_flip`; the two draws
    use independent halves of ``key``. The same key gives the same images."""
    k_crop, k_flip = jax.random.split(key)
    out = random_crop(k_crop, images, padding) if padding else images
    return random_flip(k_flip, out) if flip else out


def channel_stats(images):
    """Per-channel mean and standard deviation of ``images`` (N, H, W, C) on the [0, 1] scale
    (uint8 pixels are divided by 255): ``(mean (C,), std (C,))``, the population standard
    deviation. Accumulated in float64 over chunks of images, so CIFAR10's 50000 images never
    exist as one float64 copy (1.2 GB)."""
    images = np.asarray(images)
    _check_images(images)
    if images.size == 0:
        raise ValueError(f"images must be a non-empty batch (N, H, W, C), got shape {images.shape}.")
    scale = 255.0 if images.dtype == np.uint8 else 1.0
    total = np.zeros(images.shape[-1])
    for start in range(0, images.shape[0], 1000):
        total += images[start:start + 1000].sum(axis=(0, 1, 2), dtype=np.float64)
    count = images.size // images.shape[-1]
    mean = total / count / scale
    sq = np.zeros(images.shape[-1])
    for start in range(0, images.shape[0], 1000):
        sq += ((images[start:start + 1000] / scale - mean) ** 2).sum(axis=(0, 1, 2))
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(sq))):
        raise ValueError(f"images must hold finite pixel values whose squares fit in float64 (pixels on a 0-255 or "
                         f"0-1 scale), got a largest magnitude of {float(np.max(np.abs(images))):.3g}; "
                         "their channel statistics would not be finite.")
    return mean, np.sqrt(sq / count)


def normalise(images, mean, std, dtype=jnp.float32):
    """``(x - mean) / std`` per channel, with uint8 pixels first mapped to [0, 1]. Use the
    training set's :func:`channel_stats` for both training and test images."""
    x = jnp.asarray(images)
    scaled = x.astype(dtype) / 255.0 if x.dtype == jnp.uint8 else x.astype(dtype)
    return (scaled - jnp.asarray(mean, dtype)) / jnp.asarray(std, dtype)


__all__ = ["Batches", "full_batch", "minibatches", "augmented_minibatches", "split_microbatches",
           "random_crop", "random_flip", "augment", "channel_stats", "normalise"]
