"""The book's results files (itlin_core.book.records): they round trip exactly (NaN and
infinities included), are written atomically, and refuse bad names and values."""

import json
import os
import platform

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import itlin_core as ic
from itlin_core.book import records

# ------------------------------------------------------------------------------ results files


def curves():
    return {"eval_step": np.arange(0, 50, 10),
            "test_accuracy": jnp.asarray([[0.1, 0.5], [0.7, np.nan]], dtype=jnp.float32),
            "loss": np.array([np.inf, -np.inf, 1.5, np.nan]),
            "best": float("nan"), "lr": 1e-3, "Ks": [1, 3, None], "converged": np.array([True, False]),
            "label": "K sweep", "nested": {"counts": (1, 2), "empty": np.zeros((0, 3), np.float32)},
            "n": np.int64(7), "ratio": np.float32(0.25)}


def test_results_round_trip(tmp_path):
    data = curves()
    path = records.save_results("toy_chapter", "colab", {"g": data}, seed=3, results_dir=tmp_path)
    assert path == tmp_path / "toy_chapter-colab.json"
    # the file is standard JSON: no bare NaN/Infinity tokens
    json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    rec = records.load_results("toy_chapter", results_dir=tmp_path)
    assert rec["preset"] == "colab" and rec["seed"] == 3 and rec["chapter"] == "toy_chapter"
    got = rec["data"]["g"]
    for k in ("eval_step", "test_accuracy", "loss", "converged"):
        want = np.asarray(data[k])
        assert got[k].dtype == want.dtype and got[k].shape == want.shape, k
        np.testing.assert_array_equal(got[k], want)  # equal, NaNs in the same places
    assert np.isnan(got["best"]) and got["lr"] == data["lr"]
    assert got["Ks"] == [1, 3, None] and got["label"] == "K sweep" and got["nested"]["counts"] == [1, 2]
    assert got["nested"]["empty"].shape == (0, 3) and got["nested"]["empty"].dtype == np.float32
    assert got["n"] == 7 and got["ratio"] == 0.25


def test_versions_device_and_time_are_recorded(tmp_path):
    import jaxlib
    records.save_results("toy", "paper", {"g": {"x": np.ones(2)}}, seed=0, results_dir=tmp_path, note="a test")
    rec = records.load_results("toy", results_dir=tmp_path)
    assert rec["versions"] == {"python": platform.python_version(), "jax": jax.__version__,
                               "jaxlib": jaxlib.__version__, "optax": optax.__version__,
                               "numpy": np.__version__, "itlin_core": ic.__version__}
    assert rec["device"]["platform"] == jax.default_backend()
    assert rec["device"]["count"] == len(jax.devices())
    assert rec["device"]["device_kind"] == jax.devices()[0].device_kind
    assert rec["created"].endswith("+00:00") and rec["note"] == "a test"


def test_load_results_prefers_presets_in_order(tmp_path):
    assert records.load_results("toy", results_dir=tmp_path) is None  # none recorded yet
    records.save_results("toy", "colab", {"g": {"v": 1}}, seed=0, results_dir=tmp_path)
    assert records.load_results("toy", results_dir=tmp_path)["preset"] == "colab"
    records.save_results("toy", "paper", {"g": {"v": 2}}, seed=0, results_dir=tmp_path)
    assert records.load_results("toy", results_dir=tmp_path)["data"]["g"]["v"] == 2
    assert records.load_results("toy", preferred=("colab", "paper"), results_dir=tmp_path)["data"]["g"]["v"] == 1
    assert records.load_results("toy", preferred="smoke", results_dir=tmp_path) is None


def test_results_write_is_atomic(tmp_path, monkeypatch):
    records.save_results("toy", "colab", {"g": {"v": np.arange(3)}}, seed=0, results_dir=tmp_path)
    before = (tmp_path / "toy-colab.json").read_bytes()

    # a failure after part of the new file has been written (here: at fsync) ...
    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(records.os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        records.save_results("toy", "colab", {"g": {"v": np.arange(10 ** 5)}}, seed=1, results_dir=tmp_path)
    # ... leaves the old record untouched and no temporary file behind
    assert (tmp_path / "toy-colab.json").read_bytes() == before
    assert os.listdir(tmp_path) == ["toy-colab.json"]
    # a first write that fails leaves no file at all
    with pytest.raises(OSError):
        records.save_results("other", "colab", {"g": {"v": 1}}, seed=0, results_dir=tmp_path)
    assert os.listdir(tmp_path) == ["toy-colab.json"]
    # a value that cannot be recorded fails before anything is written
    monkeypatch.undo()
    with pytest.raises(ValueError, match="cannot record"):
        records.save_results("third", "colab", {"g": {"f": print}}, seed=0, results_dir=tmp_path)
    assert os.listdir(tmp_path) == ["toy-colab.json"]


@pytest.mark.parametrize("chapter", ["CIFAR", "cifar-10", "", "../x", "a/b", 3])
def test_bad_chapter_names_raise(tmp_path, chapter):
    with pytest.raises(ValueError, match="chapter must be"):
        records.save_results(chapter, "colab", {}, seed=0, results_dir=tmp_path)
    with pytest.raises(ValueError, match="chapter must be"):
        records.load_results(chapter, results_dir=tmp_path)


def test_bad_arguments_raise(tmp_path):
    with pytest.raises(ValueError, match="unknown preset"):
        records.save_results("toy", "gpu", {}, seed=0, results_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown preset"):
        records.load_results("toy", preferred=("big",), results_dir=tmp_path)
    with pytest.raises(ValueError, match="seed must be an integer"):
        records.save_results("toy", "colab", {}, seed=1.5, results_dir=tmp_path)
    with pytest.raises(ValueError, match="keys must be strings"):
        records.save_results("toy", "colab", {"g": {1: 2}}, seed=0, results_dir=tmp_path)
    with pytest.raises(ValueError, match="reserved"):
        records.save_results("toy", "colab", {"g": {"__float__": 2}}, seed=0, results_dir=tmp_path)
    (tmp_path / "bad-colab.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        records.load_results("bad", results_dir=tmp_path)
    assert os.listdir(tmp_path) == ["bad-colab.json"]


def test_a_damaged_results_file_gives_a_clear_error(tmp_path):
    """Emptied, truncated, byte-flipped or binary files, and fields the writer could not have
    written (an integer array holding 1.7, a shape that does not match its data, an unknown
    dtype or float word): each raises a ValueError that names the file and what to do, and the
    file is left as it was."""
    path = records.save_results("toy", "colab", {"g": curves()}, seed=0, results_dir=tmp_path)
    good = path.read_bytes()
    damaged = [b"", good[:len(good) // 2], good[:-3], bytes(range(256)) * 4]
    damaged += [good[:i] + bytes([good[i] ^ 0xFF]) + good[i + 1:] for i in np.linspace(0, len(good) - 1, 30).astype(int)]
    rec = json.loads(good)

    def edited(change):
        r = json.loads(good)
        change(r["data"]["g"])
        return json.dumps(r).encode()
    spec = rec["data"]["g"]["eval_step"]["__ndarray__"]
    damaged += [
        edited(lambda d: d["eval_step"]["__ndarray__"].update(data=[0, 10, 1.7, 30, 40])),
        edited(lambda d: d["eval_step"]["__ndarray__"].update(shape=[6])),
        edited(lambda d: d["eval_step"]["__ndarray__"].update(shape=[-5])),
        edited(lambda d: d["eval_step"]["__ndarray__"].update(dtype="object")),
        edited(lambda d: d["eval_step"]["__ndarray__"].update(dtype=7)),
        edited(lambda d: d["eval_step"]["__ndarray__"].update(data="0 10 20")),
        edited(lambda d: d["eval_step"]["__ndarray__"].pop("shape")),
        edited(lambda d: d["converged"]["__ndarray__"].update(data=[1, 0])),
        edited(lambda d: d["loss"]["__ndarray__"]["data"].__setitem__(0, "infinity")),
        edited(lambda d: d["loss"]["__ndarray__"]["data"].__setitem__(0, [1])),
        edited(lambda d: d.update(best={"__float__": "nope"})),
        edited(lambda d: d["eval_step"]["__ndarray__"].update(dtype="int8", data=[0, 10, 20, 30, 400])),
    ]
    assert spec["dtype"] == "int64"
    for i, data in enumerate(damaged):
        path.write_bytes(data)
        with pytest.raises(ValueError, match="toy-colab.json") as e:
            records.load_results("toy", results_dir=tmp_path)
        assert "record the run again" in str(e.value), (i, str(e.value))
        assert path.read_bytes() == data
    path.write_bytes(good)
    np.testing.assert_array_equal(records.load_results("toy", results_dir=tmp_path)["data"]["g"]["eval_step"],
                                  curves()["eval_step"])


def test_default_results_dir_is_the_books(tmp_path, monkeypatch):
    (tmp_path / "book").mkdir()
    (tmp_path / "_toc.yml").write_text("root: book/intro\n")
    monkeypatch.delenv("ITLIN_RESULTS_DIR", raising=False)
    monkeypatch.chdir(tmp_path / "book")  # a chapter runs in book/
    assert records.default_results_dir() == tmp_path.resolve() / "book" / "results"
    monkeypatch.setenv("ITLIN_RESULTS_DIR", str(tmp_path / "elsewhere"))
    assert records.default_results_dir() == tmp_path / "elsewhere"


def test_preset_names_are_spelt_as_get_preset_accepts_them(tmp_path):
    path = records.save_results("toy", " Colab", {"g": {"a": 1}}, seed=0, results_dir=tmp_path)
    assert path.name == "toy-colab.json"
    rec = records.load_results("toy", preferred="COLAB", results_dir=tmp_path)
    assert rec["preset"] == "colab" and rec["data"] == {"g": {"a": 1}}


def test_a_results_dir_that_is_a_file_is_named(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="results_dir must be a folder"):
        records.save_results("toy", "colab", {"g": {"a": 1}}, seed=0, results_dir=tmp_path / "file")


def test_accuracy_noise_is_the_binomial_standard_error_at_one_half():
    from itlin_core.book.image_records import accuracy_noise_points

    rng = np.random.default_rng(0)
    n = 400
    sims = rng.binomial(n, 0.5, size=20000) / n * 100  # accuracies in points
    assert accuracy_noise_points(n) == pytest.approx(2.5)
    assert np.std(sims) == pytest.approx(accuracy_noise_points(n), rel=0.03)
    for bad in (0, -3, 2.5, True, None):
        with pytest.raises(ValueError, match="n_eval"):
            accuracy_noise_points(bad)


def _edited_record(tmp_path, change):
    """A good record of toy/colab (and one of other/laptop), then ``change(record)`` written back."""
    records.save_results("other", "laptop", {"g": {"y": np.arange(2.0)}}, seed=0, results_dir=tmp_path)
    path = records.save_results("toy", "colab", {"g": {"x": np.arange(3.0)}}, seed=0, results_dir=tmp_path)
    rec = json.loads(path.read_text())
    change(rec, tmp_path)
    return path


@pytest.mark.parametrize("change, says", [
    (lambda r, d: r.update(json.loads((d / "other-laptop.json").read_text())), "record of chapter 'other'"),
    (lambda r, d: r.update(preset="paper"), "record of preset 'paper', but its file name says 'colab'"),
    (lambda r, d: r.update(chapter=None), "record of chapter None"),
    (lambda r, d: r.update(seed="abc"), "seed must be an integer, got 'abc'"),
    (lambda r, d: r.update(seed=1.5), "seed must be an integer"),
    (lambda r, d: r.update(seed=True), "seed must be an integer"),
    (lambda r, d: r.update(data=[1, 2]), "data must be a dict of run groups"),
    (lambda r, d: r["data"].update(g=5), r"data\['g'\] must be a dict of curves"),
    (lambda r, d: r["data"].update(g=r["data"]["g"]["x"]), r"data\['g'\] must be a dict of curves .*got ndarray"),
], ids=["other chapter", "other preset", "no chapter", "seed str", "seed float", "seed bool", "data list",
        "group number", "group array"])
def test_load_results_refuses_a_record_that_is_not_its_files(tmp_path, change, says):
    def write(r, d):
        change(r, d)
        (d / "toy-colab.json").write_text(json.dumps(r))
    path = _edited_record(tmp_path, write)
    text = path.read_text()
    with pytest.raises(ValueError, match=says) as e:
        records.load_results("toy", ("colab",), results_dir=tmp_path)
    assert str(path) in str(e.value) and "record the run again" in str(e.value)
    assert path.read_text() == text


@pytest.mark.parametrize("data", [[1, 2], {"g": 5}, {"g": np.ones(2)}, {"a": 1, "g": {}}])
def test_save_results_refuses_data_that_is_not_a_dict_of_groups(tmp_path, data):
    with pytest.raises(ValueError, match="must be a dict of (run groups|curves)"):
        records.save_results("toy", "colab", data, seed=0, results_dir=tmp_path)
    assert not tmp_path.exists() or not list(tmp_path.iterdir())


def test_the_committed_records_still_load():
    """The records in book/results were written before these checks: each still passes them."""
    from pathlib import Path
    results = Path(__file__).resolve().parents[1] / "book" / "results"
    files = sorted(results.glob("*-*.json"))
    assert files
    for f in files:
        chapter, preset = f.stem.rsplit("-", 1)
        rec = records.load_results(chapter, (preset,), results_dir=results)
        assert rec["chapter"] == chapter and all(isinstance(g, dict) for g in rec["data"].values())


@pytest.mark.parametrize("there", [b"my notes", b'{"format": 1, "data": {"g": ', None],
                         ids=["not a record", "damaged record", "another chapter's"])
def test_save_results_keeps_a_file_it_cannot_read_and_saves_the_new_record_beside_it(tmp_path, there):
    """Nothing recorded is discarded: the file is left byte for byte, the new record is written beside
    it (and reads back), and the error names both; overwrite=True replaces it."""
    path = tmp_path / "toy-colab.json"
    if there is None:
        other = records.save_results("other", "colab", {"g": {"v": 1}}, seed=0, results_dir=tmp_path)
        there = other.read_bytes()
    path.write_bytes(there)
    with pytest.raises(ValueError, match="toy-colab.json") as e:
        records.save_results("toy", "colab", {"g": {"v": 2}}, seed=0, results_dir=tmp_path)
    beside = [p for p in tmp_path.iterdir() if p.name.startswith("toy-colab.json.new-")]
    assert path.read_bytes() == there and len(beside) == 1
    assert f"saved beside it in {beside[0]}" in str(e.value) and "left as it is" in str(e.value)
    moved = tmp_path / "moved"
    moved.mkdir()
    beside[0].rename(moved / "toy-colab.json")
    assert records.load_results("toy", ("colab",), results_dir=moved)["data"] == {"g": {"v": 2}}
    records.save_results("toy", "colab", {"g": {"v": 3}}, seed=0, results_dir=tmp_path, overwrite=True)
    assert records.load_results("toy", ("colab",), results_dir=tmp_path)["data"] == {"g": {"v": 3}}


def test_a_folder_at_a_records_path_is_named_by_the_reader_and_the_writer(tmp_path):
    (tmp_path / "toy-colab.json").mkdir()
    with pytest.raises(ValueError, match="toy-colab.json is a folder, not a results record"):
        records.load_results("toy", ("colab",), results_dir=tmp_path)
    with pytest.raises(ValueError, match="toy-colab.json is a folder, not a results record"):
        records.save_results("toy", "colab", {"g": {"v": 1}}, seed=0, results_dir=tmp_path)
