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

from ._validate import check_key, check_finite, check_whole, is_traced


@dataclasses.dataclass(frozen=True, eq=False)
class Batches:
    """A batch source: ``fn(data, i) -> (x_b, y_b)`` (jittable, pure) and its ``data``.
    ``batches(i)`` returns batch ``i`` (and can be jitted like any function of ``i``).

    Examples:
      A source that cycles through three fixed batches of two: step ``i`` sees batch ``i % 3``,
      so steps 1 and 4 (the latter jitted) see the same examples:

      >>> import jax, jax.numpy as jnp
      >>> import itlin_core as ic
      >>> data = (jnp.arange(6).reshape(3, 2), jnp.arange(6).reshape(3, 2) % 2)
      >>> batches = ic.Batches(lambda d, i: (d[0][i % 3], d[1][i % 3]), data)
      >>> batches(1)[0].tolist(), jax.jit(batches)(4)[0].tolist()
      ([2, 3], [2, 3])
    """

    fn: Callable
    data: Any

    def __call__(self, i):
        return self.fn(self.data, i)


def _whole(data, i):
    return data


def full_batch(x, y) -> Batches:
    """The whole data set at every step (full-batch gradient descent). ``x`` and ``y`` must hold the
    same number of examples, at least one (ValueError).

    Examples:
      Steps 0 and 7 both see all three examples:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> batches = ic.full_batch(jnp.arange(3), jnp.arange(3) % 2)
      >>> batches(0)[0].tolist(), batches(7)[0].tolist()
      ([0, 1, 2], [0, 1, 2])
    """
    _check_pair(x, y)
    return Batches(_whole, (x, y))


def _check_pair(x, y):
    nx, ny = np.shape(x)[:1], np.shape(y)[:1]
    if nx != ny or not nx:
        raise ValueError(f"x and y must have the same number of examples (leading axis), got shapes "
                         f"{np.shape(x)} and {np.shape(y)}.")
    if nx[0] == 0:
        raise ValueError(f"x and y hold no examples (leading axis of length 0, shapes {np.shape(x)} and "
                         f"{np.shape(y)}); there is nothing to draw batches from.")
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

    Examples:
      Six examples in batches of two make epochs of three steps, and each epoch (steps 0-2,
      then 3-5, in a new order) covers every example once:

      >>> import jax, jax.numpy as jnp
      >>> import itlin_core as ic
      >>> x = jnp.arange(6)
      >>> batches = ic.minibatches(jax.random.key(0), x, x, batch_size=2)
      >>> epoch = lambda steps: sorted(jnp.concatenate([batches(i)[0] for i in steps]).tolist())
      >>> epoch(range(3)), epoch(range(3, 6))
      ([0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5])
    """
    check_key(key)
    n = _check_pair(x, y)
    batch_size = check_whole("batch_size", batch_size, 1, n, " (the number of examples)")
    return Batches(_minibatch_fn(batch_size), (key, x, y))


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
    of an uninterrupted one. Keep ``x`` as uint8 (4x less memory) and pass the statistics.

    Examples:
      Batches of two normalised float32 images of the original size; a source built again from
      the same key (as after a restart) gives the same batch ``i``:

      >>> import jax, jax.numpy as jnp
      >>> import numpy as np
      >>> import itlin_core as ic
      >>> x, y = np.arange(4 * 8 * 8 * 3, dtype=np.uint8).reshape(4, 8, 8, 3), np.arange(4)
      >>> mean, std = ic.channel_stats(x)
      >>> make = lambda: ic.augmented_minibatches(jax.random.key(0), x, y, 2, mean=mean, std=std)
      >>> xb, yb = make()(5)
      >>> xb.shape, xb.dtype, bool(jnp.array_equal(xb, make()(5)[0]))
      ((2, 8, 8, 3), dtype('float32'), True)
    """
    check_key(key)
    if (mean is None) != (std is None):
        raise ValueError("give both mean and std (to normalise) or neither.")
    _check_images(x, "x")
    padding = check_whole("padding", padding, 0)
    if mean is not None:
        _check_stats(np.shape(x)[-1], mean, std)
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

    Examples:
      A batch of six examples in microbatches of two: ``(6, ...)`` becomes ``(3, 2, ...)``:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> xm, ym = ic.split_microbatches((jnp.zeros((6, 5)), jnp.arange(6)), 2)
      >>> xm.shape, ym.tolist()
      ((3, 2, 5), [[0, 1], [2, 3], [4, 5]])
    """
    size = check_whole("size (examples per microbatch)", size, 1)
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

    Examples:
      A crop of a 4x4 image of ones with ``padding=1`` keeps its size and shifts in at most one
      row and one column of zeros, so it keeps between 3 x 3 = 9 and 16 ones:

      >>> import jax, jax.numpy as jnp
      >>> import itlin_core as ic
      >>> out = ic.random_crop(jax.random.key(0), jnp.ones((5, 4, 4, 1)), padding=1)
      >>> ones = out.sum(axis=(1, 2, 3))
      >>> out.shape, bool(((ones >= 9) & (ones <= 16)).all())
      ((5, 4, 4, 1), True)
    """
    check_key(key)
    _check_images(images)
    padding = check_whole("padding", padding, 0)
    h, w, c = images.shape[1:]

    def one(k, img):
        padded = jnp.pad(img, ((padding, padding), (padding, padding), (0, 0)))
        dy, dx = jax.random.randint(k, (2,), 0, 2 * padding + 1)
        return jax.lax.dynamic_slice(padded, (dy, dx, 0), (h, w, c))

    return jax.vmap(one)(jax.random.split(key, images.shape[0]), images)


def random_flip(key, images):
    """Mirror each image left-right (the width axis of NHWC) with probability 1/2,
    independently per image. Jittable; pure in ``key``.

    Examples:
      Each image comes back as itself or its mirror, and a flip applied twice with the same key
      is the identity:

      >>> import jax, jax.numpy as jnp
      >>> import itlin_core as ic
      >>> key, images = jax.random.key(0), jnp.arange(2 * 3 * 3).reshape(2, 3, 3, 1)
      >>> once = ic.random_flip(key, images)
      >>> bool(jnp.all((once == images) | (once == images[:, :, ::-1])))
      True
      >>> bool(jnp.array_equal(ic.random_flip(key, once), images))
      True
    """
    check_key(key)
    _check_images(images)
    flip = jax.random.bernoulli(key, 0.5, (images.shape[0],))
    return jnp.where(flip[:, None, None, None], images[:, :, ::-1, :], images)


def augment(key, images, padding: int = 4, flip: bool = True):
    """The standard CIFAR10 augmentation (used by Goldwaser and Ge, Figs. 3 and 10):
    :func:`random_crop` with ``padding`` then, if ``flip``, :func:`random_flip`; the two draws
    use independent halves of ``key``. The same key gives the same images.

    Examples:
      The same key gives the same images, and with ``padding=0`` and ``flip=False`` nothing
      changes:

      >>> import jax, jax.numpy as jnp
      >>> import itlin_core as ic
      >>> key, images = jax.random.key(0), jnp.arange(2 * 8 * 8 * 3).reshape(2, 8, 8, 3)
      >>> bool(jnp.array_equal(ic.augment(key, images), ic.augment(key, images)))
      True
      >>> bool(jnp.array_equal(ic.augment(key, images, padding=0, flip=False), images))
      True
    """
    k_crop, k_flip = jax.random.split(check_key(key))
    out = random_crop(k_crop, images, padding) if padding else images
    return random_flip(k_flip, out) if flip else out


def channel_stats(images):
    """Per-channel mean and standard deviation of ``images`` (N, H, W, C) on the [0, 1] scale
    (uint8 pixels are divided by 255): ``(mean (C,), std (C,))``, the population standard
    deviation. Accumulated in float64 over chunks of images, so CIFAR10's 50000 images never
    exist as one float64 copy (1.2 GB).

    Examples:
      Channel 0 holds pixels 0 and 255 (0 and 1 on the [0, 1] scale: mean 0.5, std 0.5), and
      channel 1 is the constant 51 (0.2, std 0):

      >>> import numpy as np
      >>> import itlin_core as ic
      >>> images = np.zeros((2, 1, 1, 2), np.uint8)
      >>> images[1, ..., 0], images[..., 1] = 255, 51
      >>> mean, std = ic.channel_stats(images)
      >>> np.round(mean, 6).tolist(), np.round(std, 6).tolist()
      ([0.5, 0.2], [0.5, 0.0])
    """
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


def _check_stats(channels: int, mean, std, dtype=jnp.float32) -> None:
    """``mean`` and ``std`` of images with ``channels`` channels: each one number or one per
    channel; when concrete, ``mean`` finite and ``std`` finite and > 0 in ``dtype`` (else ValueError)."""
    for name, v in (("mean", mean), ("std", std)):
        a = v if is_traced(v) else np.asarray(v)
        if a.dtype.kind not in "iuf" or a.ndim > 1 or (a.ndim == 1 and a.shape[0] not in (1, channels)):
            raise ValueError(f"{name} must be one number or one per channel, shape ({channels},), for images with "
                             f"{channels} channels (the last axis), got {v!r}.")
        if not is_traced(v):   # finite in dtype, and a std that is a normal (not subnormal or 0) number there
            a, info = a.astype(np.float64), jnp.finfo(dtype)
            if not np.all(np.abs(a) <= float(info.max)) or (name == "std" and not np.all(a >= float(info.tiny))):
                raise ValueError(f"{name} must be {'finite' if name == 'mean' else 'finite and > 0 (it divides)'} "
                                 f"in every channel, got {a.tolist()}.")


def normalise(images, mean, std, dtype=jnp.float32):
    """``(x - mean) / std`` per channel, with uint8 pixels first mapped to [0, 1]. Use the
    training set's :func:`channel_stats` for both training and test images.

    Examples:
      Normalised with their own :func:`channel_stats`, images have mean 0 and std 1 in every
      channel; the uint8 pixel 255 is 1 before scaling, so with mean and std 0.5 it becomes 1:

      >>> import numpy as np
      >>> import itlin_core as ic
      >>> images = np.arange(4 * 2 * 2 * 3, dtype=np.uint8).reshape(4, 2, 2, 3)
      >>> z = np.asarray(ic.normalise(images, *ic.channel_stats(images)))
      >>> np.allclose(z.mean(axis=(0, 1, 2)), 0, atol=1e-5), np.allclose(z.std(axis=(0, 1, 2)), 1, atol=1e-5)
      (True, True)
      >>> ic.normalise(np.full((1, 1, 1, 1), 255, np.uint8), 0.5, 0.5).tolist()
      [[[[1.0]]]]

    Raises:
      ValueError: ``mean`` or ``std`` neither one number nor one per channel, a non-finite
        ``mean``, a ``std`` that is not finite and positive, or images with NaN or infinity
        (checked when they are concrete).
    """
    x = check_finite("images", jnp.asarray(images))
    _check_stats(x.shape[-1] if x.ndim else 1, mean, std, dtype)
    scaled = x.astype(dtype) / 255.0 if x.dtype == jnp.uint8 else x.astype(dtype)
    return (scaled - jnp.asarray(mean, dtype)) / jnp.asarray(std, dtype)


__all__ = ["Batches", "full_batch", "minibatches", "augmented_minibatches", "split_microbatches",
           "random_crop", "random_flip", "augment", "channel_stats", "normalise"]
