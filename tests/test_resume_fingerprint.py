"""A checkpoint knows what made it (itlin_core._fingerprint): resuming a run, or calling a
finished one again, after its learning rate, K, damping, batch size or data changed is refused
with a sentence naming what differs; the same settings, built afresh, resume as before."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin_core as ic
from itlin_core import _fingerprint

MODEL = ic.mlp([3, 8, 1], "tanh")
KEY = jax.random.key(1)


def run(path, lr=0.05, K=3, batch=8, damping=0.0, scale=1.0, stop_at=None):
    x = jax.random.normal(jax.random.key(0), (32, 3))
    y = scale * jnp.sin(x[:, :1])
    opt = optax.sgd(lr)
    step = ic.make_il_step(MODEL.apply, ic.squared_error, opt, K, damping=damping)
    state = ic.init_il_state(MODEL.init(jax.random.key(2)), opt)
    return ic.train(step, state, ic.minibatches(KEY, x, y, batch), 12, evaluate=ic.Evaluation(every=4), checkpoint=ic.Checkpointing(path, key=KEY, stop_at=stop_at), progress="off")


@pytest.mark.parametrize("change, what", [
    (dict(lr=0.1), "step"), (dict(K=4), "step"), (dict(batch=4), "step"), (dict(damping=0.5), "step"),
    (dict(scale=2.0), "data")])
@pytest.mark.parametrize("finished", [False, True], ids=["stopped", "finished"])
def test_a_run_whose_settings_changed_is_not_resumed(tmp_path, change, what, finished):
    path = tmp_path / "ck.npz"
    run(path, stop_at=None if finished else 4)
    with pytest.raises(ValueError, match=rf"other settings: {what} \("):
        run(path, **change)
    assert run(path)[1]["resumed_from"] == (12 if finished else 4)   # the same settings still resume


def test_the_step_digest_follows_the_program_not_the_python_objects():
    x = jnp.ones((6, 3))
    source = ic.full_batch(x, jnp.zeros((6, 1)))

    def digest(lr, K):
        opt = optax.sgd(lr)
        step = ic.make_il_step(MODEL.apply, ic.squared_error, opt, K)
        return _fingerprint.step_digest(step, ic.init_il_state(MODEL.init(KEY), opt), source.fn, source.data)

    assert digest(0.1, 3) == digest(0.1, 3)                 # built twice: one program
    assert len({digest(0.1, 3), digest(0.2, 3), digest(0.1, 5)}) == 3
    a, b = np.arange(6.0), np.arange(6.0)
    assert _fingerprint.data_digest({"x": a}) == _fingerprint.data_digest({"x": b})
    assert _fingerprint.data_digest({"x": a}) != _fingerprint.data_digest({"x": a.astype(np.float32)})
    b[3] = 7.0
    assert _fingerprint.data_digest({"x": a}) != _fingerprint.data_digest({"x": b})
