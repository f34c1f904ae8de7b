"""The book layer of the chapter "When should the features be refreshed?": the comparison at equal
numbers of feature updates against a hand computation, the generated verdict, the kernel movement."""

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
    sentence = refresh_rules.verdict_sentence(list(rows.values()), CFG.tie_images)
    assert sentence.startswith("Of the 3 adaptive runs compared, 1 beat the fixed period")
    assert "1 tie with it" in sentence and "1 fall behind it" in sentence
    assert f"{100 * rows['g']['difference']:+.1f} points (g)" in sentence


def test_no_comparable_run_says_so():
    rows = refresh_rules.compare_at_equal_updates(hist_of(FIXED + [("drift", "d", 9000, 0.9)]), CFG)
    assert "none can be compared" in refresh_rules.verdict_sentence(rows, CFG.tie_images)


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
