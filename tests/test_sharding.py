"""Runs of a sweep split over several devices (itlin_core.sharding, ``train(mesh=...)``): the same
records on 1, 2 and 4 devices to float rounding (three runs, padded to four), checkpoints that
resume on another number of devices, a vmap over seeds, and a run of two processes (hosts) over
JAX's CPU collectives checked against one device. The several-device runs happen in fresh
processes (tests/sharding_worker.py), because JAX fixes its device count when it starts; the
CPU presents several devices with ``XLA_FLAGS=--xla_force_host_platform_device_count``."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st

import itlin_core as ic
from itlin_core import sharding
from itlin_core.tools import record

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import sharding_worker as worker  # noqa: E402

ROUNDING = dict(rtol=1e-5, atol=1e-5)   # float32 sums taken in another order on another device


def _run(args):
    env = dict(os.environ, ITLIN_PROGRESS="off")     # the worker adds its device count to XLA_FLAGS
    return subprocess.Popen([sys.executable, str(HERE / "sharding_worker.py"), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait(proc, timeout=600):
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:]


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory):
    out = tmp_path_factory.mktemp("devices") / "out.npz"
    _wait(_run(["devices", out]))
    return dict(np.load(out))


def _group(res, prefix):
    return {k[len(prefix):]: v for k, v in res.items() if k.startswith(prefix)}


def _same_record(a, b):
    assert a.keys() == b.keys() and a
    for k in a:
        assert a[k].shape == b[k].shape, k
        if a[k].dtype.kind == "f" and "loss" in k:
            np.testing.assert_allclose(a[k], b[k], err_msg=k, **ROUNDING)
        else:   # steps, feature updates, accuracies: counts, identical
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("devices", [2, 4])
@pytest.mark.system
def test_a_run_group_gives_the_same_record_on_several_devices(four_devices, devices):
    one = _group(four_devices, "group1/")
    assert one["train_loss"].shape[1] == 3            # three runs: padded to four, cut back to three
    _same_record(one, _group(four_devices, f"group{devices}/"))


@pytest.mark.system
def test_a_checkpoint_resumes_on_another_number_of_devices(four_devices):
    """Four devices for the first evaluation interval, two for the second, one for the last."""
    _same_record(_group(four_devices, "group1/"), _group(four_devices, "resumed/"))


@pytest.mark.system
def test_sharded_vmap_over_seeds_matches_one_device(four_devices):
    assert four_devices["vmap4"].shape == (5,)        # five seeds, padded to eight, cut back
    np.testing.assert_allclose(four_devices["vmap4"], four_devices["vmap1"], **ROUNDING)
    np.testing.assert_allclose(four_devices["vmap1"], four_devices["vmap_loop"], **ROUNDING)


@pytest.mark.system
def test_a_toy_sweep_on_four_devices_matches_one(four_devices):
    _, hist = worker.train_toy(None)
    np.testing.assert_allclose(four_devices["toy_loss"], hist["loss"], **ROUNDING)
    np.testing.assert_allclose(four_devices["toy_rmse"], hist["rmse"], **ROUNDING)


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.system
def test_two_hosts_train_and_resume_like_one_device(tmp_path):
    """Two processes of two CPU devices each (JAX's multi-host runtime over gloo): the mesh spans
    both, process 0 alone writes the checkpoint and the result, the run stops half way and
    resumes, and its losses, evaluations and parameters are those of one device."""
    port, ck = _free_port(), tmp_path / "ck.npz"
    procs = [_run(["host", pid, port, ck, tmp_path / f"out{pid}.npz"]) for pid in (0, 1)]
    for p in procs:
        _wait(p, timeout=300)
    assert (tmp_path / "out0.npz").exists() and not (tmp_path / "out1.npz").exists()
    got = np.load(tmp_path / "out0.npz")
    assert str(got["mesh"]).startswith("4 cpu devices on 2 hosts")
    assert int(got["resumed_from"]) == worker.HALF
    state, hist = worker.train_toy(None)
    np.testing.assert_allclose(got["loss"], hist["loss"], **ROUNDING)
    np.testing.assert_allclose(got["rmse"], hist["rmse"], **ROUNDING)
    np.testing.assert_allclose(got["params"], jax.tree.leaves(state.params)[0], **ROUNDING)


# ---------------------------------------------------------------------------------------------
# one device (this process): the padding, and the arguments


def test_a_padded_sweep_step_repeats_the_last_run_and_keeps_the_others():
    step, state, batches, _ = worker.toy_sweep()
    padded = step.with_runs(5)
    assert (step.runs, padded.runs) == (3, 5) and step.with_runs(5) is padded and step.with_runs(3) is step
    assert padded.run_labels[:3] == step.run_labels and padded.run_labels[3:] == ["K=∞ (padding)"] * 2
    batch = batches.fn(batches.data, jnp.int32(0))
    s3, m3 = jax.jit(step)(state, batch)
    s5, m5 = jax.jit(padded)(ic.pad_runs(state, 5), batch)
    np.testing.assert_allclose(m5["loss"][:3], m3["loss"], rtol=1e-6)
    np.testing.assert_allclose(m5["loss"][3:], m3["loss"][2], rtol=1e-6)    # the padding is the last run again
    for a, b in zip(jax.tree.leaves(ic.unpad_runs(s5, 3)), jax.tree.leaves(s3)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_one_device_is_the_unsharded_program():
    assert sharding.resolve_mesh("auto") is None and sharding.resolve_mesh(ic.run_mesh(jax.devices()[:1])) is None
    assert ic.describe_mesh("auto").endswith("(no sharding)")
    assert ic.padded_runs(3, None) == 3 and ic.padded_runs(3, ic.run_mesh()) == 3
    step, state, batches, eval_fn = worker.toy_sweep()
    a = ic.train(ic.on_devices(step, None), state, batches, 20, evaluate=ic.Evaluation(eval_fn, every=10), progress="off")[1]
    b = ic.train(step, state, batches, 20, evaluate=ic.Evaluation(eval_fn, every=10), progress="off")[1]
    np.testing.assert_array_equal(a["loss"], b["loss"])


@pytest.mark.parametrize("devices, match", [([], "at least one"), (["cpu"], "JAX devices"),
                                            (jax.devices()[:1] * 2, "repeat")])
def test_run_mesh_refuses_bad_devices(devices, match):
    with pytest.raises(ValueError, match=match):
        ic.run_mesh(devices)


@settings(max_examples=25, deadline=None)
@given(st.one_of(st.text().filter(lambda s: s != "auto"), st.integers(), st.floats(), st.just([1, 2])))
def test_a_bad_mesh_is_refused_in_a_sentence(mesh):
    with pytest.raises(ValueError, match="mesh must be 'auto'"):
        sharding.resolve_mesh(mesh)
    step, state, batches, _ = worker.toy_sweep()
    with pytest.raises(ValueError, match="mesh must be 'auto'"):
        ic.train(ic.on_devices(step, mesh), state, batches, 2, progress="off")


def test_padding_and_placing_check_their_runs():
    tree = {"a": jnp.arange(6.0).reshape(3, 2), "b": jnp.arange(3)}
    padded = ic.pad_runs(tree, 4)
    np.testing.assert_array_equal(padded["a"][3], tree["a"][2])
    np.testing.assert_array_equal(ic.unpad_runs(padded, 3)["b"], tree["b"])
    with pytest.raises(ValueError, match="fewer"):
        ic.pad_runs(tree, 2)
    with pytest.raises(ValueError, match="lead with a run axis"):
        ic.shard_runs({"scalar": jnp.float32(1.0)}, ic.run_mesh())


@pytest.mark.parametrize("argv, match", [(["--devices", "0"], "--devices must be between 1"),
                                         (["--devices", "99"], "--devices must be between 1"),
                                         (["--coordinator", "localhost:1"], "go together")])
def test_the_record_command_refuses_a_bad_mesh_in_a_sentence(tmp_path, capsys, argv, match):
    assert record.main(["cifar_few_updates", "--preset", "laptop", "--data", str(tmp_path), *argv]) == 2
    assert match in capsys.readouterr().err


def test_the_record_command_prints_its_mesh(tmp_path, capsys):
    assert record.main(["cifar_few_updates", "--preset", "laptop", "--data", str(tmp_path)]) == 2   # no data
    out = capsys.readouterr()
    assert "mesh: 1 cpu device (no sharding)" in out.out and "holds no CIFAR10" in out.err
