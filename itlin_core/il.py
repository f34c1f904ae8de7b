r"""Iterative linearisation as an ``(init, step)`` pair, the shape of optax's
``GradientTransformation``: ``state = il.init(params)``, then ``state, metrics = il.step(state,
batch)`` as often as wanted (or ``ic.train(il.step, il.init(params), batches, num_steps)``).

It bundles what a run needs from :mod:`itlin_core.iterative` so that a reader writes one call:
:func:`~itlin_core.make_il_step` (or :func:`~itlin_core.make_il_sweep_step` for several periods
at once) for the step, and :func:`~itlin_core.init_il_state` (stacked with
:func:`~itlin_core.replicate` for a sweep) for the state. The state is an
:class:`~itlin_core.ILState` NamedTuple, one per run or stacked along a leading run axis.

Conventions: a single period or rule (an integer, ``None`` or ``math.inf`` for never, a
:class:`~itlin_core.RelinRule`) gives one run; a list, tuple or 1-D array of them gives a sweep,
one run per entry, trained side by side in one compiled program.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np
import optax

from .iterative import init_il_state, make_il_step, make_il_sweep_step, replicate
from .relinearise import RelinRule, as_rule


class IterativeLinearisation(NamedTuple):
    """An IL run (or sweep of runs) as an ``(init, step)`` pair.

    Attributes:
      init: ``init(params) -> state``: the :class:`~itlin_core.ILState` at step 0 (for a sweep,
        one per run, stacked along a leading axis; every run starts from ``params``).
      step: ``step(state, batch) -> (state, metrics)``, pure and jittable (see
        :func:`~itlin_core.make_il_step` for the metrics).
      rules: the relinearisation rule, or for a sweep the stacked rules (``rules.period`` the periods).
      runs: ``None`` for one run, else the number of runs of the sweep.
    """
    init: Callable
    step: Callable
    rules: RelinRule
    runs: int | None


def iterative_linearisation(apply_fn: Callable, loss_fn: Callable, optimizer: optax.GradientTransformation,
                            K: Any, **options) -> IterativeLinearisation:
    r"""Iterative linearisation (Goldwaser and Ge, Algorithm 3) of ``apply_fn`` under ``loss_fn``
    and ``optimizer``, refreshing the features by ``K``, as an ``(init, step)`` pair.

    Args:
      apply_fn: ``apply_fn(params, x) -> outputs``.
      loss_fn: ``loss_fn(outputs, targets) -> scalar``; a softmax belongs inside it, outside the
        linearisation.
      optimizer: any optax ``GradientTransformation``.
      K: a period, ``None`` (never) or a rule for one run; a list, tuple or 1-D array of them for
        a sweep (one run each).
      **options: ``damping`` (one weight, or one per run of a sweep), ``microbatch``,
        ``loss_reduction``, ``drift_every``, ``reset_optimizer``, as for
        :func:`~itlin_core.make_il_step`.

    Returns:
      An :class:`IterativeLinearisation`.

    Raises:
      ValueError: a bad period, rule or option (the messages of :func:`~itlin_core.make_il_step`).
      TypeError: an option that the step does not take.

    Examples:
      One step of gradient descent (``K = 1``) on ``1/2 (theta x - y)^2`` from ``theta = 0``
      with ``x = 2``, ``y = 1`` and learning rate 0.1 moves ``theta`` by ``0.2``; a sweep
      trains ``K = 1`` and ``K = None`` side by side:

      >>> import jax.numpy as jnp, optax
      >>> import itlin_core as ic
      >>> batch = (jnp.array([2.0]), jnp.array([1.0]))
      >>> gd = ic.iterative_linearisation(lambda th, x: th * x, ic.squared_error, optax.sgd(0.1), K=1)
      >>> state, metrics = gd.step(gd.init(jnp.zeros(())), batch)
      >>> round(float(state.params), 6), float(metrics["loss"])
      (0.2, 0.5)
      >>> sweep = ic.iterative_linearisation(lambda th, x: th * x, ic.squared_error, optax.sgd(0.1), [1, None])
      >>> states, _ = ic.train(sweep.step, sweep.init(jnp.zeros(())), batch, 2, progress="off")
      >>> sweep.runs, states.updates.tolist()
      (2, [2, 1])
    """
    known = {"damping", "microbatch", "loss_reduction", "drift_every", "reset_optimizer"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"iterative_linearisation got unknown option(s) {unknown}; it takes "
                        f"{', '.join(sorted(known))}.")
    # a RelinRule is a NamedTuple, hence a tuple: one rule, not a sweep
    if (isinstance(K, (list, tuple)) and not isinstance(K, RelinRule)) or (isinstance(K, np.ndarray) and K.ndim == 1):
        step, rules = make_il_sweep_step(apply_fn, loss_fn, optimizer, K, **options)
        runs = len(step.run_labels)
        return IterativeLinearisation(lambda params: replicate(init_il_state(params, optimizer), runs),
                                      step, rules, runs)
    if isinstance(options.get("damping"), (list, tuple)) or np.ndim(options.get("damping", 0.0)) == 1:
        raise ValueError("damping: a sequence (one weight per run) needs a sweep; pass K as a list of periods "
                         "of the same length, or one number for one run.")
    step = make_il_step(apply_fn, loss_fn, optimizer, K, **options)
    return IterativeLinearisation(lambda params: init_il_state(params, optimizer), step, as_rule(K), None)


__all__ = ["IterativeLinearisation", "iterative_linearisation"]
