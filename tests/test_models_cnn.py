"""The image models: LeNet-50 (paper 000 App. C.2.1) and ResNet-18 with and without BatchNorm
(000 Fig. 10, App. C.2.2). Architecture facts are checked against independent computations
(parameter counts from the layer formulas, a NumPy forward pass), BatchNorm against its
invariances, and both models against the IL machinery (loss decreases, linearisation is
exact at the anchor and first-order accurate around it). Tiny images keep this fast on CPU.
"""

import math

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin_core as ic

KEY = jax.random.PRNGKey(0)


def images(n, size, channels=3, seed=1):
    return jax.random.normal(jax.random.PRNGKey(seed), (n, size, size, channels))


def n_params(model):
    """Parameter count from shapes only (no arrays are made)."""
    return sum(math.prod(a.shape) for a in jax.tree_util.tree_leaves(jax.eval_shape(model.init, KEY)))


# ----------------------------------------------------------------------------- LeNet-50

@pytest.mark.parametrize("shape", [(32, 32, 3), (28, 28, 1)])
def test_lenet50_parameter_count_by_formula(shape):
    h, w, c = shape
    conv = lambda k, c_in, c_out: k * k * c_in * c_out + c_out
    dense = lambda a, b: a * b + b
    side = lambda s: ((s - 4) // 2 - 4) // 2  # two VALID 5x5 convs, each then 2x2 pooling
    flat = side(h) * side(w) * 50
    expected = conv(5, c, 50) + conv(5, 50, 50) + dense(flat, 120) + dense(120, 84) + dense(84, 10)
    assert n_params(ic.lenet50(input_shape=shape)) == expected


def _numpy_lenet(params, x):
    """LeNet-50 forward pass written with explicit 5x5 windows (float64 NumPy)."""
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
    h = np.asarray(x, np.float64)
    for name in ("conv1", "conv2"):
        win = np.lib.stride_tricks.sliding_window_view(h, (5, 5), axis=(1, 2))  # (N, H', W', C, 5, 5)
        z = np.einsum("nijcab,abco->nijo", win, p[name]["w"]) + p[name]["b"]
        z = np.maximum(z, 0.0)
        n, hh, ww, ch = z.shape
        h = z[:, : hh // 2 * 2, : ww // 2 * 2].reshape(n, hh // 2, 2, ww // 2, 2, ch).max(axis=(2, 4))
    h = h.reshape(h.shape[0], -1)
    for i, layer in enumerate(p["dense"]):
        h = h @ layer["w"] + layer["b"]
        if i < len(p["dense"]) - 1:
            h = np.maximum(h, 0.0)
    return h


def test_lenet50_matches_an_independent_forward_pass():
    model = ic.lenet50()
    params = model.init(KEY)
    params = jax.tree_util.tree_map(lambda a: a + 0.01, params)  # non-zero biases too
    x = images(3, 32)
    out = model.apply(params, x)
    assert out.shape == (3, 10)
    np.testing.assert_allclose(out, _numpy_lenet(params, x), rtol=1e-9, atol=1e-9)
    assert [l["w"].shape for l in params["dense"]] == [(1250, 120), (120, 84), (84, 10)]


# ----------------------------------------------------------------------------- ResNet-18

def resnet18_count(num_classes, in_channels, width, batch_norm):
    """ResNet-18 parameters from the architecture: a 3x3 stem, 4 stages x 2 basic blocks of
    two 3x3 convs, 1x1 projections where the width changes, a dense head. Each conv has a
    bias (no BN) or a BN scale and shift (BN) per output channel."""
    per_channel = 2 if batch_norm else 1
    conv = lambda k, c_in, c_out: k * k * c_in * c_out + per_channel * c_out
    widths = [width, 2 * width, 4 * width, 8 * width]
    total = conv(3, in_channels, width)
    c_in = width
    for stage, c_out in enumerate(widths):
        for block in range(2):
            total += conv(3, c_in, c_out) + conv(3, c_out, c_out)
            if c_in != c_out:
                total += conv(1, c_in, c_out)
            c_in = c_out
    return total + widths[-1] * num_classes + num_classes


@pytest.mark.parametrize("batch_norm", [False, True])
def test_resnet18_parameter_count(batch_norm):
    count = n_params(ic.resnet18(10, batch_norm=batch_norm))
    assert count == resnet18_count(10, 3, 64, batch_norm)
    assert 11.1e6 < count < 11.3e6  # "ResNet-18 has 11.2M parameters" on CIFAR10
    assert n_params(ic.resnet18(7, batch_norm, in_channels=1, width=8)) == resnet18_count(7, 1, 8, batch_norm)


@pytest.mark.parametrize("batch_norm, size", [(False, 8), (True, 16)])
def test_resnet18_output_shapes(batch_norm, size):
    model = ic.resnet18(num_classes=5, batch_norm=batch_norm, width=4)
    params = model.init(KEY)
    out, stats = jax.jit(lambda p, x: model.apply(p, x, return_stats=True))(params, images(3, size))
    assert out.shape == (3, 5) and bool(jnp.all(jnp.isfinite(out)))
    assert len(stats) == (1 + 8 * 2 + 3 if batch_norm else 0)  # one BN per conv
    blocks = params["blocks"]
    assert [("shortcut" in b) for b in blocks] == [False, False, True, False, True, False, True, False]


def test_resnet18_without_batchnorm_is_positively_homogeneous():
    """Zero biases and ReLU: f(a x) = a f(x) for a > 0 (no hidden normalisation), and an
    example's output does not depend on the rest of the batch."""
    model = ic.resnet18(batch_norm=False, width=4)
    params = model.init(KEY)
    x = images(4, 8)
    f = jax.jit(model.apply)
    np.testing.assert_allclose(f(params, 3.7 * x), 3.7 * f(params, x), rtol=1e-10)
    np.testing.assert_allclose(f(params, x[:2]), f(params, x)[:2], rtol=1e-10)
    with pytest.raises(ValueError, match="batch_norm=True"):
        model.apply(params, x, stats=[])


def test_resnet18_batchnorm_uses_batch_statistics():
    model = ic.resnet18(batch_norm=True, width=4, bn_eps=1e-12)
    params = model.init(KEY)
    x = images(6, 8)
    f = jax.jit(model.apply, static_argnames="return_stats")
    out, stats = f(params, x, return_stats=True)
    # BN after the first conv makes the network invariant to rescaling the input (conv is
    # linear, BN removes the scale): f(a x) = f(x), which a network without BN is not.
    np.testing.assert_allclose(f(params, 3.7 * x), out, rtol=1e-7, atol=1e-9)
    # on 1x1 images a 3x3 conv sees only its centre tap, so a per-channel constant added to
    # the input shifts the stem's output by a constant per channel, which BN subtracts
    x1 = images(6, 1)
    shift = jnp.array([0.3, -1.2, 2.0])
    np.testing.assert_allclose(f(params, x1 + shift), f(params, x1), rtol=1e-7, atol=1e-9)
    # the same invariance for a weight feeding a BN layer, and hence (Euler) a zero tangent
    # along it: J(theta) . w_stem = 0
    scaled = {**params, "stem": {**params["stem"], "w": 2.5 * params["stem"]["w"]}}
    np.testing.assert_allclose(f(scaled, x), out, rtol=1e-7, atol=1e-9)
    tangent = jax.tree_util.tree_map(jnp.zeros_like, params)
    tangent["stem"]["w"] = params["stem"]["w"]
    _, jv = jax.jit(lambda p, t: jax.jvp(lambda q: model.apply(q, x), (p,), (t,)))(params, tangent)
    assert float(jnp.max(jnp.abs(jv))) < 1e-6 * float(jnp.max(jnp.abs(out)))
    # batch mode couples the examples of a batch
    assert not np.allclose(f(params, x[:3]), out[:3], rtol=1e-3)
    # frozen statistics reproduce batch mode on that batch and decouple the examples
    np.testing.assert_allclose(f(params, x, stats=stats), out, rtol=1e-10)
    np.testing.assert_allclose(f(params, x[:3], stats=stats), out[:3], rtol=1e-10)
    with pytest.raises(ValueError, match="one .* per BatchNorm layer"):
        model.apply(params, x, stats=stats[:-1])
    # the statistics are the per-channel batch mean and (biased) variance of the stem conv
    z = jax.lax.conv_general_dilated(x, params["stem"]["w"], (1, 1), ((1, 1), (1, 1)),
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    np.testing.assert_allclose(stats[0]["mean"], np.asarray(z).mean(axis=(0, 1, 2)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(stats[0]["var"], np.asarray(z).var(axis=(0, 1, 2)), rtol=1e-10)


@pytest.mark.parametrize("batch_norm", [False, True])
def test_linearise_resnet18(batch_norm):
    """f_lin(theta_s) = f(theta_s); f_lin is affine along any line theta_s + t v; and it is a
    first-order approximation: the gap to f vanishes faster than t."""
    model = ic.resnet18(batch_norm=batch_norm, width=4)
    params_s = model.init(KEY)
    x = images(4, 8)
    f, f_lin = jax.jit(model.apply), jax.jit(ic.linearise(model.apply, params_s))
    np.testing.assert_allclose(f_lin(params_s, x), f(params_s, x), rtol=1e-12, atol=1e-12)
    flat, unravel = jax.flatten_util.ravel_pytree(params_s)  # one draw: one compiled sampler
    v = jax.tree_util.tree_map(lambda d, p: d * jnp.std(p + 1e-3), unravel(jax.random.normal(KEY, flat.shape)), params_s)
    shift = lambda t: jax.tree_util.tree_map(lambda p, d: p + t * d, params_s, v)
    step = f_lin(shift(1e-2), x) - f_lin(params_s, x)  # = J(theta_s) v t, affine in t
    np.testing.assert_allclose(f_lin(shift(3e-2), x) - f_lin(params_s, x), 3 * step, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(f_lin(shift(-1e-2), x) - f_lin(params_s, x), -step, rtol=1e-8, atol=1e-12)
    gap = lambda t: float(jnp.linalg.norm(f(shift(t), x) - f_lin(shift(t), x)))
    change = lambda t: float(jnp.linalg.norm(f(shift(t), x) - f(params_s, x)))
    # ReLU kinks make the decay ragged, so ask for much faster than linear, not exactly t^2
    assert gap(1e-3) / gap(1e-4) > 20
    assert gap(1e-4) < 0.05 * change(1e-4)


# ----------------------------------------------------------------------------- training with IL

@pytest.mark.parametrize("name", ["lenet50", "resnet18", "resnet18_bn"])
def test_il_training_decreases_the_loss(name):
    """A few full-batch IL steps with K = 1 (SGD) and K = 5 on a tiny random batch lower the
    network's cross-entropy; K = 5 really linearises (its parameters differ from SGD's)."""
    if name == "lenet50":
        model, x, lr = ic.lenet50(num_classes=4, input_shape=(16, 16, 3)), images(8, 16), 1e-3
    else:
        model, x, lr = ic.resnet18(4, batch_norm=(name == "resnet18_bn"), width=4), images(8, 8), 0.02
    y = jnp.arange(8) % 4
    params0 = model.init(KEY)
    opt = optax.sgd(lr)
    loss = lambda p: ic.softmax_cross_entropy(model.apply(p, x), y)

    @jax.jit
    def run(K):  # one compiled program for both K values (K is an int32 array)
        step = ic.make_il_step(model.apply, ic.softmax_cross_entropy, opt, K)
        state, _ = jax.lax.scan(lambda s, _: step(s, (x, y)), ic.init_il_state(params0, opt), None, length=10)
        return state.params

    initial = float(loss(params0))
    finals = {}
    for K in (1, 5):
        finals[K] = run(ic.period_as_int(K))
        assert float(loss(finals[K])) < initial - 1e-3, (K, initial, float(loss(finals[K])))
    diff = jax.tree_util.tree_map(lambda a, b: jnp.max(jnp.abs(a - b)), finals[1], finals[5])
    assert max(jax.tree_util.tree_leaves(diff)) > 1e-6


@pytest.mark.parametrize("shape, kernel", [((2, 32, 32, 3), (5, 5, 3, 7)), ((3, 14, 14, 7), (5, 5, 7, 4)),
                                           ((1, 9, 6, 2), (3, 2, 2, 5))])
def test_im2col_convolution_equals_lax_conv_and_its_gradient(shape, kernel):
    from itlin_core.models import _conv, _conv_lax

    x = jax.random.normal(jax.random.key(1), shape)
    w = jax.random.normal(jax.random.key(2), kernel)
    b = jax.random.normal(jax.random.key(3), kernel[-1:])
    np.testing.assert_allclose(_conv(x, w, b), _conv_lax(x, w, b), rtol=1e-5, atol=1e-5)
    loss = lambda f: lambda w_, x_: jnp.sum(jnp.sin(f(x_, w_, b)))
    for a, r in zip(jax.grad(loss(_conv), argnums=(0, 1))(w, x), jax.grad(loss(_conv_lax), argnums=(0, 1))(w, x)):
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, kernel, stride", [((2, 8, 8, 3), (3, 3, 3, 4), 1), ((2, 8, 8, 3), (3, 3, 3, 4), 2),
                                                   ((3, 7, 5, 2), (3, 3, 2, 3), 2), ((2, 8, 8, 4), (1, 1, 4, 6), 2),
                                                   ((1, 9, 9, 2), (1, 1, 2, 2), 1)])
def test_padded_strided_im2col_convolution_equals_lax_conv_and_its_gradient(shape, kernel, stride):
    """ResNet's convolution (padding k // 2, stride 1 or 2, odd and even sizes) against lax.conv."""
    from itlin_core.models import _conv_padded, _conv_padded_lax

    x = jax.random.normal(jax.random.key(4), shape)
    w = jax.random.normal(jax.random.key(5), kernel)
    np.testing.assert_allclose(_conv_padded(x, w, stride), _conv_padded_lax(x, w, stride), rtol=1e-5, atol=1e-5)
    loss = lambda f: lambda w_, x_: jnp.sum(jnp.sin(f(x_, w_, stride)))
    for a, r in zip(jax.grad(loss(_conv_padded), argnums=(0, 1))(w, x),
                    jax.grad(loss(_conv_padded_lax), argnums=(0, 1))(w, x)):
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-4)
