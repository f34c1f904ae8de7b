"""Every public function that takes a PRNG key checks it where it is entered: a seed, a float, an
array of the wrong dtype or shape, or several keys where one is meant raise a TypeError whose
sentence names the argument, what was given and what is allowed, instead of a TypeError from deep
inside JAX; typed keys (jax.random.key) and raw ones (jax.random.PRNGKey) both work, and inside
jit/vmap (tracers) nothing is checked."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import itlin_core as ic

IMAGES = jnp.zeros((2, 4, 4, 1))
X, Y = jnp.zeros((4, 3)), jnp.zeros(4)

CALLS = {
    "augment": lambda k: ic.augment(k, IMAGES),
    "random_crop": lambda k: ic.random_crop(k, IMAGES),
    "random_flip": lambda k: ic.random_flip(k, IMAGES),
    "minibatches": lambda k: ic.minibatches(k, X, Y, 2),
    "augmented_minibatches": lambda k: ic.augmented_minibatches(k, np.zeros((4, 4, 4, 1), np.uint8), Y, 2),
    "single_index": lambda k: ic.data.single_index(k, 4, 4, 3),
    "regression_1d": lambda k: ic.data.regression_1d(k, 4, 4),
    "xor": lambda k: ic.data.xor(k, 4),
    "teacher_student": lambda k: ic.data.teacher_student(k, 4, 4, d=3, m_star=2),
    "mlp.init": lambda k: ic.mlp([3, 2]).init(k),
    "lenet50.init": lambda k: ic.lenet50(3, (16, 16, 1), channels=1, dense=(2,)).init(k),
    "mean_field_net.init": lambda k: ic.mean_field.mean_field_net(3, 4).init(k),
    "max_curvature": lambda k: ic.max_curvature(lambda th, x: x @ th, ic.squared_error, jnp.zeros(3), X, Y,
                                                iterations=2, key=k),
}
BAD = {
    "a seed": (0, r"the integer 0 \(a seed\? pass jax\.random\.key\(0\)\)"),
    "a float": (1.5, "the float 1.5"),
    "a float array": (jnp.zeros(2), r"an array of shape \(2,\) and dtype float"),
    "a list": ([0, 1], "a list"),
    "several keys": (jax.random.split(jax.random.key(0), 3), r"got an array of 3 keys .* key\[0\]"),
    "several raw keys": (jax.random.split(jax.random.PRNGKey(0), 3), r"got 3 raw keys"),
}


@pytest.mark.parametrize("bad", list(BAD))
@pytest.mark.parametrize("fn", list(CALLS))
def test_a_bad_key_is_named(fn, bad):
    value, given = BAD[bad]
    with pytest.raises(TypeError, match=r"^key must be (a|one) JAX PRNG key.*" + given):
        CALLS[fn](value)
    if bad == "a seed":     # the sentence says what is allowed
        with pytest.raises(TypeError, match=r"jax\.random\.key\(seed\) or jax\.random\.PRNGKey\(seed\)"):
            CALLS[fn](value)


@pytest.mark.parametrize("fn", list(CALLS))
def test_typed_and_raw_keys_both_work(fn):
    CALLS[fn](jax.random.key(0))
    CALLS[fn](jax.random.PRNGKey(0))


def test_keys_inside_jit_and_vmap_are_not_checked():
    keys = jax.random.split(jax.random.key(0), 2)
    assert jax.vmap(lambda k: ic.random_crop(k, IMAGES, padding=1))(keys).shape == (2,) + IMAGES.shape
    assert jax.jit(lambda k: ic.random_flip(k, IMAGES))(keys[0]).shape == IMAGES.shape


def test_a_checkpoint_key_must_be_a_key_or_keys(tmp_path):
    path = tmp_path / "ck.npz"
    ic.save_checkpoint(path, jnp.ones(2), step=1, history={}, key=jax.random.split(jax.random.key(0), 2))  # a sweep's
    before = path.read_bytes()
    with pytest.raises(TypeError, match=r"^key must be a JAX PRNG key.*got the integer 7"):
        ic.save_checkpoint(path, jnp.ones(2), step=2, history={}, key=7)
    assert path.read_bytes() == before
    step = lambda s, b: (s + 1, {"loss": 0.0 * s})
    with pytest.raises(TypeError, match=r"^Checkpointing\.key must be a JAX PRNG key.*got the integer 3"):
        ic.train(step, jnp.zeros(()), None, 2, evaluate=ic.Evaluation(every=2),
                 checkpoint=ic.Checkpointing(tmp_path / "run.npz", key=3), progress="off")
    assert not (tmp_path / "run.npz").exists()
