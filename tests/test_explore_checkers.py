"""The checkers of the five predict-then-measure exercises (itlin_core.book.exercises_explore):
each passes the reference solution, computed here as the chapter's solution computes it on a tiny
setting, and fails typical wrong answers with the hint that names the slip."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin_core as ic
from itlin_core.book import exercises_explore as ex
from itlin_core.book import iterative_linearisation, linearisation, mean_field_gn, refresh_rules


def assert_checker(check, right, wrongs, capsys):
    """``check`` passes ``right`` with a tick and fails each ``(wrong, says)`` with a cross and the hint ``says``."""
    assert check(right) is True, capsys.readouterr().out
    assert "✔" in capsys.readouterr().out
    for wrong, says in wrongs:
        assert check(wrong) is False, (wrong, says)
        out = capsys.readouterr().out
        assert "✘" in out and says in out, (says, out)


def test_probe_rescaling(capsys):
    rng = np.random.default_rng(0)
    y = np.arange(160) % 4
    f = rng.normal(size=(160, 12))
    f[np.arange(160), y] += 1.0
    f_tr, f_te, y_tr, y_te = f[:80], f[80:], y[:80], y[80:]
    probe = lambda a, b, key="test_accuracy": float(ic.linear_probe(a, y_tr, b, y_te)[key])
    right = {s: probe(s * f_tr, s * f_te) for s in (1e-3, 1.0, 1e3)}
    # a global factor leaves the probe unchanged (the claim the exercise leads to), to one image
    assert max(right.values()) - min(right.values()) <= 1 / 80
    train_only = probe(1e3 * f_tr, f_te)
    assert abs(train_only - right[1e3]) > 1 / 80          # the slip is visible on this problem
    wrongs = [({**right, 1e3: train_only}, "same factor"),
              ({**right, 1.0: 100 * right[1.0]}, "percentage"),
              ({**right, 1.0: probe(f_tr, f_te, "train_accuracy")}, "training accuracy"),
              ({1.0: "high"}, "finite number"), ({}, "empty"), ([0.5], "dict"), ({-1.0: 0.5}, "positive factor")]
    assert_checker(lambda a: ex.check_probe_rescaling(a, f_tr, y_tr, f_te, y_te), right, wrongs, capsys)


def il_sweep(cfg, Ks, progress=None):
    """The chapter's sweep (book/iterative_linearisation.ipynb, cell "il_sweep"), written out again."""
    model, params0, data, lr = iterative_linearisation.il_toy_problem(cfg)
    opt = optax.sgd(lr)
    step, _ = ic.make_il_sweep_step(model.apply, ic.squared_error, opt, Ks)
    states = ic.replicate(ic.init_il_state(params0, opt), len(Ks))
    splits = {"train": (data["x_train"], data["y_train"]), "test": (data["x_test"], data["y_test"])}
    evaluate = jax.vmap(ic.make_il_eval(model.apply, splits, {"rmse": ic.rmse}))
    _, hist = ic.train(step, states, ic.full_batch(data["x_train"], data["y_train"]), cfg.steps,
                       evaluate=ic.Evaluation(evaluate, every=cfg.eval_every), progress=ic.Progress(progress, "IL"))
    return hist


def test_lazy_gap(capsys):
    cfg = dataclasses.replace(iterative_linearisation.il_toy_config("smoke"), n_train=16, n_test=20, width=8,
                              steps=40, eval_every=20)
    @functools.cache
    def hist(scale, centre=True):
        return il_sweep(dataclasses.replace(cfg, out_scale=scale, centre_output=centre), (1, None), "off")
    run = lambda scale, centre=True, key="test_rmse_proxy": tuple(np.asarray(hist(scale, centre)[key], float)[-1])
    right = {10.0: run(10.0), 0.1: run(0.1)}
    # the wrong values sit at the first key, so that each check reruns as little as possible
    wrongs = [({**right, 10.0: right[10.0][::-1]}, "wrong order"),
              ({**right, 10.0: run(10.0, key="test_rmse_network")}, "network's errors"),
              ({**right, 10.0: run(10.0, centre=False)}, "centre_output=True"),
              ({0.1: (1.0,)}, "2 finite number"), ("gap", "dict")]
    # the slips give other numbers on this problem, by more than the checker's tolerance
    for wrong, _ in wrongs[:3]:
        assert not np.allclose(wrong[10.0], right[10.0], rtol=1e-5), wrong
    assert_checker(lambda a: ex.check_lazy_gap(a, il_sweep, cfg), right, wrongs, capsys)


def test_width_runs(capsys):
    cfg = dataclasses.replace(linearisation.KERNEL_EVOLUTION["smoke"], n_train=8, steps=40, eval_every=10)
    names = ("kernel_distance", "relative_param_change", "train_rmse")

    def run(param, w, b_std=None):
        b = (1.0 if param == "ntk" else cfg.b_std) if b_std is None else b_std
        r = linearisation.run_kernel_evolution(dataclasses.replace(
            cfg, width=w, alphas=(1.0,), parameterisation=param, b_std=b), progress="off")
        return lambda at=-1: [float(np.asarray(r[k])[0, at]) for k in names]
    ntk8 = run("ntk", 8)     # read at the end, and (a wrong answer) before it
    right = {("ntk", 8): ntk8(), ("standard", 8): run("standard", 8)()}
    wrongs = [({**right, ("ntk", 8): run("ntk", 8, b_std=0.0)()}, "b_std=1.0"),
              ({**right, ("ntk", 8): ntk8(at=1)}, "before the end of training"),
              ({**right, ("ntk", 8): [1.0, 1.0, 1.0]}, "kernel_distance is off"),
              ({("relu", 8): [1, 2, 3]}, "'standard' or 'ntk'"), ({("ntk", 8): [1, 2]}, "3 finite number")]
    assert_checker(lambda a: ex.check_width_runs(a, linearisation.run_kernel_evolution, cfg), right, wrongs, capsys)


def test_rf_widths(capsys):
    cfg = dataclasses.replace(mean_field_gn.TEACHER_STUDENT["smoke"], n_train=10, n_test=50, tau0s=(1e-3, 10.0),
                              activation="silu")
    with jax.enable_x64(True):
        data = mean_field_gn.teacher_student_problem(dataclasses.replace(cfg, seed=cfg.seed))
        widths = [5, 10, 40]
        rf = lambda m, tau0=1.0, d=data: float(mean_field_gn.random_features_baseline(
            dataclasses.replace(cfg, width=m), [tau0], data=d)["test_loss"][0])
        right = [rf(m) for m in widths]
        other = mean_field_gn.teacher_student_problem(dataclasses.replace(cfg, seed=cfg.seed + 7))
        wrongs = [([right[0], rf(10, tau0=1e-3), right[2]], "tau0 = 1"),
                  ([right[0], right[1], 2 * right[2]], "random_features_baseline(dataclasses.replace"),
                  (right[:2], "one finite test loss per width")]
        assert rf(10, tau0=1e-3) != right[1]                  # SiLU features depend on tau0
        assert rf(10, d=other) != right[1]
        assert_checker(lambda a: ex.check_rf_widths(a, widths, mean_field_gn.random_features_baseline, cfg, data),
                       right, wrongs, capsys)


def test_started_refresh(capsys):
    cfg = dataclasses.replace(refresh_rules.small_refresh_config("smoke"), fixed=(1, None), geometric=(),
                              tols=(0.01, 1.0), n_evals=2, ts_steps=12)
    tcfg = dataclasses.replace(mean_field_gn.TEACHER_STUDENT["smoke"], n_train=8, n_test=8, width=16)
    original = refresh_rules.teacher_student_refresh_problem(cfg, tcfg)
    last, first = "v", "u"
    assert not np.any(np.asarray(original["params0"]["v"]))   # the output weights start at zero
    v0 = 0.5 * jax.random.normal(jax.random.key(7), jnp.shape(original["params0"][last]))
    started = dict(original, params0={**original["params0"], last: v0})
    hist = refresh_rules.run_small_problem(started, cfg, progress="off")

    def check(args):
        h, problem, c = args
        return ex.check_started_refresh(h, refresh_rules.run_small_problem, problem, original, c)
    moved = dict(started, params0={**started["params0"], first: 2 * started["params0"][first]})
    zero = dict(started, params0={**started["params0"], last: 0 * v0})
    bad_updates = dict(hist, updates=np.asarray(hist["updates"]) + 1)
    bad_loss = dict(hist, test_error_proxy=2 * np.asarray(hist["test_error_proxy"]))
    wrongs = [((hist, moved, cfg), "change only the output weights"),
              ((hist, zero, cfg), "still zero"),
              ((hist, started, dataclasses.replace(cfg, geometric=(3,))), "geometric=()"),
              ((bad_updates, started, cfg), "feature-update counts"),
              ((bad_loss, started, cfg), "final test losses"),
              ((dict(hist, labels=["K=1"]), started, cfg), "labels should be")]
    assert_checker(check, (hist, started, cfg), wrongs, capsys)
