"""Closed-form gradient flow (000 Lemma 3.2.1, App. B) against simulated small-step gradient
descent on the linear(ised) model, its t = inf limit, and a near-singular kernel."""

import math

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

import itlin_core as ic


def linear_problem(n=7, p=20, m=5, o=1, seed=0):
    k = jax.random.split(jax.random.PRNGKey(seed), 5)
    phi, phi_test = jax.random.normal(k[0], (n, p)), jax.random.normal(k[1], (m, p))
    theta0 = jax.random.normal(k[2], (p, o)) * 0.3
    y = jax.random.normal(k[3], (n, o))
    return phi, phi_test, theta0, y


def simulate_gd(phi, theta0, y, t, steps_per_unit):
    """Explicit small-step gradient descent on 1/2 ||phi theta - y||^2 up to time t."""
    n_steps = int(round(t * steps_per_unit))
    lr = t / n_steps

    def body(theta, _):
        return theta - lr * phi.T @ (phi @ theta - y), None

    return jax.lax.scan(body, theta0, None, length=n_steps)[0]


@pytest.mark.parametrize("t", [0.01, 0.1, 0.5, 2.0])
@pytest.mark.parametrize("o", [1, 3])
def test_closed_form_matches_small_step_gd_on_train_and_test(t, o):
    phi, phi_test, theta0, y = linear_problem(o=o)
    ntk, ntk_test = phi @ phi.T, phi_test @ phi.T
    f_tr, f_te = ic.gradient_flow(ntk, phi @ theta0, y, t, ntk_test, phi_test @ theta0)
    theta_t = simulate_gd(phi, theta0, y, t, steps_per_unit=20_000)
    # Euler's method has O(step) error: compare to the same tolerance scale.
    scale = float(jnp.abs(phi @ theta0 - y).max())
    np.testing.assert_allclose(f_tr, phi @ theta_t, atol=2e-3 * scale)
    np.testing.assert_allclose(f_te, phi_test @ theta_t, atol=2e-3 * scale)
    assert f_tr.shape == (7, o) and f_te.shape == (5, o)


def test_time_array_and_convergence_to_interpolation():
    phi, phi_test, theta0, y = linear_problem()
    ntk, ntk_test = phi @ phi.T, phi_test @ phi.T
    ts = jnp.array([0.0, 1.0, 10.0, 1e4, math.inf])
    f_tr, f_te = ic.gradient_flow(ntk, phi @ theta0, y, ts, ntk_test, phi_test @ theta0)
    assert f_tr.shape == (5, 7, 1)
    np.testing.assert_allclose(f_tr[0], phi @ theta0, atol=1e-12)
    np.testing.assert_allclose(f_tr[-1], y, atol=1e-10)  # t = inf interpolates the training data
    np.testing.assert_allclose(f_tr[-2], f_tr[-1], atol=1e-8)
    # t = inf is the minimum-norm interpolant: theta0 + phi^+ (y - phi theta0)
    theta_inf = theta0 + np.linalg.pinv(np.asarray(phi)) @ (y - phi @ theta0)
    np.testing.assert_allclose(f_te[-1], phi_test @ theta_inf, atol=1e-10)
    # the training loss never increases along the flow
    losses = [float(jnp.sum((f - y) ** 2)) for f in f_tr]
    assert all(a >= b - 1e-12 for a, b in zip(losses, losses[1:]))


def test_near_singular_kernel_is_stable():
    # Two identical training inputs with identical labels: the kernel is singular, the flow is not.
    phi, phi_test, theta0, y = linear_problem()
    phi = phi.at[1].set(phi[0])
    y = y.at[1].set(y[0])
    ntk = phi @ phi.T
    assert np.linalg.eigvalsh(np.asarray(ntk)).min() < 1e-10 * float(jnp.abs(ntk).max())
    for t in [0.5, math.inf]:
        f_tr, f_te = ic.gradient_flow(ntk, phi @ theta0, y, t, phi_test @ phi.T, phi_test @ theta0)
        assert np.all(np.isfinite(f_tr)) and np.all(np.isfinite(f_te))
    theta_half = simulate_gd(phi, theta0, y, 0.5, 20_000)
    f_tr, f_te = ic.gradient_flow(ntk, phi @ theta0, y, 0.5, phi_test @ phi.T, phi_test @ theta0)
    np.testing.assert_allclose(f_te, phi_test @ theta_half, atol=5e-3)
    f_tr, _ = ic.gradient_flow(ntk, phi @ theta0, y, math.inf)
    np.testing.assert_allclose(f_tr, y, atol=1e-9)


def test_small_times_keep_their_digits():
    # Starting from f0 = 0 the flow gives f_t = (I - e^{-ntk t}) y, about t * ntk @ y for small t.
    # Written as 1 - exp(-ev t) this would lose about 6 of its 16 digits at t = 1e-12;
    # with expm1 it keeps them (the second-order term is ~1e-12 relative).
    phi, _, _, y = linear_problem()
    ntk = phi @ phi.T
    t = 1e-12
    f_tr, _ = ic.gradient_flow(ntk, jnp.zeros_like(y), y, t)
    np.testing.assert_allclose(f_tr / t, ntk @ y, rtol=1e-9)


def test_params_flow_of_a_network_matches_function_flow_and_gn():
    model = ic.mlp([2, 32, 1], "tanh")
    params = model.init(jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (6, 2))
    x_test = jax.random.normal(jax.random.PRNGKey(2), (4, 2))
    y = jnp.sin(3 * x[:, :1])
    ntk = ic.empirical_ntk(model.apply, params, x)
    ntk_test = ic.empirical_ntk(model.apply, params, x_test, x)
    f_lin = ic.linearise(model.apply, params)
    for t in [0.3, 3.0, math.inf]:
        theta_t = ic.gradient_flow_params(model.apply, params, x, y, t)
        f_tr, f_te = ic.gradient_flow(ntk, model.apply(params, x), y, t, ntk_test, model.apply(params, x_test))
        np.testing.assert_allclose(f_lin(theta_t, x), f_tr, atol=1e-9)
        np.testing.assert_allclose(f_lin(theta_t, x_test), f_te, atol=1e-9)
    gn = ic.gn_step(model.apply, params, x, y)
    a = jax.flatten_util.ravel_pytree(theta_t)[0]
    b = jax.flatten_util.ravel_pytree(gn)[0]
    np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
