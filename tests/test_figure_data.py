"""The CSV files behind the image chapters' figures (itlin_core.book.figure_data): every number of
the record's curves comes back from the file, missing groups leave a header-only file, and a bad
name is refused before anything is written. A new file replaces the old one only after it was
read back whole, and only if the old one is a table this writer made (else overwrite=True)."""

import csv
import os

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


class HalfWritten:
    """A file whose writes keep only the first half of what they are given (a full disk that does
    not say so): what a writer that does not read its file back would rename into place."""

    def __init__(self, f):
        self.f = f

    def write(self, data):
        self.f.write(data[:len(data) // 2])
        return len(data)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def test_a_file_that_reads_back_wrong_never_replaces_the_old_one(tmp_path, monkeypatch):
    path = figure_data.write_figure_csv({"a": record([1, 2])}, ["a"], "fig", folder=tmp_path)
    before = path.read_bytes()
    fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda *a, **k: HalfWritten(fdopen(*a, **k)))
    with pytest.raises(OSError, match="read back .* differs"):
        figure_data.write_figure_csv({"a": record([1])}, ["a"], "fig", folder=tmp_path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["fig.csv"]


@pytest.mark.parametrize("content", [b"my own notes\n1,2,3\n", b"\x00\xff\xfe binary", "run,step,filter,row,column,channel,weight\n".encode(),
                                     b"group,run,K"])     # someone else's file, a filters table, a header cut short
def test_a_file_the_writer_did_not_make_is_kept_unless_overwrite(tmp_path, content):
    path = tmp_path / "fig.csv"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"fig\.csv was not written by figure_data .* left as it is.*overwrite=True"):
        figure_data.write_figure_csv({"a": record([1])}, ["a"], "fig", folder=tmp_path)
    assert path.read_bytes() == content and [p.name for p in tmp_path.iterdir()] == ["fig.csv"]
    figure_data.write_figure_csv({"a": record([1])}, ["a"], "fig", folder=tmp_path, overwrite=True)
    assert read(path)[0][:6] == list(figure_data.KEY_COLUMNS)


def test_a_figure_file_cut_short_or_empty_is_replaced(tmp_path):
    """As documented: an empty file, or one of the writer's own cut short after its header line
    (as a killed writer of old left it), holds nothing to lose and is replaced."""
    full = figure_data.write_figure_csv({"a": record([1, 2])}, ["a"], "fig", folder=tmp_path).read_bytes()
    for content in (b"", full[:len(full) // 2]):
        (tmp_path / "fig.csv").write_bytes(content)
        path = figure_data.write_figure_csv({"a": record([1, 2])}, ["a"], "fig", folder=tmp_path)
        assert path.read_bytes() == full
    (tmp_path / "filters.csv").write_bytes(b"run,step,filter,row,column,channel,weight\nK=1,0,0")
    assert read(figure_data.write_filters_csv(None, "filters", folder=tmp_path)) == [list(figure_data.FILTER_COLUMNS)]
