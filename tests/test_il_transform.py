"""ic.iterative_linearisation, the (init, step) pair: the same run as the step and state built by
hand (make_il_step / make_il_sweep_step with init_il_state and replicate), for one run and for
a sweep, with options passed through; and its refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin_core as ic

MODEL = ic.mlp([3, 8, 2])
X = jax.random.normal(jax.random.key(0), (16, 3))
Y = jax.random.normal(jax.random.key(1), (16, 2))
PARAMS = MODEL.init(jax.random.key(2))


def leaves_equal(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.parametrize("K, options", [
    (1, {}), (3, {"damping": 0.1}), (None, {}), (ic.geometric(2, 2.0), {}),
    (ic.on_drift(0.05), {"drift_every": 2}), (2, {"reset_optimizer": True, "microbatch": 4}),
], ids=["gd", "damped", "never", "geometric", "drift", "reset+microbatch"])
def test_one_run_is_make_il_step_with_init_il_state(K, options):
    opt = optax.adam(1e-2)
    il = ic.iterative_linearisation(MODEL.apply, ic.squared_error, opt, K, **options)
    step = ic.make_il_step(MODEL.apply, ic.squared_error, opt, K, **options)
    a, b = il.init(PARAMS), ic.init_il_state(PARAMS, opt)
    assert leaves_equal(a, b) and il.runs is None
    for _ in range(5):
        (a, ma), (b, mb) = il.step(a, (X, Y)), step(b, (X, Y))
        assert float(ma["loss"]) == float(mb["loss"])
    assert leaves_equal(a, b) and int(a.updates) == int(b.updates)


@pytest.mark.parametrize("Ks, damping", [([1, 4, None], 0.0), ((2, 2), [0.0, 1.0]),
                                         (np.array([1, 5]), 0.0)], ids=["list", "damping-per-run", "array"])
def test_a_sweep_is_make_il_sweep_step_with_replicated_states(Ks, damping):
    opt = optax.sgd(0.05)
    il = ic.iterative_linearisation(MODEL.apply, ic.squared_error, opt, Ks, damping=damping)
    step, rules = ic.make_il_sweep_step(MODEL.apply, ic.squared_error, opt, list(Ks), damping=damping)
    states = ic.replicate(ic.init_il_state(PARAMS, opt), len(Ks))
    assert il.runs == len(Ks) and np.array_equal(il.rules.period, rules.period)
    got, hist = ic.train(il.step, il.init(PARAMS), (X, Y), 7, progress="off")
    want, want_hist = ic.train(step, states, (X, Y), 7, progress="off")
    assert leaves_equal(got, want)
    np.testing.assert_array_equal(hist["loss"], want_hist["loss"])
    assert il.step.run_labels == step.run_labels


def test_the_pair_refuses_what_the_steps_refuse_and_unknown_options():
    opt = optax.sgd(0.1)
    with pytest.raises(ValueError, match="K"):
        ic.iterative_linearisation(MODEL.apply, ic.squared_error, opt, 0)
    with pytest.raises(TypeError, match="unknown option.*'lr'"):
        ic.iterative_linearisation(MODEL.apply, ic.squared_error, opt, 1, lr=0.1)
    with pytest.raises(ValueError, match="damping: a sequence"):
        ic.iterative_linearisation(MODEL.apply, ic.squared_error, opt, 1, damping=[0.1, 0.2])
    with pytest.raises(ValueError, match="damping has 2 values"):
        ic.iterative_linearisation(MODEL.apply, ic.squared_error, opt, [1, 2, 3], damping=[0.1, 0.2])
