"""The estimate printed before a run group trains (itlin_core.book.estimates): its time comes from
a record of the same settings on the same kind of device and nowhere else, and a group that would
not fit the device is refused before anything trains."""

import dataclasses

import jax
import pytest

from itlin_core.book import estimates, image_chapters as ich, image_runs as ir

CFG = ir.ImageRunConfig(dataset="cifar10", model="lenet50", steps=300, eval_every=100, Ks=(1, 10), lr=0.01,
                        width=4, batch_size=16, n_train=64, n_eval=32, eval_batch=32)


def records(cfg=CFG, kind=None, sps=50.0, compile_s=4.0):
    group = {"config": cfg.as_dict(), "steps_per_second": sps, "compile_seconds": compile_s}
    return {"laptop": {"device": {"device_kind": kind or jax.devices()[0].device_kind}, "data": {"g": group}}}


def test_the_time_is_the_recorded_rate_for_these_steps_plus_the_compile():
    est = estimates.group_estimate("g", CFG, "laptop", records())
    assert est["seconds"] == pytest.approx(4.0 + 300 / 50.0) and est["from"] == "laptop"
    assert est["steps"] == 300 and est["runs"] == 2
    assert est["parameters"] == ir.ic.count_params(ir.init_params(CFG, ir.build_model(CFG, (32, 32, 3))))
    line = estimates.estimate_line("ch/g", est)
    assert "2 run(s) x 300 steps" in line and "about 0.2 min here (the laptop record" in line


@pytest.mark.parametrize("records_", [
    records(kind="NVIDIA H100 80GB HBM3"),                           # another kind of device
    records(cfg=dataclasses.replace(CFG, lr=0.02)),                  # other settings
    records(sps=None), {}], ids=["device", "settings", "no rate", "no record"])
def test_no_time_without_a_record_of_the_same_settings_on_this_kind_of_device(records_):
    est = estimates.group_estimate("g", CFG, "laptop", records_)
    assert est["seconds"] is None and est["from"] is None
    assert "no time estimate" in estimates.estimate_line("ch/g", est)


def test_a_group_that_does_not_fit_the_device_is_refused_with_the_smaller_presets():
    est = dict(estimates.group_estimate("g", CFG, "colab", {}), step_bytes=20 * 2**30, device_bytes=15 * 2**30)
    with pytest.raises(ValueError, match=r"needs 20\.0 GiB .* this device's 15\.0 GiB; nothing was trained\. "
                                         r"Use a smaller preset \(laptop or smoke"):
        estimates.check_fits("ch/g", est, "colab")
    assert "more than a free Colab GPU" in estimates.estimate_line("ch/g", est)
    estimates.check_fits("ch/g", dict(est, step_bytes=2**30), "colab")          # fits: no error
    estimates.check_fits("ch/g", dict(est, device_bytes=None), "colab")         # unknown: no error
    assert "fits a free Colab GPU" in estimates.estimate_line("ch/g", dict(est, step_bytes=2**30))


def test_a_chapter_prints_each_groups_estimate_before_it_trains(capsys, monkeypatch):
    trained = []
    monkeypatch.setattr(ich, "run_images", lambda cfg, *a, **k: trained.append(capsys.readouterr().out) or {})
    monkeypatch.setattr(ich, "summarise", lambda hist: {})
    ich.run_chapter("cifar_few_updates", "smoke", names=["fig2", "fig3"], data={"cifar10": {"stand_in": True}})
    assert "cifar_few_updates/fig2: 2 run(s) x 40 steps" in trained[0]
    assert "cifar_few_updates/fig3:" in trained[1] and "fig2" not in trained[1]
