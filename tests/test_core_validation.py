"""Bad input raises ValueError with a sentence that says what was wrong and what is allowed."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin_core as ic
from itlin_core.book import common, iterative_linearisation

MODEL = ic.mlp([2, 8, 1], "tanh")
PARAMS = MODEL.init(jax.random.PRNGKey(0))
X = jnp.ones((4, 2))
Y = jnp.zeros((4, 1))


@pytest.mark.parametrize("K", [0, -3, 2.5, True, "5", -math.inf, math.nan])
def test_bad_period(K):
    with pytest.raises(ValueError, match="K"):
        ic.make_il_step(MODEL.apply, ic.squared_error, optax.sgd(0.1), K)


@pytest.mark.parametrize("K", [1, 7, 5.0, 1e6, None, math.inf, 10**12])
def test_good_period(K):
    ic.make_il_step(MODEL.apply, ic.squared_error, optax.sgd(0.1), K)


@pytest.mark.parametrize("damping", [-1.0, -1e-12, math.nan, math.inf, "a lot"])
def test_bad_damping(damping):
    with pytest.raises(ValueError, match="damping"):
        ic.gn_direction(MODEL.apply, PARAMS, X, Y, damping)
    with pytest.raises(ValueError, match="damping"):
        ic.gn_step(MODEL.apply, PARAMS, X, Y, damping=damping)
    with pytest.raises(ValueError, match="damping"):
        ic.make_il_step(MODEL.apply, ic.squared_error, optax.sgd(0.1), 3, damping=damping)


def test_mismatched_shapes():
    with pytest.raises(ValueError, match="shape"):
        ic.gn_direction(MODEL.apply, PARAMS, X, jnp.zeros((5, 1)))
    with pytest.raises(ValueError, match="shape"):
        ic.gn_step(MODEL.apply, PARAMS, X, jnp.zeros((4, 2)))
    with pytest.raises(ValueError, match="same shape"):
        ic.squared_error(jnp.zeros((4, 1)), jnp.zeros((3, 1)))
    ntk = jnp.eye(4)
    with pytest.raises(ValueError, match="N"):
        ic.gradient_flow(ntk, jnp.zeros(5), jnp.zeros(5), 1.0)
    with pytest.raises(ValueError, match="y_train"):
        ic.gradient_flow(ntk, jnp.zeros(4), jnp.zeros(3), 1.0)
    with pytest.raises(ValueError, match="ntk_test_train"):
        ic.gradient_flow(ntk, jnp.zeros(4), jnp.zeros(4), 1.0, jnp.ones((3, 5)), jnp.zeros(3))
    with pytest.raises(ValueError, match="both"):
        ic.gradient_flow(ntk, jnp.zeros(4), jnp.zeros(4), 1.0, jnp.ones((3, 4)))
    with pytest.raises(ValueError, match="t must be"):
        ic.gradient_flow(ntk, jnp.zeros(4), jnp.zeros(4), -1.0)
    with pytest.raises(ValueError, match="same shape"):
        ic.kernel_distance(jnp.eye(3), jnp.eye(4))


@pytest.mark.parametrize("name", ["huge", "", "Smoke!", "gpu"])
def test_unknown_preset(name, monkeypatch):
    with pytest.raises(ValueError, match="smoke, book, laptop, colab, paper"):
        common.get_preset(name)
    monkeypatch.setenv("ITLIN_PRESET", name)
    with pytest.raises(ValueError, match="ITLIN_PRESET"):
        common.get_preset()


def test_known_presets(monkeypatch):
    monkeypatch.delenv("ITLIN_PRESET", raising=False)
    assert common.get_preset() == "book"
    monkeypatch.setenv("ITLIN_PRESET", "Smoke")
    assert common.get_preset() == "smoke"
    for name in common.PRESETS:
        assert iterative_linearisation.il_toy_config(name).steps > 0


def test_without_itlin_preset_a_gpu_chooses_colab(monkeypatch):
    """Issue: "Run all" on a Colab GPU trained nothing, because the default was always book."""
    monkeypatch.delenv("ITLIN_PRESET", raising=False)
    monkeypatch.setattr(common.jax, "default_backend", lambda: "gpu")
    assert common.get_preset() == "colab"
    assert common.preset_line("colab").startswith("preset: colab (no $ITLIN_PRESET and JAX found a GPU")
    assert common.get_preset("book") == "book" and "chosen in the cell above" in common.preset_line("book")
    monkeypatch.setenv("ITLIN_PRESET", "book")                         # the variable still wins
    assert common.get_preset() == "book" and "from $ITLIN_PRESET" in common.preset_line("book")
    monkeypatch.delenv("ITLIN_PRESET")
    monkeypatch.setattr(common.jax, "default_backend", lambda: "cpu")
    assert common.get_preset() == "book" and "no GPU" in common.preset_line("book")


def test_other_bad_arguments():
    with pytest.raises(ValueError, match="solve_dtype|64-bit"):
        with jax.enable_x64(False):
            ic.gn_direction(MODEL.apply, PARAMS, X, Y, 0.1, solve_dtype=jnp.float64)
    with pytest.raises(ValueError, match="batch_size"):
        ic.minibatches(jax.random.PRNGKey(0), X, Y, 0)
    with pytest.raises(ValueError, match="on_nonfinite"):
        ic.train(lambda s, b: (s, {"loss": 0.0}), 0, (X, Y), 3, on_nonfinite="maybe")
    with pytest.raises(ValueError, match="num_steps"):
        ic.tgn_step(MODEL.apply, PARAMS, X, Y, loss_fn=ic.squared_error, optimizer=optax.sgd(0.1), num_steps=0)
    with pytest.raises(ValueError, match="activation"):
        ic.mlp([2, 3, 1], "swish-ish")
    with pytest.raises(ValueError, match="parameterisation"):
        ic.mlp([2, 3, 1], parameterisation="mean-field")


@pytest.mark.parametrize("value,mode", [("1", "auto"), ("true", "auto"), ("on", "auto"), ("0", "off"),
                                        ("FALSE", "off"), ("text", "text"), (True, "auto"), (False, "off")])
def test_progress_modes(value, mode, monkeypatch):
    from itlin_core._progress import progress_mode
    if isinstance(value, bool):
        assert progress_mode(value) == mode
    else:
        monkeypatch.setenv("ITLIN_PROGRESS", value)
        assert progress_mode(None) == mode


def test_a_misspelt_progress_mode_is_refused(monkeypatch):
    monkeypatch.setenv("ITLIN_PROGRESS", "txet")
    step = ic.make_il_step(MODEL.apply, ic.squared_error, optax.sgd(0.1), 1)
    with pytest.raises(ValueError, match="ITLIN_PROGRESS"):
        ic.train(step, ic.init_il_state(PARAMS, optax.sgd(0.1)), (X, Y), 2)


@pytest.mark.parametrize("K", [jnp.array(0), jnp.array([1, -3]), jnp.array([2, 0])])
def test_a_concrete_array_of_periods_is_checked_too(K):
    with pytest.raises(ValueError, match="K .* at least 1 in every entry"):
        ic.make_il_step(MODEL.apply, ic.squared_error, optax.sgd(0.1), K)


LOGITS = jnp.array([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0], [2.0, 0.0, 0.0]])


@pytest.mark.parametrize("fn", [ic.accuracy, ic.softmax_cross_entropy], ids=["accuracy", "cross-entropy"])
def test_class_labels_of_shape_n_1_mean_the_same_as_n(fn):
    y = jnp.array([0, 1, 1, 0])
    assert float(fn(LOGITS, y[:, None])) == float(fn(LOGITS, y))
    assert float(ic.accuracy(LOGITS, y[:, None])) == 0.75          # not a mean over a broadcast 4 x 4


@pytest.mark.parametrize("fn", [ic.accuracy, ic.softmax_cross_entropy], ids=["accuracy", "cross-entropy"])
@pytest.mark.parametrize("labels, error, words", [
    (jnp.array([0, 1, 2, -1]), ValueError, r"labels must be classes in \[0, 3\).*from -1"),
    (jnp.array([0, 1, 2, 3]), ValueError, r"labels must be classes in \[0, 3\).*to 3"),
    (jax.nn.one_hot(jnp.array([0, 1, 2, 0]), 3), ValueError, "one-hot labels: labels.argmax"),
    (jnp.array([0.0, 1.0, 2.0, 0.0]), TypeError, "integer class indices"),
    (jnp.array([0, 1]), ValueError, r"labels must have shape \(4,\)"),
])
def test_bad_class_labels_are_named(fn, labels, error, words):
    with pytest.raises(error, match=words):
        fn(LOGITS, labels)


@pytest.mark.parametrize("fn", [ic.accuracy, ic.softmax_cross_entropy], ids=["accuracy", "cross-entropy"])
def test_out_of_range_labels_under_jit_give_nan_not_a_class(fn):
    """Under jit the values are unknown: -1 must not count as the last class, 3 not as anything."""
    for bad in ([0, 1, 2, -1], [0, 1, 2, 3]):
        assert math.isnan(float(jax.jit(fn)(LOGITS, jnp.array(bad))))
    assert float(jax.jit(ic.accuracy)(LOGITS, jnp.array([0, 1, 2, 0]))) == 1.0


def test_an_empty_batch_is_refused_by_the_classification_losses():
    for fn in (ic.accuracy, ic.softmax_cross_entropy):
        with pytest.raises(ValueError, match="batch is empty"):
            fn(jnp.zeros((0, 3)), jnp.zeros((0,), jnp.int32))


EMPTY = jnp.zeros((0, 2))


@pytest.mark.parametrize("call", [
    lambda: ic.gn_step(MODEL.apply, PARAMS, EMPTY, jnp.zeros((0, 1))),
    lambda: ic.empirical_ntk(MODEL.apply, PARAMS, EMPTY),
    lambda: ic.empirical_ntk(MODEL.apply, PARAMS, X, EMPTY),
    lambda: ic.gradient_flow(jnp.zeros((0, 0)), jnp.zeros((0,)), jnp.zeros((0,)), 1.0),
    lambda: ic.gradient_flow_params(MODEL.apply, PARAMS, EMPTY, jnp.zeros((0, 1)), 1.0),
], ids=["gn_step", "empirical_ntk-x1", "empirical_ntk-x2", "gradient_flow", "gradient_flow_params"])
def test_an_empty_batch_is_named(call):
    with pytest.raises(ValueError, match="holds no examples"):
        call()


def test_kernel_inputs_of_different_example_shapes_are_named():
    with pytest.raises(ValueError, match="x1 and x2 must hold examples of the same shape"):
        ic.empirical_ntk(MODEL.apply, PARAMS, X, jnp.ones((3, 5)))


@pytest.mark.parametrize("damping", ["5", b"5", True])
def test_a_damping_that_only_looks_like_a_number_is_refused(damping):
    with pytest.raises(ValueError, match="damping must be a non-negative number"):
        ic.gn_step(MODEL.apply, PARAMS, X, Y, damping=damping)


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf])
def test_a_damping_rule_returning_a_bad_lambda(value):
    """Eagerly the rule's value is checked; under jit it cannot be, and the step becomes NaN
    (so that training reports a divergence) instead of a silent zero or wrong step."""
    rule = lambda ev: value + 0.0 * ev[0]
    with pytest.raises(ValueError, match="damping: the callable must return one finite number >= 0"):
        ic.gn_step(MODEL.apply, PARAMS, X, Y, damping=rule)
    stepped = jax.jit(lambda p: ic.gn_step(MODEL.apply, p, X, Y, damping=rule))(PARAMS)
    assert not all(bool(jnp.all(jnp.isfinite(a))) for a in jax.tree.leaves(stepped))


@pytest.mark.parametrize("rtol", [math.nan, -0.1, math.inf, "0"])
def test_tgn_rtol_must_be_a_finite_non_negative_number(rtol):
    with pytest.raises(ValueError, match="rtol must be a finite number >= 0"):
        ic.tgn_step(MODEL.apply, PARAMS, X, Y, loss_fn=ic.squared_error, optimizer=optax.sgd(0.1),
                    num_steps=3, rtol=rtol)


@pytest.mark.parametrize("t", [jnp.array([0.0, math.nan]), jnp.array([1.0, -1.0]), math.nan])
def test_gradient_flow_times_must_be_non_negative_numbers(t):
    with pytest.raises(ValueError, match="t must be"):
        ic.gradient_flow(jnp.eye(2), jnp.zeros(2), jnp.ones(2), t)


def test_a_sweep_state_that_was_not_replicated_is_named():
    opt = optax.sgd(0.1)
    step, _ = ic.make_il_sweep_step(MODEL.apply, ic.squared_error, opt, (1, 3, None))
    with pytest.raises(ValueError, match=r"lead with an axis of 3 runs.*ic.replicate"):
        step(ic.init_il_state(PARAMS, opt), (X, Y))
    with pytest.raises(ValueError, match="lead with an axis of 3 runs"):
        step(ic.replicate(ic.init_il_state(PARAMS, opt), 2), (X, Y))
    step(ic.replicate(ic.init_il_state(PARAMS, opt), 3), (X, Y))


CNNS = {"lenet50": (ic.lenet50(3, (16, 16, 2), channels=4, dense=(8,)), (16, 16, 2)),
        "resnet18": (ic.resnet18(3, in_channels=2, width=2), (8, 8, 2))}


@pytest.mark.parametrize("name", sorted(CNNS))
def test_cnns_name_channels_first_and_uint8_images(name):
    model, (h, w, c) = CNNS[name]
    params = model.init(jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"channels-first \(NCHW\): pass x.transpose\(0, 2, 3, 1\)"):
        model.apply(params, jnp.zeros((2, c, h, w)))
    with pytest.raises(TypeError, match="floating-point pixels, got dtype uint8"):
        model.apply(params, jnp.zeros((2, h, w, c), jnp.uint8))
    with pytest.raises(ValueError, match="x must be a batch of images"):
        model.apply(params, jnp.zeros((h, w, c)))


@pytest.mark.parametrize("fn", [lambda x: ic.channel_stats(x), lambda x: ic.random_crop(jax.random.key(0), x),
                                lambda x: ic.augment(jax.random.key(0), x)], ids=["channel_stats", "random_crop", "augment"])
def test_channels_first_images_are_not_augmented_on_the_wrong_axes(fn):
    with pytest.raises(ValueError, match="looks channels-first"):
        fn(jnp.zeros((2, 3, 32, 32), jnp.uint8))
    fn(jnp.zeros((2, 32, 32, 3), jnp.uint8))


# ---------------------------------------------------------------------------------------------
# Issue 45, round 2: the algorithm layer's bad inputs. Each test fails without its fix.

def test_refit_test_loss_refuses_targets_that_would_broadcast():
    """(M,) predictions against (M, 1) targets used to broadcast to an (M, M) error."""
    phi, y = jnp.eye(3), jnp.arange(3.0)
    with pytest.raises(ValueError, match=r"y_test must have shape \(3,\).*got \(3, 1\)"):
        ic.refit_test_loss(phi, y, phi, y[:, None])
    with pytest.raises(ValueError, match=r"y_test must have shape \(3, 1\)"):
        ic.refit_test_loss(phi, y[:, None], phi, y)
    with pytest.raises(ValueError, match="features_test"):
        ic.refit_test_loss(phi, y, jnp.ones((2, 4)), jnp.ones(2))
    rng = np.random.default_rng(0)                       # good inputs: numpy's minimum-norm least squares
    ftr, ytr, fte, yte = rng.normal(size=(4, 6)), rng.normal(size=4), rng.normal(size=(5, 6)), rng.normal(size=5)
    v = np.linalg.pinv(ftr) @ ytr
    want = 0.5 * np.sum((fte @ v - yte) ** 2) / 5
    assert float(ic.refit_test_loss(ftr, ytr, fte, yte)) == pytest.approx(want, rel=1e-4)


@pytest.mark.parametrize("fn", [ic.squared_error, ic.rmse], ids=["squared_error", "rmse"])
@pytest.mark.parametrize("shapes", [((4, 6), (4, 2, 3)), ((4,), (4, 1, 1)), ((2, 2), (4,)), ((4, 1), (1, 4))])
def test_regression_losses_refuse_a_reshape(fn, shapes):
    with pytest.raises(ValueError, match="outputs and targets must have the same shape"):
        fn(jnp.zeros(shapes[0]), jnp.ones(shapes[1]))


def test_regression_losses_keep_n_against_n_1():
    out, y = np.array([[1.0], [2.0], [4.0]]), np.array([0.0, 1.0, 1.0])
    assert float(ic.squared_error(out, y)) == float(ic.squared_error(out[:, 0], y[:, None])) == 0.5 * (1 + 1 + 9)
    assert float(ic.rmse(out, y)) == pytest.approx(np.sqrt(11 / 3))


@pytest.mark.parametrize("labels, num_classes, error, words", [
    ([0, 0, 0, 0, 1, 1, 1, -1], None, ValueError, r"labels .* must be classes in \[0, 2\).*from -1"),
    ([0, 0, 0, 0, 1, 1, 1, 5], 2, ValueError, r"labels .* must be classes in \[0, 2\).*to 5"),
    ([0, 0, 0, 0, 1, 1, 1, 1.5], None, TypeError, "y_train must be integer class labels"),
    ([0, 0, 0, 0, 1, 1, 1, 1], 0, ValueError, "num_classes must be a positive integer"),
    ([0, 0, 0, 0, 1, 1, 1, 1], 2.5, ValueError, "num_classes must be a positive integer"),
])
def test_linear_probe_refuses_labels_outside_its_classes(labels, num_classes, error, words):
    f = jnp.arange(8.0)[:, None]
    with pytest.raises(error, match=words):
        ic.linear_probe(f, jnp.array(labels), f, jnp.array([0, 0, 0, 0, 1, 1, 1, 1]), num_classes=num_classes)


def test_linear_probe_under_jit_gives_nan_for_labels_out_of_range():
    f, good = jnp.arange(8.0)[:, None], jnp.array([0, 0, 0, 0, 1, 1, 1, 1])
    probe = jax.jit(lambda y: ic.linear_probe(f, y, f, good, num_classes=2)["test_accuracy"])
    assert float(probe(good)) == 1.0
    assert math.isnan(float(probe(good.at[-1].set(-1)))) and math.isnan(float(probe(good.at[-1].set(2))))
    with pytest.raises(ValueError, match=r"ridge must be a finite number >= 0"):
        ic.linear_probe(f, good, f, good, ridge=math.inf)


NOT_SYMMETRIC = jnp.array([[1.0, 2.0], [0.0, 1.0]])


@pytest.mark.parametrize("kmat, error, words", [
    (NOT_SYMMETRIC, ValueError, r"kmat is not symmetric: max \|K - K\^T\| = 2 exceeds the tolerance"),
    (jnp.diag(jnp.array([1.0, -1.0])), ValueError, "kmat is not positive semi-definite: its smallest eigenvalue -1"),
    (jnp.eye(2) * (1 + 1j), TypeError, "kmat must hold real numbers, got dtype complex"),
    (jnp.zeros((2, 2)), ValueError, "kmat is all zeros"),
    (jnp.eye(2).at[0, 0].set(jnp.nan), ValueError, "kmat holds NaN or infinite entries"),
    (jnp.ones((2, 3)), ValueError, r"kmat must be a square \(n, n\) matrix"),
    (jnp.zeros((0, 0)), ValueError, r"kmat must be a square \(n, n\) matrix with n >= 1"),
], ids=["asymmetric", "indefinite", "complex", "zero", "nan", "not square", "empty"])
def test_kernel_solve_checks_its_kernel_instead_of_repairing_it(kmat, error, words):
    with pytest.raises(error, match=words):
        ic.kernel_solve(kmat, jnp.ones(kmat.shape[0]))


@pytest.mark.parametrize("rcond", [-1.0, math.nan, math.inf, 1.0, "0", True])
def test_rcond_must_be_a_number_in_0_1(rcond):
    for call in (lambda: ic.kernel_solve(jnp.eye(2), jnp.ones(2), rcond=rcond),
                 lambda: ic.gradient_flow(jnp.eye(2), jnp.zeros(2), jnp.ones(2), 1.0, rcond=rcond),
                 lambda: ic.gn_direction(MODEL.apply, PARAMS, X, Y, rcond=rcond),
                 lambda: ic.min_norm_readout(jnp.eye(2), jnp.ones(2), rcond=rcond)):
        with pytest.raises(ValueError, match=r"rcond .* must be a number in \[0, 1\)"):
            call()


def test_kernel_solve_good_kernels_still_solve():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 3)).astype(np.float32)
    k, rhs = a @ a.T, rng.normal(size=(5, 2)).astype(np.float32)       # rank 3: the pseudo-inverse
    want = np.linalg.pinv(k.astype(np.float64), rcond=1e-4, hermitian=True) @ rhs
    np.testing.assert_allclose(ic.kernel_solve(k, rhs), want, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(ic.kernel_solve(k, rhs, 0.5), np.linalg.solve(k + 0.5 * np.eye(5), rhs), rtol=1e-4, atol=1e-5)
    noisy = k + 1e-7 * np.abs(k).max() * np.triu(np.ones((5, 5), np.float32), 1)    # rounding-sized asymmetry
    ic.kernel_solve(noisy, rhs)
    np.testing.assert_allclose(ic.kernel_solve(jnp.zeros((2, 2)), jnp.array([2.0, 4.0]), 2.0), [1.0, 2.0])  # damped
    np.testing.assert_allclose(ic.kernel_solve(np.diag([2, 4]), np.ones(2)), [0.5, 0.25])             # integers
    with pytest.raises(ValueError, match=r"rhs must have the kernel's n = 2 rows"):
        ic.kernel_solve(jnp.eye(2), jnp.ones(3))
    jitted = jax.jit(ic.kernel_solve)(NOT_SYMMETRIC, jnp.ones(2))            # traced: the dtype and shapes only
    assert jitted.shape == (2,)


@pytest.mark.parametrize("ntk, words", [
    (NOT_SYMMETRIC, "ntk_train is not symmetric"), (jnp.diag(jnp.array([1.0, -1.0])), "ntk_train is not positive"),
    (jnp.zeros((2, 2)), "ntk_train is all zeros"), (jnp.eye(2) * (1 + 0j), "ntk_train must hold real numbers"),
])
def test_gradient_flow_checks_its_kernel(ntk, words):
    with pytest.raises((ValueError, TypeError), match=words):
        ic.gradient_flow(ntk, jnp.zeros(2), jnp.ones(2), 1.0)
    with pytest.raises(TypeError, match="ntk_test_train must hold real numbers"):
        ic.gradient_flow(jnp.eye(2), jnp.zeros(2), jnp.ones(2), 1.0, jnp.ones((3, 2)) * 1j, jnp.zeros(3))


def test_gd_steps_to_tolerance_checks_its_kernel():
    with pytest.raises(ValueError, match="ntk is not symmetric"):
        ic.gd_steps_to_tolerance(np.array([[1.0, 0.5], [0.0, 1.0]]), np.ones(2), 0.5, 0.1)
    with pytest.raises(ValueError, match="ntk is not positive semi-definite"):
        ic.gd_steps_to_tolerance(np.diag([1.0, -0.5]), np.ones(2), 0.5, 0.1)


IMAGES = np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3)


@pytest.mark.parametrize("mean, std, words", [
    (np.zeros(2), np.ones(2), r"mean must be one number or one per channel, shape \(3,\)"),
    (0.5, np.ones(4), "std must be one number or one per channel"),
    (0.5, np.array([1.0, 0.0, 1.0]), r"std must be finite and > 0 .* got \[1.0, 0.0, 1.0\]"),
    (0.5, -0.5, "std must be finite and > 0"), (math.nan, 0.5, "mean must be finite"),
    (0.5, math.inf, "std must be finite"), ("0.5", 0.5, "mean must be one number"),
])
def test_normalise_refuses_bad_statistics(mean, std, words):
    with pytest.raises(ValueError, match=words):
        ic.normalise(IMAGES, mean, std)
    with pytest.raises(ValueError, match=words):                # at construction, not at the first step
        ic.augmented_minibatches(jax.random.key(0), IMAGES, np.arange(2), 1, mean=mean, std=std)


def test_normalise_good_statistics_match_numpy():
    mean, std = np.array([0.1, 0.2, 0.3]), np.array([0.5, 0.25, 2.0])
    np.testing.assert_allclose(ic.normalise(IMAGES, mean, std), (IMAGES / 255.0 - mean) / std, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ic.normalise(IMAGES, 0.5, [2.0]), (IMAGES / 255.0 - 0.5) / 2.0, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("build, words", [
    (lambda: ic.lenet50(num_classes=0), "num_classes must be a positive integer, got 0"),
    (lambda: ic.lenet50(3, (16, 16, 1), channels=2.5), "channels must be a positive integer, got 2.5"),
    (lambda: ic.lenet50(3, (16, 16, 1), dense=(0,)), r"dense\[0\] must be a positive integer"),
    (lambda: ic.lenet50(3, (16.5, 16, 1)), r"input_shape\[0\] must be a positive integer"),
    (lambda: ic.lenet50(3, (16, 16)), "input_shape must be a sequence of 3 positive integers"),
    (lambda: ic.mlp([3, 0, 2]), r"layer_sizes\[1\] must be a positive integer, got 0"),
    (lambda: ic.mlp([3, 2.5, 2]), r"layer_sizes\[1\] must be a positive integer, got 2.5"),
    (lambda: ic.mlp([3, "4", 2]), r"layer_sizes\[1\] must be a positive integer"),
    (lambda: ic.mlp([3, True, 2]), r"layer_sizes\[1\] must be a positive integer"),
    (lambda: ic.mlp([3, 4, 2], w_std=math.nan), "w_std must be a finite number"),
    (lambda: ic.resnet18(width=0), "width must be a positive integer, got 0"),
    (lambda: ic.resnet18(width=2.5), "width must be a positive integer, got 2.5"),
    (lambda: ic.resnet18(3, bn_eps=math.nan), "bn_eps must be a finite number > 0"),
    (lambda: ic.small_cnn(channels=(2.5, 4)), r"channels\[0\] must be a positive integer"),
    (lambda: ic.small_cnn(dense=0), "dense must be a positive integer"),
    (lambda: ic.mean_field_net(3, 2.5), "width must be a positive integer"),
    (lambda: ic.data.single_index(jax.random.key(0), 0, 5, 2), "n_train must be a positive integer"),
    (lambda: ic.data.regression_1d(jax.random.key(0), 2.5, 5), "n_train must be a positive integer"),
    (lambda: ic.data.quintic_data(0), "n_train must be a positive integer"),
    (lambda: ic.data.xor(jax.random.key(0), 4, noise_var=math.nan), "noise_var must be a finite number >= 0"),
])
def test_degenerate_sizes_are_refused(build, words):
    with pytest.raises(ValueError, match=words):
        build()


def test_a_whole_float_size_is_accepted():
    a, b = ic.mlp([3, 8.0, 2]), ic.mlp([3, 8, 2])
    assert jax.tree.map(jnp.shape, a.init(jax.random.key(0))) == jax.tree.map(jnp.shape, b.init(jax.random.key(0)))
    assert ic.count_params(ic.resnet18(3, width=2.0).init(jax.random.key(0))) == \
        ic.count_params(ic.resnet18(3, width=2).init(jax.random.key(0)))


@pytest.mark.parametrize("call, words", [
    (lambda: ic.minibatches(jax.random.key(0), X, Y, 5), "batch_size must be a positive integer of at most 4"),
    (lambda: ic.minibatches(jax.random.key(0), X, Y, None), "batch_size must be a positive integer"),
    (lambda: ic.minibatches(jax.random.key(0), X, Y, math.nan), "batch_size must be a positive integer"),
    (lambda: ic.minibatches(jax.random.key(0), X[:0], Y[:0], 1), "x and y hold no examples"),
    (lambda: ic.augmented_minibatches(jax.random.key(0), IMAGES, np.arange(2), 0), "batch_size"),
    (lambda: ic.augmented_minibatches(jax.random.key(0), IMAGES, np.arange(2), 3), "batch_size"),
    (lambda: ic.augmented_minibatches(jax.random.key(0), IMAGES, np.arange(2), 1, padding=2.5), "padding must be"),
    (lambda: ic.random_crop(jax.random.key(0), IMAGES, 2.5), "padding must be a non-negative integer"),
    (lambda: ic.split_microbatches((X, Y), 0), r"size \(examples per microbatch\) must be a positive integer"),
    (lambda: ic.full_batch(X, Y[:2]), r"x and y must have the same number of examples .*\(4, 2\) and \(2, 1\)"),
    (lambda: ic.full_batch(X[:0], Y[:0]), "x and y hold no examples"),
    (lambda: ic.unpad_runs(jnp.ones((4, 2)), 6), r"unpad_runs: tree has shape \(4, 2\), fewer than runs = 6"),
])
def test_batch_sizes_are_checked(call, words):
    with pytest.raises(ValueError, match=words):
        call()


@pytest.mark.parametrize("lr", [-1.0, 0.0, math.nan, math.inf, "0.1", None, True])
def test_gauss_newton_learning_rates(lr):
    with pytest.raises(ValueError, match=r"lr \(the step size\) must be a finite number > 0"):
        ic.gn_step(MODEL.apply, PARAMS, X, Y, lr=lr)
    with pytest.raises(ValueError, match=r"lr \(the step size\) must be a finite number > 0"):
        ic.gn_iterate(MODEL.apply, PARAMS, X, Y, 2, lr=lr)


def test_mean_field_steps_check_their_learning_rate():
    net = ic.mean_field_net(2, 4)
    p, x, y = net.init(jax.random.key(0)), jnp.ones((3, 2)), jnp.zeros(3)
    for make in (ic.make_gn_step, ic.make_gd_step):
        with pytest.raises(ValueError, match="lr"):
            make(net, x, y)(p, -1.0)


@pytest.mark.parametrize("call, words", [
    (lambda: ic.stable_lr(jnp.array([1.0, -1.0])), "lam_max must be a positive finite curvature"),
    (lambda: ic.stable_lr(jnp.array([0.0])), "lam_max must be a positive finite curvature"),
    (lambda: ic.stable_lr(np.array([math.nan])), "lam_max must be a positive finite curvature"),
    (lambda: ic.stable_lr(True), "lam_max must be a positive finite curvature"),
    (lambda: ic.stable_lr("1"), "lam_max must be a positive finite curvature"),
    (lambda: ic.damping_min_eigenvalue(math.nan), "alpha"),
    (lambda: ic.damping_min_eigenvalue(1.0, floor=math.inf), "floor"),
    (lambda: ic.replicate(PARAMS, 0), r"n \(the number of copies\) must be a positive integer"),
    (lambda: ic.replicate(PARAMS, 2.5), r"n \(the number of copies\) must be a positive integer"),
    (lambda: ic.relin_steps(ic.every(2), -1), "steps must be a non-negative integer"),
    (lambda: ic.relin_steps(ic.every(2), 2.5), "steps must be a non-negative integer"),
    (lambda: ic.make_il_sweep_step(MODEL.apply, ic.squared_error, optax.sgd(0.1), [1, 2], damping=["a", 1.0]),
     "damping must be a non-negative number"),
    (lambda: ic.make_il_sweep_step(MODEL.apply, ic.squared_error, optax.sgd(0.1), [1], damping=[lambda ev: ev[0]]),
     "damping: a sequence"),
    (lambda: ic.make_il_sweep_step(MODEL.apply, ic.squared_error, optax.sgd(0.1), [1, 0]), "K .* at least 1"),
    (lambda: ic.every(-2), "K .* at least 1"),
    (lambda: ic.feature_alignment(jnp.zeros((2, 2)), jnp.eye(2)), "w must hold finite features of nonzero norm"),
    (lambda: ic.weighted_cosine_distance(jnp.eye(2), jnp.zeros((1, 2))), "u_star must hold finite teacher units"),
    (lambda: ic.tgn_step(MODEL.apply, PARAMS, X, Y, loss_fn=ic.squared_error, optimizer=optax.sgd(0.1),
                         num_steps=2 ** 31), "num_steps must be a positive integer of at most 2,147,483,647"),
    (lambda: ic.activation_pair("silu", beta="2"), "the SiLU temperature beta must be a finite number > 0"),
    (lambda: ic.activation_pair("silu", beta=math.inf), "the SiLU temperature beta must be a finite number > 0"),
    (lambda: ic.save_checkpoint("unused.npz", PARAMS, step=-1, history={}), "step must be a non-negative integer"),
    (lambda: ic.save_checkpoint("unused.npz", PARAMS, step=math.nan, history={}), "step must be a non-negative"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_scalars_are_named(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_stable_lr_of_good_arrays_matches_the_formula():
    np.testing.assert_allclose(ic.stable_lr(jnp.array([4.0, 100.0])), [0.25, 0.01])
    assert float(jax.jit(ic.stable_lr)(jnp.array(4.0))) == 0.25


OTHER = ic.mlp([2, 5, 1], "tanh")   # MODEL is mlp([2, 8, 1])


@pytest.mark.parametrize("call", [
    lambda: MODEL.apply(OTHER.init(jax.random.key(0)), X),
    lambda: jax.jit(MODEL.apply)(OTHER.init(jax.random.key(0)), X),
    lambda: ic.empirical_ntk(MODEL.apply, OTHER.init(jax.random.key(0)), X),
    lambda: ic.linearise(MODEL.apply, OTHER.init(jax.random.key(0)))(OTHER.init(jax.random.key(0)), X),
    lambda: ic.make_il_step(MODEL.apply, ic.squared_error, optax.sgd(0.1), 2)(
        ic.init_il_state(OTHER.init(jax.random.key(0)), optax.sgd(0.1)), (X, Y)),
], ids=["apply", "jit", "empirical_ntk", "linearise", "il_step"])
def test_parameters_of_another_model_name_the_leaf(call):
    with pytest.raises(ValueError, match=r"mlp: params\[0\]\['b'\] has shape \(5,\), but this mlp expects \(8,\)"):
        call()


def test_parameter_checks_name_missing_leaves_and_other_models():
    with pytest.raises(ValueError, match=r"params has no leaf params\[1\]\['b'\], which this mlp has \(shape \(1,\)\)"):
        MODEL.apply(PARAMS[:1], X)
    with pytest.raises(ValueError, match=r"linearise: params\[0\]\['b'\] has shape \(5,\), but the anchor params_s"):
        ic.linearise(MODEL.apply, PARAMS)(OTHER.init(jax.random.key(0)), X)
    plain, bn = ic.resnet18(3, width=2), ic.resnet18(3, width=2, batch_norm=True)
    with pytest.raises(ValueError, match=r"resnet18: params has no leaf params\['blocks'\]\[0\]\['conv1'\]\['scale'\]"):
        bn.apply(plain.init(jax.random.key(0)), jnp.ones((1, 8, 8, 3)))
    assert bn.apply.couples_examples and not plain.apply.couples_examples     # the wrapper keeps the flag
    small, wide = ic.small_cnn(dense=32), ic.small_cnn()
    for fn in (small.apply, lambda p, x: small.features(p, x, 1)):
        with pytest.raises(ValueError, match=r"small_cnn: params\['dense'\]\['b'\] has shape \(64,\)"):
            fn(wide.init(jax.random.key(0)), jnp.ones((1, 8, 8, 1)))
    lenet = ic.lenet50(3, (16, 16, 1), channels=2, dense=(4,))
    with pytest.raises(ValueError, match=r"lenet50: params\['conv1'\]\['b'\] has shape \(3,\), but this lenet50 expects"):
        lenet.apply(ic.lenet50(3, (16, 16, 1), channels=3, dense=(4,)).init(jax.random.key(0)), jnp.ones((1, 16, 16, 1)))
    np.testing.assert_allclose(MODEL.apply(PARAMS, X), jnp.tanh(X @ PARAMS[0]["w"] + PARAMS[0]["b"]) @ PARAMS[1]["w"]
                               + PARAMS[1]["b"], rtol=1e-6)                    # good parameters: unchanged


def test_a_step_counter_is_not_trained_past_its_int32_range():
    """ILState.step is int32 (JAX's default without x64); it used to wrap to negative steps."""
    opt = optax.sgd(0.1)
    step = ic.make_il_step(MODEL.apply, ic.squared_error, opt, 2)
    limit = 2 ** 31 - 2            # the largest count an int32 step counter reaches without wrapping or meaning "never"
    near = ic.init_il_state(PARAMS, opt)._replace(step=jnp.array(limit - 3, jnp.int32),
                                                   last_relin=jnp.array(limit - 3, jnp.int32))
    with pytest.raises(ValueError, match=r"num_steps: the state's step counter \(int32\) is at 2,147,483,643.*at most 3"):
        ic.train(step, near, (X, Y), 4, progress="off")
    state, _ = ic.train(step, near, (X, Y), 3, progress="off")
    assert int(state.step) == limit
    sweep, _ = ic.make_il_sweep_step(MODEL.apply, ic.squared_error, opt, [1, 3])
    states = ic.replicate(near, 2)
    with pytest.raises(ValueError, match="num_steps: the state's step counter"):
        ic.train(sweep, states, (X, Y), 4, progress="off")
    with pytest.raises(ValueError, match="num_steps must be a non-negative integer of at most 2,147,483,647"):
        ic.train(lambda s, b: (s, {"loss": 0.0}), 0.0, None, 2 ** 31, progress="off")


# ------------------------------------------------------------------------------ NaN and infinity in data

NAN2, INF2 = jnp.array([math.nan, 1.0]), jnp.array([[1.0, 0.0], [math.inf, 2.0]])
FEATS, YS = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), jnp.array([1.0, 2.0, 3.0])
LABELS = jnp.array([0, 0, 1])


@pytest.mark.parametrize("call, words", [
    (lambda: ic.squared_error(jnp.zeros(2), NAN2), r"^targets holds 1 NaN or infinite value\(s\) \(the first at "
                                                    r"index \(0,\)\); it must hold finite numbers"),
    (lambda: ic.rmse(jnp.zeros((2, 2)), INF2), r"^targets holds 1 NaN or infinite value\(s\) \(the first at index "
                                                r"\(1, 0\)\)"),
    (lambda: ic.refit_test_loss(FEATS.at[0, 0].set(math.nan), YS, jnp.eye(2), YS[:2]), "^features holds 1 NaN"),
    (lambda: ic.refit_test_loss(FEATS, YS.at[1].set(math.inf), jnp.eye(2), YS[:2]), "^y holds 1 NaN"),
    (lambda: ic.refit_test_loss(FEATS, YS, INF2, YS[:2]), "^features_test holds 1 NaN"),
    (lambda: ic.refit_test_loss(FEATS, YS, jnp.eye(2), NAN2), "^y_test holds 1 NaN"),
    (lambda: ic.min_norm_readout(FEATS, YS.at[0].set(math.nan)), "^y holds 1 NaN"),
    (lambda: ic.linear_probe(FEATS.at[2, 1].set(math.nan), LABELS, FEATS, LABELS), "^features_train holds 1 NaN"),
    (lambda: ic.linear_probe(FEATS, LABELS, FEATS.at[2, 1].set(-math.inf), LABELS), "^features_test holds 1 NaN"),
    (lambda: ic.kernel_solve(jnp.eye(2), NAN2), "^rhs holds 1 NaN"),
    (lambda: ic.gradient_flow(jnp.eye(2), jnp.zeros(2), NAN2, 1.0), "^y_train holds 1 NaN"),
    (lambda: ic.gradient_flow(jnp.eye(2), NAN2, jnp.zeros(2), 1.0), "^f0_train holds 1 NaN"),
    (lambda: ic.gradient_flow(jnp.eye(2), jnp.zeros(2), jnp.ones(2), 1.0, jnp.ones((1, 2)), jnp.array([math.nan])),
     "^f0_test holds 1 NaN"),
    (lambda: ic.gn_step(MODEL.apply, PARAMS, X.at[1, 1].set(math.nan), Y), r"^x holds 1 NaN .*index \(1, 1\)"),
    (lambda: ic.gn_step(MODEL.apply, PARAMS, X, Y.at[0, 0].set(math.inf)), "^y holds 1 NaN"),
    (lambda: ic.empirical_ntk(MODEL.apply, PARAMS, X.at[0, 0].set(math.nan)), "^x1 holds 1 NaN"),
    (lambda: ic.empirical_ntk(MODEL.apply, PARAMS, X, X.at[0, 0].set(math.nan)), "^x2 holds 1 NaN"),
    (lambda: ic.max_ntk_eigenvalue(MODEL.apply, PARAMS, X.at[0, 0].set(math.nan)), "^x holds 1 NaN"),
    (lambda: ic.normalise(np.full((1, 2, 2, 3), math.nan, np.float32), 0.0, 1.0), "^images holds 12 NaN"),
], ids=["squared_error targets", "rmse targets", "refit features",
        "refit y", "refit features_test", "refit y_test", "min_norm_readout y", "probe train", "probe test",
        "kernel_solve rhs", "flow y", "flow f0", "flow f0_test", "gn_step x", "gn_step y", "ntk x1", "ntk x2",
        "max_ntk_eigenvalue", "normalise"])
def test_nan_and_infinity_in_concrete_data_are_refused(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_a_diverged_models_outputs_have_a_nan_loss():
    """NaN outputs are a model's state, not bad input: their loss is NaN, eagerly as under jit."""
    assert math.isnan(float(ic.squared_error(NAN2, jnp.zeros(2))))
    assert math.isnan(float(ic.rmse(INF2 * jnp.nan, jnp.zeros((2, 2)))))
    assert math.isnan(float(ic.softmax_cross_entropy(INF2 * jnp.nan, jnp.array([0, 1]))))


def test_the_zero_norm_checks_take_a_constant_kernel_inside_jit_and_vmap():
    """A concrete kernel closed over by a traced function (as the linearisation chapter does) is
    checked by value, not refused as a tracer or turned into a TracerBoolConversionError."""
    k0 = jnp.array([[2.0, 1.0], [1.0, 2.0]])
    d = jax.jit(jax.vmap(lambda k: ic.kernel_distance(k0, k)))(jnp.stack([k0, 3.0 * k0, jnp.eye(2)]))
    np.testing.assert_allclose(d[:2], 0.0, atol=1e-7)
    assert 0 < float(d[2]) < 1


def test_the_finite_check_costs_nothing_under_jit():
    """Traced values are not checked (the loss of NaN outputs is NaN there, as training's divergence
    detection expects); finite data pass; integer arrays are finite by type."""
    assert math.isnan(float(jax.jit(ic.squared_error)(NAN2, jnp.zeros(2))))
    assert math.isnan(float(jax.jit(ic.softmax_cross_entropy)(INF2 * jnp.nan, jnp.array([0, 1]))))
    assert float(ic.squared_error(jnp.arange(2), jnp.zeros(2, jnp.int32))) == 0.5
    from itlin_core._validate import check_finite
    assert check_finite("x", {"a": np.arange(3), "b": [1.0, 2.0]}) is not None


@pytest.mark.parametrize("call, words", [
    (lambda: ic.kernel_distance(jnp.zeros((2, 2)), jnp.eye(2)), r"^k1 is all zeros \(norm 0\)"),
    (lambda: ic.kernel_distance(jnp.eye(2), jnp.zeros((2, 2))), r"^k2 is all zeros \(norm 0\)"),
    (lambda: ic.kernel_distance(jnp.eye(2).at[0, 0].set(math.nan), jnp.eye(2)), "^k1 holds 1 NaN"),
    (lambda: ic.kernel_distance(jnp.eye(2), jnp.eye(2) * math.inf), "^k2 holds 4 NaN"),
    (lambda: ic.weighted_cosine_distance(jnp.zeros((2, 2)), jnp.eye(2)), r"^u is all zeros \(norm 0\)"),
    (lambda: ic.weighted_cosine_distance(jnp.eye(2).at[1, 1].set(math.nan), jnp.eye(2)), "^u holds 1 NaN"),
    (lambda: ic.weighted_cosine_distance(jnp.eye(2), jnp.zeros((1, 2))), "u_star must hold finite teacher units"),
    (lambda: ic.min_norm_readout(jnp.zeros((3, 2)), YS), r"^features is all zeros \(norm 0\).*read-out would be 0"),
    (lambda: ic.refit_test_loss(jnp.zeros((3, 2)), YS, jnp.eye(2), YS[:2]), r"^features is all zeros"),
], ids=["kd k1 zero", "kd k2 zero", "kd k1 nan", "kd k2 inf", "wcd u zero", "wcd u nan", "wcd u_star zero",
        "readout zero", "refit zero"])
def test_zero_norm_or_non_finite_kernels_and_features_are_refused(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_a_zero_unit_among_others_still_counts_zero_in_wcd():
    u = jnp.array([[2.0, 0.0], [0.0, 0.0]])
    assert float(ic.weighted_cosine_distance(u, jnp.array([[1.0, 0.0]]))) == 0.0


# ------------------------------------------------------------------------------ trees and callables

@pytest.mark.parametrize("a, b, words", [
    ({"a": jnp.ones(4)}, {"a": jnp.ones(1)}, r"a\['a'\] has shape \(4,\), but b expects \(1,\)"),
    ({"a": jnp.ones(2), "c": jnp.ones(2)}, {"a": jnp.ones(2)}, r"a\['c'\] \(shape \(2,\)\) is a leaf that b does not"),
    ({"a": jnp.ones(2)}, {"a": jnp.ones(2), "c": 1.0}, r"a has no leaf a\['c'\]"),
    (PARAMS, ic.mlp([2, 5, 1], "tanh").init(jax.random.PRNGKey(0)), r"a\[0\]\['b'\] has shape \(8,\)"),
], ids=["broadcast", "extra leaf", "missing leaf", "other model"])
def test_tree_arithmetic_refuses_trees_that_differ(a, b, words):
    for fn in (ic.tree_sub, ic.tree_vdot):
        with pytest.raises(ValueError, match="a and b must be pytrees of the same structure and leaf shapes: " + words):
            fn(a, b)
    assert float(ic.tree_vdot(a, a)) > 0 and jax.tree.structure(ic.tree_sub(b, b)) == jax.tree.structure(b)


@pytest.mark.parametrize("call, words", [
    (lambda: ic.init_il_state(PARAMS, "sgd"), r"optimizer must be an optax gradient transformation .*got 'sgd'"),
    (lambda: ic.init_il_state(PARAMS, optax.sgd), r"optimizer must be an optax gradient transformation"),
    (lambda: ic.make_il_step(MODEL.apply, None, optax.sgd(0.1), 1), r"loss_fn must be a function loss_fn\(outputs"),
    (lambda: ic.make_il_step("apply", ic.squared_error, optax.sgd(0.1), 1), "apply_fn must be a function"),
    (lambda: ic.make_il_sweep_step(MODEL.apply, "mse", optax.sgd(0.1), [1, 2]), "loss_fn must be a function"),
    (lambda: ic.count_params({"a": "x"}), r"params\['a'\] is 'x' \(str\); params must be a pytree of numeric"),
    (lambda: ic.count_params({"a": jnp.ones(2), "b": [np.array(["u"])]}), r"params\['b'\]\[0\] is array"),
], ids=["optimizer str", "optimizer factory", "loss_fn None", "apply_fn str", "sweep loss_fn", "count str",
        "count strings"])
def test_arguments_of_the_wrong_type_are_named(call, words):
    with pytest.raises(TypeError, match=words):
        call()
