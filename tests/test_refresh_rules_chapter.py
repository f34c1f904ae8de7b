"""The book layer of the chapter "When should the features be refreshed?": the comparison at equal
numbers of feature updates against a hand computation, the counts of verdicts the chapter glues
into its sentences, the kernel movement."""

import math

import numpy as np
import pytest

from itlin_core.book import refresh_rules

CFG = refresh_rules.REFRESH["smoke"]


def hist_of(runs, n_test=500):
    """A history with one final evaluation: runs = [(family, label, updates, accuracy)]."""
    return {"families": [r[0] for r in runs], "labels": [r[1] for r in runs], "n_test": n_test,
            "updates": np.array([[r[2] for r in runs]]), "test_accuracy_proxy": np.array([[r[3] for r in runs]])}


FIXED = [("fixed", "K=∞", 1, 0.80), ("fixed", "K=1000", 3, 0.90), ("fixed", "K=100", 30, 0.92),
         ("fixed", "K=1", 3000, 0.93)]


def test_adaptive_runs_are_compared_with_the_fixed_curve_interpolated_in_log_updates():
    hist = hist_of(FIXED + [("geometric", "g", 10, 0.95), ("drift", "d-tied", 30, 0.921),
                            ("drift", "d-worse", 300, 0.90), ("drift", "d-out", 5000, 0.99)])
    rows = {r["label"]: r for r in refresh_rules.compare_at_equal_updates(hist, CFG)}
    w = (math.log(10) - math.log(3)) / (math.log(30) - math.log(3))
    assert rows["g"]["fixed_accuracy"] == pytest.approx(0.90 + w * 0.02)
    assert rows["g"]["verdict"] == "better" and rows["g"]["difference"] == pytest.approx(0.95 - 0.90 - w * 0.02)
    assert rows["d-tied"]["verdict"] == "tied"          # 0.001 < 3 test images of 500
    w = (math.log(300) - math.log(30)) / (math.log(3000) - math.log(30))
    assert rows["d-worse"]["fixed_accuracy"] == pytest.approx(0.92 + w * 0.01)
    assert rows["d-worse"]["verdict"] == "worse"
    assert rows["d-out"]["verdict"] == "outside" and math.isnan(rows["d-out"]["fixed_accuracy"])
    counts = refresh_rules.verdict_counts(list(rows.values()))
    assert {k: v for k, v in counts.items() if k not in ("best", "worst")} == {
        "runs": 4, "compared": 3, "better": 1, "tied": 1, "worse": 1, "diverged": 0, "never": 0, "outside": 1}
    assert counts["best"] is rows["g"] and counts["worst"] is rows["d-worse"]


def test_no_comparable_run_has_no_best_or_worst():
    rows = refresh_rules.compare_at_equal_updates(hist_of(FIXED + [("drift", "d", 9000, 0.9)]), CFG)
    counts = refresh_rules.verdict_counts(rows)
    assert counts["runs"] == counts["outside"] == 1 and counts["compared"] == 0
    assert counts["best"] is None and counts["worst"] is None
    assert refresh_rules.verdict_counts([])["runs"] == 0


def test_kernel_movement_ignores_scale_and_sees_a_change_of_shape():
    k = np.eye(4) + 0.5
    other = np.diag([4.0, 1.0, 1.0, 1.0])
    move = refresh_rules.kernel_movement(np.stack([k, 3 * k, other]))
    assert math.isnan(move["per_interval"][0])
    np.testing.assert_allclose(move["from_init"][:2], 0, atol=1e-7)
    np.testing.assert_allclose(move["per_interval"][1], 0, atol=1e-7)
    assert move["per_interval"][2] > 0.1 and move["from_init"][2] == pytest.approx(move["per_interval"][2])


def test_every_rule_of_every_preset_is_valid_and_named_once():
    for preset, cfg in refresh_rules.REFRESH.items():
        fams = refresh_rules.rules_of(cfg)
        labels = [label for rs in fams.values() for label, _ in rs]
        assert len(labels) == len(set(labels)), preset
        assert set(fams) == {"fixed", "geometric", "drift"} and all(fams.values()), preset
        assert 1 in cfg.fixed and None in cfg.fixed, f"{preset}: the comparison needs K=1 and K=inf"


SMALL = refresh_rules.SMALL["smoke"]


def loss_hist(runs):
    """A history of final test errors: runs = [(family, label, updates, error)]."""
    return {"families": [r[0] for r in runs], "labels": [r[1] for r in runs],
            "updates": np.array([[r[2] for r in runs]]), "test_error_proxy": np.array([[r[3] for r in runs]])}


LOSS_FIXED = [("fixed", "K=∞", 1, 0.2), ("fixed", "K=100", 10, 0.1), ("fixed", "K=10", 100, 0.01),
              ("fixed", "K=1", 1000, 0.02)]


def test_losses_are_compared_in_log_loss_and_relative_difference():
    hist = loss_hist(LOSS_FIXED + [("geometric", "g", 30, 0.05), ("geometric", "g-worse", 30, 0.2),
                                   ("drift", "d-tied", 10, 0.1015),
                                   ("drift", "d-never", 1, 0.2), ("drift", "d-nan", 50, math.nan),
                                   ("fixed", "K=3", 300, math.nan)])
    rows = {r["label"]: r for r in refresh_rules.compare_at_equal_updates(hist, SMALL, "test_error_proxy",
                                                                           lower_is_better=True)}
    # geometric interpolation between (10, 0.1) and (100, 0.01) at 30 updates, by hand
    w = (math.log(30) - math.log(10)) / (math.log(100) - math.log(10))
    ref = math.exp((1 - w) * math.log(0.1) + w * math.log(0.01))
    assert rows["g"]["fixed_accuracy"] == pytest.approx(ref)
    assert rows["g"]["difference"] == pytest.approx(0.05 / ref - 1) and rows["g"]["unit"] == "relative"
    assert rows["g"]["gain"] == pytest.approx(1 - 0.05 / ref) and rows["g"]["gain"] < -0.4
    # far above the interpolated loss, but between its two bracketing periods (0.1 at 10
    # updates, 0.01 at 100): the verdict does not rest on the interpolation, so it is a tie
    assert rows["g"]["bracket"] == ("K=100", "K=10") and rows["g"]["verdict"] == "tied"
    assert rows["g-worse"]["verdict"] == "worse"                # above both bracketing losses
    assert rows["d-tied"]["verdict"] == "tied"                  # 1.5% < 2%
    assert rows["d-never"]["verdict"] == "never refreshed"      # one linearisation: the K=inf run
    assert rows["d-nan"]["verdict"] == "diverged"
    counts = refresh_rules.verdict_counts(list(rows.values()))
    assert (counts["runs"], counts["compared"], counts["better"], counts["tied"], counts["worse"]) == (5, 3, 0, 2, 1)
    assert (counts["diverged"], counts["never"], counts["outside"]) == (1, 1, 0)
    # a lower loss is better: the best row is the one of largest gain, "d-tied" here
    assert counts["best"] is rows["d-tied"] and counts["worst"] is rows["g-worse"]


def test_a_lower_loss_is_better():
    hist = loss_hist(LOSS_FIXED + [("geometric", "g", 10, 0.05)])
    (row,) = refresh_rules.compare_at_equal_updates(hist, SMALL, "test_error_proxy", lower_is_better=True)
    assert row["verdict"] == "better" and row["difference"] == pytest.approx(-0.5) and row["gain"] > 0


def test_refresh_shares_count_refreshes_after_the_first_linearisation():
    hist = {"families": ["drift", "drift", "fixed"], "labels": ["a", "b", "K=1"], "eval_step": np.array([0, 10, 20]),
            "updates": np.array([[1, 1, 1], [3, 1, 11], [5, 1, 21]])}
    shares = refresh_rules.refresh_shares(hist, 10)
    assert set(shares) == {"a", "b"} and shares["a"] == pytest.approx(0.5) and math.isnan(shares["b"])
    assert refresh_rules.never_refreshed(hist) == ["b"]


def test_every_small_problem_rule_is_valid_and_named_once():
    for preset, cfg in refresh_rules.SMALL.items():
        fams = refresh_rules.rules_of(cfg)
        labels = [label for rs in fams.values() for label, _ in rs]
        assert len(labels) == len(set(labels)), preset
        assert 1 in cfg.fixed and None in cfg.fixed and all(fams.values()), preset


def test_drift_rule_cannot_fire_on_a_mean_field_student_with_zero_output_weights():
    """At v = 0 the hidden weights have zero Jacobian: the proxy never moves them, the network
    equals the proxy, the drift stays 0 and the rule is K = inf (checked against an explicit
    Jacobian and a K = inf run)."""
    import jax
    import jax.numpy as jnp

    import itlin_core as ic

    cfg = refresh_rules.SmallRefreshConfig(ts_steps=60, fixed=(None,), geometric=(), tols=(1e-3,), n_evals=3)
    tcfg = refresh_rules.teacher_student_config("smoke")
    import dataclasses
    tcfg = dataclasses.replace(tcfg, n_train=12, width=16, n_test=20)
    problem = refresh_rules.teacher_student_refresh_problem(cfg, tcfg)
    x = problem["train"][0]
    jac = jax.jacfwd(problem["apply"])(problem["params0"], x)
    assert float(jnp.max(jnp.abs(jac["u"]))) == 0.0 and float(jnp.max(jnp.abs(jac["v"]))) > 0
    hist = refresh_rules.run_small_problem(problem, cfg)
    assert hist["labels"] == ["K=∞", "on_drift(0.001)"]
    assert refresh_rules.never_refreshed(hist) == ["on_drift(0.001)"]
    assert float(np.max(hist["drift"])) < 1e-5
    u = np.asarray(hist["state"].params["u"])
    np.testing.assert_array_equal(u[0], np.asarray(problem["params0"]["u"]))
    np.testing.assert_array_equal(u[1], u[0])
    # and with output weights away from zero the same rule does fire
    v0 = 0.1 * jax.random.normal(jax.random.key(3), problem["params0"]["v"].shape)
    started = dict(problem, params0={**problem["params0"], "v": v0})
    assert int(refresh_rules.run_small_problem(started, cfg)["updates"][-1, 1]) > 1


def test_fixed_below_inf_lists_the_finite_periods_that_end_below_k_inf():
    hist = hist_of([("fixed", "K=∞", 1, 0.85), ("fixed", "K=1000", 3, 0.80), ("fixed", "K=1", 3000, 0.93),
                    ("geometric", "g", 10, 0.5)])
    assert refresh_rules.fixed_below_inf(hist) == ["K=1000"]
    assert refresh_rules.fixed_below_inf(hist_of(FIXED)) == []
