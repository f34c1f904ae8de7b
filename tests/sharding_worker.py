"""Run by tests/test_sharding.py in fresh processes that see several CPU devices (JAX fixes its
device count at start-up, so the test process itself cannot): ``python sharding_worker.py
devices OUT`` (one process, four devices) or ``python sharding_worker.py host PID PORT CKPT OUT``
(one of two processes of a multi-host run, two devices each, over JAX's gloo CPU collectives).
Each writes what it measured to ``OUT`` (an ``.npz``) for the test to compare with a run on one
device."""

import os
import sys

import numpy as np

STEPS, EVAL_EVERY, HALF = 60, 10, 30


def toy_sweep():
    """A small sweep of three runs (K = 1, 5, never) on XOR with minibatches: ``(step, state,
    batches, eval_fn)``. Three runs pad to four on two or four devices."""
    import jax
    import optax

    import itlin_core as ic
    x, y = ic.data.xor(jax.random.key(0), 64)
    model = ic.mlp([2, 64, 1], "tanh", w_std=1.0)
    opt = optax.sgd(2e-3)
    step, _ = ic.make_il_sweep_step(model.apply, ic.squared_error, opt, [1, 5, None])
    state = ic.replicate(ic.init_il_state(model.init(jax.random.key(1)), opt), 3)
    eval_fn = jax.vmap(lambda s: {"rmse": ic.rmse(model.apply(s.params, x), y)})
    return step, state, ic.minibatches(jax.random.key(3), x, y, 16), eval_fn


def train_toy(mesh, **kw):
    import itlin_core as ic
    step, state, batches, eval_fn = toy_sweep()
    return ic.train(ic.on_devices(step, mesh), state, batches, STEPS, evaluate=ic.Evaluation(eval_fn, every=EVAL_EVERY),
                    progress="off", **kw)


def tiny_group():
    """A tiny LeNet run group of three runs (K = 1, 4, never) on stand-in CIFAR10."""
    from itlin_core.book import image_runs as ir
    cfg = ir.ImageRunConfig(dataset="cifar10", model="lenet50", steps=12, eval_every=4, Ks=(1, 4, None), lr=0.02,
                            n_eval=64, eval_batch=32, batch_size=16, width=4)
    return cfg, ir.image_data("cifar10", "smoke", stand_in_sizes=(192, 96))


def flat_record(rec, prefix=""):
    """The arrays of a summarised record, flattened to ``{"a/b": array}`` for an ``.npz``."""
    out = {}
    for k, v in rec.items():
        if isinstance(v, dict):
            out.update(flat_record(v, f"{prefix}{k}/"))
        elif isinstance(v, np.ndarray) and v.dtype.kind in "fiub":
            out[prefix + k] = v
    return out


def devices(out):
    import jax
    import jax.numpy as jnp

    import itlin_core as ic
    from itlin_core.book import image_records as irec
    from itlin_core.book import image_runs as ir
    assert len(jax.devices()) == 4, jax.devices()
    res = {}
    cfg, data = tiny_group()
    for n in (1, 2, 4):
        rec = irec.summarise(ir.run_images(cfg, data, progress="off", mesh=ic.run_mesh(jax.devices()[:n])))
        res.update({f"group{n}/{k}": v for k, v in flat_record(rec).items()})
    # a checkpoint written on four devices, resumed on two and finished on one
    ck = os.path.join(os.path.dirname(out), "group.npz")
    ir.run_images(cfg, data, progress="off", checkpoint_path=ck, checkpoint_every=4, stop_at=4,
                  mesh=ic.run_mesh(jax.devices()))
    ir.run_images(cfg, data, progress="off", checkpoint_path=ck, checkpoint_every=4, stop_at=8,
                  mesh=ic.run_mesh(jax.devices()[:2]))
    rec = irec.summarise(ir.run_images(cfg, data, progress="off", checkpoint_path=ck, checkpoint_every=4, mesh=None))
    res.update({f"resumed/{k}": v for k, v in flat_record(rec).items()})
    # a vmap over seeds without a training loop
    f = lambda k: jnp.sum(jax.random.normal(jax.random.key(k), (8,)) ** 2)
    for n in (1, 4):
        res[f"vmap{n}"] = np.asarray(ic.sharded_vmap(f, ic.run_mesh(jax.devices()[:n]))(jnp.arange(5)))
    res["vmap_loop"] = np.asarray([f(k) for k in range(5)])       # one seed at a time, no vmap
    _, hist = train_toy(ic.run_mesh(jax.devices()))
    res["toy_loss"], res["toy_rmse"] = hist["loss"], hist["rmse"]
    np.savez(out, **res)


def host(pid, port, ck, out):
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=pid)
    import itlin_core as ic
    assert jax.process_count() == 2 and len(jax.devices()) == 4 and len(jax.local_devices()) == 2
    mesh = ic.run_mesh()                    # every device of both hosts
    train_toy(mesh, checkpoint=ic.Checkpointing(ck, stop_at=HALF))
    state, hist = train_toy(mesh, checkpoint=ck)
    params = ic.sharding.to_host(jax.tree.leaves(state.params)[0])   # a collective: every process calls it
    if ic.sharding.is_writer():
        np.savez(out, loss=hist["loss"], rmse=hist["rmse"], resumed_from=hist["resumed_from"], params=params,
                 mesh=ic.describe_mesh(mesh))


if __name__ == "__main__":
    mode = sys.argv[1]
    kept = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f)   # make test's
    os.environ["XLA_FLAGS"] = f"{kept} --xla_force_host_platform_device_count={4 if mode == 'devices' else 2}".strip()
    import jax
    jax.config.update("jax_enable_x64", True)    # as the test process (tests/conftest.py), to compare with it
    if mode == "devices":
        devices(sys.argv[2])
    else:
        host(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
