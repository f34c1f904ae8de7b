"""The recorded mean-field runs (itlin_core.book.mean_field_record): one unit per student, the
seed-0 step-size choice, resuming unit by unit, and agreement with the chapters' own runs."""

import dataclasses

import jax
import numpy as np
import pytest

from itlin_core.book import mean_field_gn, mean_field_record as mfr

jax.config.update("jax_enable_x64", True)

TINY = mfr.Scale(dataclasses.replace(mean_field_gn.teacher_student_config("smoke"), width=30, n_test=60),
                 {"gn": (0.5, 1.0), "gd": (10.0, 100.0)}, {"gn": 40, "gd": 150}, n_evals=5)
GROUP = mfr.Group("test", "silu", (1.0,), (12,), 2)
QUIET = dict(scale=TINY, progress="off", log=lambda *a: None)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The tiny group recorded in one command: its folder and units."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(mfr.GROUPS, "tiny", GROUP)
        folder = tmp_path_factory.mktemp("whole")
        return folder, mfr.record(["tiny"], results_dir=folder, **QUIET)


@pytest.fixture
def tiny_groups(monkeypatch):
    monkeypatch.setitem(mfr.GROUPS, "tiny", GROUP)


def _strip(units):
    return {k: {f: v for f, v in u.items() if f != "seconds"} for k, u in units.items()}


def _assert_same_units(a, b):
    a, b = _strip(a), _strip(b)
    assert a.keys() == b.keys()
    for k in a:
        for f in a[k]:
            np.testing.assert_array_equal(np.asarray(a[k][f]), np.asarray(b[k][f]), err_msg=f"{k}: {f}")


def test_the_group_has_its_sweeps_and_seeds(whole):
    folder, units = whole
    # 1 size x 1 tau0 x (2 + 2 step sizes) on seed 0, then seed 1000 for each method
    assert len(units) == 4 + 2
    _assert_same_units(units, mfr.recorded_units(folder))      # the record on disk is what was trained


def test_an_interrupted_record_resumes_to_the_uninterrupted_one(whole, tiny_groups, tmp_path):
    folder, units = whole
    keys = list(units)                    # recording order; an interruption leaves a prefix
    mfr.save_results(mfr.CHAPTER, mfr.PRESET, {k: units[k] for k in keys[:3]}, seed=0, results_dir=tmp_path)
    got = mfr.record(["tiny"], results_dir=tmp_path, max_units=1, **QUIET)
    assert list(got) == keys[:4]
    got = mfr.record(["tiny"], results_dir=tmp_path, **QUIET)
    _assert_same_units(units, got)


def test_the_other_seeds_run_at_the_step_size_with_the_lowest_seed0_test_loss(whole):
    _, units = whole
    for m in ("gn", "gd"):
        sweep = [units[mfr.unit_key(GROUP, mfr.settings(GROUP, m, 12, 1.0, lr, 0, TINY))] for lr in TINY.lrs[m]]
        pool = [r for r in sweep if r["fitted"]] or [r for r in sweep if np.isfinite(r["final_test_loss"])]
        best = min(pool, key=lambda r: r["final_test_loss"])["settings"]["lr"]
        assert mfr.chosen_lr(units, GROUP, m, 12, 1.0, TINY) == best
        seeds = [u["settings"] for u in units.values() if u["settings"]["method"] == m and u["settings"]["seed"]]
        assert [(s["seed"], s["lr"]) for s in seeds] == [(1000, best)]


def test_a_unit_is_the_chapters_seeded_run(whole):
    # the unit of seed 1000 is run 1 of mean_field_gn.run_teacher_student(..., seeds=[0, 1000]): the same
    # teacher, data and initial draw as the chapters' seed repeats
    _, units = whole
    unit = next(u for u in units.values() if u["settings"]["method"] == "gn" and u["settings"]["seed"] == 1000)
    s = unit["settings"]
    ref = mean_field_gn.run_teacher_student(mfr.unit_config(s), "gn", [1.0, 1.0], [s["lr"]] * 2, seeds=[0, 1000],
                                            iterations=s["iterations"], progress="off")
    for k in ("train_loss", "test_loss", "lrfit", "wcd"):
        np.testing.assert_allclose(unit["final_" + k], ref["final_" + k][1], rtol=1e-8, err_msg=k)
    assert unit["fitted"] == (unit["final_train_loss"] < s["stop_loss"])
    # the random-features baseline is Test-LRfit at iteration 0
    np.testing.assert_allclose(unit["rf_test_loss"], unit["lrfit"][0], rtol=1e-9)


def test_a_unit_recorded_with_other_settings_is_trained_again(whole, tiny_groups, tmp_path):
    folder, units = whole
    mfr.save_results(mfr.CHAPTER, mfr.PRESET, units, seed=0, results_dir=tmp_path)
    other = dataclasses.replace(TINY, budget={"gn": 41, "gd": 150})
    s = mfr.group_units(GROUP, units, other)[0]
    assert mfr.is_recorded(units, GROUP, mfr.group_units(GROUP, units, TINY)[0])
    assert not mfr.is_recorded(units, GROUP, s)
    # nor is a unit of other settings used to choose a step size or drawn
    assert mfr.chosen_lr(units, GROUP, "gn", 12, 1.0, other) is None
    tab = mfr.group_table("tiny", units, other)
    assert np.isnan(tab["gn"]["lr"]).all() and np.isnan(tab["gn"]["test_loss"]).all()
    assert tab["recorded"] == 3 and not np.isnan(tab["gd"]["test_loss"]).any()   # GD's settings did not change
    got = mfr.record(["tiny"], results_dir=tmp_path, max_units=1, **dict(QUIET, scale=other))
    assert got[mfr.unit_key(GROUP, s)]["settings"]["iterations"] == 41


@pytest.mark.parametrize("names, max_units, words", [
    (["no_such_group"], None, "unknown group 'no_such_group'"),
    (["fig3_right"], 0, "max_units must be a positive integer"),
    (["fig3_right"], 1.5, "max_units must be a positive integer"),
])
def test_bad_arguments_are_refused_with_a_sentence(tmp_path, names, max_units, words):
    with pytest.raises(ValueError, match=words):
        mfr.record(names, results_dir=tmp_path, max_units=max_units)


def test_the_command_lists_the_groups_without_training(capsys):
    assert mfr.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in mfr.GROUPS)
    assert mfr.main(["--list", "--names", "nope"]) == 2


def test_the_table_holds_each_seed_at_the_chosen_step_size(whole, tiny_groups):
    _, units = whole
    tab = mfr.group_table("tiny", units, TINY)
    assert tab["recorded"] == tab["total"] == len(units)
    for m in ("gn", "gd"):
        lr = mfr.chosen_lr(units, GROUP, m, 12, 1.0, TINY)
        assert tab[m]["lr"][0, 0] == lr
        for k, seed in enumerate((0, 1000)):
            u = units[mfr.unit_key(GROUP, mfr.settings(GROUP, m, 12, 1.0, lr, seed, TINY))]
            assert tab[m]["test_loss"][0, 0, k] == u["final_test_loss"] and tab["rf"][0, 0, k] == u["rf_test_loss"]
    part = mfr.group_table("tiny", dict(list(units.items())[:4]), TINY)      # the seed-0 sweeps only
    assert part["recorded"] == 4 and np.isnan(part["gn"]["test_loss"][0, 0, 1])


def test_a_unit_saved_by_another_recorder_meanwhile_is_kept(whole, tiny_groups, tmp_path, monkeypatch):
    """Two recorders of different groups share the record file: a unit that the other one saved
    while this one trained stays in the record (each re-reads the file under a lock before
    writing), and the next unit this one picks is chosen from the file as it is then."""
    _, units = whole
    keys = list(units)
    other = {"another group's unit": {"fitted": True}}
    train = mfr.train_unit

    def train_while_another_saves(settings, progress=None):
        r = train(settings, progress)
        with mfr._record_lock(tmp_path):
            mfr.save_results(mfr.CHAPTER, mfr.PRESET, {**mfr.recorded_units(tmp_path), **other}, seed=0,
                             results_dir=tmp_path)
        return r
    monkeypatch.setattr(mfr, "train_unit", train_while_another_saves)
    got = mfr.record(["tiny"], results_dir=tmp_path, max_units=1, **QUIET)
    assert list(got) == ["another group's unit", keys[0]]
    # the other recorder also recorded this group's second unit: this one goes on with the third
    mfr.save_results(mfr.CHAPTER, mfr.PRESET, {**got, keys[1]: units[keys[1]]}, seed=0, results_dir=tmp_path)
    monkeypatch.setattr(mfr, "train_unit", train)
    got = mfr.record(["tiny"], results_dir=tmp_path, max_units=1, **QUIET)
    assert list(got) == ["another group's unit", keys[0], keys[1], keys[2]]
