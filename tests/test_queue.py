"""``python -m itlin_core.tools.queue``: records every pending run group, one record command per
group, stops when its budget is spent and, run again, skips what is recorded and resumes the
interrupted group, ending with the record an uninterrupted queue makes. Tested at a tiny size on
stand-in files in CIFAR10's on-disk format, through the real record command in a subprocess
(a wrapper that swaps in the tiny groups)."""

import sys
import textwrap

import pytest

import itlin_core as ic
from itlin_core.book import cifar_few_updates, image_records, image_settings, records
from itlin_core.tools import queue

TINY = dict(width=4, batch_size=16, n_eval=64, eval_batch=32, n_train=96)
WRAPPER = textwrap.dedent('''
    import sys
    from itlin_core.book import cifar_few_updates, image_settings
    from itlin_core.tools import record
    TINY = dict(width=4, batch_size=16, n_eval=64, eval_batch=32, n_train=96)
    def tiny_runs(preset):
        return {"fig3": image_settings.group(steps=150, eval_every=10, Ks=(1, 4, None), lr=0.005, **TINY),
                "fig3_tgn": image_settings.group(steps=40, eval_every=10, Ks=(20,), lr=1e-3, optimizer="adam", **TINY)}
    cifar_few_updates.runs = tiny_runs
    sys.exit(record.main(sys.argv[1:]))
''')


def tiny_runs(preset):
    return {"fig3": image_settings.group(steps=150, eval_every=10, Ks=(1, 4, None), lr=0.005, **TINY),
            "fig3_tgn": image_settings.group(steps=40, eval_every=10, Ks=(20,), lr=1e-3, optimizer="adam", **TINY)}


@pytest.fixture
def setup(tmp_path, monkeypatch):
    monkeypatch.setattr(cifar_few_updates, "runs", tiny_runs)
    monkeypatch.setattr(queue, "CHAPTERS", ("cifar_few_updates",))
    data = tmp_path / "data"
    ic.datasets.write_stand_in("cifar10", data, 160, 64)
    wrapper = tmp_path / "record_tiny.py"
    wrapper.write_text(WRAPPER)
    return tmp_path, data, (sys.executable, str(wrapper))


def command(tmp_path, name, python):
    return dict(verify=False, data_note="files written by the test", results_dir=tmp_path / f"results-{name}",
                checkpoint_dir=tmp_path / f"ck-{name}", python=python)


def strip_costs(rec):
    return {k: v for k, v in rec.items() if k not in ("seconds", "steps_per_second", "compile_seconds",
                                                      "peak_device_bytes")}


@pytest.mark.system
def test_an_interrupted_queue_resumes_to_the_record_of_an_uninterrupted_one(setup):
    tmp_path, data, python = setup
    assert queue.queue("laptop") == [("cifar_few_updates", "fig3"), ("cifar_few_updates", "fig3_tgn")]
    whole = queue.run_queue("laptop", data, budget=600, log=lambda *_: None, **command(tmp_path, "whole", python))
    assert whole["left"] == [] and whole["stopped"] is None and len(whole["recorded"]) == 2

    kw = command(tmp_path, "parts", python)
    first = queue.run_queue("laptop", data, budget=6, log=lambda *_: None, **kw)    # stopped during fig3
    assert first["stopped"] == ("cifar_few_updates", "fig3") and first["left"] == queue.queue("laptop")
    assert queue.pending("laptop", kw["results_dir"]) == queue.queue("laptop")
    second = queue.run_queue("laptop", data, budget=600, log=lambda *_: None, **kw)
    assert second["left"] == [] and second["recorded"] == queue.queue("laptop")

    a = records.load_results("cifar_few_updates", ("laptop",), results_dir=tmp_path / "results-whole")["data"]
    b = records.load_results("cifar_few_updates", ("laptop",), results_dir=kw["results_dir"])["data"]
    assert list(a) == list(b) == ["fig3", "fig3_tgn"]
    for name in a:
        assert image_records.records_equal(strip_costs(a[name]), strip_costs(b[name])), name
    # nothing left: a further call records nothing
    assert queue.run_queue("laptop", data, budget=600, log=lambda *_: None, **kw)["recorded"] == []
    # a group whose settings change is pending again
    changed = lambda preset: dict(tiny_runs(preset), fig3_tgn=image_settings.group(
        steps=40, eval_every=10, Ks=(20,), lr=2e-3, optimizer="adam", **TINY))
    cifar_few_updates.runs = changed          # undone by the fixture's monkeypatch
    assert queue.pending("laptop", kw["results_dir"]) == [("cifar_few_updates", "fig3_tgn")]


def test_bad_arguments_are_refused_in_a_sentence(tmp_path, capsys):
    with pytest.raises(ValueError, match="budget"):
        queue.run_queue("laptop", tmp_path, budget=0)
    assert queue.main(["--preset", "nope", "--data", str(tmp_path)]) == 2
    assert "preset" in capsys.readouterr().err
