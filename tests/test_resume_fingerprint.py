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


def run(path, lr=0.05, K=3, batch=8, damping=0.0, scale=1.0, stop_at=None, seed=2):
    x = jax.random.normal(jax.random.key(0), (32, 3))
    y = scale * jnp.sin(x[:, :1])
    opt = optax.sgd(lr)
    step = ic.make_il_step(MODEL.apply, ic.squared_error, opt, K, damping=damping)
    state = ic.init_il_state(MODEL.init(jax.random.key(seed)), opt)
    return ic.train(step, state, ic.minibatches(KEY, x, y, batch), 12, evaluate=ic.Evaluation(every=4), checkpoint=ic.Checkpointing(path, key=KEY, stop_at=stop_at), progress="off")


@pytest.mark.parametrize("change, what", [
    (dict(lr=0.1), "step"), (dict(K=4), "step"), (dict(batch=4), "step"), (dict(damping=0.5), "step"),
    (dict(scale=2.0), "data"), (dict(seed=3), "init")])
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


def test_the_initial_state_is_compared_within_a_tolerance_and_older_checkpoints_resume(tmp_path):
    """The initial state is kept as a sample compared to 1e-4 (an initialisation recomputed on another
    device may differ in the last bit); a checkpoint written before it was kept resumes as before."""
    state = ic.init_il_state(MODEL.init(KEY), optax.sgd(0.1))
    sample = _fingerprint.state_sample(state)
    assert _fingerprint.same_sample(sample, _fingerprint.state_sample(jax.tree.map(lambda a: a * (1 + 1e-7), state)))
    assert not _fingerprint.same_sample(sample, _fingerprint.state_sample(
        ic.init_il_state(MODEL.init(jax.random.key(9)), optax.sgd(0.1))))
    assert _fingerprint.same_sample(["nan", 1.0], ["nan", 1.0]) and not _fingerprint.same_sample(["nan"], [1.0])
    path = tmp_path / "ck.npz"
    run(path, stop_at=4)
    template = ic.init_il_state(MODEL.init(KEY), optax.sgd(0.05))
    ck = ic.load_checkpoint(path, template)
    older = {k: v for k, v in ck.meta.items() if k != "init"}
    ic.save_checkpoint(path, ck.state, step=ck.step, history=ck.history, key=ck.key, meta=older)
    assert run(path, seed=3)[1]["resumed_from"] == 4


def test_a_run_made_by_another_package_version_is_not_resumed(tmp_path, monkeypatch):
    """The checkpoint keeps itlin_core's version; another version refuses it by name, and a
    checkpoint written before the version was kept resumes as before."""
    path = tmp_path / "ck.npz"
    run(path, stop_at=4)
    monkeypatch.setattr(ic, "__version__", "9.9.9")
    with pytest.raises(ValueError, match=r"other settings: itlin_core \(another version of itlin_core"):
        run(path)
    template = ic.init_il_state(MODEL.init(KEY), optax.sgd(0.05))
    ck = ic.load_checkpoint(path, template)
    assert ck.meta["itlin_core"] != ic.__version__
    older = {k: v for k, v in ck.meta.items() if k != "itlin_core"}
    ic.save_checkpoint(path, ck.state, step=ck.step, history=ck.history, key=ck.key, meta=older)
    assert run(path)[1]["resumed_from"] == 4


def test_a_checkpoint_path_below_a_file_is_refused_before_training(tmp_path):
    (tmp_path / "file").write_text("x")
    calls = []

    def step(s, b):
        calls.append(1)
        return s, {"loss": s}
    with pytest.raises(ValueError, match="which is a file, not a folder"):
        ic.train(step, 1.0, None, 4, checkpoint=tmp_path / "file" / "run.npz", progress="off")
    assert not calls and (tmp_path / "file").read_text() == "x"
