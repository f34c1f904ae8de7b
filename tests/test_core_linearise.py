"""linearise and empirical_ntk against an explicit Jacobian."""

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

import itlin_core as ic

PROBLEMS = {
    # name: (model, input shape)
    "mlp-tanh-scalar": (ic.mlp([3, 16, 16, 1], "tanh"), (6, 3)),
    "mlp-relu-vector-ntk": (ic.mlp([3, 12, 4], "relu", parameterisation="ntk", b_std=0.3), (5, 3)),
    "cnn-lenet50-small": (ic.lenet50(num_classes=3, input_shape=(16, 16, 2), channels=4, dense=(8,)), (3, 16, 16, 2)),
}


@pytest.fixture(params=sorted(PROBLEMS))
def problem(request):
    model, xshape = PROBLEMS[request.param]
    params = model.init(jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), xshape)
    return model, params, x


def random_like(params, key, scale=1.0):
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    return unravel(scale * jax.random.normal(key, flat.shape))


def add(a, b, s=1.0):
    return jax.tree_util.tree_map(lambda u, v: u + s * v, a, b)


def test_linearise_equals_f_at_anchor(problem):
    model, params, x = problem
    f_lin = ic.linearise(model.apply, params)
    np.testing.assert_array_equal(f_lin(params, x), model.apply(params, x))


def test_linearise_is_affine_with_jvp_slope(problem):
    model, params, x = problem
    f_lin = ic.linearise(model.apply, params)
    u = random_like(params, jax.random.PRNGKey(2), 0.1)
    v = random_like(params, jax.random.PRNGKey(3), 0.1)
    f0 = f_lin(params, x)
    du = f_lin(add(params, u), x) - f0
    dv = f_lin(add(params, v), x) - f0
    both = f_lin(add(add(params, u, 2.0), v, -3.0), x) - f0
    np.testing.assert_allclose(both, 2.0 * du - 3.0 * dv, rtol=1e-9, atol=1e-10)
    # The slope is J u, with J the explicit Jacobian.
    J = ic.flat_jacobian(model.apply, params, x)
    u_flat, _ = jax.flatten_util.ravel_pytree(u)
    np.testing.assert_allclose(np.asarray(du).reshape(-1), J @ u_flat, rtol=1e-8, atol=1e-10)


def test_linearisation_error_is_second_order():
    # Away from the anchor f and f_lin differ, by O(|delta|^2) for a smooth network.
    model = ic.mlp([3, 16, 16, 1], "tanh")
    params = model.init(jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (6, 3))
    f_lin = ic.linearise(model.apply, params)
    u = random_like(params, jax.random.PRNGKey(2), 0.05)
    errs = [float(jnp.linalg.norm(model.apply(add(params, u, a), x) - f_lin(add(params, u, a), x)))
            for a in (1.0, 0.5)]
    assert errs[0] > 1e-6
    assert 3.0 < errs[0] / errs[1] < 5.0  # halving the step quarters the error


def test_empirical_ntk_equals_explicit_jjt(problem):
    model, params, x = problem
    x2 = x[:2] * 0.7 + 0.1
    J1 = ic.flat_jacobian(model.apply, params, x)
    J2 = ic.flat_jacobian(model.apply, params, x2)
    n1, n2 = x.shape[0], x2.shape[0]
    o = J1.shape[0] // n1
    blocks = (J1 @ J2.T).reshape(n1, o, n2, o).transpose(0, 2, 1, 3)
    full = ic.empirical_ntk(model.apply, params, x, x2, full=True)
    np.testing.assert_allclose(full, blocks, rtol=1e-9, atol=1e-9)
    traced = ic.empirical_ntk(model.apply, params, x, x2)
    np.testing.assert_allclose(traced, np.trace(blocks, axis1=2, axis2=3), rtol=1e-9, atol=1e-9)
    chunked = ic.empirical_ntk(model.apply, params, x, x2, batch_size=2)
    np.testing.assert_allclose(chunked, traced, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ic.kernel_matrix(full), J1 @ J2.T, rtol=1e-9, atol=1e-9)


def test_empirical_ntk_default_second_argument_is_symmetric_psd(problem):
    model, params, x = problem
    k = np.asarray(ic.empirical_ntk(model.apply, params, x))
    np.testing.assert_allclose(k, k.T, rtol=1e-10, atol=1e-10)
    assert np.linalg.eigvalsh(k).min() > -1e-8 * np.abs(k).max()


def test_jacobian_method_equals_implicit(problem):
    model, params, x = problem
    x2 = x[:2] * 0.5
    for full in (False, True):
        a = ic.empirical_ntk(model.apply, params, x, x2, full=full)
        b = ic.empirical_ntk(model.apply, params, x, x2, full=full, method="jacobian")
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="method"):
        ic.empirical_ntk(model.apply, params, x, method="explicit")
