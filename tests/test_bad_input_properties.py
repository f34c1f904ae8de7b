"""Property-based checks of the public API's argument handling (hypothesis).

Random arguments (numbers of every sign, NaN and infinities, strings, None, booleans, arrays of
random shapes and dtypes, empty arrays) go into the public functions. Each call must either
return finite values of the right shape, or raise ValueError/TypeError whose message names the
argument; any other exception fails the test, and so does a NaN or infinity returned in silence.
The tally of outcomes is printed at the end of the module (``pytest -s``).
"""

from __future__ import annotations

import collections
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import itlin_core as ic

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
TALLY = collections.Counter()

MODEL = ic.mlp([2, 4, 1], "tanh")
PARAMS = MODEL.init(jax.random.PRNGKey(0))
X = jax.random.normal(jax.random.PRNGKey(1), (5, 2))
Y = jnp.sin(X[:, :1])
OPT = optax.sgd(0.1)

scalars = st.one_of(st.integers(-10, 10), st.floats(allow_nan=True, allow_infinity=True), st.none(),
                    st.booleans(), st.text(max_size=3), st.just(1e12), st.just([1, 2]))
# step counts: no huge values (a valid 1e12 steps would run, not fail)
counts = st.one_of(st.integers(-3, 30), st.floats(-5, 40), st.just(math.nan), st.just(math.inf), st.none(),
                   st.booleans(), st.text(max_size=3))
dtypes = st.sampled_from([np.float32, np.float64, np.int32, np.uint8, np.bool_])


def arrays(max_dims=3, max_side=4):
    return dtypes.flatmap(lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=0,
                                                                     max_side=max_side)))


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    print(f"\nbad-input properties: {sum(TALLY.values())} calls, " +
          ", ".join(f"{k} {v}" for k, v in sorted(TALLY.items())))


def outcome(call, names, inputs=()):
    """Run ``call``; a ValueError/TypeError must name one of ``names``; a result must be finite
    unless one of the ``inputs`` held a NaN or infinity (NaN in, NaN out is not silent: it is
    how a diverging run shows in its loss)."""
    try:
        out = call()
    except (ValueError, TypeError) as e:
        assert any(n in str(e) for n in names), f"the message does not name {names}: {e}"
        TALLY["clear error"] += 1
        return None
    given_nonfinite = any(np.asarray(a).dtype.kind in "fc" and not np.all(np.isfinite(np.asarray(a)))
                          for a in inputs if a is not None and np.ndim(a) >= 0 and not isinstance(a, str))
    for leaf in jax.tree.leaves(out):
        a = np.asarray(leaf)
        if a.dtype.kind in "fc" and not given_nonfinite:
            assert np.all(np.isfinite(a)), f"a silent non-finite result: {a}"
    TALLY["finite result"] += 1
    return out


@SETTINGS
@given(K=st.one_of(scalars, arrays(1)), damping=scalars)
def test_il_step_settings(K, damping):
    def call():
        step = ic.make_il_step(MODEL.apply, ic.squared_error, OPT, K, damping=damping)
        return step(ic.init_il_state(PARAMS, OPT), (X, Y))[1]["loss"]
    outcome(call, ["K (the relinearisation period)", "K as an array", "damping"])


@SETTINGS
@given(damping=scalars, lr=st.one_of(st.floats(-2, 2), scalars), y=arrays(2, 6))
def test_gn_step_arguments(damping, lr, y):
    outcome(lambda: ic.gn_step(MODEL.apply, PARAMS, X, y, lr=lr, damping=damping), ["damping", "targets y", "lr"], [y])


@SETTINGS
@given(x1=arrays(3, 5), x2=st.one_of(st.none(), arrays(3, 5)))
def test_empirical_ntk_inputs(x1, x2):
    def call():
        k = ic.empirical_ntk(MODEL.apply, PARAMS, x1, x2)
        assert k.shape == (x1.shape[0], (x1 if x2 is None else x2).shape[0])
        return k
    outcome(call, ["x1", "x2", "x must"], [x1, x2])


@SETTINGS
@given(t=st.one_of(scalars, arrays(1, 4)), f0=arrays(1, 4))
def test_gradient_flow_times_and_outputs(t, f0):
    n = f0.shape[0] if f0.ndim else 1
    outcome(lambda: ic.gradient_flow(jnp.eye(n), f0, jnp.ones_like(f0, dtype=jnp.float32), t),
            ["t must", "time in t", "f0_train", "y_train", "ntk_train"], [f0])


@SETTINGS
@given(logits=arrays(2, 4), labels=arrays(2, 4))
def test_classification_metrics(logits, labels):
    for fn in (ic.accuracy, ic.softmax_cross_entropy):
        outcome(lambda: fn(logits, labels), ["labels", "logits"], [logits])


@SETTINGS
@given(outputs=arrays(2, 4), targets=arrays(2, 4))
def test_regression_losses(outputs, targets):
    for fn in (ic.squared_error, ic.rmse):
        outcome(lambda: fn(outputs, targets), ["outputs", "targets"], [outputs, targets])


@SETTINGS
@given(batch_size=scalars, n_y=st.integers(0, 12))
def test_minibatches(batch_size, n_y):
    x = jnp.arange(10.0)[:, None]
    outcome(lambda: ic.minibatches(jax.random.key(0), x, jnp.arange(n_y), batch_size).fn, ["batch_size", "same number of examples"])


@SETTINGS
@given(images=arrays(4, 6))
def test_image_pipeline(images):
    outcome(lambda: ic.channel_stats(images), ["images"], [images])
    outcome(lambda: ic.augment(jax.random.key(0), images), ["images"], [images])


@SETTINGS
@given(num_steps=counts, eval_every=counts, loss_every=counts)
def test_train_counts(num_steps, eval_every, loss_every):
    step = ic.make_il_step(MODEL.apply, ic.squared_error, OPT, 2)
    outcome(lambda: ic.train(step, ic.init_il_state(PARAMS, OPT), (X, Y), num_steps, evaluate=ic.Evaluation(every=eval_every, loss_every=loss_every), progress="off")[1]["loss"],
            ["num_steps", "Evaluation.every", "loss_every"])


@SETTINGS
@given(num_steps=counts, rtol=scalars, damping=scalars)
def test_truncated_gn(num_steps, rtol, damping):
    outcome(lambda: ic.tgn_step(MODEL.apply, PARAMS, X, Y, loss_fn=ic.squared_error, optimizer=OPT,
                                num_steps=num_steps, rtol=rtol, damping=damping).params,
            ["num_steps", "rtol", "damping"])


# Kernels: small-integer entries (well scaled, so that a finite kernel gives a finite answer), symmetric
# PSD ones (A A^T), the same made asymmetric or indefinite, and arbitrary arrays of any dtype and shape.
small = hnp.arrays(np.float32, st.tuples(st.integers(1, 4), st.integers(1, 4)), elements=st.integers(-3, 3))
kernels = st.one_of(small.map(lambda a: a @ a.T), small.map(lambda a: a @ a.T - 2 * np.eye(len(a), dtype=np.float32)),
                    small.map(lambda a: a @ a.T + np.triu(np.ones((len(a),) * 2, np.float32), 1)), small, arrays(3, 4))
vectors = st.one_of(hnp.arrays(np.float32, st.integers(0, 5), elements=st.integers(-5, 5)), arrays(2, 4))


@SETTINGS
@given(kmat=kernels, rhs=vectors, damping=scalars, rcond=st.one_of(st.none(), scalars))
def test_kernel_solve_arguments(kmat, rhs, damping, rcond):
    def call():
        a = ic.kernel_solve(kmat, rhs, damping, rcond=rcond)
        assert a.shape == np.shape(rhs)
        return a
    outcome(call, ["kmat", "rhs", "damping", "rcond"], [kmat, rhs])


@SETTINGS
@given(ntk=kernels, rcond=st.one_of(st.none(), scalars))
def test_gradient_flow_kernels(ntk, rcond):
    n = np.shape(ntk)[0] if np.ndim(ntk) else 1
    outcome(lambda: ic.gradient_flow(ntk, jnp.zeros(n), jnp.ones(n), 0.5, rcond=rcond)[0],
            ["ntk_train", "rcond", "f0_train"], [ntk])


@SETTINGS
@given(width=counts, classes=counts)
def test_model_sizes(width, classes):
    def call():
        out = ic.mlp([2, width, 1]).apply(ic.mlp([2, width, 1]).init(jax.random.key(0)), X)
        assert out.shape == (5, 1)
        ic.lenet50(classes, (16, 16, 1), channels=width, dense=(4,))     # built, not run: the sizes are checked here
        ic.resnet18(classes, width=width)
        ic.small_cnn(classes, channels=(width, 2), dense=width)
        return out
    outcome(call, ["layer_sizes[1]", "num_classes", "channels", "width", "dense"])


@SETTINGS
@given(mean=st.one_of(scalars, arrays(2, 4)), std=st.one_of(scalars, arrays(2, 4)))
def test_normalise_statistics(mean, std):
    images = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)
    # a finite answer is required unless a mean beyond 1e30 or a std below 1e-30 makes (x - mean) / std overflow float32
    ok = lambda m, s: np.ndim(m) <= 1 and np.ndim(s) <= 1 and np.max(np.abs(np.asarray(m, float)), initial=0) < 1e30 \
        and np.min(np.abs(np.asarray(s, float)), initial=1) > 1e-30
    try:
        tame = ok(mean, std)
    except (TypeError, ValueError):
        tame = True
    outcome(lambda: ic.normalise(images, mean, std), ["mean", "std"], [] if tame else [np.array(np.inf)])


@SETTINGS
@given(labels=hnp.arrays(np.int32, 8, elements=st.integers(-2, 5)), num_classes=st.one_of(st.none(), counts),
       ridge=scalars)
def test_linear_probe_labels(labels, num_classes, ridge):
    f = np.arange(8.0)[:, None]
    outcome(lambda: ic.linear_probe(f, labels, f, labels, ridge=ridge, num_classes=num_classes),
            ["labels", "num_classes", "ridge"])
