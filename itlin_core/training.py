r"""The training loop: ``lax.scan`` over chunks of steps, evaluation between chunks, divergence
detection, and (optionally) checkpoints that resume a run bit for bit. What it is told besides the
step, state, batches and step count comes in the option types of :mod:`itlin_core.train_options`.

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
  ``step.with_runs(n)``, as :func:`itlin_core.make_il_sweep_step`'s does) is split over every
  visible device, or over the mesh that :func:`itlin_core.on_devices` gives it
  (:mod:`itlin_core.sharding`): the runs are padded to a multiple of the device count, the state is sharded along its run axis and the data copied to every device. The
  history, the returned state and the checkpoints hold the real runs only, so a checkpoint
  resumes on any number of devices; only process 0 of a multi-host run writes it.
"""

from __future__ import annotations

import functools
import os
import time
import warnings
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ._fingerprint import MEANINGS, data_digest, step_digest
from ._progress import progress_bar
from ._validate import check_step_room
from .train_options import Checkpointing, Evaluation, Progress, _Plan, _plan
from .checkpoint import _json_meta, key_data, load_checkpoint, save_checkpoint
from .pipeline import Batches, _whole
from .sharding import (is_writer, pad_runs, padded_runs, replicate_on, shard_runs,
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
    """What a run records, chunk by chunk (also restored from a checkpoint), and how it treats a
    non-finite loss (``"auto"`` is decided by the first chunk, or by the checkpoint it resumes)."""

    def __init__(self, block, on_nonfinite, saved=None, run_meta=None, key=None, done=False):
        saved = dict(saved or {})
        self.block, self.on_nonfinite, self.auto = block, on_nonfinite, on_nonfinite == "auto"
        self.run_meta, self.key, self.done = run_meta, key, done
        self.losses = [np.asarray(saved.pop("loss"))] if "loss" in saved else []
        self.eval_step = [int(s) for s in saved.pop("eval_step", [])]
        self.diverged_at = saved.pop("diverged_at", None)
        self.nonfinite_at = saved.pop("nonfinite_at", None)
        self.seconds = float(saved.pop("seconds", 0.0))
        saved.pop("loss_every", None)
        self.evals = {k: list(np.asarray(v)) for k, v in saved.items()}
        if self.auto and self.nonfinite_at is not None:   # a sweep resumed: its first call decided "ignore"
            self.on_nonfinite = "ignore"

    @property
    def ignore(self) -> bool:
        return self.on_nonfinite == "ignore"

    def evaluate(self, jit_eval, state, at, cut=lambda v: v):
        if jit_eval is None:
            return
        values = {k: cut(to_host(v)) for k, v in jit_eval(state).items()}
        clash = sorted(set(values) & set(RESERVED_KEYS))
        if clash:
            raise ValueError(f"the evaluation returned the key(s) {clash}, which the training history uses itself "
                             f"({', '.join(RESERVED_KEYS)}); rename those metrics.")
        self.eval_step.append(at)
        for k, v in values.items():
            self.evals.setdefault(k, []).append(v)

    def as_dict(self, seconds=None):
        out = {"eval_step": np.asarray(self.eval_step, dtype=np.int64), "diverged_at": self.diverged_at,
               "loss": np.concatenate(self.losses) if self.losses else np.zeros((0,)), "loss_every": self.block,
               "seconds": self.seconds if seconds is None else seconds}
        if self.ignore:
            out["nonfinite_at"] = self.nonfinite_at
        out.update({k: np.stack(v) for k, v in self.evals.items()})
        return out

    def result(self, plan, start: int) -> dict:
        out = self.as_dict()
        if plan.checkpoint is not None:
            out["resumed_from"] = start
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


def _resume(plan: _Plan, step, state, source):
    """``(state, start step, history)``: the given state at step 0, or the checkpoint of the same
    run (refused, with what differs, when its settings, key or program differ)."""
    if plan.checkpoint is None:
        return state, 0, _History(plan.block, plan.on_nonfinite)
    path, kd = plan.checkpoint.path, key_data(plan.checkpoint.key)
    ck = load_checkpoint(path, state) if path.exists() else None    # its structure checked first
    run_meta = {"num_steps": plan.num_steps, "eval_every": plan.every, "checkpoint_every": plan.checkpoint.every,
                "loss_every": plan.block, "user": _json_meta(plan.checkpoint.meta), "jax": jax.__version__,
                "step": step_digest(getattr(step, "inner_step", step), state, source.fn, source.data), "data": data_digest(source.data)}
    if ck is None:
        return state, 0, _History(plan.block, plan.on_nonfinite, run_meta=run_meta, key=kd)
    if ck.meta != run_meta:
        diff = [f"{k} ({MEANINGS.get(k, f'{ck.meta.get(k)!r} there, {run_meta.get(k)!r} now')})"
                for k in run_meta if ck.meta.get(k) != run_meta[k]]
        raise ValueError(f"{path} was written by a run with other settings: {'; '.join(diff)}. Resuming "
                         "it would not continue that run: delete it or choose another checkpoint path.")
    if (ck.key is None) != (kd is None) or (kd is not None and not np.array_equal(ck.key, kd)):
        raise ValueError(f"{path} was written by a run with another PRNG key (seed); resuming it would "
                         "not reproduce that run. Use the same seed, or delete the checkpoint.")
    history = _History(plan.block, plan.on_nonfinite, ck.history, run_meta, kd)
    history.done = history.diverged_at is not None or ck.step >= plan.end
    return ck.state, ck.step, history


class _Runner:
    """The compiled chunks of one :func:`train` call: the state (sharded over the runs of a sweep
    when the plan has a mesh), one chunk at a time, divergence handling, checkpoints."""

    def __init__(self, plan: _Plan, step, state, source, history: _History, start: int):
        self.plan, self.step, self.history = plan, step, history
        mesh, runs = plan.mesh, plan.runs
        self.total = runs if mesh is None else padded_runs(runs, mesh)
        self.cut = (lambda v: v) if mesh is None else (
            lambda v: v[:runs] if np.ndim(v) and v.shape[0] == self.total else v)
        check_step_room(state, plan.end - start)   # an int32 state.step must not wrap around
        self.jit_eval = None
        if plan.eval_fn is not None:
            jitted = jax.jit(plan.eval_fn)
            data = plan.eval_data if mesh is None else replicate_on(plan.eval_data, mesh)
            self.jit_eval = jitted if data is None else (lambda s: jitted(s, data))
        donate = plan.on_nonfinite != "stop"            # "stop" returns the state from before a bad chunk
        run_step = step
        if mesh is not None:   # the runs padded to a multiple of the devices, and split over them
            state = shard_runs(pad_runs(state, self.total), mesh)
            source = Batches(source.fn, replicate_on(source.data, mesh))
            run_step = step.with_runs(self.total)
        self.run, self.data = _chunk_runner(run_step, source.fn, donate), source.data
        self.state = jax.tree.map(jnp.copy, state) if donate else state  # ours to donate
        self.t0 = time.perf_counter()

    def advance(self, at: int, n: int) -> bool:
        """Run steps ``at .. at + n``; False when the run stops here (a divergence under "stop")."""
        plan, history = self.plan, self.history
        new_state, metrics = self.run(self.state, self.data, jnp.arange(at, at + n, dtype=jnp.int32))
        losses = to_host(metrics["loss"])
        losses = losses if plan.mesh is None else losses[:, :plan.runs]
        bad = ~np.isfinite(losses)
        if history.on_nonfinite == "auto":          # decided by the first chunk: a sweep has a loss per run
            history.on_nonfinite = "ignore" if losses.ndim > 1 else "raise"
        # the loss of step i is taken before its update: the last update is checked on the state
        last_bad = (self.cut(_nonfinite_runs(new_state, (self.total,) if plan.mesh is not None else losses.shape[1:]))
                    if at + n == plan.num_steps else None)
        if not history.ignore and (bad.any() or (last_bad is not None and last_bad.any())):
            history.diverged_at = (at + int(np.argmax(bad.reshape(n, -1).any(axis=1))) if bad.any()
                                   else plan.num_steps - 1)
            if history.on_nonfinite == "raise":
                what = "the loss" if bad.any() else "the parameters (after the last update)"
                raise TrainingDiverged(
                    f"{plan.label}: {what} became non-finite at step {history.diverged_at}; training stopped. "
                    "Lower the learning rate, add damping, or check the data for NaNs (and class labels "
                    "for values outside [0, number of classes)).")
            return False
        if history.ignore:
            first = np.where(bad.any(axis=0), at + np.argmax(bad, axis=0), -1).astype(np.int64)
            if last_bad is not None:
                first = np.where((first < 0) & last_bad, plan.num_steps - 1, first)
            prev = history.nonfinite_at
            history.nonfinite_at = first if prev is None else np.where(prev >= 0, prev, first)
            if history.auto:
                _warn_new_divergences(self.step, plan.label, prev, history.nonfinite_at)
        history.losses.append(_block_means(losses, history.block) if history.block > 1 else losses)
        self.state = new_state
        return True

    def final_state(self):
        return self.state if self.plan.mesh is None else unpad_runs(self.state, self.plan.runs)

    def save(self, at: int) -> None:
        s = self.final_state()
        s = s if self.plan.mesh is None else jax.tree.map(to_host, s)
        if is_writer():
            h = self.history
            save_checkpoint(self.plan.checkpoint.path, s, step=at, key=h.key, meta=h.run_meta,
                            history=h.as_dict(h.seconds + time.perf_counter() - self.t0))


def train(step: Callable, state, batches, num_steps: int, *, evaluate: Evaluation | Callable | None = None,
          checkpoint: Checkpointing | str | os.PathLike | None = None, on_nonfinite: str = "auto",
          progress: Progress | str | bool | None = None):
    """Run ``num_steps`` of ``step`` with ``lax.scan`` in chunks, evaluating between chunks (the
    module docstring states the conventions: batches, chunks, compilation cache, sweeps).

    Args:
      step: ``step(state, batch) -> (state, metrics)`` with a scalar ``metrics["loss"]`` (one per run
        for a sweep step, whose runs :func:`itlin_core.on_devices` may split over devices).
      state: initial state (copied: the caller's arrays stay valid).
      batches: a batch source (:func:`itlin_core.minibatches`, ...), a jittable ``i -> batch`` of the
        int32 step index, or a fixed batch (full batch).
      num_steps: total number of steps, at most 2**31 - 1 (``state.step`` is an int32).
      evaluate: an :class:`Evaluation`, or a bare ``fn(state) -> dict`` evaluated at the start and end.
      checkpoint: a :class:`Checkpointing`, or the path of its file.
      on_nonfinite: ``"raise"`` raises :class:`TrainingDiverged` naming the step; ``"stop"`` ends
        training and returns what was recorded before the bad chunk, ``history["diverged_at"]`` set;
        ``"ignore"`` records NaNs. ``"auto"``: ``"raise"`` for one run, ``"ignore"`` for a sweep
        (one loss per run), warning once per run that became non-finite (by ``step.run_labels``).
      progress: a :class:`Progress`, or its mode.

    Returns:
      ``(state, history)``: ``history["loss"]`` one entry per step, or per block of
      ``history["loss_every"]`` steps; ``history["eval_step"]`` the evaluated steps and ``history[k]``
      the evaluation's values; ``history["diverged_at"]`` the first non-finite step or ``None``;
      ``history["seconds"]`` the wall time (summed over resumed calls). With ``on_nonfinite``
      ``"ignore"`` (or ``"auto"`` on a sweep) also ``history["nonfinite_at"]`` (per run, the first
      non-finite step, -1 for none); with a checkpoint, ``history["resumed_from"]``.

    Raises:
      ValueError: bad arguments, or a checkpoint from a different run (structure, key or settings).
      TrainingDiverged: a non-finite loss under ``on_nonfinite="raise"``.

    Examples:
      Three steps that halve the state ``s`` with loss ``s``; each loss is taken before its step's update:

      >>> import itlin_core as ic
      >>> ic.train(lambda s, b: (s / 2, {"loss": s}), 1.0, None, 3, progress="off")[1]["loss"].tolist()
      [1.0, 0.5, 0.25]
    """
    plan = _plan(step, num_steps, evaluate, checkpoint, on_nonfinite, progress)
    source = _as_source(batches)
    state, start, history = _resume(plan, step, state, source)
    if history.done:
        return state, history.result(plan, start)
    runner = _Runner(plan, step, state, source, history, start)
    bar = progress_bar(plan.end - start, plan.label, plan.mode) if plan.end > start else None
    at = start
    try:
        if start == 0:
            history.evaluate(runner.jit_eval, runner.state, 0, runner.cut)
        while at < plan.end:
            n = min(plan.every - at % plan.every, plan.end - at)
            if not runner.advance(at, n):
                break
            at += n
            history.evaluate(runner.jit_eval, runner.state, at, runner.cut)
            if bar is not None:
                bar.update(n)
            if plan.checkpoint is not None and (at % plan.checkpoint.every == 0 or at == plan.end):
                runner.save(at)
        if plan.checkpoint is not None and history.diverged_at is not None:
            runner.save(at)   # so that the run, called again, returns what it recorded
    finally:
        if bar is not None:
            bar.close()
    history.seconds += time.perf_counter() - runner.t0
    return runner.final_state(), history.result(plan, start)


__all__ = ["train", "TrainingDiverged", "RESERVED_KEYS", "CACHED_STEPS"]
