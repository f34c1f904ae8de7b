"""Recorded sweeps (itlin_core.book.sweeps): a recorded result is read back only for the same
function, settings and data, read back exactly, and a damaged file is an error that keeps it."""

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from itlin_core.book import sweeps


@dataclasses.dataclass(frozen=True)
class Cfg:
    n: int
    lr: float
    names: tuple = ("a", "b")


CALLS = []


def sweep(cfg, data=None, scale=1.0):
    """A stand-in sweep: nested results with float keys, strings, NaN and arrays of three dtypes."""
    CALLS.append(cfg)
    x = np.arange(cfg.n, dtype=float) * cfg.lr * scale
    if data is not None:
        x = x + float(np.sum(data["x"]))
    return {"runs": {1.0: {"loss": x, "method": "gn"}, 1e6: {"loss": -x, "method": "gd"}},
            "stopped": np.arange(cfg.n), "diverged": np.zeros(cfg.n, bool), "nan": float("nan"), "names": ["a"]}


@pytest.fixture
def where(tmp_path, monkeypatch):
    monkeypatch.setenv("ITLIN_RESULTS_DIR", str(tmp_path))
    CALLS.clear()
    sweeps._STARTED.clear()
    return tmp_path


def same(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(u, v) for u, v in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    if isinstance(a, float) and np.isnan(a):
        return np.isnan(b)
    return a == b and type(a) is type(b)


def test_record_then_read_back_exactly(where, monkeypatch):
    cfg = Cfg(5, 0.1)
    monkeypatch.setenv("ITLIN_SWEEPS", "record")
    first = sweeps.recorded(sweep, cfg)
    assert len(CALLS) == 1 and (where / "sweeps" / "test_sweeps.sweep.json").is_file()
    monkeypatch.setenv("ITLIN_SWEEPS", "use")
    again = sweeps.recorded(sweep, cfg)
    assert len(CALLS) == 1, "a matching record must be read, not recomputed"
    assert same(first, again)
    assert list(again["runs"]) == [1.0, 1e6]          # float keys come back as floats


@pytest.mark.parametrize("change", [
    lambda cfg, kw: (dataclasses.replace(cfg, lr=0.2), kw),
    lambda cfg, kw: (dataclasses.replace(cfg, names=("a",)), kw),
    lambda cfg, kw: (cfg, dict(kw, scale=2.0)),
    lambda cfg, kw: (cfg, dict(kw, data={"x": np.array([1.0, 2.5])})),
])
def test_other_settings_or_data_are_trained_again(where, monkeypatch, change):
    cfg, kw = Cfg(4, 0.1), {"data": {"x": np.array([1.0, 2.0])}}
    monkeypatch.setenv("ITLIN_SWEEPS", "record")
    sweeps.recorded(sweep, cfg, **kw)
    monkeypatch.setenv("ITLIN_SWEEPS", "use")
    cfg2, kw2 = change(cfg, kw)
    out = sweeps.recorded(sweep, cfg2, **kw2)
    assert len(CALLS) == 2
    assert same(out, sweep(cfg2, **kw2))


def test_off_never_reads(where, monkeypatch):
    monkeypatch.setenv("ITLIN_SWEEPS", "record")
    sweeps.recorded(sweep, Cfg(3, 1.0))
    monkeypatch.setenv("ITLIN_SWEEPS", "off")
    sweeps.recorded(sweep, Cfg(3, 1.0))
    assert len(CALLS) == 2


def test_a_recording_process_starts_each_file_anew(where, monkeypatch):
    monkeypatch.setenv("ITLIN_SWEEPS", "record")
    sweeps.recorded(sweep, Cfg(3, 1.0))
    sweeps._STARTED.clear()                       # a later recording run
    sweeps.recorded(sweep, Cfg(3, 2.0))
    sweeps.recorded(sweep, Cfg(4, 2.0))
    entries = sweeps.read_entries(where / "sweeps" / "test_sweeps.sweep.json")
    assert sorted(e["settings"].split(".sweep", 1)[1] for e in entries.values()) == [
        "(Cfg(n=3, lr=2.0, names=('a', 'b')))", "(Cfg(n=4, lr=2.0, names=('a', 'b')))"]


def test_damaged_file_is_an_error_and_is_kept(where, monkeypatch):
    path = where / "sweeps" / "test_sweeps.sweep.json"
    path.parent.mkdir()
    path.write_text('{"format": 1, "entries": {"k": {"result": {"__ndarray__": 3}, "seconds": 1, "created": "x"}}}')
    before = path.read_bytes()
    monkeypatch.setenv("ITLIN_SWEEPS", "use")
    with pytest.raises(ValueError, match="test_sweeps.sweep.json is not a readable sweeps record"):
        sweeps.recorded(sweep, Cfg(3, 1.0))
    assert path.read_bytes() == before
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not a readable sweeps record"):
        sweeps.recorded(sweep, Cfg(3, 1.0))
    assert path.read_text() == "{not json"


def test_bad_mode_and_arguments(where, monkeypatch):
    monkeypatch.setenv("ITLIN_SWEEPS", "sometimes")
    with pytest.raises(ValueError, match="ITLIN_SWEEPS must be one of use, off, record, got 'sometimes'"):
        sweeps.recorded(sweep, Cfg(3, 1.0))
    monkeypatch.setenv("ITLIN_SWEEPS", "use")
    with pytest.raises(TypeError, match="fn must be the sweep function"):
        sweeps.recorded("sweep", Cfg(3, 1.0))
    with pytest.raises(TypeError, match="argument 'progress': a recorded sweep's arguments must be"):
        sweeps.recorded(sweep, Cfg(3, 1.0), progress=print)
    with pytest.raises(TypeError, match=r"argument 2\['x'\]: only real numeric arrays"):
        sweeps.recorded(sweep, Cfg(3, 1.0), {"x": np.array(["a"])})
    assert CALLS == []


def test_fingerprint_ignores_rounding_noise():
    a = np.random.default_rng(0).normal(size=(200, 10))
    key = sweeps.fingerprint(sweep, Cfg(1, 1.0), data={"x": a})[0]
    assert sweeps.fingerprint(sweep, Cfg(1, 1.0), data={"x": a * (1 + 1e-14)})[0] == key
    assert sweeps.fingerprint(sweep, Cfg(1, 1.0), data={"x": a.astype(np.float32)})[0] != key   # another dtype


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=20), st.integers(0, 19))
def test_fingerprint_tells_data_apart(values, i):
    a = np.array(values)
    key = sweeps.fingerprint(sweep, Cfg(1, 1.0), data={"x": a})[0]
    other = a.copy()
    j = i % a.size
    other[j] += 1e-3 * (1 + abs(other[j]))
    assert sweeps.fingerprint(sweep, Cfg(1, 1.0), data={"x": other})[0] != key


def test_the_book_records_match_the_chapters_settings():
    """Each committed sweeps file holds results of its own function, and the mean_field_scaling
    entries are the ones the chapter asks for at the book preset (its four sweeps take only cfg)."""
    from itlin_core.book import mean_field_gn, mean_field_scaling, records
    folder = records.default_results_dir() / "sweeps"
    files = sorted(folder.glob("*.json"))
    assert files, "book/results/sweeps holds the recorded sweeps of the mean-field chapters"
    for f in files:
        doc = json.loads(f.read_text())
        for e in doc["entries"].values():
            assert e["function"].endswith(f.stem) and e["settings"].startswith(e["function"] + "(")
    cfg = mean_field_gn.teacher_student_config("book")
    for fn in (mean_field_scaling.run_sample_size, mean_field_scaling.run_width, mean_field_scaling.run_silu,
               mean_field_scaling.run_relu_vs_silu):
        path = sweeps.sweep_path(fn, records.default_results_dir())
        assert sweeps.fingerprint(fn, cfg)[0] in set(json.loads(path.read_text())["entries"]), path.name


def _recorded_keys(fn):
    from itlin_core.book import records
    return set(json.loads(sweeps.sweep_path(fn, records.default_results_dir()).read_text())["entries"])


def test_the_book_records_match_the_mean_field_and_digits_chapters():
    """The calls of mean_field_gn's main sweep and of the digits chapter's two sweeps, built as the
    notebooks build them at the book preset, are in the committed records: a changed setting or
    data set fails here (record the chapter again: python -m itlin_core.book.sweeps CHAPTER)
    instead of silently training during the book build."""
    import jax
    from itlin_core.book import digits_cnn, mean_field_gn
    cfg = mean_field_gn.teacher_student_config("book")
    with jax.enable_x64(True):
        data = mean_field_gn.teacher_student_problem(cfg)
    keys = _recorded_keys(mean_field_gn.run_teacher_student)
    for method, lrs in (("gn", cfg.gn_lrs), ("gd", cfg.gd_lrs)):
        T, L = np.meshgrid(cfg.tau0s, lrs, indexing="ij")
        assert sweeps.fingerprint(mean_field_gn.run_teacher_student, cfg, method, T.ravel(), L.ravel(),
                                  data=data)[0] in keys, method
    dcfg = digits_cnn.digits_config("book")
    ddata = digits_cnn.digits_data(dcfg)
    assert sweeps.fingerprint(digits_cnn.run_digits_scaling, dcfg, data=ddata)[0] in \
        _recorded_keys(digits_cnn.run_digits_scaling)
    keep = ["eval_step", "dampings", "solved", "test_accuracy_network"]
    assert sweeps.fingerprint(digits_cnn.run_digits_damping, dcfg, data=ddata, **{" keep": keep})[0] in \
        _recorded_keys(digits_cnn.run_digits_damping)


def test_keep_selects_the_same_entries_computed_or_read(where, monkeypatch):
    monkeypatch.setenv("ITLIN_SWEEPS", "record")
    live = sweeps.recorded(sweep, Cfg(3, 1.0), keep=["stopped", "nan"])
    monkeypatch.setenv("ITLIN_SWEEPS", "use")
    read = sweeps.recorded(sweep, Cfg(3, 1.0), keep=["stopped", "nan"])
    assert len(CALLS) == 1 and same(live, read) and list(read) == ["stopped", "nan"]
    sweeps.recorded(sweep, Cfg(3, 1.0), keep=["stopped"])         # another selection: trained again
    assert len(CALLS) == 2
    with pytest.raises(ValueError, match=r"keep names \['state'\], which .*sweep did not return"):
        sweeps.recorded(sweep, Cfg(3, 1.0), keep=["state"])
    with pytest.raises(TypeError, match="keep must be a list of the result's keys"):
        sweeps.recorded(sweep, Cfg(3, 1.0), keep="stopped")
