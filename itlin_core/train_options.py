"""What :func:`itlin_core.train` is told besides the step, the state, the batches and the number of
steps, in three small option types (NamedTuples, as optax states are): :class:`Evaluation` (what
to evaluate between chunks of steps, and how to record the loss), :class:`Checkpointing` (where a
run is saved and resumed from) and :class:`Progress` (its progress bar). :func:`_plan` checks them
once, before anything is traced, and says which argument is wrong.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

from ._progress import progress_mode
from ._validate import K_NEVER, check_whole
from .sharding import resolve_mesh


class Evaluation(NamedTuple):
    """What :func:`train` evaluates between its chunks of steps, and how it records the loss.

    Attributes:
      fn: ``fn(state) -> dict`` of arrays (``fn(state, data)`` when ``data`` is given), evaluated at
        step 0, every ``every`` steps and at the end; its keys may not be those of
        :data:`RESERVED_KEYS`. ``None``: no evaluation (``every`` still sets the chunk length).
      every: the chunk length, in steps (default: the whole run, one chunk).
      loss_every: record the loss as its mean over blocks of ``loss_every`` steps (from step 0; the
        last may be shorter), not every step: 6e7 steps of two runs' losses are 480 MB in every
        checkpoint. ``every`` must be a multiple of it. Divergence is still located to the exact
        step, from each chunk's per-step losses.
      data: a pytree of arrays the evaluation reads (test images, a probe set), handed to ``fn`` as
        its second argument, so that the compiled evaluation takes them as inputs. Arrays a
        function merely closes over become constants of its compiled program, and XLA then tries
        to fold them (it computes a convolution of constant images while compiling): compiling
        gets slower and the program larger. ``None``: ``fn(state)``.

    Examples:
      The state counts steps; it is evaluated at step 0, after every 2 steps and at the end:

      >>> import itlin_core as ic
      >>> ev = ic.Evaluation(lambda s: {"count": s}, every=2)
      >>> _, hist = ic.train(lambda s, b: (s + 1, {"loss": 0.0 * s}), 0.0, None, 5, evaluate=ev, progress="off")
      >>> hist["eval_step"].tolist(), hist["count"].tolist()
      ([0, 2, 4, 5], [0.0, 2.0, 4.0, 5.0])
    """
    fn: Callable | None = None
    every: int | None = None
    loss_every: int | None = None
    data: Any = None


class Checkpointing(NamedTuple):
    """Where and how often :func:`train` saves a checkpoint (:func:`itlin_core.save_checkpoint`),
    from which a stopped run resumes.

    When the file exists, :func:`train` resumes from it instead of starting from the state it is
    given. An interrupted-then-resumed run reproduces the uninterrupted run bit for bit, history
    included (on a GPU this also needs XLA's deterministic kernels,
    ``XLA_FLAGS=--xla_gpu_deterministic_ops=true``). A run that is finished, or stopped by a
    divergence, returns its recorded result without training.

    Attributes:
      path: the ``.npz`` file, written every ``every`` steps and at the end.
      every: steps between checkpoints, a multiple of the evaluation chunk (default: every chunk).
      key: the PRNG key the run's data order (and any other randomness) derives from; it is saved,
        and resuming with another key raises ValueError.
      meta: JSON-able settings that must match on resume (e.g. the preset); the number of steps,
        the chunk, checkpoint and loss-block lengths, the JAX version and digests of the step's
        program and of the data always must (:mod:`itlin_core._fingerprint`).
      stop_at: stop (after checkpointing) once this many steps are done, e.g. to fit a session;
        the next call continues from there. A multiple of the evaluation chunk.

    Examples:
      A run stopped at step 2 and called again continues to the end:

      >>> import pathlib, tempfile
      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> step, s0, every = (lambda s, b: (s + 1, {"loss": 0.0 * s})), jnp.zeros(()), ic.Evaluation(every=2)
      >>> with tempfile.TemporaryDirectory() as d:
      ...     ck = ic.Checkpointing(pathlib.Path(d) / "run.npz", stop_at=2)
      ...     first = ic.train(step, s0, None, 4, evaluate=every, checkpoint=ck, progress="off")
      ...     final = ic.train(step, s0, None, 4, evaluate=every, checkpoint=ck._replace(stop_at=None), progress="off")
      >>> float(first[0]), float(final[0]), final[1]["resumed_from"]
      (2.0, 4.0, 2)
    """
    path: Any
    every: int | None = None
    key: Any = None
    meta: Mapping | None = None
    stop_at: int | None = None


class Progress(NamedTuple):
    """The progress bar of :func:`train`: ``mode`` ``"auto"`` (notebook widget or terminal),
    ``"text"`` (stderr) or ``"off"`` (default: the ``ITLIN_PROGRESS`` environment variable), and
    ``label``, which also starts a divergence message.

    Examples:
      >>> import itlin_core as ic
      >>> try: ic.train(lambda s, b: (s - 1, {"loss": 1 / s}), 1.0, None, 3, progress=ic.Progress("off", "demo"))
      ... except ic.TrainingDiverged as e: print(str(e).split(":")[0])
      demo
    """
    mode: str | bool | None = None
    label: str = "training"


class _Plan(NamedTuple):
    """:func:`train`'s arguments, checked: the chunk, loss-block and checkpoint lengths, where this
    call ends, the progress bar and the devices of a sweep step."""
    num_steps: int
    end: int
    every: int
    block: int
    eval_fn: Callable | None
    eval_data: Any
    checkpoint: Checkpointing | None
    on_nonfinite: str
    label: str
    mode: Any
    mesh: Any
    runs: int | None


def _plan(step, num_steps, evaluate, checkpoint, on_nonfinite, progress) -> _Plan:
    if on_nonfinite not in ("auto", "raise", "stop", "ignore"):
        raise ValueError(f"on_nonfinite must be 'auto', 'raise', 'stop' or 'ignore', got {on_nonfinite!r}.")
    if evaluate is not None and not isinstance(evaluate, Evaluation):
        if not callable(evaluate):
            raise TypeError(f"evaluate must be an ic.Evaluation or a function state -> dict, got "
                            f"{type(evaluate).__name__}.")
        evaluate = Evaluation(evaluate)
    evaluate = evaluate or Evaluation()
    if evaluate.fn is not None and not callable(evaluate.fn):
        raise TypeError(f"Evaluation.fn must be a function state -> dict, got {type(evaluate.fn).__name__}.")
    if evaluate.data is not None and evaluate.fn is None:
        raise ValueError("Evaluation.data is given without Evaluation.fn: the data are for fn(state, data).")
    num_steps = check_whole("num_steps", num_steps, 0, K_NEVER, " (the step index is an int32)")
    every = check_whole("Evaluation.every", evaluate.every, 1) if evaluate.every is not None else max(num_steps, 1)
    block = 1 if evaluate.loss_every is None else check_whole("Evaluation.loss_every", evaluate.loss_every, 1)
    if evaluate.every is not None and every % block:
        raise ValueError(f"Evaluation.every ({every}) must be a multiple of loss_every ({block}), "
                         "so that every chunk ends where a loss block does.")
    if checkpoint is not None:
        if isinstance(checkpoint, (str, os.PathLike)):
            checkpoint = Checkpointing(checkpoint)
        if not isinstance(checkpoint, Checkpointing):
            raise TypeError(f"checkpoint must be an ic.Checkpointing or the path of its file, got "
                            f"{type(checkpoint).__name__}.")
        ck_every = every if checkpoint.every is None else check_whole("Checkpointing.every", checkpoint.every, 1)
        if ck_every % every:
            raise ValueError(f"Checkpointing.every must be a positive multiple of the evaluation chunk ({every}), "
                             f"got {ck_every}: checkpoints are taken between evaluation chunks.")
        if checkpoint.stop_at is not None and check_whole("Checkpointing.stop_at", checkpoint.stop_at, 0) % every:
            raise ValueError(f"Checkpointing.stop_at must be a non-negative multiple of the evaluation chunk "
                             f"({every}), got {checkpoint.stop_at!r}: a run stops only where the uninterrupted "
                             "run evaluates.")
        checkpoint = checkpoint._replace(path=Path(checkpoint.path), every=ck_every)
    if progress is None or isinstance(progress, (str, bool)):
        progress = Progress(progress)
    if not isinstance(progress, Progress):
        raise TypeError(f"progress must be an ic.Progress or a mode ('auto', 'text', 'off'), got "
                        f"{type(progress).__name__}.")
    progress_mode(progress.mode)   # a bad mode is refused before anything runs
    stop_at = None if checkpoint is None else checkpoint.stop_at
    runs, mesh = getattr(step, "runs", None), resolve_mesh(getattr(step, "mesh", "auto"))
    if runs is None or not callable(getattr(step, "with_runs", None)):
        mesh = None
    return _Plan(num_steps, num_steps if stop_at is None else min(int(stop_at), num_steps), every, block,
                 evaluate.fn, evaluate.data, checkpoint, on_nonfinite, str(progress.label), progress.mode, mesh, runs)


__all__ = ["Evaluation", "Checkpointing", "Progress"]
