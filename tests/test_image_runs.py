"""The CIFAR10/MNIST pipeline of the image chapters (itlin_core.book.image_runs, image_records,
image_chapters), at smoke scale on
in-format stand-in data: data through the real loaders, models, training, network and proxy
evaluation against independent computations, one vmapped group against separate runs,
damping per run, divergence of one run, checkpoint-resume bit for bit, the results record."""

import dataclasses
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin_core as ic
from itlin_core import _download
from itlin_core.book import common, image_chapters as ich, image_records as irec, image_runs as ir, image_settings, records

TINY = dict(n_eval=64, eval_batch=32, batch_size=16, width=4, probe_train=48)


def cfg(**kw):
    base = dict(dataset="cifar10", model="lenet50", steps=12, eval_every=4, Ks=(1, 4, None), lr=0.02, **TINY)
    base.update(kw)
    return ir.ImageRunConfig(**base)


@pytest.fixture(scope="module")
def cifar():
    return ir.image_data("cifar10", "smoke", stand_in_sizes=(192, 96))


@pytest.fixture(scope="module")
def mnist():
    return ir.image_data("mnist", "smoke", stand_in_sizes=(192, 96))


@pytest.fixture(scope="module")
def group(cifar):
    return ir.run_images(cfg(), cifar, progress="off")


def test_stand_in_data_go_through_the_real_loaders(cifar, mnist):
    assert cifar["stand_in"] and mnist["stand_in"]
    assert cifar["x_train"].shape == (192, 32, 32, 3) and cifar["x_train"].dtype == np.uint8
    assert mnist["x_test"].shape == (96, 28, 28, 1) and mnist["y_train"].shape == (192,)
    mean, std = ic.channel_stats(cifar["x_train"])
    np.testing.assert_allclose(cifar["mean"], mean)
    np.testing.assert_allclose(cifar["std"], std)


def test_stand_in_env_switch(monkeypatch, tmp_path):
    monkeypatch.setenv("ITLIN_STAND_IN", "1")
    assert ir.image_data("mnist", "colab", stand_in_sizes=(40, 20))["stand_in"]
    monkeypatch.setenv("ITLIN_STAND_IN", "0")
    with pytest.raises(ic.datasets.DatasetUnavailableError):  # offline, nothing cached there
        monkeypatch.setattr(_download, "urlopen", lambda *a, **k: (_ for _ in ()).throw(OSError("offline")))
        ir.image_data("mnist", "colab", data_dir=tmp_path)


def test_stand_in_is_published_whole_and_replaces_a_half_written_folder(monkeypatch, tmp_path):
    """Chapters run side by side (pytest workers, a book build) share the stand-in folder: it
    appears in one rename, a folder left without its "complete" mark is rewritten, and a writer
    that loses the race leaves no private copy behind."""
    monkeypatch.setattr(ir.tempfile, "gettempdir", lambda: str(tmp_path))
    root = tmp_path / "itlin-stand-in" / "mnist-40-20"
    (root / "mnist").mkdir(parents=True)
    (root / "mnist" / "train-images-idx3-ubyte.gz").write_bytes(b"half")
    first = ir.image_data("mnist", "smoke", stand_in_sizes=(40, 20))
    assert (root / "complete").exists() and first["x_train"].shape == (40, 28, 28, 1)
    ir._write_stand_in_once("mnist", root, 40, 20)           # the loser of a race
    assert [p.name for p in root.parent.iterdir()] == ["mnist-40-20"]
    again = ir.image_data("mnist", "smoke", stand_in_sizes=(40, 20))
    np.testing.assert_array_equal(again["x_train"], first["x_train"])


def test_evaluations_match_an_independent_computation(group, cifar):
    """The last evaluation of network and proxy = accuracy/loss computed directly from the
    final parameters and anchors on the same test images."""
    c = group["config"]
    x = ic.normalise(cifar["x_test"][:group["n_eval"]], cifar["mean"], cifar["std"])
    y = jnp.asarray(cifar["y_test"][:group["n_eval"]])
    for i in range(len(c.runs)):
        s = jax.tree_util.tree_map(lambda a: a[i], group["state"])
        f = group["apply_fn"](s.params, x)
        f_lin = group["apply_fn"](s.anchor, x) + jax.jvp(lambda p: group["apply_fn"](p, x), (s.anchor,),
                                                        (ic.tree_sub(s.params, s.anchor),))[1]
        np.testing.assert_allclose(group["test_accuracy_network"][-1, i], np.mean(np.argmax(f, -1) == y), atol=1e-6)
        np.testing.assert_allclose(group["test_accuracy_proxy"][-1, i], np.mean(np.argmax(f_lin, -1) == y), atol=1e-6)
        ce = float(jnp.mean(optax.softmax_cross_entropy_with_integer_labels(f, y)))
        np.testing.assert_allclose(group["test_loss_network"][-1, i], ce, rtol=1e-5)


def test_proxy_is_the_network_right_after_a_feature_update(group):
    rec = irec.summarise(group)
    steps = rec["eval_step"]
    for i, K in enumerate(rec["Ks"]):
        net, lin = rec["metrics"]["test_loss_network"][:, i], rec["metrics"]["test_loss_proxy"][:, i]
        if K is None:  # never relinearised: the trained network is not its proxy
            assert np.all(np.abs(net[1:] - lin[1:]) > 1e-6)
        else:
            at = steps % K == 0
            np.testing.assert_allclose(net[at], lin[at], rtol=1e-6)
    np.testing.assert_array_equal(rec["feature_updates"][:, 1], np.maximum(1, np.ceil(steps / 4)))
    np.testing.assert_array_equal(rec["feature_updates"][:, 2], np.ones(len(steps)))


def test_k1_training_lowers_the_loss(group):
    rec = irec.summarise(group)
    assert rec["train_loss"][-1, 0] < rec["train_loss"][0, 0]
    assert rec["metrics"]["train_accuracy_network"][-1, 0] > rec["metrics"]["train_accuracy_network"][0, 0]
    assert rec["diverged_at"] == [None, None, None] and rec["stand_in"]


def test_a_vmapped_group_equals_separate_runs(cifar, group):
    """One compiled program over K gives each run what it would get alone."""
    for i, K in enumerate((1, 4, None)):
        alone = ir.run_images(cfg(Ks=(K,)), cifar, progress="off")
        np.testing.assert_allclose(alone["loss"][:, 0], group["loss"][:, i], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(alone["test_loss_proxy"][:, 0], group["test_loss_proxy"][:, i], rtol=1e-5)


def test_k1_equals_plain_sgd_on_the_same_batches(cifar, group):
    c = cfg(Ks=(1,))
    model = ir.build_model(c, (32, 32, 3))
    params = ir.init_params(c, model)
    x, y = ir.training_subset(c, cifar)
    batches = ic.augmented_minibatches(jax.random.PRNGKey(c.seed + 1), jnp.asarray(x), jnp.asarray(y), c.batch_size,
                                       padding=0, flip=False, mean=cifar["mean"], std=cifar["std"])
    for t in range(c.steps):
        xb, yb = batches(t)
        g = jax.grad(lambda p: ic.softmax_cross_entropy(model.apply(p, xb), yb))(params)
        params = jax.tree_util.tree_map(lambda p, d: p - c.lr * d, params, g)
    final = jax.tree_util.tree_map(lambda a: a[0], group["state"].params)
    for a, b in zip(jax.tree_util.tree_leaves(final), jax.tree_util.tree_leaves(params)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)


def test_damping_per_run_equals_separate_damped_steps():
    model = ic.lenet50(num_classes=3, input_shape=(16, 16, 1), channels=2, dense=(5,))
    params = model.init(jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (6, 16, 16, 1))
    y = jnp.arange(6) % 3
    opt = optax.adam(1e-2)
    lams = (0.0, 3.0)   # undamped and damped side by side: each run must get its own
    step, _ = ic.make_il_sweep_step(model.apply, ic.softmax_cross_entropy, opt, (3, 3), damping=lams)
    states = ic.replicate(ic.init_il_state(params, opt), 2)
    singles = [ic.init_il_state(params, opt) for _ in lams]
    steps1 = [jax.jit(ic.make_il_step(model.apply, ic.softmax_cross_entropy, opt, 3, damping=lam)) for lam in lams]
    for _ in range(4):   # past a relinearisation (K = 3)
        states, _ = step(states, (x, y))
        singles = [s1(s, (x, y))[0] for s1, s in zip(steps1, singles)]
    for i, s in enumerate(singles):
        for a, b in zip(jax.tree_util.tree_leaves(s.params), jax.tree_util.tree_leaves(states.params)):
            np.testing.assert_allclose(b[i], a, rtol=1e-6, atol=1e-9)
    first = jax.tree_util.tree_leaves(states.params)[0]
    assert not np.allclose(first[0], first[1]), "the damping made no difference: the test would not see a mix-up"
    with pytest.raises(ValueError, match="one damping per K"):
        ic.make_il_sweep_step(model.apply, ic.softmax_cross_entropy, opt, (1, 2), damping=(0.1, 0.2, 0.3))
    with pytest.raises(ValueError):
        ic.make_il_sweep_step(model.apply, ic.softmax_cross_entropy, opt, (1, 2), damping=(0.1, -1.0))


def test_one_diverging_run_leaves_the_others_alone(cifar):
    c = cfg(Ks=(1, 1), dampings=(0.0,), lr=1e3, steps=8)  # a rate at which both runs blow up
    sane = irec.summarise(ir.run_images(cfg(Ks=(1,), steps=8), cifar, progress="off"))
    wild = irec.summarise(ir.run_images(c, cifar, progress="off"))
    assert sane["diverged_at"] == [None]
    assert all(d is not None for d in wild["diverged_at"])
    d = wild["diverged_at"][0]
    after = wild["eval_step"] > d
    assert np.all(np.isnan(wild["metrics"]["test_accuracy_network"][after, 0]))
    assert np.all(np.isfinite(wild["metrics"]["test_accuracy_network"][~after, 0]))
    # the mean training loss is finite over the evaluation intervals before step d, NaN from its own
    interval = np.searchsorted(wild["eval_step"], d, side="right") - 1
    assert np.all(np.isfinite(wild["train_loss"][:interval, 0])) and np.isnan(wild["train_loss"][interval, 0])
    # within one group: K=1 stays finite while a huge-K proxy trained at the same rate may not;
    # what must hold is that a run's NaNs never leak into another run's record
    mixed = irec.summarise(ir.run_images(cfg(Ks=(1, None), lr=5.0, steps=8), cifar, progress="off"))
    for i, dv in enumerate(mixed["diverged_at"]):
        col = mixed["metrics"]["test_loss_proxy"][:, i]
        assert np.all(np.isfinite(col)) if dv is None else np.all(np.isnan(col[mixed["eval_step"] > dv]))


@pytest.mark.parametrize("block", [1, 2, 4])
def test_summarise_train_loss_is_the_interval_mean_whatever_the_loss_blocks(block):
    """``train_loss`` from per-step losses (block 1) and from block means (as ``run_images``
    records them) is the plain mean of each evaluation interval's steps, a short last one too."""
    c = cfg(steps=10, eval_every=4, Ks=(1, 2))
    per_step = np.stack([np.linspace(3.0, 1.0, 10), np.cos(np.arange(10.0)) + 2.0], axis=1).astype(np.float32)
    blocks = np.stack([per_step[j:j + block].astype(np.float64).mean(axis=0) for j in range(0, 10, block)])
    hist = dict(config=c, eval_step=np.array([0, 4, 8, 10]), loss=blocks.astype(np.float32), loss_every=block,
                nonfinite_at=np.array([-1, -1]), seconds=2.0, n_params=1, n_train=1, n_eval=1, stand_in=True)
    rec = irec.summarise(hist)
    expected = [per_step[a:b].astype(np.float64).mean(axis=0) for a, b in ((0, 4), (4, 8), (8, 10))]
    np.testing.assert_allclose(rec["train_loss"], expected, rtol=1e-6)
    assert rec["steps_per_second"] == 5.0 and rec["diverged_at"] == [None, None]
    rec = irec.summarise(dict(hist, nonfinite_at=np.array([-1, 9])))
    assert rec["diverged_at"] == [None, 9]


def test_a_group_records_one_mean_loss_per_evaluation_interval(group):
    c = cfg()
    assert group["loss_every"] == c.eval_every and group["loss"].shape == (c.steps // c.eval_every, 3)
    np.testing.assert_array_equal(group["nonfinite_at"], [-1, -1, -1])


def test_checkpoint_resume_reproduces_the_run_bit_for_bit(cifar, tmp_path, group):
    path = tmp_path / "run.npz"
    first = ir.run_images(cfg(), cifar, checkpoint_path=path, checkpoint_every=4, stop_at=8, progress="off")
    assert first["eval_step"][-1] == 8 and path.exists()
    resumed = ir.run_images(cfg(), cifar, checkpoint_path=path, checkpoint_every=4, progress="off")
    assert resumed["resumed_from"] == 8
    fresh = ir.run_images(cfg(), cifar, checkpoint_path=tmp_path / "fresh.npz", checkpoint_every=4, progress="off")
    for k in ("loss", "eval_step", "test_accuracy_proxy", "test_loss_network", "train_loss_proxy"):
        np.testing.assert_array_equal(resumed[k], fresh[k])
    for a, b in zip(jax.tree_util.tree_leaves(resumed["state"]), jax.tree_util.tree_leaves(fresh["state"])):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(fresh["test_loss_proxy"], group["test_loss_proxy"])
    # the records say so in their parameter digests; the interrupted run's differs
    digests = [irec.summarise(h)["params_digest"] for h in (resumed, fresh, first)]
    assert digests[0] == digests[1] == irec.params_digest(fresh["state"].params) != digests[2]
    with pytest.raises(ValueError, match="other settings"):
        ir.run_images(cfg(lr=0.03), cifar, checkpoint_path=path, checkpoint_every=4, progress="off")
    with pytest.raises(ValueError, match="other settings"):  # real data never resume a stand-in run
        ir.run_images(cfg(), dict(cifar, stand_in=False), checkpoint_path=path, checkpoint_every=4, progress="off")


def test_params_digest_tells_trees_apart_bit_for_bit():
    tree = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": [np.ones(2, np.float32)]}
    same = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": [np.ones(2, np.float32)]}
    assert irec.params_digest(tree) == irec.params_digest(same)
    flipped = np.arange(6, dtype=np.float32).reshape(2, 3)
    flipped.view(np.uint32)[1, 2] ^= 1                               # one bit of one entry
    for other in ({"a": flipped, "b": tree["b"]},
                  {"a": tree["a"].astype(np.float64), "b": tree["b"]},   # dtype
                  {"a": tree["a"].reshape(3, 2), "b": tree["b"]},        # shape, same bytes
                  {"a": tree["a"], "b": (tree["b"][0],)}):               # structure
        assert irec.params_digest(other) != irec.params_digest(tree)


def test_record_round_trip(group, tmp_path):
    rec = irec.summarise(group)
    records.save_results("cifar_test", "colab", {"g": rec}, seed=0, results_dir=tmp_path, note="stand-in")
    back = records.load_results("cifar_test", results_dir=tmp_path)["data"]["g"]
    assert back["labels"] == rec["labels"] and back["Ks"] == [1, 4, None] and back["config"] == rec["config"]
    for k, v in rec["metrics"].items():
        np.testing.assert_array_equal(back["metrics"][k], v)
    np.testing.assert_array_equal(back["feature_updates"], rec["feature_updates"])
    np.testing.assert_array_equal(irec.best_accuracy(back), irec.best_accuracy(rec))
    assert back["params_digest"] == rec["params_digest"] == irec.params_digest(group["state"].params)


def test_probes_and_filters_match_direct_computations(cifar):
    c = cfg(Ks=(1, None), probes=True, n_filters=3, steps=8)
    h = ir.run_images(c, cifar, progress="off")
    x_tr, y_tr = ir.training_subset(c, cifar)
    norm = lambda v: ic.normalise(v, cifar["mean"], cifar["std"])
    n = h["n_eval"]
    for i in range(2):
        p = jax.tree_util.tree_map(lambda a: a[i], h["state"].params)
        for layer in (1, 2):
            ref = ic.linear_probe(ic.lenet50_features(p, norm(x_tr[:c.probe_train]), layer), y_tr[:c.probe_train],
                                  ic.lenet50_features(p, norm(cifar["x_test"][:n]), layer), cifar["y_test"][:n],
                                  ridge=c.probe_ridge, num_classes=10)
            np.testing.assert_allclose(h[f"probe{layer}_test_accuracy"][-1, i], ref["test_accuracy"], atol=1e-6)
        np.testing.assert_allclose(h["filters"][-1, i], (p["conv1"]["w"] - h["params0"]["conv1"]["w"])[..., :3],
                                   rtol=1e-6, atol=1e-9)
    assert h["filters"].shape == (3, 2, 5, 5, 3, 3)
    assert np.all(h["filters"][0] == 0)


def test_curvature_is_measured_at_each_runs_anchor(cifar):
    """The recorded curvature is ic.max_curvature of the linearised training loss at the run's
    anchor, on the first curvature_batch training images; with K = inf the anchor never moves."""
    c = cfg(Ks=(1, None), steps=8, curvature_batch=24, curvature_iterations=30)
    h = ir.run_images(c, cifar, progress="off")
    x_tr, y_tr = ir.training_subset(c, cifar)
    xk = ic.normalise(x_tr[:24], cifar["mean"], cifar["std"])
    model = ir.build_model(c, x_tr.shape[1:])
    for i in range(2):
        anchor = jax.tree_util.tree_map(lambda a: a[i], h["state"].anchor)
        ref = ic.max_curvature(model.apply, ic.softmax_cross_entropy, anchor, xk, jnp.asarray(y_tr[:24]),
                               iterations=30)
        np.testing.assert_allclose(h["curvature"][-1, i], ref, rtol=1e-4)
    k = np.asarray(h["curvature"])
    assert k.shape == (3, 2) and np.all(k > 0)
    np.testing.assert_allclose(k[:, 1], k[0, 1], rtol=1e-5)          # K = inf: one anchor, one curvature
    assert irec.summarise(h)["metrics"]["curvature"].shape == (3, 2)


def test_reset_optimizer_reaches_the_group_step(cifar):
    """A group with reset_optimizer trains like make_il_sweep_step with reset_optimizer=True."""
    c = cfg(Ks=(3,), optimizer="adam", lr=1e-3, steps=7, reset_optimizer=True)
    h = ir.run_images(c, cifar, progress="off")
    assert int(np.asarray(h["state"].opt_state[0].count)[0]) == 7 % 3
    kept = ir.run_images(dataclasses.replace(c, reset_optimizer=False), cifar, progress="off")
    assert int(np.asarray(kept["state"].opt_state[0].count)[0]) == 7


def test_lenet_features_are_the_networks_blocks():
    model = ic.lenet50(input_shape=(32, 32, 3), channels=5)
    p = model.init(jax.random.PRNGKey(3))
    x = jax.random.normal(jax.random.PRNGKey(4), (2, 32, 32, 3))
    assert ic.lenet50_features(p, x, 1).shape == (2, 14 * 14 * 5)
    h2 = ic.lenet50_features(p, x, 2)
    y = h2
    for j, layer in enumerate(p["dense"]):
        y = y @ layer["w"] + layer["b"]
        y = jax.nn.relu(y) if j < len(p["dense"]) - 1 else y
    np.testing.assert_allclose(y, model.apply(p, x), rtol=1e-6)
    with pytest.raises(ValueError, match="layer must be 1 or 2"):
        ic.lenet50_features(p, x, 3)


# LeNet-50 on MNIST here; the two ResNet-18s (with and without BatchNorm) train through the same
# run_images in every run group of the resnet_mnist notebook at smoke, whose check cell asserts the
# same mechanics (image_records.check_record: the proxy is the network at each anchor, no divergence).
@pytest.mark.parametrize("model,dataset", [("lenet50", "mnist")])
def test_other_models_and_data_train(model, dataset, cifar, mnist):
    data = cifar if dataset == "cifar10" else mnist
    c = cfg(model=model, dataset=dataset, Ks=(1, 2), steps=4, eval_every=2, lr=0.01, augment=model == "resnet18_bn",
            width=2 if model != "lenet50" else 4, n_eval=32)
    rec = irec.summarise(ir.run_images(c, data, progress="off"))
    assert rec["diverged_at"] == [None, None]
    at = rec["eval_step"] % 2 == 0
    np.testing.assert_allclose(rec["metrics"]["test_loss_network"][at], rec["metrics"]["test_loss_proxy"][at], rtol=1e-6)
    assert rec["train_loss"][-1, 0] < rec["train_loss"][0, 0] or model != "lenet50"


def test_full_batch_is_gradient_descent_on_the_subset(cifar):
    c = cfg(batch_size=None, n_train=40, Ks=(1,), steps=3, eval_every=3)
    h = ir.run_images(c, cifar, progress="off")
    model = ir.build_model(c, (32, 32, 3))
    params = ir.init_params(c, model)
    x, y = ir.training_subset(c, cifar)
    xn = ic.normalise(x, cifar["mean"], cifar["std"])
    for _ in range(3):
        g = jax.grad(lambda p: ic.softmax_cross_entropy(model.apply(p, xn), y))(params)
        params = jax.tree_util.tree_map(lambda p, d: p - c.lr * d, params, g)
    for a, b in zip(jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda a: a[0], h["state"].params)),
                    jax.tree_util.tree_leaves(params)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)
    assert h["n_train"] == 40


def test_microbatched_full_batch_equals_the_whole_batch(cifar):
    """000 Fig. 11's full-batch runs accumulate over chunks; the runs are the same, up to rounding."""
    c = cfg(Ks=(1, 3), batch_size=None, n_train=96, steps=6, eval_every=3)
    whole = ir.run_images(c, cifar, progress="off")
    parts = ir.run_images(dataclasses.replace(c, microbatch=24), cifar, progress="off")
    for a, b in zip(jax.tree_util.tree_leaves(parts["state"].params), jax.tree_util.tree_leaves(whole["state"].params)):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(parts["loss"], whole["loss"], rtol=1e-5)
    with pytest.raises(ValueError, match="must divide the batch of 96"):
        ir.run_images(dataclasses.replace(c, microbatch=40), cifar, progress="off")


def test_full_batch_groups_fit_a_colab_gpu():
    """XLA's memory plan (on the test machine's CPU backend) for one step of the colab and paper
    Fig. 11 full-batch groups: the chunked step fits well inside a 16 GB Colab GPU, and taking
    all images at once would not (checked on 5,000 images: colab's group trains on 500)."""
    for preset in ("colab", "paper"):
        c = ich.run_groups("cifar_few_updates", preset)["fig11_full"]
        assert c.batch_size is None and c.microbatch
        chunked = ir.step_memory(c)["total"]
        assert chunked < 8 * 2 ** 30, (preset, chunked / 2 ** 30)
        if preset == "colab":
            whole = ir.step_memory(dataclasses.replace(c, microbatch=None, n_train=5000))["total"]
            assert whole > 16 * 2 ** 30 and whole > 4 * chunked, (whole / 2 ** 30, chunked / 2 ** 30)


def test_feature_updates():
    np.testing.assert_array_equal(common.feature_updates([1, 10, None], [0, 5, 10, 11]),
                                  [[1, 1, 1], [5, 1, 1], [10, 1, 1], [11, 2, 1]])


def test_best_accuracy_ignores_nan():
    rec = {"metrics": {"test_accuracy_proxy": np.array([[0.1, np.nan, 0.2], [0.5, np.nan, np.nan], [0.3, np.nan, 0.1]])}}
    np.testing.assert_array_equal(irec.best_accuracy(rec), [0.5, np.nan, 0.2])


@pytest.mark.parametrize("bad,match", [
    (dict(dataset="svhn"), "dataset"), (dict(model="vgg"), "model"), (dict(optimizer="rmsprop"), "optimizer"),
    (dict(steps=0), "steps"), (dict(lr=-1.0), "lr"), (dict(Ks=()), "Ks"), (dict(Ks=(0,)), "K"),
    (dict(dampings=(0.1, 0.2)), "dampings"), (dict(dampings=(-1.0,)), "damping"),
    (dict(batch_size=0), "batch_size"), (dict(model="resnet18", probes=True), "probes"),
    (dict(n_train=0), "n_train"), (dict(width=0), "width"), (dict(microbatch=0), "microbatch"),
    (dict(microbatch=5), "must divide batch_size"), (dict(model="resnet18_bn", microbatch=8), "BatchNorm"),
    (dict(Ks=("sometimes",)), "rule spec"), (dict(Ks=("geometric(0, 1.5)",)), "K"),
    (dict(Ks=("on_drift(-0.1)",)), "tol"), (dict(Ks=("on_drift(x)",)), "numbers"), (dict(drift_every=0), "drift_every"),
    (dict(reset_optimizer="yes"), "reset_optimizer"), (dict(curvature_batch=-1), "curvature_batch"),
    (dict(curvature_iterations=0), "curvature_iterations")])
def test_bad_configs_raise(bad, match):
    with pytest.raises(ValueError, match=match):
        cfg(**bad)


def test_chapter_tables():
    for chapter in ich.CHAPTERS:
        smoke, colab, paper = (ich.run_groups(chapter, p) for p in ("smoke", "colab", "paper"))
        # every smoke group tests the mechanics of a group some larger preset records (the
        # laptop preset's own groups included, e.g. cifar_few_updates' fig3_inf)
        laptop = ich.run_groups(chapter, "laptop") if ich.MODULES[chapter].HAS_LAPTOP else {}
        assert set(smoke) <= set(paper) | set(colab) | set(laptop) or chapter == "cifar_features"
        # the book shows the settings of the largest-scale record it plots, else colab's
        shown = ich.shown_preset(chapter, "book")
        assert ich.run_groups(chapter, "book") == ich.run_groups(chapter, shown)
        present = [p for p in ("paper", "colab", "laptop")
                   if (records.default_results_dir() / f"{chapter}-{p}.json").exists()]
        assert shown == (present[0] if present else "colab"), (chapter, present)
        assert all(c.dataset in ir.DATASETS for c in paper.values())
        rows = ich.scale_table(chapter)
        assert rows and all(r[2] != r[3] for r in rows)
    for chapter in ich.CHAPTERS:                                             # the committed laptop records
        if not (records.default_results_dir() / f"{chapter}-laptop.json").exists():
            continue
        assert ich.shown_preset(chapter, "book") in ("laptop", "colab", "paper")
        laptop = ich.run_groups(chapter, "laptop")
        larger = {**ich.run_groups(chapter, "paper"), **ich.run_groups(chapter, "colab")}
        families = {re.sub(r"\d+$", "", g) for g in larger}
        for name, c in laptop.items():    # a larger preset's group, the K = inf run of one in its own group,
            base = name.removesuffix("_inf")    # or another size of a family of groups (fig4_n<size>)
            assert (name in larger or (base != name and c.Ks == (None,) and None in larger[base].Ks)
                    or (re.search(r"\d$", name) and re.sub(r"\d+$", "", name) in families)), (chapter, name)
    # every image chapter has a GPU record now, so the book build shows colab's settings for each
    assert [ich.shown_preset(c, "book") for c in ich.CHAPTERS] == ["colab"] * len(ich.CHAPTERS)
    # the paper preset keeps the papers' stated settings
    p = ich.run_groups("resnet_mnist", "paper")
    assert (p["fig10_plain"].lr, p["fig10_plain"].Ks[-1]) == (7e-7, 1_000_000)
    assert (p["fig10_bn"].lr, p["fig10_bn"].Ks[-1], p["fig10_bn"].augment) == (1e-5, 100_000, True)
    f = ich.run_groups("cifar_few_updates", "paper")
    assert f["fig2"].Ks == (1, 5_000_000) and f["fig2"].augment and f["fig2"].batch_size == 256
    assert (f["fig11_full"].lr, f["fig11_mini"].lr) == (1e-3, 1e-4) and f["fig11_full"].batch_size is None
    # colab trains the paper's width at the laptop groups' lr x K (the paper's, for its K = 1e3 ...
    # 1e6 at 1e-5), at a rate half the one at which K = 50 diverged at that width, and measures
    # the curvature at every evaluation
    c, lap = ich.run_groups("cifar_few_updates", "colab"), ich.run_groups("cifar_few_updates", "laptop")
    for name in ("fig3", "fig3_rules"):
        times = lambda g: [g.lr * k for k in g.Ks if isinstance(k, int) and k > 1]
        assert times(c[name]) == pytest.approx(times(lap[name])), name
    assert all(g.width is None and g.curvature_batch > 0 for g in c.values())
    assert all(g.lr <= image_settings.COLAB_STABLE_LR / 2 for n, g in c.items() if n != "fig3_inf")
    with pytest.raises(ValueError, match="unknown chapter"):
        ich.run_groups("cifar_nothing", "smoke")
    with pytest.raises(ValueError, match="book preset does not train"):
        ich.run_chapter("cifar_damping", "book")
    with pytest.raises(ValueError, match="unknown run"):
        ich.run_chapter("cifar_damping", "smoke", names=["fig99"])


def test_colab_runs_checkpoint_where_asked(tmp_path, cifar, monkeypatch):
    """run_chapter at a training preset writes one checkpoint per group and a second call resumes."""
    small = {"g": cfg(Ks=(1,), steps=4, eval_every=2)}
    monkeypatch.setattr(ich, "run_groups", lambda chapter, preset=None: small)
    out = ich.run_chapter("cifar_tiny", "colab", data={"cifar10": cifar}, checkpoint_dir=tmp_path)
    assert (tmp_path / "cifar_tiny-g-colab-stand-in.npz").exists()  # stand-in runs never pose as real ones
    again = ich.run_chapter("cifar_tiny", "colab", data={"cifar10": cifar}, checkpoint_dir=tmp_path)
    np.testing.assert_array_equal(out["g"]["metrics"]["test_loss_proxy"], again["g"]["metrics"]["test_loss_proxy"])



def test_rule_specs_count_their_updates_and_name_themselves():
    for spec in ("geometric(3, 1.5)", "geometric(5, 1)"):
        starts = ic.relin_steps(common.parse_rule(spec), 100)
        t = np.arange(0, 101, 7)
        expected = np.maximum(1, [sum(s < u for s in starts) for u in t])
        np.testing.assert_array_equal(common.feature_updates([spec], t)[:, 0], expected)
    # geometric(K, 1) is every(K)
    np.testing.assert_array_equal(common.feature_updates(["geometric(5, 1)"], np.arange(60)),
                                  common.feature_updates([5], np.arange(60)))
    with pytest.raises(ValueError, match="depends on the run"):
        common.feature_updates(["on_drift(0.1)"], [10])
    assert common.k_label("on_drift( 0.1 )") == "on_drift(0.1)" and common.k_text(10) == "10"
    assert [common.rule_family(k) for k in (1, None, "geometric(2, 2)", "on_drift(0)")] == \
        ["fixed", "fixed", "geometric", "drift"]


def test_a_group_with_rules_records_each_runs_own_updates(cifar):
    """A drift rule's count comes from the run (state.updates); a geometric rule's equals its
    schedule; the record passes the checks every record passes, and survives a round trip."""
    c = cfg(Ks=(1, "geometric(2, 1.5)", "on_drift(0)", "on_drift(inf)"), drift_every=1, lr=0.005)
    hist = ir.run_images(c, cifar, progress="off")
    rec = irec.summarise(hist)
    assert rec["Ks"] == [1, "geometric(2, 1.5)", "on_drift(0)", "on_drift(inf)"]
    upd = np.asarray(rec["feature_updates"])
    np.testing.assert_array_equal(upd[:, 2], upd[:, 0])        # on_drift(0) is K = 1
    np.testing.assert_array_equal(upd[:, 3], 1)                # on_drift(inf) is K = inf
    np.testing.assert_array_equal(upd[:, 1], common.feature_updates(["geometric(2, 1.5)"], rec["eval_step"])[:, 0])
    for key in ("test_accuracy_proxy", "test_loss_proxy"):   # the same arithmetic as K = 1
        np.testing.assert_array_equal(rec["metrics"][key][:, 2], rec["metrics"][key][:, 0])
    assert "updates" not in rec["metrics"]
    irec.check_record("rules", rec, smoke=True)
    assert c.as_dict()["Ks"] == [1, "geometric(2, 1.5)", "on_drift(0)", "on_drift(inf)"]
