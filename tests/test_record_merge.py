"""Records made on different machines come together without relabelling any group:
``record --merge`` and the ``--names`` merge of the record command keep each group's own device,
software and date (``records.group_origin``), and what the book prints and tabulates names them."""

import pytest

import itlin_core as ic
from itlin_core.book import cifar_few_updates, estimates, image_chapters, image_settings, records
from itlin_core.tools import costs, record

TINY = dict(width=4, batch_size=16, n_eval=64, eval_batch=32, n_train=96)


def tiny_runs(preset):
    assert preset == "laptop"
    return {"fig3": image_settings.group(steps=8, eval_every=4, Ks=(1, 4, None), lr=0.005, **TINY),
            "fig3_rules": image_settings.group(steps=8, eval_every=4, Ks=(1, "geometric(2, 1.5)"), lr=0.005,
                                               **TINY)}


def machine(kind, day, jax_version="0.11.2"):
    return {"device": {"platform": "gpu", "device_kind": kind, "count": 1}, "created": f"2026-11-{day}T10:00:00+00:00",
            "versions": {"jax": jax_version}}


@pytest.fixture
def made(tmp_path, monkeypatch):
    """Write a record of the given groups, as if computed on ``origin``, into its own folder."""
    monkeypatch.setattr(cifar_few_updates, "runs", tiny_runs)

    def write(folder, origin, *names, note="JPEG copy", seed=0, value=1.0):
        groups = {n: {"config": tiny_runs("laptop")[n].as_dict(), "value": value} for n in names}
        return records.save_results("cifar_few_updates", "laptop", groups, seed=seed, note=note,
                                    results_dir=tmp_path / folder, origin=origin)
    return write


def load(folder):
    return records.load_results("cifar_few_updates", ("laptop",), results_dir=folder)


def test_merge_keeps_each_groups_device_and_the_first_source_wins(made, tmp_path):
    a = made("a", machine("H100", 24), "fig3", "fig3_rules", value=1.0)
    b = made("b", machine("H200", 28), "fig3", "fig3_rules", value=2.0)
    path = record.merge_records("cifar_few_updates", "laptop", [(a, ["fig3"]), (b, None)], results_dir=tmp_path / "out")
    merged = load(path.parent)
    assert merged["data"]["fig3"]["value"] == 1.0 and merged["data"]["fig3_rules"]["value"] == 2.0
    assert merged["device"]["device_kind"] == "H200" and merged["created"].startswith("2026-11-28")   # the newest
    assert records.group_origin(merged, "fig3")["device"]["device_kind"] == "H100"
    assert records.group_origin(merged, "fig3")["created"].startswith("2026-11-24")
    assert "origin" not in merged["data"]["fig3_rules"]        # computed where the file says
    assert records.origins(merged) == {("H100", "2026-11-24"): ["fig3"], ("H200", "2026-11-28"): ["fig3_rules"]}
    assert image_chapters.provenance(merged) == ("recorded laptop run on H100 (fig3), 2026-11-24, and H200 "
                                                 "(fig3_rules), 2026-11-28; JPEG copy")
    # merged again into a third record, a group keeps its first origin, not the intermediate file's
    c = made("c", machine("A100", 29), "fig3_rules", value=3.0)
    again = load(record.merge_records("cifar_few_updates", "laptop", [(c, None), (path, ["fig3"])],
                                      results_dir=tmp_path / "again").parent)
    assert records.group_origin(again, "fig3")["device"]["device_kind"] == "H100"


def test_merge_keeps_the_existing_records_groups_unless_a_source_gives_them(made, tmp_path):
    made("out", machine("H100", 24), "fig3", "fig3_rules", value=1.0)
    b = made("b", machine("H100", 25), "fig3_rules", value=2.0)
    merged = load(record.merge_records("cifar_few_updates", "laptop", [(b, None)], results_dir=tmp_path / "out").parent)
    assert [merged["data"][n]["value"] for n in ("fig3", "fig3_rules")] == [1.0, 2.0]
    assert all("origin" not in g for g in merged["data"].values())     # same device and software: nothing to say


def test_the_costs_and_estimates_read_each_groups_own_device(made, tmp_path, monkeypatch):
    a = made("a", machine("H100", 24), "fig3")
    b = made("b", machine("H200", 28), "fig3_rules")
    out = record.merge_records("cifar_few_updates", "laptop", [(a, None), (b, None)], results_dir=tmp_path / "out")
    merged = load(out.parent)
    for name, rec in merged["data"].items():
        rec.update(eval_step=[0, 8], labels=["K=1"], seconds=10.0, compile_seconds=2.0, peak_device_bytes=2**30,
                   steps_per_second=1.0)
    records.save_results("cifar_few_updates", "laptop", merged["data"], seed=0, results_dir=out.parent,
                         origin={k: merged[k] for k in records.ORIGIN_FIELDS}, overwrite=True)
    rows, sources = costs.group_costs("laptop", results_dir=out.parent)
    assert {(r[1], r[2]) for r in rows} == {("fig3", "H100"), ("fig3_rules", "H200")}
    assert {s[1] for s in sources if s[0] == "cifar_few_updates"} == {"H100", "H200"}
    monkeypatch.setattr(estimates, "_device_kind", lambda: "H100")
    got = {n: estimates.recorded_seconds(n, tiny_runs("laptop")[n], "laptop", {"laptop": load(out.parent)})[0]
           for n in ("fig3", "fig3_rules")}
    assert got["fig3"] == pytest.approx(2.0 + 8) and got["fig3_rules"] is None    # timed on an H200, not here


@pytest.mark.parametrize("sources, match", [
    (lambda a, b, t: [(t / "x.json", None)], "is a file named cifar_few_updates-laptop.json"),
    (lambda a, b, t: [(t / "none" / a.name, None)], "no such file"),
    (lambda a, b, t: [(a, ["fig9"])], "holds no group 'fig9'"),
    (lambda a, b, t: [(a, None), (b, None)], "disagree on their note"),
    (lambda a, b, t: [], "at least one record file"),
])
def test_merge_refuses_what_it_cannot_merge_in_a_sentence(made, tmp_path, sources, match):
    a = made("a", machine("H100", 24), "fig3")
    b = made("b", machine("H100", 25), "fig3_rules", note="another copy")
    with pytest.raises(ValueError, match=match):
        record.merge_records("cifar_few_updates", "laptop", sources(a, b, tmp_path), results_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_merge_refuses_a_group_recorded_with_other_settings(made, tmp_path, monkeypatch):
    a = made("a", machine("H100", 24), "fig3")
    changed = {**tiny_runs("laptop"), "fig3": image_settings.group(steps=16, eval_every=4, Ks=(1,), lr=0.005, **TINY)}
    monkeypatch.setattr(cifar_few_updates, "runs", lambda preset: changed)
    with pytest.raises(ValueError, match="group 'fig3' was recorded with other settings"):
        record.merge_records("cifar_few_updates", "laptop", [(a, None)], results_dir=tmp_path / "out")


def test_the_command_line_merges_and_names_each_groups_device(made, tmp_path, capsys):
    a = made("a", machine("H100", 24), "fig3")
    b = made("b", machine("H200", 28), "fig3", "fig3_rules")
    rc = record.main(["cifar_few_updates", "--preset", "laptop", "--results-dir", str(tmp_path / "out"),
                      "--merge", str(a), f"{b}:fig3_rules"])
    out = capsys.readouterr().out
    assert rc == 0 and "cifar_few_updates/fig3: H100, 2026-11-24" in out and "fig3_rules: H200, 2026-11-28" in out
    assert record.main(["cifar_few_updates", "--preset", "laptop", "--merge", str(a), "--data", "x"]) == 2
    assert "--merge trains nothing" in capsys.readouterr().err
    assert record.main(["cifar_few_updates", "--preset", "laptop"]) == 2
    assert "--data is required" in capsys.readouterr().err


def test_recording_more_groups_on_another_device_keeps_where_the_first_were_computed(tmp_path, monkeypatch):
    """The bug this pins: a group recorded on one GPU, merged by ``--names`` into a record made on
    another, was relabelled with the second GPU."""
    monkeypatch.setattr(cifar_few_updates, "runs", tiny_runs)
    data = tmp_path / "data"
    ic.datasets.write_stand_in("cifar10", data, 160, 64)
    kw = dict(verify=False, data_note="files written by the test", checkpoint_dir=tmp_path / "ck",
              results_dir=tmp_path / "results", progress="off")
    here = records.device_description()
    monkeypatch.setattr(record, "device_description", lambda: {**here, "device_kind": "elsewhere"})
    monkeypatch.setattr(records, "device_description", lambda: {**here, "device_kind": "elsewhere"})
    record.record_chapter("cifar_few_updates", "laptop", data, names=["fig3"], **kw)
    monkeypatch.setattr(record, "device_description", lambda: here)
    monkeypatch.setattr(records, "device_description", lambda: here)
    record.record_chapter("cifar_few_updates", "laptop", data, names=["fig3_rules"], **kw)
    both = load(tmp_path / "results")
    assert records.group_origin(both, "fig3")["device"]["device_kind"] == "elsewhere"
    assert records.group_origin(both, "fig3_rules")["device"] == here == both["device"]
