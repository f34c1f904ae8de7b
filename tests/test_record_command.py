"""``python -m itlin_core.tools.record``: records a chapter from the data folder it is given,
refuses clearly what it cannot record, resumes, and merges groups recorded in several sittings.
Tested on files written in the real on-disk format (no internet here), with tiny groups in place
of the chapter's laptop groups."""

import dataclasses
import json
import re

import pytest

import itlin_core as ic
from itlin_core.book import cifar_few_updates, image_chapters, image_records, image_settings, records
from itlin_core.tools import record

TINY = dict(width=4, batch_size=16, n_eval=64, eval_batch=32, n_train=96)


def tiny_runs(preset):
    assert preset == "laptop"
    return {"fig3": image_settings.group(steps=8, eval_every=4, Ks=(1, 4, None), lr=0.005, **TINY),
            "fig3_rules": image_settings.group(steps=8, eval_every=4, Ks=(1, "geometric(2, 1.5)", "on_drift(0.1)"),
                                               lr=0.005, drift_every=2, **TINY)}


@pytest.fixture
def folders(tmp_path, monkeypatch):
    monkeypatch.setattr(cifar_few_updates, "runs", tiny_runs)
    data = tmp_path / "data"
    ic.datasets.write_stand_in("cifar10", data, 160, 64)
    return {"data": data, "results": tmp_path / "results", "ck": tmp_path / "ck"}


def test_records_the_groups_with_the_data_note_and_merges_later_groups(folders):
    kw = dict(verify=False, data_note="files written by the test", checkpoint_dir=folders["ck"],
              results_dir=folders["results"], progress="off")
    path = record.record_chapter("cifar_few_updates", "laptop", folders["data"], names=["fig3"], **kw)
    assert path.name == "cifar_few_updates-laptop.json"
    first = records.load_results("cifar_few_updates", ("laptop",), results_dir=folders["results"])
    assert list(first["data"]) == ["fig3"] and first["note"] == "files written by the test"
    record.record_chapter("cifar_few_updates", "laptop", folders["data"], names=["fig3_rules"], **kw)
    both = records.load_results("cifar_few_updates", ("laptop",), results_dir=folders["results"])
    assert list(both["data"]) == ["fig3", "fig3_rules"]
    assert image_records.records_equal(both["data"]["fig3"], first["data"]["fig3"])  # kept, not retrained away
    for name, rec in both["data"].items():
        assert not rec["stand_in"]
        image_records.check_record(name, rec, smoke=True)
    assert "files written by the test" in image_chapters.provenance(both)
    for rec in both["data"].values():     # the costs measured: compiling happened, the CPU keeps no allocator peak
        assert rec["compile_seconds"] > 0 and rec["peak_device_bytes"] is None
    # run again: every group resumes from its finished checkpoint and gives the same record
    record.record_chapter("cifar_few_updates", "laptop", folders["data"], **kw)
    again = records.load_results("cifar_few_updates", ("laptop",), results_dir=folders["results"])
    for name in both["data"]:
        a, b = dict(both["data"][name]), dict(again["data"][name])
        for cost in ("seconds", "steps_per_second", "compile_seconds", "peak_device_bytes"):   # measured, not computed
            a.pop(cost), b.pop(cost)
        assert image_records.records_equal(a, b), name


def test_two_record_commands_of_one_chapter_at_once_keep_both_groups(folders, monkeypatch):
    """A record command merges its groups into the record as it is when the command saves, not as
    it was when it started: a group that another command saved meanwhile is kept (it was lost)."""
    kw = dict(verify=False, data_note="files written by the test", checkpoint_dir=folders["ck"],
              results_dir=folders["results"], progress="off")
    run_chapter = record.run_chapter

    def the_other_command_saves_first(*args, **kwargs):
        out = run_chapter(*args, **kwargs)
        monkeypatch.setattr(record, "run_chapter", run_chapter)
        record.record_chapter("cifar_few_updates", "laptop", folders["data"], names=["fig3_rules"], **kw)
        return out

    monkeypatch.setattr(record, "run_chapter", the_other_command_saves_first)
    record.record_chapter("cifar_few_updates", "laptop", folders["data"], names=["fig3"], **kw)
    both = records.load_results("cifar_few_updates", ("laptop",), results_dir=folders["results"])
    assert list(both["data"]) == ["fig3", "fig3_rules"]


def test_a_record_damaged_while_groups_train_is_kept_and_the_new_groups_saved_beside_it(folders, monkeypatch,
                                                                                         capsys):
    """The record is checked before training and read again to merge at the end: if it became unreadable
    meanwhile (an editor, a copy), it is left as it is, the new groups are saved beside it, and the
    command's one sentence names both files (the new groups were lost). Training is a stand-in here."""
    records.save_results("cifar_few_updates", "laptop", {"fig3": {"config": {}}}, seed=0,
                         results_dir=folders["results"])
    path = folders["results"] / "cifar_few_updates-laptop.json"

    def an_editor_damages_the_record_meanwhile(chapter, preset, *, names, **kwargs):
        path.write_text('{"format": 1, "data": {"fig3": ')
        return {name: {"stand_in": False, "trained": True} for name in names}

    monkeypatch.setattr(record, "run_chapter", an_editor_damages_the_record_meanwhile)
    assert _run(folders, "--no-verify", "--data-note", "test files", "--names", "fig3_rules") == 2
    err = capsys.readouterr().err
    beside = list(folders["results"].glob("cifar_few_updates-laptop.json.new-*"))
    assert len(beside) == 1 and str(beside[0]) in err and str(path) in err and "Traceback" not in err
    assert path.read_text() == '{"format": 1, "data": {"fig3": '
    saved = json.loads(beside[0].read_text())
    assert saved["data"] == {"fig3_rules": {"stand_in": False, "trained": True}}


@pytest.mark.parametrize("kwargs, match", [
    (dict(preset="smoke"), "--preset"), (dict(chapter="xor_features"), "unknown chapter"),
    (dict(names=["fig99"]), "unknown run group"), (dict(verify=False), "--data-note"),
    (dict(data_dir="missing"), "not a folder"), (dict(data_dir="empty"), "holds no CIFAR10")])
def test_refuses_what_it_cannot_record(folders, kwargs, match):
    (folders["data"].parent / "empty").mkdir()
    args = dict(chapter="cifar_few_updates", preset="laptop", data_dir=folders["data"], verify=True)
    args.update(kwargs)
    if args["data_dir"] in ("missing", "empty"):
        args["data_dir"] = folders["data"].parent / args["data_dir"]
    with pytest.raises(ValueError, match=match):
        record.record_chapter(args.pop("chapter"), args.pop("preset"), args.pop("data_dir"),
                              results_dir=folders["results"], **args)
    assert not folders["results"].exists()          # nothing written


def test_the_command_line_reports_errors_in_a_sentence(folders, capsys):
    assert record.main(["cifar_few_updates", "--preset", "laptop", "--data", str(folders["data"]), "--no-verify"]) == 2
    assert "--data-note" in capsys.readouterr().err


def test_chapters_without_laptop_groups_say_so(monkeypatch):
    """Every image chapter has laptop groups now; a chapter module without them (its
    ``HAS_LAPTOP`` removed) is refused at that preset in a sentence, and not at the others."""
    from itlin_core.book import cifar_damping

    assert all(image_chapters.run_groups(c, "laptop") for c in image_chapters.CHAPTERS)
    monkeypatch.delattr(cifar_damping, "HAS_LAPTOP")
    with pytest.raises(ValueError, match="no laptop-scale run groups"):
        image_chapters.run_groups("cifar_damping", "laptop")
    assert image_chapters.run_groups("cifar_damping", "colab")


def test_measured_costs_count_compiling_once_and_no_cached_call():
    """The compile time a record keeps is JAX's own (jax.monitoring): a new program costs some, the
    same program called again costs none; the CPU keeps no allocator peak (None)."""
    import jax
    import jax.numpy as jnp

    from itlin_core.book import image_chapters

    f = jax.jit(lambda x: jnp.tanh(x) @ x.T + 1.2345)
    x = jnp.ones((8, 8))
    with image_chapters.measured_costs() as first:
        f(x).block_until_ready()
    with image_chapters.measured_costs() as again:
        f(x).block_until_ready()
    assert first["compile_seconds"] > 0 and again["compile_seconds"] == 0
    assert first["peak_device_bytes"] is None and image_chapters.peak_device_bytes() is None
    rec = {"eval_step": [0, 100, 200], "seconds": 12.0, "compile_seconds": 2.0, "steps_per_second": 200 / 12,
           "peak_device_bytes": 3 * 2**30}
    assert image_chapters.cost_line(rec) == "12 s (20.0 steps/s after 2.0 s of compiling), peak device memory 3.00 GiB"
    old = {"eval_step": [0, 100, 200], "seconds": 10.0, "steps_per_second": 20.0}    # a record before costs were kept
    assert image_chapters.cost_line(old) == "10 s (20.0 steps/s)"


def test_computed_on_names_the_platform_of_the_record_shown(monkeypatch, tmp_path):
    from itlin_core.book import image_chapters, records

    assert image_chapters.computed_on("cifar_damping", "smoke") == "cpu"    # trained here, now
    record = records.load_results("cifar_damping", image_chapters.RECORDED_PRESETS)
    if record is not None:
        assert image_chapters.computed_on("cifar_damping", "book") == record["device"]["platform"]


def _run(folders, *extra, data=None):
    return record.main(["cifar_few_updates", "--preset", "laptop", "--data", str(data or folders["data"]),
                        "--results-dir", str(folders["results"]), "--checkpoint-dir", str(folders["ck"]), *extra])


def test_files_that_fail_their_checksum_end_in_a_sentence_naming_the_commands_flags(folders, capsys):
    assert _run(folders) == record.EXIT_CODES["data"]       # the stand-in files are not the originals
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and err.count("\n") == 1
    assert "--no-verify" in err and "--data-note" in err and "verify=False" not in err
    assert "data_batch_1" in err or "test_batch" in err      # the file involved
    assert not folders["results"].exists() and not folders["ck"].exists()


def test_a_damaged_record_is_refused_before_anything_trains_and_left_as_it_is(folders, capsys):
    folders["results"].mkdir()
    path = folders["results"] / "cifar_few_updates-laptop.json"
    path.write_text('{"format": 1, "data": {"fig3": ')            # cut off mid-write by an editor
    assert _run(folders, "--no-verify", "--data-note", "test files", "--names", "fig3_rules") == 2
    err = capsys.readouterr().err
    assert str(path) in err and "Nothing was trained" in err and "Traceback" not in err
    assert path.read_text() == '{"format": 1, "data": {"fig3": '     # untouched
    assert not folders["ck"].exists()                                  # no group started


@pytest.mark.parametrize("group, says", [({"config": "x"}, "the config of its group 'fig3' must be a dict"),
                                         (5, r"data\['fig3'\] must be a dict of curves")], ids=["config", "group"])
def test_a_record_with_malformed_groups_is_refused_before_anything_trains(folders, capsys, group, says):
    """A hand-edited group (not a dict, or its config not a dict) is found by the same reading that
    finds a damaged file: before training, with the file named and left as it is."""
    folders["results"].mkdir()
    records.save_results("cifar_few_updates", "laptop", {"fig3": {"config": {}}}, seed=0,
                         results_dir=folders["results"])
    path = folders["results"] / "cifar_few_updates-laptop.json"
    text = path.read_text().replace('"fig3": {\n   "config": {}\n  }', f'"fig3": {json.dumps(group)}')
    assert text != path.read_text()
    path.write_text(text)
    assert _run(folders, "--no-verify", "--data-note", "test files", "--names", "fig3_rules") == 2
    err = capsys.readouterr().err
    assert re.search(says, err) and str(path) in err and "Nothing was trained" in err and "Traceback" not in err
    assert path.read_text() == text and not folders["ck"].exists()


@pytest.mark.parametrize("failure, code, words", [
    (KeyboardInterrupt(), 130, "run the same command again"),
    (RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17.2GiB."), 4, "--names"),
    (MemoryError(), 4, "ran out of memory"),
    (ic.datasets.DatasetUnavailableError("x is missing; pass data_dir= (or set ITLIN_DATA_DIR) to it."), 3,
     "pass --data"),
    (ZeroDivisionError("division by zero"), 1, "--debug")])
def test_every_other_failure_ends_in_one_sentence_with_the_next_step(folders, capsys, monkeypatch, failure, code,
                                                                      words):
    def fail(*args, **kwargs):
        raise failure

    monkeypatch.setattr(record, "record_chapter", fail)
    assert _run(folders) == code
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    if code in (1, 4, 130):                                            # the progress kept, and where
        assert str(folders["ck"]) in err
    with pytest.raises(type(failure)):                                 # --debug shows the traceback
        _run(folders, "--debug")


@pytest.mark.parametrize("where", [None, 0.3, 0.9])
def test_a_damaged_gzip_idx_file_gives_a_clear_error(tmp_path, where):
    """``None``: the first byte of the deflate stream says "reserved block type" (zlib.error inside
    gzip); otherwise bits flipped further in (the CRC check or a truncated stream)."""
    ic.datasets.write_stand_in("mnist", tmp_path, 64, 32)
    path = next(tmp_path.rglob("train-images-idx3-ubyte.gz"))
    raw = bytearray(path.read_bytes())
    if where is None:
        raw[10] = 0xFF                      # gzip's header is 10 bytes; BTYPE = 11 is invalid
    else:
        for i in range(int(where * len(raw)), int(where * len(raw)) + 8):
            raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="damaged gzip file"):
        ic.datasets.read_idx(path)


@pytest.mark.parametrize("name", ["mnist", "cifar10"])
def test_a_damaged_data_file_ends_in_a_sentence_with_the_next_step(tmp_path, name):
    """A damaged gzip idx file or a cut-off CIFAR10 batch names the file and what to do (was: the
    reason alone)."""
    ic.datasets.write_stand_in(name, tmp_path, 64, 32)
    path = next(p for p in tmp_path.rglob("*") if p.name in ("train-images-idx3-ubyte.gz", "data_batch_1"))
    raw = bytearray(path.read_bytes())
    raw[10] = 0xFF
    path.write_bytes(bytes(raw) if name == "mnist" else bytes(raw[:1000]))
    with pytest.raises(ValueError, match=f"{path.name}.* Delete {path.name} and load again .*replace it with an intact"):
        getattr(ic.datasets, name)(tmp_path, verify=False)


def test_a_damaged_archive_names_the_commands_next_step_not_the_librarys_argument():
    err = ic.datasets.DatasetError("/d/cifar-10-python.tar.gz is not a readable tar.gz archive (EOFError: x); it is "
                                   "damaged or incomplete: delete it (it is downloaded again with verify=True).")
    said = record.failure_sentence(err, None)
    assert "verify=True" not in said and "put an intact copy in its place" in said
