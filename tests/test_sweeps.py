"""Recorded sweeps (itlin_core.book.sweeps): a recorded result is read back only for the same
function, settings and data, read back exactly, and a damaged file is an error that keeps it."""

import ast
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
    monkeypatch.setenv("ITLIN_PRESET", "book")
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


@pytest.mark.parametrize("preset", ["book", "smoke"])
def test_the_book_records_match_the_chapters_settings(preset):
    """Each committed sweeps file holds results of its own function, and the mean_field_scaling
    entries are the ones the chapter asks for at the preset (its four sweeps take only cfg)."""
    from itlin_core.book import image_chapters, mean_field_gn, mean_field_scaling, records
    folder = records.default_results_dir() / "sweeps" / ("" if preset == "book" else preset)
    files = sorted(folder.glob("*.json"))
    assert files, f"book/results/sweeps holds the recorded sweeps of the mean-field chapters at {preset}"
    for f in files:
        doc = json.loads(f.read_text())
        for e in doc["entries"].values():
            owner, function = f.stem.rsplit(".", 1)     # <module or owning chapter>.<function>
            assert e["function"].rsplit(".", 1)[1] == function, (f.name, e["function"])
            assert owner in (e["function"].rsplit(".", 2)[-2], *image_chapters.CHAPTERS), f.name
            assert e["settings"].startswith(e["function"] + "(")
    cfg = mean_field_gn.teacher_student_config(preset)
    for fn in (mean_field_scaling.run_sample_size, mean_field_scaling.run_width, mean_field_scaling.run_silu,
               mean_field_scaling.run_relu_vs_silu):
        path = sweeps.sweep_path(fn, records.default_results_dir(), preset=preset)
        assert sweeps.fingerprint(fn, cfg)[0] in set(json.loads(path.read_text())["entries"]), path.name


def _recorded_keys(fn, preset="book"):
    from itlin_core.book import records
    return set(json.loads(sweeps.sweep_path(fn, records.default_results_dir(), preset=preset).read_text())["entries"])


@pytest.mark.parametrize("preset", ["book", "smoke"])
def test_the_book_records_match_the_mean_field_and_digits_chapters(preset):
    """The calls of mean_field_gn's main sweep and of the digits chapter's two sweeps, built as the
    notebooks build them at the preset, are in the committed records: a changed setting or data set
    fails here (record the chapter again: python -m itlin_core.tools.sweeps [--preset smoke] CHAPTER)
    instead of silently training during the book build or make test."""
    import jax
    from itlin_core.book import digits_cnn, mean_field_gn
    cfg = mean_field_gn.teacher_student_config(preset)
    with jax.enable_x64(True):
        data = mean_field_gn.teacher_student_problem(cfg)
    keys = _recorded_keys(mean_field_gn.run_teacher_student, preset)
    for method, lrs in (("gn", cfg.gn_lrs), ("gd", cfg.gd_lrs)):
        T, L = np.meshgrid(cfg.tau0s, lrs, indexing="ij")
        assert sweeps.fingerprint(mean_field_gn.run_teacher_student, cfg, method, T.ravel(), L.ravel(),
                                  data=data)[0] in keys, method
    dcfg = digits_cnn.digits_config(preset)
    ddata = digits_cnn.digits_data(dcfg)
    assert sweeps.fingerprint(digits_cnn.run_digits_scaling, dcfg, data=ddata)[0] in \
        _recorded_keys(digits_cnn.run_digits_scaling, preset)
    keep = ["eval_step", "dampings", "solved", "test_accuracy_network"]
    assert sweeps.fingerprint(digits_cnn.run_digits_damping, dcfg, data=ddata, **{" keep": keep})[0] in \
        _recorded_keys(digits_cnn.run_digits_damping, preset)


@pytest.mark.parametrize("preset", ["book", "smoke"])
def test_the_records_match_the_refresh_rules_sweep(preset):
    """refresh_rules' sweep of every rule on the digits problem, with the keys its cell keeps, is
    in the committed records at both presets."""
    import nbformat
    from itlin_core.book import digits_cnn, records, refresh_rules
    src = next(c.source for c in nbformat.read(records.default_results_dir().parent / "refresh_rules.ipynb", 4).cells
               if c.cell_type == "code" and "KEEP = [" in c.source)
    keep = ast.literal_eval(src.split("KEEP = ", 1)[1].split("]", 1)[0] + "]")
    dcfg = digits_cnn.digits_config(preset)
    key = sweeps.fingerprint(refresh_rules.run_refresh, refresh_rules.refresh_config(preset),
                             data=digits_cnn.digits_data(dcfg), digits=dcfg, **{" keep": keep})[0]
    assert key in _recorded_keys(refresh_rules.run_refresh, preset)


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


def test_another_preset_and_an_owner_have_files_of_their_own(where, monkeypatch):
    monkeypatch.setenv("ITLIN_SWEEPS", "record")
    sweeps.recorded(sweep, Cfg(3, 1.0))
    monkeypatch.setenv("ITLIN_PRESET", "smoke")
    sweeps.recorded(sweep, Cfg(3, 1.0), owner="chapter_a")
    assert (where / "sweeps" / "test_sweeps.sweep.json").is_file()
    assert (where / "sweeps" / "smoke" / "chapter_a.sweep.json").is_file()
    monkeypatch.setenv("ITLIN_SWEEPS", "use")
    sweeps.recorded(sweep, Cfg(3, 1.0), owner="chapter_a")            # read
    sweeps.recorded(sweep, Cfg(3, 1.0))                               # no smoke file of its module
    assert len(CALLS) == 3
    with pytest.raises(TypeError, match="owner must be a chapter's name"):
        sweeps.recorded(sweep, Cfg(3, 1.0), owner="../elsewhere")


def test_exact_results_are_read_only_in_the_same_environment(where, monkeypatch):
    """An exact entry holds the environment: other XLA flags train again; the same flags in
    another order, or a setting it depends on, count as what they are."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_a=1 --xla_b=2")
    monkeypatch.setenv("ITLIN_SWEEPS", "record")
    sweeps.recorded(sweep, Cfg(3, 1.0), exact=True, depends={"group": Cfg(9, 9.0)})
    monkeypatch.setenv("ITLIN_SWEEPS", "use")
    monkeypatch.setenv("XLA_FLAGS", "--xla_b=2  --xla_a=1")
    sweeps.recorded(sweep, Cfg(3, 1.0), exact=True, depends={"group": Cfg(9, 9.0)})
    assert len(CALLS) == 1
    monkeypatch.setenv("XLA_FLAGS", "--xla_a=1 --xla_b=2 --xla_a=3")            # the last value counts
    sweeps.recorded(sweep, Cfg(3, 1.0), exact=True, depends={"group": Cfg(9, 9.0)})
    assert len(CALLS) == 2
    monkeypatch.setenv("XLA_FLAGS", "--xla_a=3 --xla_b=2 --xla_a=1")
    sweeps.recorded(sweep, Cfg(3, 1.0), exact=True, depends={"group": Cfg(9, 9.0)})
    assert len(CALLS) == 2
    with pytest.raises(TypeError, match="exact must be True or False"):
        sweeps.recorded(sweep, Cfg(3, 1.0), exact="yes")
    monkeypatch.setenv("XLA_FLAGS", "--xla_a=1")
    sweeps.recorded(sweep, Cfg(3, 1.0), exact=True, depends={"group": Cfg(9, 9.0)})
    monkeypatch.setenv("XLA_FLAGS", "--xla_a=1 --xla_b=2")
    sweeps.recorded(sweep, Cfg(3, 1.0), exact=True, depends={"group": Cfg(9, 8.0)})
    assert len(CALLS) == 4
    (entry,) = sweeps.read_entries(where / "sweeps" / "test_sweeps.sweep.json").values()
    assert entry["environment"].endswith("XLA_FLAGS --xla_a=1 --xla_b=2") and entry["environment"] in entry["settings"]


def test_the_smoke_records_are_the_chapters_smoke_runs_under_the_suites_flags():
    """``make test`` reads the image chapters' run groups at ``smoke`` from book/results/sweeps/smoke:
    each chapter's entry holds today's smoke groups and stand-in data, and was recorded on one core
    with the test suite's XLA flags (execution.FAST_COMPILE_FLAGS), as make test runs it (record
    again: python -m itlin_core.tools.sweeps --preset smoke CHAPTER)."""
    import jax
    import jaxlib
    from itlin_core.book import image_chapters, image_runs, records
    from itlin_core.tools import execution
    for chapter in image_chapters.CHAPTERS:
        flags = execution.smoke_kernel_flags(chapter, execution.FAST_COMPILE_FLAGS).split()
        flags = " ".join(sorted(flags, key=lambda f: f.split("=", 1)[0]))
        groups = image_chapters.run_groups(chapter, "smoke")
        data = {d: image_runs.image_data(d, "smoke") for d in sorted({g.dataset for g in groups.values()})}
        _, want = sweeps.fingerprint(image_chapters.run_chapter, chapter, "smoke", data=data,
                                     **{" depends": groups, " environment": "ENV"})
        path = sweeps.sweep_path(image_chapters.run_chapter, records.default_results_dir(), owner=chapter,
                                 preset="smoke")
        (entry,) = sweeps.read_entries(path).values()
        assert entry["settings"].replace(repr(entry["environment"]), repr("ENV")) == want, chapter
        assert entry["environment"].endswith(f"1 core(s), XLA_FLAGS {flags}"), entry["environment"]
        # recorded with the pinned jax (requirements.txt): otherwise make test would train them all
        assert entry["environment"].startswith(f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, "), chapter


def test_the_record_command_names_a_missing_chapter(capsys):
    from itlin_core.tools import sweeps as command
    assert command.main(["no_such_chapter"]) == 2
    assert "no notebook" in capsys.readouterr().err
