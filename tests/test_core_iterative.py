"""Iterative linearisation: its two ends (K=1 is the optimiser on the network, K=inf is the
optimiser on the linearised network), the relinearisation schedule, the training loop."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin_core as ic

MODEL = ic.mlp([2, 24, 24, 1], "tanh")
X = jax.random.normal(jax.random.PRNGKey(1), (16, 2))
Y = jnp.sin(2 * X[:, :1]) * X[:, 1:]

OPTIMIZERS = {
    "sgd": lambda: optax.sgd(0.004),
    "momentum": lambda: optax.sgd(0.002, momentum=0.9),
    "adam": lambda: optax.adam(3e-3),
}
LOSSES = {
    "squared_error": (ic.squared_error, Y),
    # softmax cross-entropy on two classes: the softmax stays outside the linearisation
    "cross_entropy": (ic.softmax_cross_entropy, (Y[:, 0] > 0).astype(jnp.int32)),
}
CE_MODEL = ic.mlp([2, 24, 24, 2], "tanh")


def setup(loss_name):
    loss_fn, y = LOSSES[loss_name]
    model = MODEL if loss_name == "squared_error" else CE_MODEL
    return model, model.init(jax.random.PRNGKey(0)), loss_fn, y


def run(step, state, batch, n):
    step = jax.jit(step)
    states = []
    for _ in range(n):
        state, _ = step(state, batch)
        states.append(state)
    return states


@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("loss_name", sorted(LOSSES))
def test_k1_is_plain_optax_training(opt_name, loss_name):
    model, params, loss_fn, y = setup(loss_name)
    opt = OPTIMIZERS[opt_name]()
    states = run(ic.make_il_step(model.apply, loss_fn, opt, K=1), ic.init_il_state(params, opt), (X, y), 15)

    @jax.jit
    def ref_step(p, s):
        g = jax.grad(lambda q: loss_fn(model.apply(q, X), y))(p)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s

    p, s = params, opt.init(params)
    for st in states:
        p, s = ref_step(p, s)
        for a, b in zip(jax.tree_util.tree_leaves(st.params), jax.tree_util.tree_leaves(p)):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    assert int(states[-1].step) == 15
    # the runs compared are real training runs: the loss went down
    assert loss_fn(model.apply(p, X), y) < 0.98 * loss_fn(model.apply(params, X), y)


@pytest.mark.parametrize("K", [None, math.inf])
@pytest.mark.parametrize("loss_name", sorted(LOSSES))
def test_k_inf_is_training_the_linearised_model(K, loss_name):
    model, params, loss_fn, y = setup(loss_name)
    opt = optax.sgd(0.004, momentum=0.5)
    states = run(ic.make_il_step(model.apply, loss_fn, opt, K=K), ic.init_il_state(params, opt), (X, y), 30)
    f_lin = ic.linearise(model.apply, params)

    @jax.jit
    def ref_step(p, s):
        g = jax.grad(lambda q: loss_fn(f_lin(q, X), y))(p)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s

    p, s = params, opt.init(params)
    for st in states:
        p, s = ref_step(p, s)
    for a, b, c in zip(jax.tree_util.tree_leaves(states[-1].params), jax.tree_util.tree_leaves(p),
                       jax.tree_util.tree_leaves(states[-1].anchor)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    # the anchor never moved, and the network and its proxy now disagree (it is not K=1)
    for a, b in zip(jax.tree_util.tree_leaves(states[-1].anchor), jax.tree_util.tree_leaves(params)):
        np.testing.assert_array_equal(a, b)
    assert float(jnp.abs(model.apply(p, X) - f_lin(p, X)).max()) > 1e-4
    assert loss_fn(f_lin(p, X), y) < 0.98 * loss_fn(f_lin(params, X), y)


def test_k5_moves_anchor_exactly_every_5_steps():
    params = MODEL.init(jax.random.PRNGKey(0))
    opt = optax.sgd(0.004)
    state0 = ic.init_il_state(params, opt)
    states = run(ic.make_il_step(MODEL.apply, ic.squared_error, opt, K=5), state0, (X, Y), 23)
    history = [state0] + states
    leaf = lambda t: jax.tree_util.tree_leaves(t)[0]
    for t in range(24):
        s = 5 * (t // 5)  # step t uses the anchor set at the last multiple of 5
        np.testing.assert_array_equal(leaf(history[t].anchor), leaf(history[s].params))
        if t > 0:
            moved = not np.array_equal(leaf(history[t].anchor), leaf(history[t - 1].anchor))
            assert moved == (t % 5 == 0), t


def test_relinearised_metric_and_sweep_step_match_single_runs():
    params = MODEL.init(jax.random.PRNGKey(0))
    opt = optax.sgd(0.004)
    Ks = [1, 3, None]
    sweep_step, _ = ic.make_il_sweep_step(MODEL.apply, ic.squared_error, opt, Ks)
    states = ic.replicate(ic.init_il_state(params, opt), len(Ks))
    sweep = jax.jit(sweep_step)
    flags = []
    for _ in range(7):
        states, m = sweep(states, (X, Y))
        flags.append(np.asarray(m["relinearised"]))
    flags = np.stack(flags)  # (steps, runs)
    np.testing.assert_array_equal(flags[:, 1], [t % 3 == 0 for t in range(7)])
    np.testing.assert_array_equal(flags[:, 2], [t == 0 for t in range(7)])
    for i, K in enumerate(Ks):
        single = run(ic.make_il_step(MODEL.apply, ic.squared_error, opt, K), ic.init_il_state(params, opt), (X, Y), 7)[-1]
        for a, b in zip(jax.tree_util.tree_leaves(single.params), jax.tree_util.tree_leaves(states.params)):
            np.testing.assert_allclose(b[i], a, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("loss_name", list(LOSSES))
@pytest.mark.parametrize("damping", [0.0, 0.3])
def test_microbatched_gradient_equals_the_whole_batch(loss_name, damping):
    """Accumulating over chunks of 4 gives the loss and gradient of all 16 examples at once."""
    loss_fn, y = LOSSES[loss_name]
    model = MODEL if loss_name == "squared_error" else CE_MODEL
    anchor = model.init(jax.random.PRNGKey(0))
    params = jax.tree_util.tree_map(lambda a: a + 0.05, anchor)
    whole = ic.linearised_value_and_grad(model.apply, loss_fn, damping)(params, anchor, X, y)
    reduction = "sum" if loss_name == "squared_error" else "mean"  # the papers' summed squared error
    parts = ic.linearised_value_and_grad(model.apply, loss_fn, damping, microbatch=4,
                                         loss_reduction=reduction)(params, anchor, X, y)
    np.testing.assert_allclose(parts[0], whole[0], rtol=1e-12)
    for a, b in zip(jax.tree_util.tree_leaves(parts[1]), jax.tree_util.tree_leaves(whole[1])):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)


def test_microbatched_sweep_trains_like_the_whole_batch():
    opt = optax.sgd(0.01)
    params = MODEL.init(jax.random.PRNGKey(0))
    states = {m: ic.replicate(ic.init_il_state(params, opt), 3) for m in (None, 8)}
    for m in states:
        step = jax.jit(ic.make_il_sweep_step(MODEL.apply, ic.squared_error, opt, (1, 3, None), microbatch=m,
                                             loss_reduction="sum")[0])
        for _ in range(6):
            states[m], _ = step(states[m], (X, Y))
    for a, b in zip(jax.tree_util.tree_leaves(states[8].params), jax.tree_util.tree_leaves(states[None].params)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)


def test_bad_microbatch_raises():
    for bad in (0, -4, 2.5, True, "4", math.inf):
        with pytest.raises(ValueError, match="microbatch"):
            ic.make_il_step(MODEL.apply, ic.squared_error, optax.sgd(0.1), 1, microbatch=bad)
    with pytest.raises(ValueError, match="loss_reduction"):
        ic.make_il_sweep_step(MODEL.apply, ic.squared_error, optax.sgd(0.1), (1,), microbatch=4, loss_reduction="max")
    step = ic.make_il_step(MODEL.apply, ic.squared_error, optax.sgd(0.1), 1, microbatch=5)
    params = MODEL.init(jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="not a multiple of microbatch=5"):
        step(ic.init_il_state(params, optax.sgd(0.1)), (X, Y))


# ------------------------------------------------------------------ training loop

def test_train_chunks_match_one_scan_and_record_evals():
    params = MODEL.init(jax.random.PRNGKey(0))
    opt = optax.sgd(0.004)
    step = ic.make_il_step(MODEL.apply, ic.squared_error, opt, K=4)
    eval_fn = ic.make_il_eval(MODEL.apply, {"train": (X, Y)}, {"rmse": ic.rmse})
    s1, h1 = ic.train(step, ic.init_il_state(params, opt), ic.full_batch(X, Y), 30, evaluate=ic.Evaluation(eval_fn, every=7))
    s2, h2 = ic.train(step, ic.init_il_state(params, opt), (X, Y), 30)
    np.testing.assert_allclose(h1["loss"], h2["loss"], rtol=1e-12)
    assert h1["loss"].shape == (30,)
    np.testing.assert_array_equal(h1["eval_step"], [0, 7, 14, 21, 28, 30])
    assert h1["train_rmse_network"].shape == (6,)
    # at step 0 network and proxy coincide; the final network RMSE equals a direct computation
    assert h1["train_rmse_network"][0] == h1["train_rmse_proxy"][0]
    np.testing.assert_allclose(h1["train_rmse_network"][-1], ic.rmse(MODEL.apply(s1.params, X), Y), rtol=1e-12)
    # step 28 relinearised, so after 2 more steps the proxy differs from the network
    assert h1["train_rmse_network"][-1] != h1["train_rmse_proxy"][-1]
    assert h1["diverged_at"] is None


def counting_step(limits):
    """A step whose state counts steps; run ``i``'s loss is ``sin(t) + i`` at step ``t`` and NaN
    from step ``limits[i]`` on (so where each run diverges is known exactly)."""
    lim = jnp.asarray(limits)

    def step(t, batch):
        loss = jnp.where(t >= lim, jnp.nan, jnp.sin(t.astype(jnp.float32)) + jnp.arange(len(limits)))
        return t + 1, {"loss": loss}
    return step, jnp.zeros(len(limits), jnp.int32)


def first_nonfinite(per_step):
    """Per column, the first index whose value is not finite, -1 if none (by a Python loop)."""
    out = []
    for col in np.asarray(per_step).T:
        bad = [i for i, v in enumerate(col) if not np.isfinite(v)]
        out.append(bad[0] if bad else -1)
    return out


@pytest.mark.parametrize("L,eval_every,n", [(1, 5, 23), (3, 6, 20), (5, 5, 23), (4, None, 10), (4, 8, 3)])
def test_loss_every_records_block_means_and_the_exact_divergence_step(L, eval_every, n):
    step, t0 = counting_step([7, 100])
    _, per = ic.train(step, t0, None, n, evaluate=ic.Evaluation(every=eval_every), on_nonfinite="ignore")
    _, blk = ic.train(step, t0, None, n, evaluate=ic.Evaluation(every=eval_every, loss_every=L), on_nonfinite="ignore")
    assert per["loss_every"] == 1 and blk["loss_every"] == L and per["loss"].shape == (n, 2)
    expected = np.stack([per["loss"][j:j + L].astype(np.float64).mean(axis=0) for j in range(0, n, L)])
    np.testing.assert_allclose(blk["loss"], expected, rtol=1e-6)  # NaN where a block holds a NaN
    assert blk["loss"].shape == (-(-n // L), 2) and blk["loss"].dtype == per["loss"].dtype
    np.testing.assert_array_equal(blk["nonfinite_at"], first_nonfinite(per["loss"]))
    np.testing.assert_array_equal(per["nonfinite_at"], [7 if n > 7 else -1, -1])


def test_loss_every_bad_values_raise():
    step, t0 = counting_step([100])
    for bad in (0, -2, 2.5):
        with pytest.raises(ValueError, match="loss_every"):
            ic.train(step, t0, None, 10, evaluate=ic.Evaluation(loss_every=bad))
    with pytest.raises(ValueError, match="multiple of loss_every"):
        ic.train(step, t0, None, 10, evaluate=ic.Evaluation(every=5, loss_every=3))


def test_loss_every_survives_checkpoint_and_resume(tmp_path):
    """Block means and the first non-finite step per run are kept across a resume: run 0 diverges
    before the interruption at step 12, run 1 after it."""
    step, t0 = counting_step([7, 15])
    kw = dict(evaluate=ic.Evaluation(every=3, loss_every=3), on_nonfinite="ignore")
    _, whole = ic.train(step, t0, None, 20, checkpoint=ic.Checkpointing(tmp_path / "a.npz", every=6), **kw)
    ic.train(step, t0, None, 20, checkpoint=ic.Checkpointing(tmp_path / "b.npz", every=6, stop_at=12), **kw)
    _, resumed = ic.train(step, t0, None, 20, checkpoint=ic.Checkpointing(tmp_path / "b.npz", every=6), **kw)
    assert resumed["resumed_from"] == 12
    np.testing.assert_array_equal(resumed["loss"], whole["loss"])
    np.testing.assert_array_equal(resumed["nonfinite_at"], [7, 15])
    np.testing.assert_array_equal(whole["nonfinite_at"], [7, 15])
    _, plain = ic.train(step, t0, None, 20, evaluate=ic.Evaluation(every=3, loss_every=3), on_nonfinite="ignore")
    np.testing.assert_array_equal(whole["loss"], plain["loss"])
    with pytest.raises(ValueError, match="other settings"):  # a different loss_every is another run
        ic.train(step, t0, None, 20, checkpoint=ic.Checkpointing(tmp_path / "b.npz", every=6),
                 **dict(kw, evaluate=ic.Evaluation(every=3, loss_every=1)))


def test_minibatches_cover_each_epoch_once():
    x = jnp.arange(10.0)[:, None]
    batch = jax.jit(ic.minibatches(jax.random.PRNGKey(0), x, x, 3))
    seen = np.concatenate([np.asarray(batch(i)[0][:, 0]) for i in range(3)])
    assert len(set(seen.tolist())) == 9  # 3 full batches of a 10-example epoch, no repeats
    assert not np.array_equal(np.asarray(batch(0)[0]), np.asarray(batch(3)[0]))  # new permutation


def test_divergence_is_detected_not_plotted():
    params = MODEL.init(jax.random.PRNGKey(0))
    opt = optax.sgd(50.0)  # far too large: the loss overflows
    step = ic.make_il_step(MODEL.apply, ic.squared_error, opt, K=1)
    with pytest.raises(ic.TrainingDiverged, match="non-finite at step"):
        ic.train(step, ic.init_il_state(params, opt), (X, Y), 200, evaluate=ic.Evaluation(every=50))
    state, hist = ic.train(step, ic.init_il_state(params, opt), (X, Y), 200, evaluate=ic.Evaluation(every=50), on_nonfinite="stop")
    assert hist["diverged_at"] is not None and np.all(np.isfinite(hist["loss"]))
    assert len(hist["loss"]) <= hist["diverged_at"]


@pytest.mark.parametrize("n", [5, 6])
def test_a_divergence_on_the_last_update_is_not_missed(n):
    """The loss of a step is taken before its update, so an update to infinite parameters at the
    last step shows in no loss: train checks the final state. Run 1 of two overflows at step 5."""
    def step(s, batch):
        grow = jnp.where(s["t"] == 5, jnp.array([1.0, jnp.inf]), 1.0)
        return {"t": s["t"] + 1, "w": s["w"] * grow}, {"loss": s["w"] * 0.0 + jnp.sin(s["t"] * 1.0)}
    state = {"t": jnp.zeros(2, jnp.int32), "w": jnp.ones(2)}
    if n == 5:                       # the overflow never happens within the run
        assert ic.train(step, state, None, n)[1]["diverged_at"] is None
        return
    with pytest.raises(ic.TrainingDiverged, match="parameters .after the last update. became non-finite at step 5"):
        ic.train(step, state, None, n, evaluate=ic.Evaluation(every=3), on_nonfinite="raise")
    final, hist = ic.train(step, state, None, n, evaluate=ic.Evaluation(every=3), on_nonfinite="stop")
    assert hist["diverged_at"] == 5 and np.all(np.isfinite(final["w"])) and len(hist["loss"]) == 3
    final, hist = ic.train(step, state, None, n, on_nonfinite="ignore")
    np.testing.assert_array_equal(hist["nonfinite_at"], [-1, 5])
    with pytest.warns(RuntimeWarning, match=r"run 1 \(run 1 of 2\) became non-finite at step 5"):
        _, auto = ic.train(step, state, None, n)  # two runs are a sweep: the healthy one goes on
    np.testing.assert_array_equal(auto["nonfinite_at"], [-1, 5])
    assert np.isfinite(final["w"][0]) and not np.isfinite(final["w"][1])


def test_minibatches_refuse_inputs_and_labels_of_different_lengths():
    x = jnp.arange(10.0)[:, None]
    with pytest.raises(ValueError, match="same number of examples"):
        ic.minibatches(jax.random.key(0), x, x[:9], 3)
    with pytest.raises(ValueError, match="same number of examples"):
        ic.augmented_minibatches(jax.random.key(0), jnp.zeros((10, 4, 4, 3)), jnp.zeros(9, jnp.int32), 3)


def test_by_default_a_sweep_keeps_its_healthy_runs_and_names_the_one_that_diverged():
    """f = a^2 x with a = 0.5, 30, 0.5 for the three runs: at lr 0.05 the curvature 4 a^2 |x|^2
    makes run 1 (K=4) overflow and the others converge. The default neither raises nor discards
    the healthy runs: it warns with the run's label and step and records NaN for that run only;
    a single run still raises."""
    apply = lambda p, x: p["a"] ** 2 * x[:, 0]
    x, y = X, 0.3 * X[:, 0]
    opt = optax.sgd(0.05)
    step, _ = ic.make_il_sweep_step(apply, ic.squared_error, opt, (1, 4, None))
    assert step.run_labels == ["K=1", "K=4", "K=∞"]
    runs = [ic.init_il_state({"a": jnp.asarray(a)}, opt) for a in (0.5, 30.0, 0.5)]
    state = jax.tree.map(lambda *a: jnp.stack(a), *runs)
    with pytest.warns(RuntimeWarning, match=r"K=4 \(run 1 of 3\) became non-finite at step \d+"):
        final, hist = ic.train(step, state, (x, y), 60, evaluate=ic.Evaluation(every=20))
    assert hist["nonfinite_at"][1] >= 0 and list(hist["nonfinite_at"][[0, 2]]) == [-1, -1]
    assert np.all(np.isfinite(hist["loss"][:, [0, 2]])) and not np.all(np.isfinite(hist["loss"][:, 1]))
    assert float(hist["loss"][-1, 0]) < 1e-3 * float(hist["loss"][0, 0])
    with pytest.raises(ic.TrainingDiverged):      # one run: the default still raises
        ic.train(ic.make_il_step(apply, ic.squared_error, opt, K=4), runs[1], (x, y), 60)
