r"""Runs of a sweep spread over several devices with JAX's own SPMD partitioning (``jax.sharding``).

A sweep (over K, the damping lambda or seeds) is one compiled program: a ``vmap`` over runs,
inside ``lax.scan`` for training. Its natural scale-out is to give each device a slice of the
runs. The runs never talk to each other (they see the same batches), so the partitioned program
needs no communication but the loss it hands back, and each run computes exactly what it would
on one device.

Conventions:

* A *run mesh* is a one-dimensional :class:`jax.sharding.Mesh` with the axis :data:`RUN_AXIS`
  (``"runs"``). ``mesh="auto"`` (the default wherever a mesh is accepted) means every visible
  device, :func:`jax.devices` (on several hosts, every device of every host); ``mesh=None``
  means no sharding. A mesh of one device is no sharding: the program is exactly the unsharded
  one.
* Leaves that hold runs lead with the run axis. The run count is padded to a multiple of the
  number of devices by repeating the last run (:func:`pad_runs`): a padded run is a real,
  finite computation whose results are dropped (:func:`unpad_runs`), never a NaN that could leak
  into a warning or a divergence check.
* Everything that leaves the devices goes through :func:`to_host`, which gathers the shards of
  other hosts when there are several (``jax.experimental.multihost_utils.process_allgather``).
  Only process 0 writes files (:func:`is_writer`).

Example::

    >>> import jax, jax.numpy as jnp, itlin_core as ic
    >>> mesh = ic.run_mesh()                           # every visible device
    >>> f = ic.sharded_vmap(lambda s: jnp.sin(s) * 2.0, mesh)
    >>> f(jnp.arange(3.0)).shape                       # 3 runs, padded on the devices, cut back
    (3,)
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ._validate import check_whole

#: The name of the mesh axis the runs are sharded over.
RUN_AXIS = "runs"


def run_mesh(devices=None) -> Mesh:
    """A one-dimensional mesh over ``devices`` (default: every visible device, :func:`jax.devices`)
    with the axis :data:`RUN_AXIS`.

    Raises:
      ValueError: ``devices`` is empty, holds something that is not a JAX device, or repeats one.

    Examples:
      A mesh of the first device has the one axis ``"runs"``, of size 1:

      >>> import jax
      >>> import itlin_core as ic
      >>> mesh = ic.run_mesh(jax.devices()[:1])
      >>> mesh.axis_names, mesh.devices.shape
      (('runs',), (1,))
    """
    devs = jax.devices() if devices is None else list(devices)
    if not devs:
        raise ValueError("devices must hold at least one JAX device (e.g. jax.devices()[:2]), got none.")
    bad = [d for d in devs if not isinstance(d, jax.Device)]
    if bad:
        raise ValueError(f"devices must be JAX devices (from jax.devices()), got {bad[0]!r}.")
    if len({d.id for d in devs}) != len(devs):
        raise ValueError(f"devices must not repeat a device, got ids {[d.id for d in devs]}.")
    return Mesh(np.array(devs), (RUN_AXIS,))


def resolve_mesh(mesh) -> Mesh | None:
    """``mesh`` as a run mesh, or ``None`` for no sharding: ``"auto"`` is every visible device,
    and a mesh of one device is ``None`` (the unsharded program).

    Raises:
      ValueError: ``mesh`` is not ``"auto"``, ``None`` or a one-dimensional mesh named ``"runs"``.
    """
    if isinstance(mesh, str) and mesh == "auto":
        mesh = run_mesh()
    elif mesh is not None and not (isinstance(mesh, Mesh) and mesh.axis_names == (RUN_AXIS,)):
        raise ValueError(f"mesh must be 'auto' (every visible device), None (no sharding) or a mesh from "
                         f"ic.run_mesh(devices), with the one axis {RUN_AXIS!r}; got {mesh!r}.")
    return None if mesh is None or mesh.devices.size == 1 else mesh


def describe_mesh(mesh) -> str:
    """One line naming the devices a sweep runs on, e.g. ``"4 cpu devices on 1 host"``.

    Examples:
      A mesh of one device is no sharding, the same as ``mesh=None``; on a CPU:

      >>> import jax
      >>> import itlin_core as ic
      >>> ic.describe_mesh(ic.run_mesh(jax.devices()[:1])) == ic.describe_mesh(None)
      True
      >>> print(ic.describe_mesh(None))
      1 cpu device (no sharding)
    """
    mesh = resolve_mesh(mesh)
    if mesh is None:
        d = jax.devices()[0]
        return f"1 {d.platform} device (no sharding)"
    devs = list(mesh.devices.flat)
    hosts = len({d.process_index for d in devs})
    return (f"{len(devs)} {devs[0].platform} devices on {hosts} host{'s' if hosts > 1 else ''}, "
            f"runs sharded over the mesh axis {RUN_AXIS!r}")


def padded_runs(runs: int, mesh) -> int:
    """The smallest multiple of the mesh's device count that holds ``runs`` runs.

    Examples:
      Every run count is a multiple of one device (or of no mesh), so nothing is added (on 4
      devices, 5 runs would become 8):

      >>> import jax
      >>> import itlin_core as ic
      >>> ic.padded_runs(5, ic.run_mesh(jax.devices()[:1])), ic.padded_runs(5, None)
      (5, 5)
    """
    size = 1 if mesh is None else int(mesh.devices.size)
    return int(math.ceil(runs / size) * size)


def pad_runs(tree, n: int):
    """Every leaf of ``tree`` padded along its leading (run) axis to length ``n`` by repeating its
    last run (no copy when it is already ``n`` long).

    Examples:
      Three runs padded to five repeat the last one, and :func:`unpad_runs` undoes it:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> padded = ic.pad_runs({"seed": jnp.arange(3)}, 5)
      >>> padded["seed"].tolist(), ic.unpad_runs(padded, 3)["seed"].tolist()
      ([0, 1, 2, 2, 2], [0, 1, 2])
    """

    def pad(a):
        a = jnp.asarray(a)
        extra = n - a.shape[0]
        if extra < 0:
            raise ValueError(f"cannot pad {a.shape[0]} runs to {n}: fewer than there are.")
        return a if extra == 0 else jnp.concatenate([a, jnp.repeat(a[-1:], extra, axis=0)])

    return jax.tree.map(pad, tree)


def unpad_runs(tree, runs: int, axis: int = 0):
    """Every leaf of ``tree`` cut to its first ``runs`` entries along ``axis`` (the padded runs
    dropped). A leaf with fewer than ``runs`` entries there is refused (ValueError naming it).

    Examples:
      :func:`pad_runs` then ``unpad_runs`` is the identity; ``axis=1`` cuts, e.g., losses
      recorded as (steps, runs):

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> runs = jnp.arange(3.0)
      >>> bool(jnp.array_equal(ic.unpad_runs(ic.pad_runs(runs, 4), 3), runs))
      True
      >>> ic.unpad_runs(jnp.zeros((10, 4)), 3, axis=1).shape
      (10, 3)
    """
    runs, axis = check_whole("runs", runs, 1), check_whole("axis", axis, 0)

    def cut(where, a):
        if np.ndim(a) <= axis or np.shape(a)[axis] < runs:
            raise ValueError(f"unpad_runs: tree{jax.tree_util.keystr(where)} has shape {np.shape(a)}, fewer than "
                             f"runs = {runs} entries along axis {axis}; runs must be at most the padded run count.")
        return a[(slice(None),) * axis + (slice(0, runs),)]
    return jax.tree_util.tree_map_with_path(cut, tree)


def _put(tree, sharding):
    """``tree``'s leaves as global arrays of ``sharding``, each process supplying its own shards
    from its copy of the (identical) host values, so that it also works across hosts."""

    def put(a):
        if isinstance(a, jax.Array) and a.sharding == sharding:
            return a
        if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jax.dtypes.prng_key):   # a typed PRNG key
            return jax.random.wrap_key_data(put(jax.random.key_data(a)), impl=jax.random.key_impl(a))
        host = to_host(a)
        return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])

    return jax.tree.map(put, tree)


def shard_runs(tree, mesh: Mesh):
    """``tree`` placed with its leading (run) axis split over ``mesh``'s devices.

    Raises:
      ValueError: a leaf's leading axis is not a multiple of the number of devices (pad it with
        :func:`pad_runs` first).

    Examples:
      On a mesh of one device the runs are all on that device, split along the axis ``"runs"``,
      with their values unchanged:

      >>> import jax, jax.numpy as jnp
      >>> import itlin_core as ic
      >>> placed = ic.shard_runs(jnp.arange(4), ic.run_mesh(jax.devices()[:1]))
      >>> placed.sharding.spec == jax.sharding.PartitionSpec("runs"), placed.tolist()
      (True, [0, 1, 2, 3])
    """
    size = int(mesh.devices.size)
    for a in jax.tree.leaves(tree):
        if not np.shape(a) or np.shape(a)[0] % size:
            raise ValueError(f"every leaf must lead with a run axis that is a multiple of the {size} devices; got "
                             f"shape {np.shape(a)}. Pad the runs with ic.pad_runs(tree, ic.padded_runs(runs, mesh)).")
    return _put(tree, NamedSharding(mesh, PartitionSpec(RUN_AXIS)))


def replicate_on(tree, mesh: Mesh):
    """``tree`` with a full copy on every device of ``mesh`` (the data every run sees)."""
    return _put(tree, NamedSharding(mesh, PartitionSpec()))


def to_host(a) -> np.ndarray:
    """A NumPy copy of ``a``, gathered from every host when its shards live on several."""
    if isinstance(a, jax.Array) and not a.is_fully_addressable:
        from jax.experimental import multihost_utils
        return np.asarray(multihost_utils.process_allgather(a, tiled=True))
    return np.asarray(a)


def is_writer() -> bool:
    """Whether this process writes files (checkpoints, records): process 0 of a multi-host run,
    or the one process otherwise."""
    return jax.process_index() == 0


def on_devices(step: Callable, mesh: Any = "auto") -> Callable:
    """A sweep step (:func:`itlin_core.make_il_sweep_step`) whose runs :func:`itlin_core.train` splits
    over the devices of ``mesh``: ``"auto"`` (what train does with any sweep step) every visible
    device, a mesh from :func:`run_mesh`, or ``None`` for no sharding. The step computes the same
    thing; only where its runs live changes.

    Raises:
      ValueError: ``step`` is not a sweep step (it has no runs to split) and ``mesh`` is a mesh, or
        ``mesh`` is not ``"auto"``, ``None`` or a run mesh.

    Examples:
      >>> import jax, optax
      >>> import itlin_core as ic
      >>> step, _ = ic.make_il_sweep_step(lambda p, x: p * x, ic.squared_error, optax.sgd(0.1), [1, 2])
      >>> one = ic.on_devices(step, ic.run_mesh(jax.devices()[:1]))
      >>> one.runs, one.run_labels
      (2, ['K=1', 'K=2'])
    """
    sweep = getattr(step, "runs", None) is not None and callable(getattr(step, "with_runs", None))
    resolve_mesh(mesh)   # a bad mesh is refused here
    if not sweep and mesh is not None and not (isinstance(mesh, str) and mesh == "auto"):
        raise ValueError(f"mesh ({describe_mesh(resolve_mesh(mesh))}) splits the runs of a sweep step over devices; "
                         "this step has no runs to split (build it with ic.make_il_sweep_step), so pass mesh=None.")
    inner = getattr(step, "inner_step", step)

    def placed(state, batch):
        return inner(state, batch)

    placed.__dict__.update({k: v for k, v in getattr(inner, "__dict__", {}).items()})
    placed.inner_step, placed.mesh = inner, mesh
    return placed


def sharded_vmap(f: Callable, mesh: Any = "auto") -> Callable:
    """``jax.jit(jax.vmap(f))`` with the mapped (leading) axis of every argument split over
    ``mesh``'s devices: the arguments are padded to a multiple of the device count
    (:func:`pad_runs`), placed with :func:`shard_runs`, and the outputs cut back to the runs given
    and returned as host-gathered NumPy arrays when there are several hosts. With one device (or
    ``mesh=None``) it is ``jax.jit(jax.vmap(f))`` itself. For sweeps over seeds or the damping
    lambda that are one ``vmap`` without a training loop.

    Examples:
      On a mesh of one device it gives what ``jax.vmap`` gives:

      >>> import jax, jax.numpy as jnp
      >>> import itlin_core as ic
      >>> square, runs = (lambda s: s ** 2), jnp.arange(3.0)
      >>> f = ic.sharded_vmap(square, ic.run_mesh(jax.devices()[:1]))
      >>> f(runs).tolist(), bool(jnp.array_equal(f(runs), jax.vmap(square)(runs)))
      ([0.0, 1.0, 4.0], True)
    """
    mapped = jax.jit(jax.vmap(f))
    m = resolve_mesh(mesh)
    if m is None:
        return mapped

    def run(*args):
        leads = {np.shape(a)[0] if np.ndim(a) else None for a in jax.tree.leaves(args)}
        if len(leads) != 1 or None in leads:
            raise ValueError(f"every argument leaf must lead with the same run axis, got leading sizes {sorted(leads, key=str)}.")
        runs = leads.pop()
        out = mapped(*shard_runs(pad_runs(args, padded_runs(runs, m)), m))
        cut = unpad_runs(out, runs)
        return jax.tree.map(to_host, cut) if jax.process_count() > 1 else cut

    return run


__all__ = ["RUN_AXIS", "on_devices", "run_mesh", "resolve_mesh", "describe_mesh", "padded_runs", "pad_runs", "unpad_runs",
           "shard_runs", "replicate_on", "to_host", "is_writer", "sharded_vmap"]
