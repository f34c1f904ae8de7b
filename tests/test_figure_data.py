"""The CSV files behind the image chapters' figures (itlin_core.book.figure_data): every number of
the record's curves comes back from the file, missing groups leave a header-only file, and a bad
name is refused before anything is written."""

import csv

import numpy as np
import pytest

from itlin_core.book import figure_data


def record(Ks, n_eval_steps=3, seed=0):
    rng = np.random.default_rng(seed)
    shape = (n_eval_steps, len(Ks))
    return {"Ks": list(Ks), "labels": [f"K={k}" for k in Ks], "dampings": [0.0] * len(Ks),
            "eval_step": np.arange(n_eval_steps) * 10, "feature_updates": np.ones(shape, int),
            "metrics": {"test_accuracy_proxy": rng.uniform(size=shape), "curvature": rng.uniform(50, 500, shape)}}


def read(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_every_value_of_the_curves_comes_back(tmp_path):
    results = {"a": record([1, 10, None]), "b": record([5], n_eval_steps=4, seed=1)}
    results["a"]["metrics"]["test_accuracy_proxy"][1, 2] = np.nan    # a diverged evaluation: empty cell
    path = figure_data.write_figure_csv(results, ["a", "b", "missing"], "fig-x", folder=tmp_path)
    header, *rows = read(path)
    assert header == list(figure_data.KEY_COLUMNS) + ["curvature", "test_accuracy_proxy"]
    assert len(rows) == 3 * 3 + 4 * 1
    for row in rows:
        rec = results[row[0]]
        i, e = rec["labels"].index(row[1]), list(rec["eval_step"]).index(int(row[4]))
        for m in ("curvature", "test_accuracy_proxy"):
            want = rec["metrics"][m][e, i]
            got = row[header.index(m)]
            assert (got == "") if np.isnan(want) else float(got) == pytest.approx(want, rel=1e-7)
    assert {r[2] for r in rows if r[0] == "a"} == {"1", "10", "∞"}


def test_a_figure_without_recorded_groups_still_gets_its_file(tmp_path):
    path = figure_data.write_figure_csv(None, ["fig2"], "empty", folder=tmp_path)
    assert read(path) == [list(figure_data.KEY_COLUMNS)]
    assert read(figure_data.write_filters_csv(None, "filters", folder=tmp_path)) == [
        ["run", "step", "filter", "row", "column", "channel", "weight"]]


def test_filters_are_written_weight_by_weight(tmp_path):
    rec = record([1, 400], n_eval_steps=2)
    rec["filters"] = np.random.default_rng(2).normal(size=(2, 2, 5, 5, 3, 3))
    header, *rows = read(figure_data.write_filters_csv(rec, "filters", folder=tmp_path))
    assert len(rows) == rec["filters"].size
    run, step, k, r, c, ch, w = rows[-1]
    assert (run, step) == ("K=400", "10") and float(w) == pytest.approx(rec["filters"][1, 1, 4, 4, 2, 2], rel=1e-7)


@pytest.mark.parametrize("name", ["", "../escape", "a b", 3])
def test_a_bad_name_is_refused_and_nothing_is_written(tmp_path, name):
    with pytest.raises(ValueError, match="name must be a file name"):
        figure_data.write_figure_csv({"a": record([1])}, ["a"], name, folder=tmp_path)
    assert not list(tmp_path.iterdir())


def test_an_existing_file_is_replaced_whole(tmp_path):
    path = figure_data.write_figure_csv({"a": record([1, 2])}, ["a"], "fig", folder=tmp_path)
    path = figure_data.write_figure_csv({"a": record([1])}, ["a"], "fig", folder=tmp_path)
    assert len(read(path)) == 1 + 3 and [p.name for p in tmp_path.iterdir()] == ["fig.csv"]
