"""Gauss-Newton in kernel form against dense primal solves, the proximal objective, TGN, and
the large-K / small-lr limit of iterative linearisation (paper 000 Lemma 3.2.1)."""

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin_core as ic

PROBLEMS = {
    # over-parameterised (P >> N*O), scalar and vector outputs
    "mlp-tanh-scalar": (ic.mlp([3, 16, 16, 1], "tanh"), 8, 1),
    "mlp-relu-vector": (ic.mlp([3, 10, 10, 3], "relu", parameterisation="ntk", b_std=0.2), 6, 3),
    # under-parameterised: P = 13 < N = 20, so J^T J is invertible and J J^T is singular
    "mlp-tanh-underparam": (ic.mlp([2, 3, 1], "tanh"), 20, 1),
}


@pytest.fixture(params=sorted(PROBLEMS))
def problem(request):
    model, n, o = PROBLEMS[request.param]
    params = model.init(jax.random.PRNGKey(0))
    d_in = jax.tree_util.tree_leaves(params)[1].shape[0]
    x = jax.random.normal(jax.random.PRNGKey(1), (n, d_in))
    y = jax.random.normal(jax.random.PRNGKey(2), (n, o))
    return model, params, x, y


def primal_direction(model, params, x, y, lam):
    J = ic.flat_jacobian(model.apply, params, x)
    r = (model.apply(params, x) - y).reshape(-1)
    if lam == 0:
        return np.linalg.lstsq(np.asarray(J), np.asarray(r), rcond=None)[0]  # minimum-norm J^+ r
    return np.linalg.solve(J.T @ J + lam * np.eye(J.shape[1]), J.T @ r)


def flat(tree):
    return np.asarray(jax.flatten_util.ravel_pytree(tree)[0])


@pytest.mark.parametrize("lam", [0.0, 1e-3, 0.5, 30.0])
def test_woodbury_equals_primal(problem, lam):
    model, params, x, y = problem
    d = flat(ic.gn_direction(model.apply, params, x, y, lam))
    ref = primal_direction(model, params, x, y, lam)
    np.testing.assert_allclose(d, ref, rtol=1e-6, atol=1e-9 * np.abs(ref).max())


def test_callable_damping_uses_eigenvalues_of_jjt(problem):
    model, params, x, y = problem
    J = ic.flat_jacobian(model.apply, params, x)
    ev = np.linalg.eigvalsh(J @ J.T)
    rule = ic.damping_min_eigenvalue(alpha=1.0, floor=1e-2)
    lam = max(1e-2, max(ev.min(), 0.0))
    d = flat(ic.gn_direction(model.apply, params, x, y, rule))
    np.testing.assert_allclose(d, primal_direction(model, params, x, y, lam), rtol=1e-6, atol=1e-10)


@pytest.mark.parametrize("lam", [0.1, 5.0])
def test_damped_gn_minimises_proximal_linearised_objective(problem, lam):
    model, params, x, y = problem
    new = ic.gn_step(model.apply, params, x, y, lr=1.0, damping=lam)
    objective = ic.linearised_objective(model.apply, ic.squared_error, lam)
    obj = lambda p: objective(p, params, x, y)[0]
    g = flat(jax.grad(obj)(new))
    assert np.linalg.norm(g) < 1e-8 * max(1.0, np.linalg.norm(flat(jax.grad(obj)(params))))
    # and it is a minimum: random perturbations only increase the (strictly convex) objective
    base = float(obj(new))
    for k in range(5):
        u = jax.flatten_util.ravel_pytree(new)[1](jax.random.normal(jax.random.PRNGKey(10 + k), flat(new).shape) * 1e-2)
        assert float(obj(jax.tree_util.tree_map(jnp.add, new, u))) > base


def test_undamped_gn_step_interpolates_linearised_model_when_overparameterised():
    model, n, o = PROBLEMS["mlp-tanh-scalar"]
    params = model.init(jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (n, 3))
    y = jax.random.normal(jax.random.PRNGKey(2), (n, o))
    new = ic.gn_step(model.apply, params, x, y)
    np.testing.assert_allclose(ic.linearise(model.apply, params)(new, x), y, atol=1e-8)


def test_float64_solve_of_float32_model():
    model, n, o = PROBLEMS["mlp-tanh-scalar"]
    params64 = model.init(jax.random.PRNGKey(0))
    params32 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float32), params64)
    x = jax.random.normal(jax.random.PRNGKey(1), (n, 3))
    y = jax.random.normal(jax.random.PRNGKey(2), (n, o))
    d32 = ic.gn_direction(model.apply, params32, x.astype(jnp.float32), y.astype(jnp.float32), 1e-2,
                          solve_dtype=jnp.float64)
    assert jax.tree_util.tree_leaves(d32)[0].dtype == jnp.float32
    ref = flat(ic.gn_direction(model.apply, params64, x, y, 1e-2))
    np.testing.assert_allclose(flat(d32), ref, rtol=2e-3, atol=2e-4 * np.abs(ref).max())


@pytest.mark.parametrize("lam", [0.0, 0.3])
def test_il_small_lr_large_k_reaches_the_gn_step(lam):
    # Lemma 3.2.1: gradient descent on the linearised squared error with a small step, run for
    # long enough, converges to the (damped) GN step, the minimum-norm one when undamped.
    model, n, o = PROBLEMS["mlp-tanh-scalar"]
    params = model.init(jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (n, 3))
    y = jax.random.normal(jax.random.PRNGKey(2), (n, o))
    ev = np.linalg.eigvalsh(ic.empirical_ntk(model.apply, params, x))
    lr = 1.0 / (ev.max() + lam)
    K = int(np.ceil(40.0 / (lr * (ev.min() + lam))))  # e^{-40}: converged to machine precision
    opt = optax.sgd(lr)
    step = ic.make_il_step(model.apply, ic.squared_error, opt, K, damping=lam)
    state, _ = ic.train(step, ic.init_il_state(params, opt), (x, y), K)
    gn = ic.gn_step(model.apply, params, x, y, damping=lam)
    np.testing.assert_allclose(flat(state.params), flat(gn), rtol=1e-7, atol=1e-9)
    # one step later IL relinearises at the GN point: two IL periods are two GN steps
    state, _ = ic.train(step, state, (x, y), K)
    gn2 = ic.gn_step(model.apply, gn, x, y, damping=lam)
    np.testing.assert_allclose(flat(state.params), flat(gn2), rtol=1e-6, atol=1e-8)


def test_tgn_with_inner_gd_approaches_damped_gn_and_stops_at_tolerance():
    model, n, o = PROBLEMS["mlp-relu-vector"]
    params = model.init(jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (n, 3))
    y = jax.random.normal(jax.random.PRNGKey(2), (n, o))
    lam = 0.5
    gn = flat(ic.gn_step(model.apply, params, x, y, damping=lam))
    ev = np.linalg.eigvalsh(ic.kernel_matrix(ic.empirical_ntk(model.apply, params, x, full=True)))
    lr = 1.0 / (ev.max() + lam)
    res = jax.jit(lambda p: ic.tgn_step(model.apply, p, x, y, loss_fn=ic.squared_error, optimizer=optax.sgd(lr),
                                        num_steps=100_000, damping=lam, rtol=1e-10))(params)
    assert int(res.num_steps) < 100_000 and float(res.grad_norm_ratio) <= 1e-10
    np.testing.assert_allclose(flat(res.params), gn, rtol=1e-7, atol=1e-9)
    # a loose tolerance stops much earlier, further from the GN step (truncation)
    loose = ic.tgn_step(model.apply, params, x, y, loss_fn=ic.squared_error, optimizer=optax.sgd(lr),
                        num_steps=100_000, damping=lam, rtol=1e-1)
    assert int(loose.num_steps) < int(res.num_steps) and float(loose.grad_norm_ratio) <= 1e-1
    assert np.linalg.norm(flat(loose.params) - gn) > 1e-4 * np.linalg.norm(gn)
    # with Adam as the inner solver (000 §4.3) the budget bounds the work
    adam = ic.tgn_step(model.apply, params, x, y, loss_fn=ic.squared_error, optimizer=optax.adam(1e-2),
                       num_steps=50, damping=lam)
    assert int(adam.num_steps) == 50 and float(adam.objective) < float(
        ic.linearised_objective(model.apply, ic.squared_error, lam)(params, params, x, y)[0])


@pytest.mark.parametrize("rtol", [0.5, 1e-1, 1e-3])
@pytest.mark.parametrize("lr_factor", [0.3, 1.0])
def test_gd_steps_to_tolerance_predicts_when_tgn_with_inner_gd_stops(problem, rtol, lr_factor):
    """The spectral count of inner gradient-descent steps (Algorithm 2's tolerance) equals the
    number of steps tgn_step takes with that tolerance, run step by step on the linearised model."""
    model, params, x, y = problem
    theta = ic.kernel_matrix(ic.empirical_ntk(model.apply, params, x, full=True))
    r = np.asarray(model.apply(params, x) - y).reshape(-1)
    lr = lr_factor / np.linalg.eigvalsh(np.asarray(theta, np.float64)).max()
    k = ic.gd_steps_to_tolerance(theta, r, lr, rtol)
    assert k is not None and k >= 1
    res = ic.tgn_step(model.apply, params, x, y, loss_fn=ic.squared_error, optimizer=optax.sgd(lr),
                      num_steps=10 * k + 100, rtol=rtol)
    assert abs(int(res.num_steps) - k) <= max(1, k // 100), (int(res.num_steps), k)
    # K steps of inner gradient descent (IL between two refreshes) meet the tolerance from k on
    if k >= 2:
        short = ic.tgn_step(model.apply, params, x, y, loss_fn=ic.squared_error, optimizer=optax.sgd(lr),
                            num_steps=k - max(1, k // 50))
        assert float(short.grad_norm_ratio) > rtol


def test_gd_steps_to_tolerance_follows_the_slowest_direction():
    """For small tolerances the count is about log(1/rtol) / (lr sigma_min); a zero tolerance or
    a budget too small gives None, a tolerance of 1 or more needs no step."""
    theta, r = np.diag([1.0, 0.01]), np.ones(2)
    for rtol in (1e-2, 1e-4, 1e-6):
        k = ic.gd_steps_to_tolerance(theta, r, 0.5, rtol)
        assert abs(k - np.log(np.sqrt(0.01) / rtol) / -np.log(1 - 0.5 * 0.01)) <= 1
    assert ic.gd_steps_to_tolerance(theta, r, 0.5, 1e-6, max_steps=100) is None
    assert ic.gd_steps_to_tolerance(theta, r, 0.5, 1.0) == 0
    assert ic.gd_steps_to_tolerance(np.diag([1.0, 0.0]), np.array([0.0, 1.0]), 0.5, 0.1) == 0   # nothing to solve


@pytest.mark.parametrize("kwargs, match", [
    (dict(ntk=np.eye(3)), "square"), (dict(ntk=np.ones((2, 3))), "square"), (dict(lr=0.0), "lr must satisfy"),
    (dict(lr=3.0), "lr must satisfy"), (dict(lr=float("nan")), "lr must be a finite"), (dict(rtol=-1.0), "rtol"),
    (dict(rtol=True), "rtol must be a finite"), (dict(max_steps=-1), "max_steps")])
def test_gd_steps_to_tolerance_refuses_bad_arguments(kwargs, match):
    args = dict(ntk=np.diag([1.0, 0.5]), residual=np.ones(2), lr=0.5, rtol=0.1) | kwargs
    with pytest.raises(ValueError, match=match):
        ic.gd_steps_to_tolerance(**args)
