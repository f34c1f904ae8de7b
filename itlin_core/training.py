r"""The training loop: ``lax.scan`` over chunks of steps, evaluation between chunks, divergence
detection, and (optionally) checkpoints that resume a run bit for bit.

Conventions:

* A step is ``step(state, batch) -> (state, metrics)`` with ``metrics["loss"]`` a scalar, or one
  loss per run when the step is vmapped over a sweep (:func:`itlin_core.make_il_sweep_step`).
* Batches come from a batch source ``i -> batch`` that depends on the step index only
  (:mod:`itlin_core.pipeline`), so a resumed run sees exactly the batches of an uninterrupted one.
* Chunks end at multiples of ``eval_every`` counted from step 0, so a resumed run takes exactly
  the chunks (and evaluations) of an uninterrupted one.
* The compiled chunk is cached for the last :data:`CACHED_STEPS` ``(step, batch function)``
  pairs: calling :func:`train` again with the same step and batch source does not compile again
  (the cache keeps those steps, and what they close over, alive; older ones are released). The
  state is *donated* to the chunk (its buffers are reused for the new state, so a run holds one
  copy of the state, not two); :func:`train` first copies the state it is given, so the caller's arrays stay valid.
* A sweep step (one that says how many runs it holds, ``step.runs``, and can pad itself,
  ``step.with_runs(n)``, as :func:`itlin_core.make_il_sweep_step`'s does) is split over the
  devices of ``mesh`` (:mod:`itlin_core.sharding`): the runs are padded to a multiple of the
  device count, the state is sharded along its run axis and the data copied to every device. The
  history, the returned state and the checkpoints hold the real runs only, so a checkpoint
  resumes on any number of devices; only process 0 of a multi-host run writes it.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ._fingerprint import MEANINGS, data_digest, step_digest
from ._progress import progress_bar
from ._validate import K_NEVER, check_step_room, check_whole
from .checkpoint import _json_meta, key_data, load_checkpoint, save_checkpoint
from .pipeline import Batches, _whole
from .sharding import (describe_mesh, is_writer, pad_runs, padded_runs, replicate_on, resolve_mesh, shard_runs,
                       to_host, unpad_runs)

#: Keys of the history that :func:`train` writes itself; an ``eval_fn`` may not return them.
RESERVED_KEYS = ("loss", "loss_every", "eval_step", "diverged_at", "nonfinite_at", "seconds", "resumed_from")
#: How many ``(step, batch function)`` pairs keep their compiled chunks between calls.
CACHED_STEPS = 8


class TrainingDiverged(FloatingPointError):
    """The training loss became NaN or infinite.

    Examples:
      :func:`train` raises it at step 2 for the loss ``1 / s`` of a state ``s`` counting down from 2:

      >>> import itlin_core as ic
      >>> try: ic.train(lambda s, b: (s - 1, {"loss": 1 / s}), 2.0, None, 5, progress="off")
      ... except ic.TrainingDiverged as e: print(str(e).split(";")[0])
      training: the loss became non-finite at step 2
    """


class _Closure:
    """A plain batch function ``i -> batch`` in the ``fn(data, i)`` form of
    :class:`itlin_core.Batches`; equal (for the compilation cache) when the function is the same."""

    def __init__(self, f):
        self.f = f

    def __call__(self, data, i):
        return self.f(i)

    def __hash__(self):
        return hash(self.f)

    def __eq__(self, other):
        return isinstance(other, _Closure) and other.f is self.f


def _as_source(batches) -> Batches:
    if isinstance(batches, Batches):
        return batches
    if callable(batches):
        return Batches(_Closure(batches), None)
    return Batches(_whole, batches)   # a fixed batch: full-batch training


@functools.lru_cache(maxsize=CACHED_STEPS)
def _chunk_runner(step, batch_fn, donate: bool):
    """The compiled ``lax.scan`` of ``step`` over a chunk of step indices; with ``donate`` the
    state's buffers are reused for the new state (not under ``on_nonfinite="stop"``, which
    returns the state from before a bad chunk)."""

    def run(state, data, idx):
        return jax.lax.scan(lambda s, i: step(s, batch_fn(data, i)), state, idx)

    return jax.jit(run, donate_argnums=(0,) if donate else ())


def _block_means(losses: np.ndarray, block: int) -> np.ndarray:
    """Means over consecutive blocks of ``block`` steps (leading axis); the last may be shorter.
    Summed in float64 and returned in the losses' dtype."""
    n = len(losses)
    full = n // block
    parts = []
    if full:
        parts.append(losses[:full * block].reshape(full, block, *losses.shape[1:]).mean(axis=1, dtype=np.float64))
    if n > full * block:
        parts.append(losses[full * block:].mean(axis=0, dtype=np.float64)[None])
    return np.concatenate(parts).astype(losses.dtype) if parts else losses[:0]


class _History:
    """What a run records, chunk by chunk (also restored from a checkpoint)."""

    def __init__(self, block, saved=None):
        saved = dict(saved or {})
        self.block = block
        self.losses = [np.asarray(saved.pop("loss"))] if "loss" in saved else []
        self.eval_step = [int(s) for s in saved.pop("eval_step", [])]
        self.diverged_at = saved.pop("diverged_at", None)
        self.nonfinite_at = saved.pop("nonfinite_at", None)
        self.seconds = float(saved.pop("seconds", 0.0))
        saved.pop("loss_every", None)
        self.evals = {k: list(np.asarray(v)) for k, v in saved.items()}

    def evaluate(self, jit_eval, state, at, cut=lambda v: v):
        if jit_eval is None:
            return
        values = {k: cut(to_host(v)) for k, v in jit_eval(state).items()}
        clash = sorted(set(values) & set(RESERVED_KEYS))
        if clash:
            raise ValueError(f"eval_fn returned the key(s) {clash}, which the training history uses itself "
                             f"({', '.join(RESERVED_KEYS)}); rename those metrics.")
        self.eval_step.append(at)
        for k, v in values.items():
            self.evals.setdefault(k, []).append(v)

    def as_dict(self, seconds, ignore_nonfinite):
        out = {"eval_step": np.asarray(self.eval_step, dtype=np.int64), "diverged_at": self.diverged_at,
               "loss": np.concatenate(self.losses) if self.losses else np.zeros((0,)), "loss_every": self.block,
               "seconds": seconds}
        if ignore_nonfinite:
            out["nonfinite_at"] = self.nonfinite_at
        out.update({k: np.stack(v) for k, v in self.evals.items()})
        return out


def _warn_new_divergences(step, desc, before, now) -> None:
    """Warn once per run of a sweep whose loss or parameters just became non-finite."""
    labels = getattr(step, "run_labels", None)
    flat_now = np.asarray(now).reshape(-1)
    flat_before = np.full_like(flat_now, -1) if before is None else np.asarray(before).reshape(-1)
    for i in np.flatnonzero((flat_now >= 0) & (flat_before < 0)):
        name = labels[i] if labels is not None and len(labels) == flat_now.size else f"run {i}"
        warnings.warn(f"{desc}: {name} (run {i} of {flat_now.size}) became non-finite at step {flat_now[i]}; the "
                      "other runs go on, and its values are NaN from there (history['nonfinite_at'] has the step of "
                      "every run, -1 for none).", RuntimeWarning, stacklevel=3)


def _nonfinite_runs(state, runs_shape) -> np.ndarray:
    """Per run (``runs_shape``: ``()`` or ``(R,)``), whether a float leaf of ``state.params`` (of
    ``state`` without ``params``; an optimiser may hold a legitimate infinity) is non-finite."""
    bad = jnp.zeros(runs_shape, bool)
    for leaf in jax.tree.leaves(getattr(state, "params", state)):
        if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.inexact) and leaf.size:
            lead = leaf.shape[:len(runs_shape)] == tuple(runs_shape)
            flat = leaf.reshape(*runs_shape, -1) if lead else leaf.reshape(1, -1)
            bad = bad | ~jnp.isfinite(flat).all(axis=-1) if lead else bad | ~jnp.isfinite(flat).all()
    return to_host(bad)


def train(step: Callable, state, batches, num_steps: int, *, eval_fn: Callable | None = None,
          eval_every: int | None = None, loss_every: int | None = None, on_nonfinite: str = "auto",
          progress: str | bool | None = None, desc: str = "training", checkpoint_path=None,
          checkpoint_every: int | None = None, key=None, meta: Mapping | None = None,
          stop_at: int | None = None, mesh: Any = "auto"):
    """Run ``num_steps`` of ``step`` with ``lax.scan`` in chunks, evaluating between chunks.

    Args:
      step: ``step(state, batch) -> (state, metrics)`` with a scalar ``metrics["loss"]``
        (or one loss per run when the step is vmapped over a sweep).
      state: initial state (copied: the caller's arrays stay valid).
      batches: a batch source (:func:`itlin_core.full_batch`, :func:`itlin_core.minibatches`,
        :func:`itlin_core.augmented_minibatches`), any jittable function ``i -> batch`` of the
        int32 step index, or a fixed batch (full batch).
      num_steps: total number of steps, at most 2**31 - 1 (an int32 ``state.step`` must stay below that).
      eval_fn: ``eval_fn(state) -> dict`` of arrays, evaluated at step 0, every ``eval_every``
        steps and at the end. Its keys may not be those of :data:`RESERVED_KEYS`.
      eval_every: chunk length (default: ``num_steps``, i.e. one chunk).
      loss_every: record the loss as its mean over blocks of ``loss_every`` steps (from step 0;
        the last may be shorter), not every step: 6e7 steps of two runs' losses are 480 MB in
        every checkpoint. ``eval_every`` must be a multiple of it. Divergence is still located
        to the exact step, from each chunk's per-step losses.
      on_nonfinite: ``"raise"`` raises :class:`TrainingDiverged` naming the step; ``"stop"``
        ends training and returns what was recorded before the bad chunk, with
        ``history["diverged_at"]`` set; ``"ignore"`` records NaNs (the caller masks them).
        ``"auto"`` (default): ``"raise"`` for one run; for a vmapped sweep (one loss per run)
        ``"ignore"``, so that the healthy runs go on, with a warning that names each run that
        became non-finite (by ``step.run_labels``, e.g. ``K=30``, when the step has them, as
        :func:`itlin_core.make_il_sweep_step` does) and its first bad step.
      progress: ``"auto"`` (notebook widget or terminal), ``"text"`` (stderr), ``"off"``;
        default from the ``ITLIN_PROGRESS`` environment variable.
      desc: the progress bar's label and the start of a divergence message.
      checkpoint_path: save a checkpoint (:func:`itlin_core.save_checkpoint`) to this ``.npz``
        file every ``checkpoint_every`` steps and at the end; when the file exists, resume from
        it instead of starting from ``state``. An interrupted-then-resumed run reproduces the
        uninterrupted run bit for bit, history included (on a GPU this also needs XLA's
        deterministic kernels, ``XLA_FLAGS=--xla_gpu_deterministic_ops=true``). A run that is
        finished, or stopped by a divergence, returns its recorded result without training.
      checkpoint_every: steps between checkpoints, a multiple of ``eval_every`` (default
        ``eval_every``). Only with ``checkpoint_path``, as are ``key``, ``meta`` and ``stop_at``.
      key: the PRNG key the run's data order (and any other randomness) derives from; it is
        saved, and resuming with a different key raises ValueError.
      meta: JSON-able settings that must match on resume (e.g. the preset); ``num_steps``, ``eval_every``,
        ``checkpoint_every``, ``loss_every``, the JAX version and digests of the step's program
        and of the data always must (:mod:`itlin_core._fingerprint`).
      stop_at: stop (after checkpointing) once this many steps are done, e.g. to fit a session;
        the next call continues from there. A multiple of ``eval_every``.
      mesh: the devices a sweep step's runs are split over (see the module's conventions):
        ``"auto"`` (default) every visible device, a mesh from :func:`itlin_core.run_mesh`, or
        ``None``. With one device, or a step that is not a sweep under ``"auto"``, nothing is
        sharded and the program is the unsharded one. ``eval_fn`` then sees the padded runs (its
        per-run outputs are cut back); the batch is the same on every device.

    Returns:
      ``(state, history)``: ``history["loss"]`` has one entry per step (leading axis), or one
      per block of ``loss_every`` steps, and ``history["loss_every"]`` says which (1 or
      ``loss_every``); ``history["eval_step"]`` the steps at which ``eval_fn`` ran and
      ``history[k]`` its values, ``history["diverged_at"]`` the first non-finite step or
      ``None``, ``history["seconds"]`` the wall time of training (summed over resumed calls).
      With ``on_nonfinite="ignore"`` (or ``"auto"`` on a sweep) also ``history["nonfinite_at"]``: for each entry of the
      loss (one per run for a sweep), the first step whose loss was non-finite, ``-1`` for none.
      With ``checkpoint_path`` also ``history["resumed_from"]``: the step this call started from (0 for a fresh run).

    Raises:
      ValueError: bad arguments, or a checkpoint from a different run (structure, key or settings differ).
      TrainingDiverged: a non-finite loss under ``on_nonfinite="raise"``.

    Examples:
      Three steps that halve the state ``s`` with loss ``s``; each loss is taken before its step's update:

      >>> import itlin_core as ic
      >>> ic.train(lambda s, b: (s / 2, {"loss": s}), 1.0, None, 3, progress="off")[1]["loss"].tolist()
      [1.0, 0.5, 0.25]
    """
    if on_nonfinite not in ("auto", "raise", "stop", "ignore"):
        raise ValueError(f"on_nonfinite must be 'auto', 'raise', 'stop' or 'ignore', got {on_nonfinite!r}.")
    auto = on_nonfinite == "auto"
    num_steps = check_whole("num_steps", num_steps, 0, K_NEVER, " (the step index is an int32)")
    aligned = eval_every is not None
    eval_every = check_whole("eval_every", eval_every, 1) if aligned else max(num_steps, 1)
    block = 1 if loss_every is None else check_whole("loss_every", loss_every, 1)
    if aligned and eval_every % block:
        raise ValueError(f"eval_every ({eval_every}) must be a multiple of loss_every ({block}), "
                         "so that every chunk ends where a loss block does.")
    if checkpoint_path is None:
        extra = [n for n, v in (("checkpoint_every", checkpoint_every), ("key", key), ("meta", meta),
                                ("stop_at", stop_at)) if v is not None]
        if extra:
            raise ValueError(f"{', '.join(extra)} only apply with checkpoint_path; pass a checkpoint file too.")
    else:
        checkpoint_every = eval_every if checkpoint_every is None else check_whole("checkpoint_every", checkpoint_every, 1)
        if checkpoint_every % eval_every:
            raise ValueError(f"checkpoint_every must be a positive multiple of eval_every ({eval_every}), "
                             f"got {checkpoint_every}: checkpoints are taken between evaluation chunks.")
        if stop_at is not None and check_whole("stop_at", stop_at, 0) % eval_every:
            raise ValueError(f"stop_at must be a non-negative multiple of eval_every ({eval_every}), got "
                             f"{stop_at!r}: a run stops only where the uninterrupted run evaluates.")
    end = num_steps if stop_at is None else min(int(stop_at), num_steps)
    source, ignore = _as_source(batches), on_nonfinite == "ignore"
    explicit = mesh is not None and not (isinstance(mesh, str) and mesh == "auto")
    mesh = resolve_mesh(mesh)
    runs = getattr(step, "runs", None)
    if mesh is not None and (runs is None or not callable(getattr(step, "with_runs", None))):
        if explicit:
            raise ValueError(f"mesh ({describe_mesh(mesh)}) splits the runs of a sweep step over devices; this step "
                             "has no runs to split (build it with ic.make_il_sweep_step), so pass mesh=None.")
        mesh = None
    total = runs if mesh is None else padded_runs(runs, mesh)
    cut = (lambda v: v) if mesh is None else (lambda v: v[:runs] if np.ndim(v) and v.shape[0] == total else v)

    # resume from a checkpoint of the same run
    start, saved = 0, None
    if checkpoint_path is not None:
        path = Path(checkpoint_path)
        kd = key_data(key)
        ck = load_checkpoint(path, state) if path.exists() else None    # its structure checked first
        run_meta = {"num_steps": num_steps, "eval_every": eval_every, "checkpoint_every": checkpoint_every,
                    "loss_every": block, "user": _json_meta(meta), "jax": jax.__version__,
                    "step": step_digest(step, state, source.fn, source.data), "data": data_digest(source.data)}
        if ck is not None:
            if ck.meta != run_meta:
                diff = [f"{k} ({MEANINGS.get(k, f'{ck.meta.get(k)!r} there, {run_meta.get(k)!r} now')})"
                        for k in run_meta if ck.meta.get(k) != run_meta[k]]
                raise ValueError(f"{path} was written by a run with other settings: {'; '.join(diff)}. Resuming "
                                 "it would not continue that run: delete it or choose another checkpoint_path.")
            if (ck.key is None) != (kd is None) or (kd is not None and not np.array_equal(ck.key, kd)):
                raise ValueError(f"{path} was written by a run with another PRNG key (seed); resuming it would "
                                 "not reproduce that run. Use the same seed, or delete the checkpoint.")
            state, start, saved = ck.state, ck.step, ck.history
    history = _History(block, saved)
    if auto and history.nonfinite_at is not None:   # a sweep resumed: its first call decided "ignore"
        on_nonfinite, ignore = "ignore", True
    if saved is not None and (history.diverged_at is not None or start >= end):
        return state, dict(history.as_dict(history.seconds, ignore), resumed_from=start)
    check_step_room(state, end - start)   # an int32 state.step must not wrap around

    def checkpoint(s, at):
        s = s if mesh is None else jax.tree.map(to_host, unpad_runs(s, runs))
        if is_writer():
            save_checkpoint(path, s, step=at, key=kd, meta=run_meta,
                            history=history.as_dict(history.seconds + time.perf_counter() - t0, ignore))

    jit_eval = jax.jit(eval_fn) if eval_fn is not None else None
    donate = on_nonfinite != "stop"            # "stop" returns the state from before a bad chunk
    run_step = step
    if mesh is not None:   # the runs padded to a multiple of the devices, and split over them
        state = shard_runs(pad_runs(state, total), mesh)
        source = Batches(source.fn, replicate_on(source.data, mesh))
        run_step = step.with_runs(total)
    run = _chunk_runner(run_step, source.fn, donate)
    if donate:
        state = jax.tree.map(jnp.copy, state)  # ours to donate; the caller's arrays stay valid
    t0 = time.perf_counter()
    if start == 0:
        history.evaluate(jit_eval, state, 0, cut)
    bar = progress_bar(end - start, desc, progress) if end > start else None
    at = start
    try:
        while at < end:
            n = min(eval_every - at % eval_every, end - at)
            new_state, metrics = run(state, source.data, jnp.arange(at, at + n, dtype=jnp.int32))
            losses = to_host(metrics["loss"])
            losses = losses if mesh is None else losses[:, :runs]
            bad = ~np.isfinite(losses)
            if on_nonfinite == "auto":          # decided by the first chunk: a sweep has a loss per run
                on_nonfinite = "ignore" if losses.ndim > 1 else "raise"
                ignore = on_nonfinite == "ignore"
            # the loss of step i is taken before its update: the last update is checked on the state
            last_bad = (cut(_nonfinite_runs(new_state, (total,) if mesh is not None else losses.shape[1:]))
                        if at + n == num_steps else None)
            if not ignore and (bad.any() or (last_bad is not None and last_bad.any())):
                history.diverged_at = (at + int(np.argmax(bad.reshape(n, -1).any(axis=1))) if bad.any()
                                       else num_steps - 1)
                if on_nonfinite == "raise":
                    what = "the loss" if bad.any() else "the parameters (after the last update)"
                    raise TrainingDiverged(
                        f"{desc}: {what} became non-finite at step {history.diverged_at}; training stopped. "
                        "Lower the learning rate, add damping, or check the data for NaNs (and class labels "
                        "for values outside [0, number of classes)).")
                break
            if ignore:
                first = np.where(bad.any(axis=0), at + np.argmax(bad, axis=0), -1).astype(np.int64)
                if last_bad is not None:
                    first = np.where((first < 0) & last_bad, num_steps - 1, first)
                prev = history.nonfinite_at
                history.nonfinite_at = first if prev is None else np.where(prev >= 0, prev, first)
                if auto:
                    _warn_new_divergences(step, desc, prev, history.nonfinite_at)
            history.losses.append(_block_means(losses, block) if block > 1 else losses)
            state, at = new_state, at + n
            history.evaluate(jit_eval, state, at, cut)
            if bar is not None:
                bar.update(n)
            if checkpoint_path is not None and (at % checkpoint_every == 0 or at == end):
                checkpoint(state, at)
        if checkpoint_path is not None and history.diverged_at is not None:
            checkpoint(state, at)   # so that the run, called again, returns what it recorded
    finally:
        if bar is not None:
            bar.close()
    if mesh is not None:
        state = unpad_runs(state, runs)
    out = history.as_dict(history.seconds + time.perf_counter() - t0, ignore)
    if checkpoint_path is not None:
        out["resumed_from"] = start
    return state, out


__all__ = ["train", "TrainingDiverged", "RESERVED_KEYS", "CACHED_STEPS"]
