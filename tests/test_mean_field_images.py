"""The image teacher of Arbel et al. 2023, App. C.4 (chapter mean_field_images): the balanced
subset, the teacher's targets, MNIST in its on-disk format (stand-in data), a ten-output run
against the steps done by hand, and the verdicts against an independent reading of the runs."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import itlin_core as ic
from itlin_core.book import mean_field_images as mi

SMOKE = mi.image_teacher_config("smoke")
TINY = dataclasses.replace(SMOKE, n_train=10, n_test=30, width=60, gn_iterations=8, gd_iterations=8,
                           gn_lrs=(1.0, 10.0), gd_lrs=(1.0,), teacher_steps=50, n_evals=3)


@pytest.fixture(scope="module")
def problem():
    return mi.image_teacher_problem(TINY)


def test_balanced_indices_draw_each_class_equally():
    labels = np.repeat(np.arange(10), 7)[np.random.default_rng(0).permutation(70)]
    idx = mi.balanced_indices(labels, 30, seed=1)
    assert len(set(idx.tolist())) == 30
    assert (np.bincount(labels[idx], minlength=10) == 3).all()
    with pytest.raises(ValueError, match="multiple of the 10 classes"):
        mi.balanced_indices(labels, 25, seed=1)
    with pytest.raises(ValueError, match="class 0 has 7 images"):
        mi.balanced_indices(labels, 80, seed=1)


def test_digit_targets_are_the_teachers_probabilities(problem):
    y, yt = np.asarray(problem["y_train"]), np.asarray(problem["y_test"])
    assert y.shape == (10, 10) and yt.shape == (30, 10) and problem["x_train"].shape == (10, 64)
    assert np.allclose(y.sum(1), 1) and np.allclose(yt.sum(1), 1) and (y > 0).all()
    assert (np.bincount(problem["labels_train"], minlength=10) == 1).all()
    assert 0 <= float(problem["x_train"].min()) and float(problem["x_train"].max()) <= 1
    # the teacher was trained on both sets: on them it beats chance by far
    assert problem["teacher_accuracy"] > 0.5
    agree = np.mean(yt.argmax(1) == problem["labels_test"])
    assert agree > 0.5


def test_mnist_source_reads_the_idx_format(tmp_path):
    ic.datasets.write_stand_in("mnist", tmp_path, n_train=200, n_test=40)
    cfg = dataclasses.replace(TINY, source="mnist", n_test=20)
    prob = mi.image_teacher_problem(cfg, tmp_path, verify=False)
    assert prob["x_train"].shape == (10, 784) and prob["x_test"].shape == (20, 784)
    assert np.allclose(np.asarray(prob["y_test"]).sum(1), 1)
    with pytest.raises(ValueError, match="n_test must be at most the 40"):
        mi.image_teacher_problem(dataclasses.replace(cfg, n_test=41), tmp_path, verify=False)
    with pytest.raises(ValueError, match="source must be one of"):
        mi.image_teacher_problem(dataclasses.replace(cfg, source="cifar"))


def test_ten_output_run_is_the_steps_by_hand(problem):
    """run_teacher_student with ten outputs equals GN steps taken one by one with
    ic.make_gn_step from the same initial draw, and RF is Test-LRfit at iteration 0."""
    res = mi.run_image_teacher(TINY, problem, progress="off")
    data = {k: problem[k] for k in ("x_train", "y_train", "x_test", "y_test")}
    net = ic.mean_field_net(64, TINY.width, 1.0, outputs=10)
    p = {"u": TINY.tau0 * net.init(jax.random.key(TINY.seed + 1))["u"], "v": jnp.zeros((TINY.width, 10))}
    step = ic.make_gn_step(net, data["x_train"], data["y_train"])
    for _ in range(TINY.gn_iterations):
        p = step(p, 10.0)
    j = list(res["gn"]["lr"]).index(10.0)
    want = float(ic.mean_field_loss(net.apply(p, data["x_test"]), data["y_test"]))
    assert res["gn"]["final_test_loss"][j] == pytest.approx(want, rel=1e-9)
    assert res["rf"] == pytest.approx(res["gd"]["lrfit"][0, 0], rel=1e-10)
    assert "wcd" not in res["gn"]       # no teacher weights of the student's form


def _run(lrs, train, test, lrfit, diverged=None):
    """A run dict shaped like run_teacher_student's: two evaluations (start, end)."""
    lrs = np.asarray(lrs, float)
    g = lrs.size
    out = {"lr": lrs, "iters": np.array([0, 100]), "diverged": np.zeros(g, bool) if diverged is None else
           np.asarray(diverged), "stopped_at": np.full(g, 100)}
    for key, end in (("train_loss", train), ("test_loss", test), ("lrfit", lrfit)):
        start = np.full(g, 0.5 if key != "lrfit" else 0.3)
        out[key] = np.stack([start, np.asarray(end, float)])
        out["final_" + key] = out[key][-1]
    return out


def test_failed_catches_overflow_and_dead_networks():
    r = _run([1, 10, 100], [0.1, 0.5, np.nan], [0.2, 0.5, np.nan], [0.2, 0.5, np.nan], [False, False, True])
    assert mi.failed(r).tolist() == [False, True, True]


@pytest.mark.parametrize("paper_like", [True, False])
def test_claims_follow_the_runs(paper_like):
    if paper_like:     # GN: re-fit worsens with the step; GD improves until it dies
        gn = _run([0.01, 1, 10], [0.4, 1e-7, 1e-7], [0.48, 0.2, 0.25], [0.1, 0.15, 0.2])
        gn["lrfit"] = np.array([[0.3, 0.3, 0.3], [0.1, 0.15, 0.2]])
        gn["test_loss"] = np.array([[0.5, 0.5, 0.5], [0.48, 0.2, 0.25]])
        gd = _run([1, 10, 100], [0.1, 1e-7, 0.5], [0.3, 0.2, 0.5], [0.3, 0.2, 0.5])
    else:              # the opposite trends, and GD stable everywhere
        gn = _run([0.01, 1, 10], [0.4, 1e-7, 1e-7], [0.3, 0.2, 0.15], [0.28, 0.2, 0.15])
        gd = _run([1, 10, 100], [0.1, 1e-7, 1e-7], [0.2, 0.25, 0.3], [0.2, 0.25, 0.3])
    table, rows = mi.image_claims({"gn": gn, "gd": gd, "rf": 0.3})
    assert [r["verdict"] for r in rows] == (["yes"] * 3 if paper_like else ["no"] * 3)
    assert table.count("\n") == 4 and "unstable at " + ("100" if paper_like else "no step size") in table
