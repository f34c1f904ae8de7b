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
    with pytest.raises(ValueError, match="smoke, book, colab, paper"):
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
