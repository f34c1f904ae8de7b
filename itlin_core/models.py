"""Models as pure ``(init, apply)`` pairs over pytrees of arrays, in plain JAX.

Conventions: ``params = model.init(key)``; ``outputs = model.apply(params, x)`` with a leading batch axis; images are
NHWC; sizes are positive integers. Plain functions (no framework) keep the linearisation transparent: ``linearise`` and
``empirical_ntk`` see exactly the parameters a reader sees, which ``apply`` checks against the shapes ``init`` builds (a
ValueError names a leaf that differs, also under ``jit``). Models whose hidden representations are probed also have
``features(params, x, layer) -> (N, D)`` (:class:`FeatureModel`). Activations: :mod:`itlin_core.activations`.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ._conv import _conv, _conv_lax, _conv_padded, _conv_padded_lax  # noqa: F401 (the references, for tests)
from ._validate import check_number, check_sizes, checked_model, numeric_leaves, positive_ints
from .activations import activation as _activation


class Model(NamedTuple):
    """A pure model: ``init(key) -> params`` and ``apply(params, x) -> outputs``.

    Examples:
      >>> import itlin_core as ic; isinstance(ic.mlp([3, 2]), ic.Model), ic.Model._fields  # a named pair
      (True, ('init', 'apply'))
    """

    init: Callable
    apply: Callable


def mlp(layer_sizes: Sequence[int], activation="relu", *, parameterisation: str = "standard",
        w_std: float = math.sqrt(2.0), b_std: float = 0.0, out_scale: float = 1.0) -> Model:
    r"""Fully connected network ``layer_sizes = [d_in, h_1, ..., d_out]``.

    Pre-activations are ``z = W h + b`` with ``W_ij ~ N(0, w_std^2 / fan_in)`` (``"standard"``)
    or ``z = (w_std / sqrt(fan_in)) W h + b_std b`` with ``W_ij, b_i ~ N(0, 1)`` (``"ntk"``, the
    parameterisation of Jacot et al. and Lee et al., under which the NTK has a
    width-independent limit and wide networks train lazily). The output is multiplied by
    ``out_scale``. ``apply`` maps ``(N, d_in) -> (N, d_out)``. The last layer is linear.

    Examples:
      >>> import jax, jax.numpy as jnp, itlin_core as ic; net = ic.mlp([3, 5, 2]); p = net.init(jax.random.key(0))
      >>> ic.count_params(p), net.apply(p, jnp.ones((4, 3))).shape  # (3 + 1) * 5 + (5 + 1) * 2 = 32
      (32, (4, 2))
    """
    sizes = check_sizes("layer_sizes", layer_sizes)
    if len(sizes) < 2:
        raise ValueError(f"layer_sizes needs at least an input and an output size, all >= 1; got {layer_sizes!r}.")
    w_std, b_std, out_scale = (check_number(name, v) for name, v in
                               (("w_std", w_std), ("b_std", b_std), ("out_scale", out_scale)))
    if parameterisation not in ("standard", "ntk"):
        raise ValueError(f"parameterisation must be 'standard' or 'ntk', got {parameterisation!r}.")
    act = _activation(activation)
    ntk = parameterisation == "ntk"

    def init(key):
        params = []
        for k, (fan_in, fan_out) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes[:-1], sizes[1:])):
            kw, kb = jax.random.split(k)
            w = jax.random.normal(kw, (fan_in, fan_out))
            b = jax.random.normal(kb, (fan_out,))
            if not ntk:
                w, b = w * (w_std / math.sqrt(fan_in)), b * b_std
            params.append({"w": w, "b": b})
        return params

    def apply(params, x):
        if jnp.ndim(x) < 1 or jnp.shape(x)[-1] != sizes[0]:
            raise ValueError(f"mlp: x must hold examples of {sizes[0]} features (shape (N, {sizes[0]})), "
                             f"got shape {jnp.shape(x)}.")
        h = x
        for i, layer in enumerate(params):
            if ntk:
                h = h @ layer["w"] * (w_std / math.sqrt(layer["w"].shape[0])) + b_std * layer["b"]
            else:
                h = h @ layer["w"] + layer["b"]
            if i < len(params) - 1:
                h = act(h)
        return out_scale * h

    return Model(*checked_model("mlp", init, apply))


def _check_images(model: str, x, channels: int, hw=None) -> None:
    """Images for a CNN: floating point NHWC with ``channels`` channels (and height and width
    ``hw`` when the model fixes them); a NCHW batch or uint8 pixels get a sentence saying how to
    convert, not an error from inside the convolution."""
    shape = jnp.shape(x)
    want = f"(N, {hw[0]}, {hw[1]}, {channels})" if hw else f"(N, H, W, {channels})"
    if len(shape) != 4 or shape[-1] != channels or (hw and tuple(shape[1:3]) != tuple(hw)):
        hint = ""
        if len(shape) == 4 and shape[1] == channels and (not hw or tuple(shape[2:]) == tuple(hw)):
            hint = " It looks channels-first (NCHW): pass x.transpose(0, 2, 3, 1)."
        raise ValueError(f"{model}: x must be a batch of images {want} (NHWC), got shape {tuple(shape)}.{hint}")
    if not jnp.issubdtype(jnp.result_type(x), jnp.floating):
        raise TypeError(f"{model}: x must hold floating-point pixels, got dtype {jnp.result_type(x)}; scale "
                        "uint8 images first, e.g. ic.normalise(x, *ic.channel_stats(x_train)).")


def _max_pool(x, size=2):
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, size, size, 1), (1, size, size, 1), "VALID")


def lenet50(num_classes: int = 10, input_shape=(32, 32, 3), channels: int = 50, dense=(120, 84)) -> Model:
    """The CNN of Goldwaser and Ge 2024 (App. C.2.1; Goldwaser and Ge 2022, §4; "LeNet-50"): two 5x5
    convolutions with 50 channels, each followed by ReLU and 2x2 max-pooling, then dense layers 120 and 84 with
    ReLU and a linear output of ``num_classes`` logits (the softmax lives in the loss, outside the
    linearisation, Goldwaser and Ge 2024, §3). Inputs NHWC, ``(N, 32, 32, 3)`` for CIFAR10,
    ``input_shape=(28, 28, 1)`` for MNIST.

    The paper fixes kernel size, channels, pooling after each convolution, dense sizes and activations. It
    leaves open what LeNet itself fixes, and we follow LeNet: VALID (unpadded) convolutions with stride 1 and
    biases, 2x2 max-pooling with stride 2 (ReLU and max-pooling commute, so their order does not matter). On
    32x32x3 inputs the feature maps are 28 -> 14 -> 10 -> 5, so 5*5*50 = 1250 features enter the dense layers
    and the network has 227,484 parameters. Initialisation (not given in the paper): He-normal weights
    ``N(0, 2 / fan_in)``, zero biases.

    Examples:
      >>> import jax, jax.numpy as jnp, itlin_core as ic; net = ic.lenet50(3, (16, 16, 1), channels=2, dense=(4,))
      >>> p = net.init(jax.random.key(0)); net.apply(p, jnp.ones((2, 16, 16, 1))).shape, ic.count_params(p)
      ((2, 3), 181)
    """
    h, w, c = check_sizes("input_shape", input_shape, 3)
    num_classes, channels, dense = *positive_ints(num_classes=num_classes, channels=channels), check_sizes("dense", dense)
    s1 = ((h - 4) // 2, (w - 4) // 2)
    s2 = ((s1[0] - 4) // 2, (s1[1] - 4) // 2)
    if min(s2) < 1:
        raise ValueError(f"input_shape {input_shape} is too small for two 5x5 convolutions with pooling.")
    flat = s2[0] * s2[1] * channels
    dense_sizes = [flat, *dense, num_classes]

    def init(key):
        k1, k2, *kd = jax.random.split(key, 2 + len(dense_sizes) - 1)
        he = lambda k, shape, fan_in: jax.random.normal(k, shape) * math.sqrt(2.0 / fan_in)
        params = {"conv1": {"w": he(k1, (5, 5, c, channels), 25 * c), "b": jnp.zeros(channels)},
                  "conv2": {"w": he(k2, (5, 5, channels, channels), 25 * channels), "b": jnp.zeros(channels)}}
        params["dense"] = [{"w": he(k, (a, b), a), "b": jnp.zeros(b)}
                           for k, a, b in zip(kd, dense_sizes[:-1], dense_sizes[1:])]
        return params

    def apply(params, x):
        _check_images("lenet50", x, c, (h, w))
        y = lenet50_features(params, x, 2)
        for i, layer in enumerate(params["dense"]):
            y = y @ layer["w"] + layer["b"]
            if i < len(params["dense"]) - 1:
                y = jax.nn.relu(y)
        return y

    return Model(*checked_model("lenet50", init, apply))


def lenet50_features(params, x, layer: int):
    """The hidden representation of a :func:`lenet50` network that a linear probe reads (Goldwaser and Ge 2024,
    Fig. 5): block ``layer`` (1: first convolution, ReLU and pooling, 14x14x50 on CIFAR10; 2: the second,
    5x5x50), flattened to ``(N, D)``; ``apply`` continues from block 2.

    Examples:
      >>> import jax, itlin_core as ic; p = ic.lenet50(input_shape=(16, 16, 1), channels=2).init(jax.random.key(0))
      >>> [ic.lenet50_features(p, jax.numpy.ones((1, 16, 16, 1)), k).shape for k in (1, 2)]  # 6*6*2, 1*1*2
      [(1, 72), (1, 2)]
    """
    if layer not in (1, 2):
        raise ValueError(f"layer must be 1 or 2 (LeNet-50's two convolutional blocks), got {layer!r}.")
    _check_images("lenet50_features", x, params["conv1"]["w"].shape[2])
    y = x
    for name in ("conv1", "conv2")[:layer]:
        y = _max_pool(jax.nn.relu(_conv(y, params[name]["w"], params[name]["b"])))
    return y.reshape(y.shape[0], -1)


def resnet18(num_classes: int = 10, batch_norm: bool = False, *, in_channels: int = 3, width: int = 64,
             residual_init_scale: float = 1.0, bn_eps: float = 1e-5) -> Model:
    r"""ResNet-18 (He et al. 2016) in its CIFAR form, as used by Goldwaser and Ge 2024 (Fig. 10, App. C.2.2).

    A 3x3 convolution with ``width`` channels (stride 1, no max-pooling: the CIFAR stem, which keeps 32x32
    maps), then four stages of two basic blocks with ``width * (1, 2, 4, 8)`` channels, the first block of
    stages 2-4 having stride 2. A basic block is ``relu(u(x) + s(x))`` with ``u = conv3x3 . relu . conv3x3``
    (each conv followed by BatchNorm when ``batch_norm``) and ``s`` the identity or, where the shape changes, a
    1x1 convolution with the block's stride (plus BatchNorm). Global average pooling and a dense layer give
    ``num_classes`` logits. Any image size works (8x8 or 16x16 for fast tests). With ``width=64`` and 10
    classes: 11,173,962 parameters with BatchNorm, 11,169,162 without.

    Numerical choices (the paper names only "ResNet-18"): padding ``k // 2`` on each side as in PyTorch;
    He-normal conv weights ``N(0, 2 / fan_in)``, output layer ``N(0, 1 / fan_in)``, zero biases; convolutions
    carry a bias only without BatchNorm (with it, BatchNorm's shift plays that role); BatchNorm scale 1, shift
    0, ``eps = bn_eps``, biased batch variance. ``residual_init_scale`` multiplies the initial value of the last
    layer of every residual branch (its conv weights without BatchNorm, its BatchNorm scale with it): 0 starts
    every branch at zero (Goyal et al. 2017), ``8 ** -0.5`` is Fixup's scale for 8 branches (Zhang et al. 2019).
    Without BatchNorm and at 1.0, each block roughly doubles the activations' variance, so the logits at
    initialisation are of order 10 for unit-variance inputs; the paper trains this network with a learning rate
    of 7e-7.

    **BatchNorm under linearisation.** ``apply`` normalises with the mean and variance of the batch it is given
    (training mode), always, so it is a pure function of ``(params, x)`` and :func:`itlin_core.linearise`,
    :func:`itlin_core.empirical_ntk` and :func:`itlin_core.make_il_step` need no special case: the tangent model
    differentiates through the batch statistics. The price is that a batch is one input: an example's output and
    Jacobian depend on the other examples in its batch, and the NTK couples examples through the statistics.
    There are no running averages, because they would be state updated outside the gradient, which the
    linearised proxy has no way to follow.

    Evaluation: by default also in batch mode, on large batches (the function that is trained, for the network
    and its proxy alike). Or freeze statistics recomputed at the current parameters on a large training batch,
    ``_, stats = apply(params, x_big, return_stats=True)``, then ``apply(params, x_test, stats=stats)``: the
    network's predictions then no longer depend on which examples share a batch.

    Returns:
      :class:`Model` whose ``apply(params, x, *, stats=None, return_stats=False)`` maps NHWC
      images ``(N, H, W, in_channels)`` to logits ``(N, num_classes)`` (and the list of
      per-layer ``{"mean", "var"}`` it used when ``return_stats``; empty without BatchNorm).
      With BatchNorm, ``apply.couples_examples`` is ``True``, so that
      :func:`itlin_core.empirical_ntk` never computes its kernel one example at a time.

    Examples:
      >>> import jax, jax.numpy as jnp, itlin_core as ic; net = ic.resnet18(width=2)  # 8x8 images for speed
      >>> p = net.init(jax.random.key(0)); net.apply(p, jnp.ones((2, 8, 8, 3))).shape, ic.count_params(p)
      ((2, 10), 11270)
    """
    num_classes, in_channels, width = positive_ints(num_classes=num_classes, in_channels=in_channels, width=width)
    check_number("residual_init_scale", residual_init_scale, minimum=0.0)
    check_number("bn_eps", bn_eps, minimum=0.0, strict=True)
    # (in_channels, out_channels, stride) of the 8 basic blocks
    widths = [width * m for m in (1, 2, 4, 8)]
    blocks = []
    c_in = width
    for stage, c_out in enumerate(widths):
        for b in range(2):
            blocks.append((c_in, c_out, 2 if (stage > 0 and b == 0) else 1))
            c_in = c_out

    # Weight shapes in a fixed order: stem, then per block conv1, conv2 (and shortcut), head.
    shapes = [(3, 3, in_channels, width)]
    for c_in, c_out, stride in blocks:
        shapes += [(3, 3, c_in, c_out), (3, 3, c_out, c_out)]
        if stride != 1 or c_in != c_out:
            shapes.append((1, 1, c_in, c_out))
    shapes.append((widths[-1], num_classes))

    def conv_params(w, scale=1.0):
        w = w * math.sqrt(2.0 / math.prod(w.shape[:3]))  # He-normal, fan_in = k * k * c_in
        c_out = w.shape[-1]
        if batch_norm:
            return {"w": w, "scale": jnp.full((c_out,), scale, w.dtype), "shift": jnp.zeros(c_out, w.dtype)}
        return {"w": w * scale, "b": jnp.zeros(c_out, w.dtype)}

    def init(key):
        # One draw for all weights, cut into layers: a single compiled sampler (one per shape
        # costs about a second each on CPU).
        flat = jax.random.normal(key, (sum(math.prod(sh) for sh in shapes),))
        offsets = np.cumsum([0] + [math.prod(sh) for sh in shapes])
        ws = iter(flat[a:b].reshape(sh) for a, b, sh in zip(offsets[:-1], offsets[1:], shapes))
        params = {"stem": conv_params(next(ws)), "blocks": []}
        for c_in, c_out, stride in blocks:
            block = {"conv1": conv_params(next(ws)), "conv2": conv_params(next(ws), residual_init_scale)}
            if stride != 1 or c_in != c_out:
                block["shortcut"] = conv_params(next(ws))
            params["blocks"].append(block)
        w = next(ws)
        params["head"] = {"w": w / math.sqrt(widths[-1]), "b": jnp.zeros(num_classes, w.dtype)}
        return params

    def apply(params, x, *, stats=None, return_stats=False):
        if stats is not None and not batch_norm:
            raise ValueError("stats= is only meaningful for resnet18(batch_norm=True).")
        if stats is not None and len(stats) != len(shapes) - 1:
            raise ValueError(f"stats must hold one {{'mean', 'var'}} per BatchNorm layer ({len(shapes) - 1}), "
                             f"as returned by apply(..., return_stats=True); got {len(stats)}.")
        _check_images("resnet18", x, in_channels)
        given = iter(stats) if stats is not None else None
        used = []

        def unit(p, h, stride):  # conv, then bias or BatchNorm
            z = _conv_padded(h, p["w"], stride)
            if not batch_norm:
                return z + p["b"]
            if given is None:
                mean, var = jnp.mean(z, axis=(0, 1, 2)), jnp.var(z, axis=(0, 1, 2))
            else:
                s = next(given)
                mean, var = s["mean"], s["var"]
            used.append({"mean": mean, "var": var})
            return (z - mean) * jax.lax.rsqrt(var + bn_eps) * p["scale"] + p["shift"]

        h = jax.nn.relu(unit(params["stem"], x, 1))
        for p, (_, _, stride) in zip(params["blocks"], blocks):
            u = jax.nn.relu(unit(p["conv1"], h, stride))
            u = unit(p["conv2"], u, 1)
            s = unit(p["shortcut"], h, stride) if "shortcut" in p else h
            h = jax.nn.relu(u + s)
        logits = jnp.mean(h, axis=(1, 2)) @ params["head"]["w"] + params["head"]["b"]
        return (logits, used) if return_stats else logits

    # in batch mode an example's logits depend on its batch: no per-example kernels or gradients
    apply.couples_examples = batch_norm
    return Model(*checked_model("resnet18", init, apply))


def count_params(params) -> int:
    """Number of scalar parameters in a pytree (TypeError naming a leaf that is not numeric).

    Examples:
      >>> import jax.numpy as jnp, itlin_core as ic; ic.count_params({"w": jnp.ones((3, 2)), "b": jnp.ones(2)})
      8
    """
    return sum(int(np.size(a)) for a in numeric_leaves("params", params))


def centred(apply_fn: Callable, params0, scale: float = 1.0) -> Callable:
    r"""The scaled, centred model of Chizat, Oyallon & Bach (2019),
    ``f_alpha(theta, x) = alpha * (f(theta, x) - f(theta_0, x))``.

    It outputs 0 at initialisation whatever ``alpha``; its NTK is ``alpha^2`` times the NTK of ``f``. Trained
    with a learning rate scaled by ``1 / alpha^2`` (same function-space speed), a large ``alpha`` needs only
    tiny parameter changes to fit the data, so the features barely move (the *lazy* regime); a small ``alpha``
    forces large relative changes (the *rich* regime)."""

    def apply(params, x):
        return scale * (apply_fn(params, x) - apply_fn(params0, x))

    apply.couples_examples = getattr(apply_fn, "couples_examples", False)
    return apply


# A small CNN for 8x8 images (the CPU digits chapter), with its hidden features exposed


class FeatureModel(NamedTuple):
    """A pure model that also exposes hidden representations: ``init(key)``,
    ``apply(params, x)`` and ``features(params, x, layer) -> (N, D)`` (flattened).

    Examples:
      >>> import itlin_core as ic; isinstance(ic.small_cnn(), ic.FeatureModel), ic.FeatureModel._fields
      (True, ('init', 'apply', 'features'))
    """

    init: Callable
    apply: Callable
    features: Callable


def small_cnn(num_classes: int = 10, input_shape=(8, 8, 1), channels=(16, 32), dense: int = 64) -> FeatureModel:
    """A two-block CNN for small images (e.g. scikit-learn's 8x8 digits): two 3x3 SAME convolutions with
    ``channels`` output channels, each followed by ReLU and 2x2 max-pooling (8x8 -> 4x4 -> 2x2), then a dense
    ReLU layer of ``dense`` units and a linear output of ``num_classes`` logits (softmax in the loss).
    LeNet-50's layout (Goldwaser and Ge 2024, App. C.2.1) shrunk to inputs that two 5x5 VALID convolutions would
    not fit. He-normal weights (LeCun-normal, ``N(0, 1/fan_in)``, for the linear output layer), zero biases.

    ``features(params, x, layer)`` returns the flattened output of block ``layer`` (1: after the
    first convolution, ReLU and pooling; 2: after the second), the representations that the
    linear probes of Goldwaser and Ge 2024 (Fig. 5) read.

    Examples:
      >>> import jax, jax.numpy as jnp, itlin_core as ic; net, x = ic.small_cnn(), jnp.ones((2, 8, 8, 1))
      >>> p = net.init(jax.random.key(0)); net.apply(p, x).shape, [net.features(p, x, k).shape for k in (1, 2)]
      ((2, 10), [(2, 256), (2, 128)])
    """
    (h, w, c), (c1, c2) = check_sizes("input_shape", input_shape, 3), check_sizes("channels", channels, 2)
    num_classes, dense = positive_ints(num_classes=num_classes, dense=dense)
    if h % 4 or w % 4:
        raise ValueError(f"input_shape {input_shape}: height and width must be multiples of 4 "
                         "(two 2x2 poolings).")
    flat = (h // 4) * (w // 4) * c2

    def init(key):
        k1, k2, k3, k4 = jax.random.split(key, 4)
        he = lambda k, shape, fan_in: jax.random.normal(k, shape) * math.sqrt(2.0 / fan_in)
        return {"conv1": {"w": he(k1, (3, 3, c, c1), 9 * c), "b": jnp.zeros(c1)},
                "conv2": {"w": he(k2, (3, 3, c1, c2), 9 * c1), "b": jnp.zeros(c2)},
                "dense": {"w": he(k3, (flat, dense), flat), "b": jnp.zeros(dense)},
                "out": {"w": he(k4, (dense, num_classes), dense) / math.sqrt(2.0), "b": jnp.zeros(num_classes)}}

    def conv(x, p):
        # 3x3 SAME convolution as one matrix product over the 9 shifted copies of the input (im2col, itlin_core._conv:
        # measured about 9x faster than lax.conv inside lax.scan on XLA:CPU, where the training loop runs), ReLU, pool.
        return _max_pool(jax.nn.relu(_conv_padded(x, p["w"], 1) + p["b"]))

    def blocks(params, x):
        y1 = conv(x, params["conv1"])
        return y1, conv(y1, params["conv2"])

    def apply(params, x):
        y = blocks(params, x)[1].reshape(x.shape[0], -1)
        y = jax.nn.relu(y @ params["dense"]["w"] + params["dense"]["b"])
        return y @ params["out"]["w"] + params["out"]["b"]

    def features(params, x, layer: int):
        if layer not in (1, 2):
            raise ValueError(f"layer must be 1 or 2 (the two convolutional blocks), got {layer!r}.")
        return blocks(params, x)[layer - 1].reshape(x.shape[0], -1)

    return FeatureModel(*checked_model("small_cnn", init, apply, features))


__all__ = ["Model", "FeatureModel", "mlp", "lenet50", "lenet50_features", "resnet18", "small_cnn",
           "count_params", "centred"]
