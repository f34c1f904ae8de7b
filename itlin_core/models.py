"""Models as pure ``(init, apply)`` pairs over pytrees of arrays, in plain JAX.

``params = model.init(key)``; ``outputs = model.apply(params, x)`` with a leading batch axis.
Plain functions (no framework) keep the linearisation transparent: ``linearise`` and
``empirical_ntk`` see exactly the parameters a reader sees.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp


class Model(NamedTuple):
    """A pure model: ``init(key) -> params`` and ``apply(params, x) -> outputs``."""

    init: Callable
    apply: Callable


_ACTIVATIONS = {"relu": jax.nn.relu, "tanh": jnp.tanh, "gelu": jax.nn.gelu, "silu": jax.nn.silu,
                "erf": jax.scipy.special.erf, "identity": lambda z: z}


def _activation(activation):
    if callable(activation):
        return activation
    if activation not in _ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; use one of {sorted(_ACTIVATIONS)} or a callable.")
    return _ACTIVATIONS[activation]


def mlp(layer_sizes: Sequence[int], activation="relu", *, parameterisation: str = "standard",
        w_std: float = math.sqrt(2.0), b_std: float = 0.0, out_scale: float = 1.0) -> Model:
    r"""Fully connected network ``layer_sizes = [d_in, h_1, ..., d_out]``.

    Pre-activations are ``z = W h + b`` with ``W_ij ~ N(0, w_std^2 / fan_in)`` (``"standard"``)
    or ``z = (w_std / sqrt(fan_in)) W h + b_std b`` with ``W_ij, b_i ~ N(0, 1)`` (``"ntk"``, the
    parameterisation of Jacot et al. and Lee et al., under which the NTK has a
    width-independent limit and wide networks train lazily). The output is multiplied by
    ``out_scale``. ``apply`` maps ``(N, d_in) -> (N, d_out)``. The last layer is linear.
    """
    sizes = [int(s) for s in layer_sizes]
    if len(sizes) < 2 or min(sizes) < 1:
        raise ValueError(f"layer_sizes needs at least an input and an output size, all >= 1; got {layer_sizes!r}.")
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
        h = x
        for i, layer in enumerate(params):
            if ntk:
                h = h @ layer["w"] * (w_std / math.sqrt(layer["w"].shape[0])) + b_std * layer["b"]
            else:
                h = h @ layer["w"] + layer["b"]
            if i < len(params) - 1:
                h = act(h)
        return out_scale * h

    return Model(init, apply)


def _conv(x, w, b):
    y = jax.lax.conv_general_dilated(x, w, window_strides=(1, 1), padding="VALID",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return y + b


def _max_pool(x, size=2):
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, size, size, 1), (1, size, size, 1), "VALID")


def lenet50(num_classes: int = 10, input_shape=(32, 32, 3), channels: int = 50,
            dense=(120, 84)) -> Model:
    """The CNN of paper 000 App. C.2.1 ("LeNet-50"): two 5x5 VALID convolutions with 50
    channels, each followed by ReLU and 2x2 max-pooling, then dense layers 120 and 84 with
    ReLU and a linear output of ``num_classes`` logits (softmax lives in the loss).
    He-normal weights, zero biases. Inputs NHWC, e.g. ``(N, 32, 32, 3)``.
    """
    h, w, c = input_shape
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
        y = _max_pool(jax.nn.relu(_conv(x, params["conv1"]["w"], params["conv1"]["b"])))
        y = _max_pool(jax.nn.relu(_conv(y, params["conv2"]["w"], params["conv2"]["b"])))
        y = y.reshape(y.shape[0], -1)
        for i, layer in enumerate(params["dense"]):
            y = y @ layer["w"] + layer["b"]
            if i < len(params["dense"]) - 1:
                y = jax.nn.relu(y)
        return y

    return Model(init, apply)


def count_params(params) -> int:
    """Number of scalar parameters in a pytree."""
    return sum(int(a.size) for a in jax.tree_util.tree_leaves(params))





def centred(apply_fn: Callable, params0, scale: float = 1.0) -> Callable:
    r"""The scaled, centred model of Chizat, Oyallon & Bach (2019),
    ``f_alpha(theta, x) = alpha * (f(theta, x) - f(theta_0, x))``.

    It outputs 0 at initialisation whatever ``alpha``; its NTK is ``alpha^2`` times the NTK of
    ``f``. Trained with a learning rate scaled by ``1 / alpha^2`` (same function-space speed),
    a large ``alpha`` needs only tiny parameter changes to fit the data, so the features barely
    move (the *lazy* regime); a small ``alpha`` forces large relative changes (the *rich*
    regime)."""

    def apply(params, x):
        return scale * (apply_fn(params, x) - apply_fn(params0, x))

    return apply
__all__ = ["Model", "mlp", "lenet50", "count_params", "centred"]
