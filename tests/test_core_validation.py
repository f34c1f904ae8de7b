"""Bad input raises ValueError with a sentence that says what was wrong and what is allowed."""

import math

import jax
import jax.numpy as jnp
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
