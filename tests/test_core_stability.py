"""The curvature of a linearised problem (``ic.max_curvature``) against the dense Hessian of the
linearised loss, the learning-rate bound it gives against gradient descent itself, and the
optimiser reset at relinearisations (``reset_optimizer``) against a hand-written loop."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree

import itlin_core as ic

X = jax.random.normal(jax.random.key(1), (12, 3))
PROBLEMS = {
    "squared_error": (ic.mlp([3, 16, 2], "tanh"), ic.squared_error, jnp.sin(X[:, :2])),
    "cross_entropy": (ic.mlp([3, 16, 4], "tanh"), ic.softmax_cross_entropy, jnp.arange(12) % 4),
}


def dense_linearised_hessian(model, loss_fn, params, y):
    """The Hessian of loss(f_lin(theta)) in theta at the anchor, by autodiff of the explicit proxy."""
    flat, unravel = ravel_pytree(params)
    proxy = ic.linearise(model.apply, params)
    return jax.hessian(lambda v: loss_fn(proxy(unravel(v), X), y))(flat)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_max_curvature_is_the_top_eigenvalue_of_the_linearised_hessian(name):
    model, loss_fn, y = PROBLEMS[name]
    params = model.init(jax.random.key(0))
    dense = float(np.linalg.eigvalsh(np.asarray(dense_linearised_hessian(model, loss_fn, params, y)))[-1])
    est = float(ic.max_curvature(model.apply, loss_fn, params, X, y, iterations=200))
    assert est == pytest.approx(dense, rel=1e-4)
    # power iteration approaches from below: a short run never overestimates
    short = float(ic.max_curvature(model.apply, loss_fn, params, X, y, iterations=3))
    assert short <= dense * (1 + 1e-5)


def test_max_curvature_is_the_gauss_newton_matrix_for_the_squared_error():
    model, loss_fn, y = PROBLEMS["squared_error"]
    params = model.init(jax.random.key(2))
    J = ic.flat_jacobian(model.apply, params, X)     # (N * O, P): J^T J is the GN matrix of 1/2 ||f - y||^2
    top = float(np.linalg.eigvalsh(np.asarray(J.T @ J))[-1])
    assert float(ic.max_curvature(model.apply, loss_fn, params, X, y, iterations=200)) == pytest.approx(top, rel=1e-4)


@pytest.mark.parametrize("safety, converges", [(0.9, True), (1.1, False)])
def test_the_stable_rate_separates_converging_from_diverging_gradient_descent(safety, converges):
    """Gradient descent on the linearised squared error (a quadratic) converges below 2/lambda_max
    and diverges above it, with lambda_max from max_curvature."""
    model, loss_fn, y = PROBLEMS["squared_error"]
    params = model.init(jax.random.key(3))
    lam = float(ic.max_curvature(model.apply, loss_fn, params, X, y, iterations=300))
    lr = safety * 2 / lam
    opt = optax.sgd(lr)
    step = jax.jit(ic.make_il_step(model.apply, loss_fn, opt, K=None))   # one linearisation, never refreshed
    state = ic.init_il_state(params, opt)
    losses = []
    for _ in range(3000):
        state, m = step(state, (X, y))
        losses.append(float(m["loss"]))
    if converges:
        assert losses[-1] < losses[0]
    else:
        assert not math.isfinite(losses[-1]) or losses[-1] > 1e3 * losses[0]


def test_stable_lr_values_and_bad_input():
    assert ic.stable_lr(4.0, safety=1.0) == 0.5
    assert float(ic.stable_lr(jnp.array(4.0))) == pytest.approx(0.25)
    for bad in (0.0, 1.5, -0.1, True, "half"):
        with pytest.raises(ValueError, match="safety"):
            ic.stable_lr(1.0, safety=bad)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="lam_max"):
            ic.stable_lr(bad)
    model, loss_fn, y = PROBLEMS["squared_error"]
    with pytest.raises(ValueError, match="iterations"):
        ic.max_curvature(model.apply, loss_fn, model.init(jax.random.key(0)), X, y, iterations=0)


def test_reset_optimizer_restarts_adam_at_every_relinearisation():
    """With reset_optimizer, IL with Adam equals a loop that builds a fresh Adam for each
    linearisation; without it, the moments carry over (and the runs differ)."""
    model, loss_fn, y = PROBLEMS["cross_entropy"]
    params = model.init(jax.random.key(4))
    opt, K, n = optax.adam(1e-2), 5, 17
    step = jax.jit(ic.make_il_step(model.apply, loss_fn, opt, K, reset_optimizer=True))
    state = ic.init_il_state(params, opt)
    for _ in range(n):
        state, _ = step(state, (X, y))

    obj = ic.linearised_objective(model.apply, loss_fn)
    grad = jax.jit(jax.grad(lambda p, a: obj(p, a, X, y)[0]))
    p = params
    for t in range(n):
        if t % K == 0:
            anchor, s = p, opt.init(p)
        u, s = opt.update(grad(p, anchor), s, p)
        p = optax.apply_updates(p, u)
    np.testing.assert_allclose(ravel_pytree(state.params)[0], ravel_pytree(p)[0], rtol=1e-5, atol=1e-6)
    assert int(state.opt_state[0].count) == n % K      # Adam's step count restarted at the last refresh

    kept = ic.init_il_state(params, opt)
    step_kept = jax.jit(ic.make_il_step(model.apply, loss_fn, opt, K))
    for _ in range(n):
        kept, _ = step_kept(kept, (X, y))
    assert int(kept.opt_state[0].count) == n
    assert not np.allclose(ravel_pytree(kept.params)[0], ravel_pytree(p)[0], rtol=1e-3)


def test_reset_optimizer_in_a_sweep_matches_single_runs():
    model, loss_fn, y = PROBLEMS["cross_entropy"]
    params = model.init(jax.random.key(5))
    opt = optax.adam(1e-2)
    Ks = [1, 3, None]
    sweep, _ = ic.make_il_sweep_step(model.apply, loss_fn, opt, Ks, reset_optimizer=True)
    states = ic.replicate(ic.init_il_state(params, opt), len(Ks))
    sweep = jax.jit(sweep)
    for _ in range(7):
        states, _ = sweep(states, (X, y))
    for i, K in enumerate(Ks):
        step = jax.jit(ic.make_il_step(model.apply, loss_fn, opt, K, reset_optimizer=True))
        st = ic.init_il_state(params, opt)
        for _ in range(7):
            st, _ = step(st, (X, y))
        np.testing.assert_allclose(ravel_pytree(jax.tree.map(lambda a: a[i], states.params))[0],
                                   ravel_pytree(st.params)[0], rtol=1e-5, atol=1e-6)


def test_reset_optimizer_must_be_a_bool():
    model, loss_fn, _ = PROBLEMS["cross_entropy"]
    with pytest.raises(ValueError, match="reset_optimizer"):
        ic.make_il_step(model.apply, loss_fn, optax.adam(1e-3), 5, reset_optimizer="yes")
