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
    "mlp-tanh-3-outputs": (ic.mlp([3, 8, 3], "tanh"), (5, 3)),
    "mlp-tanh-10-outputs": (ic.mlp([3, 8, 8, 10], "tanh"), (4, 3)),
    "cnn-lenet50-small": (ic.lenet50(num_classes=3, input_shape=(16, 16, 2), channels=4, dense=(8,)), (3, 16, 16, 2)),
    "mean-field-silu": (ic.mean_field_net(3, 20, tau0=0.8, activation="silu", beta=2.0), (7, 3)),
}


@pytest.fixture(params=sorted(PROBLEMS))
def problem(request):
    return _problem(request.param)


@pytest.fixture(params=sorted(set(PROBLEMS) - {"cnn-lenet50-small"}))
def dense_problem(request):
    """The problems without the CNN, for properties that do not depend on the kind of layer: the
    CNN's kernel is compared with its explicit Jacobian below, and linearise on CNNs (affine,
    exact at the anchor, first order) is tested on the ResNet-18s in test_models_cnn.py. Compiling
    the CNN's programs cost these three tests about 15 s of the suite's time."""
    return _problem(request.param)


def _problem(name):
    model, xshape = PROBLEMS[name]
    params = model.init(jax.random.PRNGKey(0))
    if name == "mean-field-silu":   # v = 0 at initialisation: move it, or half the kernel is zero
        params = {"u": params["u"], "v": jax.random.normal(jax.random.PRNGKey(4), params["v"].shape)}
    x = jax.random.normal(jax.random.PRNGKey(1), xshape)
    return model, params, x


def random_like(params, key, scale=1.0):
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    return unravel(scale * jax.random.normal(key, flat.shape))


def add(a, b, s=1.0):
    return jax.tree_util.tree_map(lambda u, v: u + s * v, a, b)


def test_linearise_equals_f_at_anchor(dense_problem):
    model, params, x = dense_problem
    f_lin = ic.linearise(model.apply, params)
    # equal up to round-off: the primal of jax.jvp may evaluate an activation by another formula
    np.testing.assert_allclose(f_lin(params, x), model.apply(params, x), rtol=1e-13, atol=1e-15)


def test_linearise_is_affine_with_jvp_slope(dense_problem):
    model, params, x = dense_problem
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


def explicit_blocks(model, params, x1, x2):
    j1, j2 = ic.flat_jacobian(model.apply, params, x1), ic.flat_jacobian(model.apply, params, x2)
    n1, n2 = x1.shape[0], x2.shape[0]
    o = j1.shape[0] // n1
    return np.asarray(j1 @ j2.T).reshape(n1, o, n2, o).transpose(0, 2, 1, 3)


_WANT = {}


def explicit_for(model, params, x):
    """The dense-Jacobian kernel blocks of (x, x2) and (x, x), computed once per problem."""
    x2 = x[:3] * 0.5 + 0.1
    key = id(model)
    if key not in _WANT:
        _WANT[key] = x2, explicit_blocks(model, params, x, x2), explicit_blocks(model, params, x, x)
    return _WANT[key]


def test_empirical_ntk_equals_explicit_jjt(problem):
    model, params, x = problem
    x2, blocks, _ = explicit_for(model, params, x)
    kernels = jax.jit(lambda p, a, b: (ic.empirical_ntk(model.apply, p, a, b, full=True),
                                       ic.empirical_ntk(model.apply, p, a, b),
                                       ic.empirical_ntk(model.apply, p, a, b, batch_size=2)))
    full, traced, chunked = kernels(params, x, x2)
    np.testing.assert_allclose(full, blocks, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(traced, np.trace(blocks, axis1=2, axis2=3), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(chunked, traced, rtol=1e-12, atol=1e-12)
    n1, n2, o = blocks.shape[0], blocks.shape[1], blocks.shape[2]
    np.testing.assert_allclose(ic.kernel_matrix(full), blocks.transpose(0, 2, 1, 3).reshape(n1 * o, n2 * o),
                               rtol=1e-9, atol=1e-9)


def test_empirical_ntk_default_second_argument_is_symmetric_psd(dense_problem):
    model, params, x = dense_problem
    k = np.asarray(ic.empirical_ntk(model.apply, params, x))
    np.testing.assert_allclose(k, k.T, rtol=1e-10, atol=1e-10)
    assert np.linalg.eigvalsh(k).min() > -1e-8 * np.abs(k).max()


def modes(blocks):
    """The kernel in each output mode, from the full blocks (N1, N2, O, O)."""
    return {"trace": np.trace(blocks, axis1=2, axis2=3), "diagonal": np.diagonal(blocks, axis1=2, axis2=3),
            "full": blocks}


@pytest.mark.parametrize("method", ic.ntk.METHODS)
def test_every_method_equals_the_explicit_jacobian(problem, method):
    """Each method in each output mode (traced, diagonal, full) against the dense Jacobian: with
    x2 given, whole and in chunks of 2 (examples, or columns for "implicit"; the sizes do not
    divide evenly), and with x2 = x1 (jitted, the three modes in one program, so that each case
    compiles once)."""
    model, params, x = problem
    x2, want2, want1 = explicit_for(model, params, x)

    def kernels(p, a, b=None, batch_size=None):
        return {mode: ic.empirical_ntk(model.apply, p, a, b, outputs=mode, method=method, batch_size=batch_size)
                for mode in ic.ntk.OUTPUTS}

    for batch_size in (None, 2):
        got = jax.jit(lambda p, a, b: kernels(p, a, b, batch_size))(params, x, x2)
        for mode, want in modes(want2).items():
            np.testing.assert_allclose(got[mode], want, rtol=1e-9, atol=1e-9 * np.abs(want2).max(), err_msg=mode)
    got = jax.jit(kernels)(params, x)
    for mode, want in modes(want1).items():
        np.testing.assert_allclose(got[mode], want, rtol=1e-9, atol=1e-9 * np.abs(want1).max(), err_msg=mode)


def test_full_true_is_outputs_full_and_conflicts_are_refused():
    model = ic.mlp([3, 8, 2])
    params, x = model.init(jax.random.PRNGKey(0)), jax.random.normal(jax.random.PRNGKey(1), (4, 3))
    np.testing.assert_array_equal(ic.empirical_ntk(model.apply, params, x, full=True),
                                  ic.empirical_ntk(model.apply, params, x, outputs="full"))
    for kwargs in ({"outputs": "blocks"}, {"outputs": "diagonal", "full": True}):
        with pytest.raises(ValueError, match="outputs must be one of"):
            ic.empirical_ntk(model.apply, params, x, **kwargs)


def test_bad_method_raises(problem):
    model, params, x = problem
    with pytest.raises(ValueError, match="method"):
        ic.empirical_ntk(model.apply, params, x, method="explicit")


def test_auto_chooses_per_example_jacobians_within_the_memory_and_ntvp_beyond(monkeypatch):
    model = ic.mlp([3, 16, 1])
    params, x = model.init(jax.random.PRNGKey(0)), jax.random.normal(jax.random.PRNGKey(1), (6, 3))
    calls = []
    real = ic.ntk._per_example_jacobian
    monkeypatch.setattr(ic.ntk, "_per_example_jacobian", lambda *a: calls.append(1) or real(*a))
    want = ic.empirical_ntk(model.apply, params, x, method="jacobian")
    np.testing.assert_allclose(ic.empirical_ntk(model.apply, params, x), want, rtol=1e-10)
    assert calls                                          # contraction of per-example Jacobians
    calls.clear()
    np.testing.assert_allclose(ic.empirical_ntk(model.apply, params, x, memory=200), want, rtol=1e-10)
    assert not calls                                      # too little memory for them: ntvp in chunks


def test_batchnorm_resnet_is_marked_as_coupling_its_examples():
    net = ic.resnet18(3, batch_norm=True, width=2)
    assert net.apply.couples_examples and ic.linearise(net.apply, None).couples_examples
    assert ic.models.centred(net.apply, None).couples_examples
    assert not ic.resnet18(3, batch_norm=False, width=2).apply.couples_examples


@pytest.mark.parametrize("wrap", [False, True], ids=["marked", "unmarked"])
def test_coupled_models_never_get_per_example_kernels(wrap, monkeypatch):
    """A model that normalises over the batch (BatchNorm in batch mode; here a batch-centred
    tanh layer) couples the examples: its kernel is the whole batch's Jacobian product. "auto"
    must never compute it one example at a time, and an explicit per-example method is refused.
    A marked apply (``couples_examples = True``, as ic.resnet18 sets) is recognised under jit;
    an unmarked one is caught outside jit by comparing the batch with a single example."""
    def apply(p, x):
        h = jnp.tanh(x @ p["w1"])
        return (h - h.mean(axis=0)) @ p["w2"]
    if not wrap:
        apply.couples_examples = True
    params = {"w1": jax.random.normal(jax.random.PRNGKey(0), (3, 5)),
              "w2": jax.random.normal(jax.random.PRNGKey(2), (5, 2))}
    x = jax.random.normal(jax.random.PRNGKey(1), (4, 3))
    j = ic.flat_jacobian(apply, params, x)
    want = np.asarray(j @ j.T).reshape(4, 2, 4, 2).transpose(0, 2, 1, 3)
    monkeypatch.setattr(ic.ntk, "_per_example_jacobian", lambda *a: pytest.fail("per-example Jacobian used"))
    kernel = (lambda p, a: ic.empirical_ntk(apply, p, a, full=True))
    got = kernel(params, x) if wrap else jax.jit(kernel)(params, x)   # the unmarked check runs eagerly
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    for method in ("contraction", "ntvp"):
        with pytest.raises(ValueError, match="depends on the other examples"):
            ic.empirical_ntk(apply, params, x, method=method)
