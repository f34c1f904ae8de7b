r"""Iterative linearisation (paper 000, §3, Algorithm 3, eqs. (8)-(9); App. A eqs. (12)-(13)).

Training alternates between two kinds of update:

* every step, the parameters take an optimiser step on the *linearised* model

  .. math:: f^{\mathrm{lin}}_{s}(\theta, x) = f(\theta_s, x) + J(\theta_s, x)(\theta - \theta_s),

* every ``K`` steps (when ``step % K == 0``) the anchor moves, ``theta_s <- theta``,
  which refreshes the features ``J(theta_s, .)`` and with them the empirical NTK.

``K = 1`` is ordinary training (the anchor is always the current parameters, so
the linearised gradient is the true gradient); ``K = None`` or ``math.inf``
never relinearises, which is training the linearised model (the NTK / lazy
regime). Any optax optimiser and any loss ``loss_fn(outputs, targets)`` can be
used; a softmax lives inside the loss, outside the linearisation.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._validate import K_NEVER, check_damping, check_microbatch, check_period
from .linearise import linearise, tree_sub, tree_vdot

PyTree = Any


class ILState(NamedTuple):
    """State of iterative-linearisation training (a pytree, so it can be vmapped).

    Attributes:
      params: current parameters ``theta_t``.
      anchor: the linearisation point ``theta_s`` that the next step uses: the parameters at
        the last multiple of K at or before ``step`` (so right after a relinearisation it equals
        ``params``).
      opt_state: the optax optimiser state.
      step: number of steps taken so far (int32 scalar).
    """

    params: PyTree
    anchor: PyTree
    opt_state: PyTree
    step: jax.Array


def init_il_state(params: PyTree, optimizer: optax.GradientTransformation) -> ILState:
    """Initial state: the anchor is the initial parameters, step 0."""
    return ILState(params=params, anchor=params, opt_state=optimizer.init(params),
                   step=jnp.zeros((), jnp.int32))


def period_as_int(K) -> jax.Array:
    """Relinearisation periods as an int32 array, for ``vmap`` over a sweep of K.

    ``None`` and ``math.inf`` map to a period an int32 step counter never reaches.
    Accepts one value or a sequence.
    """
    if isinstance(K, (list, tuple, np.ndarray)):
        return jnp.asarray([check_period(k) for k in K], dtype=jnp.int32)
    return jnp.asarray(check_period(K), dtype=jnp.int32)


def linearised_objective(apply_fn: Callable, loss_fn: Callable, damping=0.0) -> Callable:
    r"""The loss of the model linearised at an anchor, optionally with a proximal term.

    Returns ``objective(params, anchor, x, y) -> (loss, outputs)`` with

    .. math:: \mathcal L_s(\theta) = \ell\big(f^{\mathrm{lin}}_s(\theta, X), Y\big)
              + \tfrac{\lambda}{2}\|\theta - \theta_s\|^2 .

    With ``ell = 1/2 ||.||^2`` its minimiser is the damped Gauss-Newton step
    (paper 000 eq. (10) and §3.3; the paper writes the objective without the
    factors 1/2, which does not change the minimiser).
    """
    check_damping(damping)
    if callable(damping):
        raise ValueError("damping of a linearised objective must be a number, not a callable.")

    def objective(params, anchor, x, y):
        outputs = linearise(apply_fn, anchor)(params, x)
        loss = loss_fn(outputs, y)
        if not (isinstance(damping, (int, float)) and damping == 0):
            delta = tree_sub(params, anchor)
            loss = loss + 0.5 * damping * tree_vdot(delta, delta)
        return loss, outputs

    return objective


def linearised_value_and_grad(apply_fn: Callable, loss_fn: Callable, damping=0.0, *,
                              microbatch: int | None = None, loss_reduction: str = "mean") -> Callable:
    r"""Value and parameter gradient of :func:`linearised_objective`, computed directly.

    Returns ``vg(params, anchor, x, y) -> (loss, grads)``. With ``f_lin = f_s + J delta`` and
    ``g = d loss / d outputs`` at ``f_lin``, the gradient is ``J^T g + lambda delta``.
    Numerical choice: :func:`jax.linearize` evaluates the network once at the anchor and keeps
    what the tangent map needs; ``J delta`` is that map applied to ``delta``, and ``J^T g`` its
    transpose (:func:`jax.linear_transpose`). This is the arithmetic minimum (one forward, one
    tangent, one backward pass) and measured about 7% faster than reverse-mode differentiation
    through a ``jax.jvp`` for LeNet-50 on CPU (``python -m itlin_core.bench``).

    ``microbatch``: split the batch into chunks of this many examples and accumulate the loss
    and gradient over them with ``lax.scan`` (the batch size must be a multiple of it). Memory
    then grows with the chunk, not the batch, which is what makes full-batch steps on tens of
    thousands of images fit on one GPU (000 Fig. 11). ``loss_reduction`` says how the loss
    combines examples, and so how chunks combine: ``"mean"`` (e.g.
    :func:`itlin_core.softmax_cross_entropy`; the mean of equal-sized chunks' means is the
    batch mean) or ``"sum"`` (e.g. :func:`itlin_core.squared_error`, the papers' summed
    squared error). With the right one the result is the whole batch's, up to rounding. It is
    not for a model whose output for one example depends on the others in the batch
    (BatchNorm with batch statistics): each chunk would be normalised by its own statistics.
    """
    check_damping(damping)
    if callable(damping):
        raise ValueError("damping of a linearised objective must be a number, not a callable.")
    undamped = isinstance(damping, (int, float)) and damping == 0
    microbatch = check_microbatch(microbatch)
    if loss_reduction not in ("mean", "sum"):
        raise ValueError(f"loss_reduction must be 'mean' or 'sum', got {loss_reduction!r}.")

    def loss_and_grad(delta, anchor, x, y):
        f_s, f_jvp = jax.linearize(lambda p: apply_fn(p, x), anchor)
        outputs = jax.tree_util.tree_map(jnp.add, f_s, f_jvp(delta))
        loss, g_out = jax.value_and_grad(lambda o: loss_fn(o, y))(outputs)
        (grads,) = jax.linear_transpose(f_jvp, delta)(g_out)
        return loss, grads

    def chunked(delta, anchor, x, y):
        n = jax.tree_util.tree_leaves(x)[0].shape[0]
        if n % microbatch:
            raise ValueError(f"the batch of {n} examples is not a multiple of microbatch={microbatch}; "
                             "choose a microbatch that divides the batch size.")
        split = lambda a: a.reshape((n // microbatch, microbatch) + a.shape[1:])
        xs, ys = jax.tree_util.tree_map(split, x), jax.tree_util.tree_map(split, y)

        def body(acc, xy):
            loss, grads = loss_and_grad(delta, anchor, *xy)
            return (acc[0] + loss, jax.tree_util.tree_map(jnp.add, acc[1], grads)), None

        first = jax.tree_util.tree_map(lambda a: a[0], (xs, ys))
        shapes = jax.eval_shape(lambda xy: loss_and_grad(delta, anchor, *xy), first)
        zero = jax.tree_util.tree_map(lambda sd: jnp.zeros(sd.shape, sd.dtype), shapes)
        (loss, grads), _ = jax.lax.scan(body, zero, (xs, ys))
        if loss_reduction == "sum":
            return loss, grads
        c = n // microbatch
        return loss / c, jax.tree_util.tree_map(lambda g: g / c, grads)

    def value_and_grad(params, anchor, x, y):
        delta = tree_sub(params, anchor)
        loss, grads = (loss_and_grad if microbatch is None else chunked)(delta, anchor, x, y)
        if not undamped:
            loss = loss + 0.5 * damping * tree_vdot(delta, delta)
            grads = jax.tree_util.tree_map(lambda g, d: g + damping * d, grads, delta)
        return loss, grads

    return value_and_grad


def make_il_step(apply_fn: Callable, loss_fn: Callable, optimizer: optax.GradientTransformation,
                 K, *, damping=0.0, microbatch: int | None = None, loss_reduction: str = "mean") -> Callable:
    r"""One step of iterative linearisation (paper 000 Algorithm 3; eqs. (8)-(9), (12)-(13)).

    The returned ``step(state, (x, y)) -> (state, metrics)`` is pure and jittable:

    1. the linearisation point is ``theta_s``, the parameters at the last step ``s <= t`` with
       ``s % K == 0`` (eq. (9): updating it is the feature-learning step);
    2. the gradient of ``loss_fn(f_lin(params, x), y)`` (plus ``damping/2 ||theta - theta_s||^2``)
       is computed by :func:`linearised_value_and_grad` (no Jacobian is formed) and passed to
       ``optimizer`` (eq. (8) for plain SGD).

    Args:
      apply_fn: ``apply_fn(params, x) -> outputs``.
      loss_fn: ``loss_fn(outputs, targets) -> scalar`` (e.g. :func:`itlin_core.squared_error`).
      optimizer: any optax ``GradientTransformation``.
      K: relinearisation period: a positive integer, ``None``/``math.inf`` (never),
         or an int32 array (inside ``vmap`` over a sweep, see :func:`period_as_int`).
      damping: optional proximal weight ``lambda`` (000 §4.3, Fig. 9 bottom).
      microbatch, loss_reduction: accumulate the gradient over chunks of this many examples of
        a ``"mean"`` or ``"sum"`` loss (memory; see :func:`linearised_value_and_grad`);
        ``None`` takes the whole batch at once.

    Returns:
      ``step``; ``metrics`` holds ``loss`` (the proxy's loss before the update, which is the
      network's loss on steps that relinearise) and ``relinearised`` (bool: this step's
      features were refreshed, ``t % K == 0``).

    Raises:
      ValueError: K is not a positive whole number / None / inf, or damping is negative.
    """
    period = check_period(K)
    value_and_grad = linearised_value_and_grad(apply_fn, loss_fn, damping, microbatch=microbatch,
                                               loss_reduction=loss_reduction)

    def step(state: ILState, batch):
        x, y = batch
        # state.anchor is already the linearisation point of this step (see ILState).
        loss, grads = value_and_grad(state.params, state.anchor, x, y)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        # Relinearise for the next step when it is a multiple of K (eq. (9)). Selecting the
        # anchor here, after the update, rather than before the linearisation at the start of
        # the step is the same algorithm and measured ~20% faster for LeNet-50 on CPU.
        relin_next = ((state.step + 1) % period) == 0
        anchor = jax.tree_util.tree_map(lambda p, a: jnp.where(relin_next, p, a), params, state.anchor)
        new_state = ILState(params=params, anchor=anchor, opt_state=opt_state, step=state.step + 1)
        return new_state, {"loss": loss, "relinearised": (state.step % period) == 0}

    return step


def make_il_sweep_step(apply_fn: Callable, loss_fn: Callable, optimizer: optax.GradientTransformation,
                       Ks, *, damping=0.0, microbatch: int | None = None,
                       loss_reduction: str = "mean") -> tuple[Callable, jax.Array]:
    """A step that advances one IL run per K value at once (one compiled program).

    ``damping`` is one proximal weight for all runs, or a sequence with one per K (run ``i``
    uses ``Ks[i]`` and ``damping[i]``; 000 Fig. 9 bottom sweeps lambda at a fixed K this way).
    ``microbatch`` and ``loss_reduction`` as for :func:`make_il_step`.

    Returns ``(step, periods)``: ``step(states, batch)`` expects ``states`` stacked along a
    leading axis of length ``len(Ks)`` (see :func:`replicate`) and the same batch for all runs.

    Raises:
      ValueError: a bad K or damping, or a damping sequence whose length is not ``len(Ks)``.
    """
    periods = period_as_int(list(Ks))
    if isinstance(damping, (list, tuple)) or np.ndim(damping) == 1:
        lams = [check_damping(float(lam)) for lam in damping]
        if len(lams) != len(periods):
            raise ValueError(f"damping has {len(lams)} values but there are {len(periods)} values of K; "
                             "give one damping per K, or a single number for all runs.")
        lams = jnp.asarray(lams, jnp.float32)
    else:
        lams = None
        check_damping(damping)
    # validates microbatch and loss_reduction now rather than at the first step
    linearised_value_and_grad(apply_fn, loss_fn, microbatch=microbatch, loss_reduction=loss_reduction)

    def one(state, batch, period, lam):
        lam = damping if lam is None else lam
        return make_il_step(apply_fn, loss_fn, optimizer, period, damping=lam, microbatch=microbatch,
                            loss_reduction=loss_reduction)(state, batch)

    vstep = jax.vmap(one, in_axes=(0, None, 0, None if lams is None else 0))
    return (lambda states, batch: vstep(states, batch, periods, lams)), periods


def replicate(tree: PyTree, n: int) -> PyTree:
    """Stack ``n`` copies of a pytree along a new leading axis (for vmapped sweeps)."""
    return jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (n,) + jnp.shape(a)), tree)


def make_il_eval(apply_fn: Callable, datasets: Mapping[str, tuple], metrics: Mapping[str, Callable]) -> Callable:
    """Evaluation of both the network and its current linearised proxy.

    Returns ``eval_fn(state) -> dict`` with keys ``f"{data}_{metric}_network"`` (the
    network ``f(theta_t, .)``) and ``f"{data}_{metric}_proxy"`` (the linearised model
    ``f_lin_s(theta_t, .)`` that IL is actually training, linearised at ``state.anchor``; right
    after a relinearisation it equals the network); paper 000 Fig. 2 plots both.
    """

    def eval_fn(state: ILState):
        out = {}
        proxy = linearise(apply_fn, state.anchor)
        for dname, (x, y) in datasets.items():
            f_net = apply_fn(state.params, x)
            f_lin = proxy(state.params, x)
            for mname, m in metrics.items():
                out[f"{dname}_{mname}_network"] = m(f_net, y)
                out[f"{dname}_{mname}_proxy"] = m(f_lin, y)
        return out

    return eval_fn


# --------------------------------------------------------------------------- training loop

class TrainingDiverged(FloatingPointError):
    """The training loss became NaN or infinite."""


def full_batch(x, y) -> Callable:
    """A batch function that returns the whole data set at every step."""
    return lambda i: (x, y)


def minibatches(key, x, y, batch_size: int) -> Callable:
    """A jittable batch function ``i -> (x_b, y_b)``: each epoch is a fresh random
    permutation (derived from ``key`` and the epoch number); a last incomplete batch
    of an epoch is dropped so every batch has ``batch_size`` examples."""
    n = x.shape[0]
    if not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must be between 1 and the number of examples ({n}), got {batch_size}.")
    per_epoch = n // batch_size

    def batch(i):
        epoch, j = i // per_epoch, i % per_epoch
        perm = jax.random.permutation(jax.random.fold_in(key, epoch), n)
        idx = jax.lax.dynamic_slice_in_dim(perm, j * batch_size, batch_size)
        return x[idx], y[idx]

    return batch


def _progress_bar(total: int, desc: str, mode: str | None):
    mode = (mode or os.environ.get("ITLIN_PROGRESS", "auto")).lower()
    if mode in ("off", "0", "false", "none"):
        return None
    if mode == "text":
        from tqdm.std import tqdm
        return tqdm(total=total, desc=desc, file=sys.stderr, mininterval=2.0)
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc)


def _first_nonfinite(chunk_losses: np.ndarray, start: int):
    """Index of the first step with a non-finite loss in any run, or None."""
    bad = ~np.isfinite(chunk_losses)
    if not bad.any():
        return None
    first = int(np.argmax(bad.reshape(bad.shape[0], -1).any(axis=1)))
    return start + first


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


def train(step: Callable, state, batches, num_steps: int, *, eval_fn: Callable | None = None,
          eval_every: int | None = None, progress: str | bool | None = None, desc: str = "training",
          on_nonfinite: str = "raise", start_step: int = 0, eval_at_start: bool = True,
          on_chunk: Callable | None = None, loss_every: int | None = None):
    """Run ``num_steps`` of ``step`` with ``lax.scan`` in chunks, evaluating between chunks.

    Args:
      step: ``step(state, batch) -> (state, metrics)`` with a scalar ``metrics["loss"]``
        (or one loss per run when the step is vmapped over a sweep).
      state: initial state.
      batches: a batch function ``i -> batch`` (jittable in the int32 step index ``i``,
        e.g. :func:`full_batch`, :func:`minibatches`) or a fixed batch (full batch).
      num_steps: total number of steps.
      eval_fn: ``eval_fn(state) -> dict`` of arrays, evaluated at step 0, every
        ``eval_every`` steps and at the end.
      eval_every: chunk length (default: ``num_steps``, i.e. one chunk).
      progress: ``"auto"`` (notebook widget or terminal), ``"text"`` (stderr), ``"off"``;
        default from the ``ITLIN_PROGRESS`` environment variable.
      on_nonfinite: ``"raise"`` (default) raises :class:`TrainingDiverged` naming the step;
        ``"stop"`` ends training and returns what was recorded before the bad chunk, with
        ``history["diverged_at"]`` set; ``"ignore"`` records NaNs (the caller masks them).
      start_step: the index of the first step, for continuing a run (used by
        :func:`itlin_core.train_with_checkpoints`): ``batches`` is called with
        ``start_step, ..., start_step + num_steps - 1`` and evaluation steps are counted from it.
        Chunks end at multiples of ``eval_every`` counted from step 0, so a continued run takes
        exactly the chunks (and evaluations) of an uninterrupted one.
      eval_at_start: evaluate before the first step (a continued run has already done so).
      on_chunk: ``on_chunk(state, step, losses, evals, nonfinite_at)`` called after every
        completed chunk with the state, the index of the next step (``start_step`` plus the
        steps done), the chunk's recorded losses (per step, or block means with
        ``loss_every``), this evaluation's values (``None`` without ``eval_fn``) and, with
        ``on_nonfinite="ignore"``, ``history["nonfinite_at"]`` so far (else ``None``); used for
        checkpointing. An exception it raises stops training.
      loss_every: record the loss as its mean over blocks of ``loss_every`` steps (blocks
        start at multiples of ``loss_every`` counted from step 0; a run's last block may be
        shorter) instead of every step. Long runs need this: 6e7 steps of two runs' float32
        losses are 480 MB, kept in memory and written into every checkpoint. ``eval_every``
        (when given) and ``start_step`` must be multiples of it. Divergence is still located
        to the exact step, from the per-step losses of each chunk, before they are averaged.

    Returns:
      ``(state, history)``: ``history["loss"]`` has one entry per step (leading axis), or one
      per block of ``loss_every`` steps, and ``history["loss_every"]`` says which (1 or
      ``loss_every``); ``history["eval_step"]`` the steps at which ``eval_fn`` ran and
      ``history[k]`` its values, ``history["diverged_at"]`` the first non-finite step or
      ``None``, ``history["seconds"]`` the wall time of training. With
      ``on_nonfinite="ignore"`` also ``history["nonfinite_at"]``: for each entry of the loss
      (one per run for a sweep), the first step whose loss was non-finite, ``-1`` for none.
    """
    if on_nonfinite not in ("raise", "stop", "ignore"):
        raise ValueError(f"on_nonfinite must be 'raise', 'stop' or 'ignore', got {on_nonfinite!r}.")
    if int(num_steps) != num_steps or num_steps < 0:
        raise ValueError(f"num_steps must be a non-negative integer, got {num_steps!r}.")
    num_steps = int(num_steps)
    if int(start_step) != start_step or start_step < 0:
        raise ValueError(f"start_step must be a non-negative integer, got {start_step!r}.")
    start_step = int(start_step)
    aligned = eval_every is not None  # chunks end at multiples of eval_every counted from step 0
    eval_every = num_steps if eval_every is None else int(eval_every)
    if num_steps > 0 and eval_every < 1:
        raise ValueError(f"eval_every must be a positive integer, got {eval_every!r}.")
    if loss_every is not None:
        if int(loss_every) != loss_every or loss_every < 1:
            raise ValueError(f"loss_every must be a positive integer, got {loss_every!r}.")
        loss_every = int(loss_every)
        if (aligned and eval_every % loss_every) or start_step % loss_every:
            raise ValueError(f"eval_every ({eval_every}) and start_step ({start_step}) must be multiples of "
                             f"loss_every ({loss_every}), so that every chunk ends where a loss block does.")
    block = loss_every or 1
    batch_fn = batches if callable(batches) else (lambda i, b=batches: b)
    if progress is True:
        progress = "auto"
    elif progress is False:
        progress = "off"

    @jax.jit
    def run_chunk(state, idx):
        def body(s, i):
            return step(s, batch_fn(i))
        return jax.lax.scan(body, state, idx)

    jit_eval = jax.jit(eval_fn) if eval_fn is not None else None
    history: dict[str, Any] = {"eval_step": [], "diverged_at": None}
    evals: dict[str, list] = {}
    losses = []
    nonfinite_at = None  # per loss entry, under on_nonfinite="ignore"

    def record_eval(s, at):
        if jit_eval is None:
            return None
        history["eval_step"].append(at)
        values = {k: np.asarray(v) for k, v in jit_eval(s).items()}
        for k, v in values.items():
            evals.setdefault(k, []).append(v)
        return values

    t0 = time.perf_counter()
    if eval_at_start:
        record_eval(state, start_step)
    bar = _progress_bar(num_steps, desc, progress) if num_steps else None
    done = 0
    try:
        while done < num_steps:
            at = start_step + done
            n = min(eval_every - at % eval_every if aligned else eval_every, num_steps - done)
            idx = jnp.arange(at, at + n, dtype=jnp.int32)
            new_state, metrics = run_chunk(state, idx)
            chunk_loss = np.asarray(metrics["loss"])
            bad = _first_nonfinite(chunk_loss, at) if on_nonfinite != "ignore" else None
            if bad is not None:
                history["diverged_at"] = bad
                if on_nonfinite == "raise":
                    raise TrainingDiverged(
                        f"{desc}: the loss became non-finite at step {bad}; training stopped. "
                        "Lower the learning rate, add damping, or check the data for NaNs.")
                break
            if on_nonfinite == "ignore":
                bad = ~np.isfinite(chunk_loss)
                first = np.where(bad.any(axis=0), at + np.argmax(bad, axis=0), -1).astype(np.int64)
                nonfinite_at = first if nonfinite_at is None else np.where(nonfinite_at >= 0, nonfinite_at, first)
            if block > 1:
                chunk_loss = _block_means(chunk_loss, block)
            state = new_state
            losses.append(chunk_loss)
            done += n
            values = record_eval(state, start_step + done)
            if bar is not None:
                bar.update(n)
            if on_chunk is not None:
                on_chunk(state, start_step + done, chunk_loss, values, nonfinite_at)
    finally:
        if bar is not None:
            bar.close()
    history["loss"] = np.concatenate(losses) if losses else np.zeros((0,))
    history["loss_every"] = block
    if on_nonfinite == "ignore":
        history["nonfinite_at"] = nonfinite_at
    history["eval_step"] = np.asarray(history["eval_step"])
    for k, v in evals.items():
        history[k] = np.stack(v)
    history["seconds"] = time.perf_counter() - t0
    return state, history


__all__ = ["ILState", "init_il_state", "make_il_step", "make_il_sweep_step", "period_as_int",
           "replicate", "linearised_objective", "linearised_value_and_grad", "make_il_eval", "train", "full_batch",
           "minibatches", "TrainingDiverged", "K_NEVER"]
