"""The linear probe against an independent least-squares computation, and the small CNN's
convolutions and features against lax.conv."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import itlin_core as ic
from itlin_core.metrics import linear_probe
from itlin_core.models import _max_pool, small_cnn


def probe_problem(n, d, m=40, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, d)) * 1.5
    y = rng.integers(0, classes, size=n + m)
    f = centres[y] + rng.normal(size=(n + m, d)) + 3.0  # an offset: the intercept matters
    return f[:n], y[:n], f[n:], y[n:]


def reference_probe(ftr, ytr, fte, classes, ridge):
    """Ridge regression with an unpenalised intercept, solved as one augmented least-squares
    problem by numpy: rows [F 1] for the data, rows [sqrt(lam) I 0] for the penalty."""
    n, d = ftr.shape
    fc = ftr - ftr.mean(0)
    lam = ridge * np.sum(fc ** 2) / d
    a = np.block([[ftr, np.ones((n, 1))], [np.sqrt(lam) * np.eye(d), np.zeros((d, 1))]])
    y = np.eye(classes)[ytr]
    b = np.vstack([y, np.zeros((d, classes))])
    coef = np.linalg.lstsq(a, b, rcond=None)[0]
    predict = lambda f: np.argmax(f @ coef[:d] + coef[d], axis=1)
    return predict(ftr), predict(fte), coef


@pytest.mark.parametrize("n, d", [(60, 10), (30, 50)], ids=["D<N primal", "D>N kernel form"])
@pytest.mark.parametrize("ridge", [1e-2, 1.0])
def test_linear_probe_is_ridge_regression(n, d, ridge):
    ftr, ytr, fte, yte = probe_problem(n, d)
    pred_tr, pred_te, _ = reference_probe(ftr, ytr, fte, 4, ridge)
    got = linear_probe(ftr, ytr, fte, yte, ridge=ridge, num_classes=4)
    assert float(got["train_accuracy"]) == pytest.approx(np.mean(pred_tr == ytr), abs=1e-6)  # fractions k/n
    assert float(got["test_accuracy"]) == pytest.approx(np.mean(pred_te == yte), abs=1e-6)
    # the probe is a real classifier here: better than chance on held-out data
    assert float(got["test_accuracy"]) > 0.5


def test_linear_probe_outputs_match_least_squares_exactly():
    """Compare the fitted outputs, not only the argmax: the probe's scores through the
    (private) closed form equal numpy's augmented least squares to rounding."""
    ftr, ytr, fte, yte = probe_problem(80, 12)
    for ridge in (0.0, 0.3):
        _, _, coef = reference_probe(ftr, ytr, fte, 4, ridge)
        ref_scores = fte @ coef[:12] + coef[12]
        # our closed form written out: centre, solve, add back the mean target
        fc, yc = ftr - ftr.mean(0), np.eye(4)[ytr] - np.eye(4)[ytr].mean(0)
        lam = ridge * np.sum(fc ** 2) / 12
        w = np.linalg.solve(fc.T @ fc + lam * np.eye(12), fc.T @ yc)
        ours = (fte - ftr.mean(0)) @ w + np.eye(4)[ytr].mean(0)
        np.testing.assert_allclose(ours, ref_scores, rtol=1e-9, atol=1e-9)
        got = linear_probe(ftr, ytr, fte, yte, ridge=ridge, num_classes=4)
        assert float(got["test_accuracy"]) == pytest.approx(np.mean(np.argmax(ref_scores, 1) == yte), abs=1e-6)


def test_linear_probe_is_scale_invariant_and_jittable():
    ftr, ytr, fte, yte = probe_problem(50, 8)
    a = linear_probe(ftr, ytr, fte, yte, ridge=0.1)
    b = linear_probe(1e3 * ftr, ytr, 1e3 * fte, yte, ridge=0.1)
    assert float(a["test_accuracy"]) == float(b["test_accuracy"])
    jitted = jax.jit(lambda f, g: linear_probe(f, ytr, g, yte, ridge=0.1, num_classes=4))
    assert float(jitted(ftr, fte)["test_accuracy"]) == float(a["test_accuracy"])


def test_linear_probe_bad_arguments():
    ftr, ytr, fte, yte = probe_problem(20, 5)
    with pytest.raises(ValueError, match="same D"):
        linear_probe(ftr, ytr, fte[:, :3], yte)
    with pytest.raises(ValueError, match="labels"):
        linear_probe(ftr, ytr[:5], fte, yte)
    with pytest.raises(ValueError, match="ridge"):
        linear_probe(ftr, ytr, fte, yte, ridge=-1.0)
    with pytest.raises(ValueError, match="num_classes"):
        jax.jit(lambda f: linear_probe(f, jnp.asarray(ytr), f, jnp.asarray(ytr))["test_accuracy"])(ftr)


def test_small_cnn_matches_lax_conv():
    model = small_cnn(10, (8, 8, 1), (4, 6), 12)
    params = model.init(jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (5, 8, 8, 1))

    def block(h, p):  # the textbook definition through lax.conv_general_dilated
        y = jax.lax.conv_general_dilated(h, p["w"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return _max_pool(jax.nn.relu(y + p["b"]))

    h1 = block(x, params["conv1"])
    h2 = block(h1, params["conv2"])
    logits = jax.nn.relu(h2.reshape(5, -1) @ params["dense"]["w"] + params["dense"]["b"]) @ params["out"]["w"] \
        + params["out"]["b"]
    np.testing.assert_allclose(model.features(params, x, 1), h1.reshape(5, -1), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(model.features(params, x, 2), h2.reshape(5, -1), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(model.apply(params, x), logits, rtol=1e-10, atol=1e-10)
    assert model.apply(params, x).shape == (5, 10) and h1.shape == (5, 4, 4, 4) and h2.shape == (5, 2, 2, 6)
    assert ic.count_params(params) == 9 * 4 + 4 + 9 * 4 * 6 + 6 + 24 * 12 + 12 + 12 * 10 + 10
    with pytest.raises(ValueError, match="layer must be 1 or 2"):
        model.features(params, x, 3)
    with pytest.raises(ValueError, match="multiples of 4"):
        small_cnn(input_shape=(7, 7, 1))
