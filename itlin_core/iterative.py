r"""Iterative linearisation (Goldwaser and Ge, §3, Algorithm 3, eqs. (8)-(9); App. A eqs. (12)-(13)).

Training alternates between two kinds of update:

* every step, the parameters take an optimiser step on the *linearised* model

  .. math:: f^{\mathrm{lin}}_{s}(\theta, x) = f(\theta_s, x) + J(\theta_s, x)(\theta - \theta_s),

* every ``K`` steps (when ``step % K == 0``) the anchor moves, ``theta_s <- theta``,
  which refreshes the features ``J(theta_s, .)`` and with them the empirical NTK. Instead of a
  fixed ``K``, a rule of :mod:`itlin_core.relinearise` (geometric periods, or a refresh when the
  proxy has drifted from the network) can decide, inside the compiled step.

Conventions: ``K = 1`` is ordinary training (the anchor is always the current parameters, so
the linearised gradient is the true gradient); ``K = None`` or ``math.inf`` never
relinearises, which is training the linearised model (the NTK / lazy regime). Any optax
optimiser and any loss ``loss_fn(outputs, targets) -> scalar`` can be used; a softmax lives
inside the loss, outside the linearisation (Goldwaser and Ge, §3 and App. A). State is an
:class:`ILState` pytree, so a sweep over K (or damping) is one ``vmap`` over stacked states.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._validate import K_NEVER, check_damping, check_period, check_whole
from .linearise import _value_grad, linearise
from .relinearise import RelinRule, as_rule, drift_ratio, relinearise_next, stack_rules, uses_drift

PyTree = Any


class ILState(NamedTuple):
    """State of iterative-linearisation training (a pytree, so it can be vmapped).

    Attributes:
      params: current parameters ``theta_t``.
      anchor: the linearisation point ``theta_s`` that the next step uses: the parameters at
        the last relinearisation at or before ``step`` (so right after one it equals ``params``).
      opt_state: the optax optimiser state.
      step: number of steps taken so far (int32 scalar).
      last_relin: the step at which the current anchor was set (int32; 0 at the start).
      updates: number of linearisations the steps taken so far have used (int32): the initial one
        and every refresh since, so ``T`` steps of gradient descent used ``T`` and the linearised
        model (``K = inf``) used 1.

    Examples:
      ``updates`` counts linearisations: two steps of gradient descent (``K = 1``) use two and
      its anchor follows the parameters; two steps of the linearised model (``K = None``) use one
      and its anchor stays at the start:

      >>> import jax.numpy as jnp, optax
      >>> import itlin_core as ic
      >>> opt, f = optax.sgd(0.1), lambda th, x: jnp.sin(th * x)
      >>> for K in (1, None):
      ...     step, state = ic.make_il_step(f, ic.squared_error, opt, K), ic.init_il_state(jnp.zeros(()), opt)
      ...     for _ in range(2):
      ...         state, _ = step(state, (jnp.array([2.0]), jnp.array([1.0])))
      ...     print(K, int(state.updates), bool(state.anchor == state.params), round(float(state.anchor), 4))
      1 2 True 0.3125
      None 1 False 0.0
    """

    params: PyTree
    anchor: PyTree
    opt_state: PyTree
    step: jax.Array
    last_relin: jax.Array
    updates: jax.Array


def init_il_state(params: PyTree, optimizer: optax.GradientTransformation) -> ILState:
    """Initial state: the anchor is the initial parameters, step 0. An ``optimizer`` without
    ``init`` and ``update`` (not an optax transformation) raises a TypeError.

    Examples:
      The anchor is the initial parameters and the counters start at 0:

      >>> import jax.numpy as jnp, optax
      >>> import itlin_core as ic
      >>> state = ic.init_il_state(jnp.array([1.0, 2.0]), optax.sgd(0.1))
      >>> state.anchor.tolist(), int(state.step), int(state.last_relin), int(state.updates)
      ([1.0, 2.0], 0, 0, 0)
    """
    if not (callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))):
        raise TypeError(f"optimizer must be an optax gradient transformation (e.g. optax.sgd(0.1)), got "
                        f"{optimizer!r} ({type(optimizer).__name__}).")
    zero = jnp.zeros((), jnp.int32)
    return ILState(params=params, anchor=params, opt_state=optimizer.init(params), step=zero,
                   last_relin=zero, updates=zero)


def period_as_int(K) -> jax.Array:
    """Relinearisation periods as an int32 array, for ``vmap`` over a sweep of K.

    ``None`` and ``math.inf`` map to a period an int32 step counter never reaches.
    Accepts one value or a sequence.

    Examples:
      ``None`` and ``math.inf`` both become the largest int32, a step never reached:

      >>> import math
      >>> import itlin_core as ic
      >>> ic.period_as_int([1, 30, None, math.inf]).tolist()
      [1, 30, 2147483647, 2147483647]
    """
    if isinstance(K, (list, tuple, np.ndarray)):
        return jnp.asarray([check_period(k) for k in K], dtype=jnp.int32)
    return jnp.asarray(check_period(K), dtype=jnp.int32)


def _check_drift_every(drift_every):
    if isinstance(drift_every, bool) or not isinstance(drift_every, int) or drift_every < 1:
        raise ValueError(f"drift_every (measure the drift at every drift_every-th step) must be a positive "
                         f"integer, got {drift_every!r}.")
    return drift_every


def _check_flag(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}.")
    return bool(value)


def _il_update(value_and_grad, optimizer, drift: bool, reset_optimizer: bool = False):
    """The IL update for one run under ``rule``; ``check`` says whether this step measures the drift.
    With ``reset_optimizer`` the optimiser state starts afresh (``optimizer.init``) whenever the
    anchor moves, so each linearisation is solved by a fresh optimiser."""

    def update(state: ILState, batch, rule: RelinRule, check):
        x, y = batch
        # state.anchor is already the linearisation point of this step (see ILState).
        loss, grads, norms = value_and_grad(state.params, state.anchor, x, y, check)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        relin_now = state.step == state.last_relin          # this step used fresh features
        n_used = state.updates + relin_now.astype(jnp.int32)
        d = drift_ratio(*norms) if drift else jnp.nan
        # Decide here, after the update, whether the next step relinearises, and move the anchor
        # now (eq. (9)); the same algorithm as re-anchoring at the start of the next step, and
        # measured ~20% faster for LeNet-50 on CPU.
        relin_next = relinearise_next(rule, state.step, state.last_relin, n_used - 1, d)
        anchor = optax.tree_utils.tree_where(relin_next, params, state.anchor)
        if reset_optimizer:
            opt_state = optax.tree_utils.tree_where(relin_next, optimizer.init(params), opt_state)
        new_state = ILState(params=params, anchor=anchor, opt_state=opt_state, step=state.step + 1,
                            last_relin=jnp.where(relin_next, state.step + 1, state.last_relin), updates=n_used)
        metrics = {"loss": loss, "relinearised": relin_now}
        if drift:
            metrics["drift"] = d
        return new_state, metrics

    return update


def make_il_step(apply_fn: Callable, loss_fn: Callable, optimizer: optax.GradientTransformation,
                 K, *, damping=0.0, microbatch: int | None = None, loss_reduction: str = "mean",
                 drift_every: int = 1, reset_optimizer: bool = False) -> Callable:
    r"""One step of iterative linearisation (Goldwaser and Ge, Algorithm 3; eqs. (8)-(9), (12)-(13)).

    The returned ``step(state, (x, y)) -> (state, metrics)`` is pure and jittable:

    1. the linearisation point is ``theta_s``, the parameters at the last relinearisation
       (for a period K, the last step ``s <= t`` with ``s % K == 0``; eq. (9): updating it is the
       feature-learning step);
    2. the gradient of ``loss_fn(f_lin(params, x), y)`` (plus ``damping/2 ||theta - theta_s||^2``)
       is computed by :func:`linearised_value_and_grad` (no Jacobian is formed) and passed to
       ``optimizer`` (eq. (8) for plain SGD);
    3. the rule decides whether the next step relinearises (:mod:`itlin_core.relinearise`).

    Args:
      apply_fn: ``apply_fn(params, x) -> outputs``.
      loss_fn: ``loss_fn(outputs, targets) -> scalar`` (e.g. :func:`itlin_core.squared_error`).
      optimizer: any optax ``GradientTransformation``.
      K: when to relinearise: a positive integer period, ``None``/``math.inf`` (never), an int32
         array (inside ``vmap`` over a sweep, see :func:`period_as_int`), or a rule
         (:func:`itlin_core.every`, :func:`itlin_core.geometric`, :func:`itlin_core.on_drift`).
      damping: optional proximal weight ``lambda`` (Goldwaser and Ge, §4.3, Fig. 9 bottom).
      microbatch, loss_reduction: accumulate the gradient over chunks of this many examples of
        a ``"mean"`` or ``"sum"`` loss (memory; see :func:`linearised_value_and_grad`);
        ``None`` takes the whole batch at once.
      drift_every: for an ``on_drift`` rule, measure the drift only at steps ``t`` with
        ``t % drift_every == 0`` (one forward pass each; the default 1 measures every step).
      reset_optimizer: restart the optimiser's state (``optimizer.init``) at every
        relinearisation, so that each linearised problem is solved by a fresh optimiser (for
        Adam: zero moments and bias correction from step 1). The papers do not say whether
        they reset it; the default ``False`` keeps the state across linearisations.

    Returns:
      ``step``; ``metrics`` holds ``loss`` (the proxy's loss before the update, which is the
      network's loss on steps that relinearise), ``relinearised`` (bool: this step's features
      were refreshed) and, for a drift rule, ``drift`` (``d_t``, NaN at steps not measured).

    Raises:
      ValueError: a bad K or rule, a negative damping, or a drift_every below 1.

    Examples:
      ``K = 1`` is gradient descent: one step on ``1/2 (theta x - y)^2`` from ``theta = 0``
      with ``x = 2``, ``y = 1`` and learning rate 0.1 moves ``theta`` by ``0.1 * 2 = 0.2``:

      >>> import jax.numpy as jnp, optax
      >>> import itlin_core as ic
      >>> opt = optax.sgd(0.1)
      >>> step = ic.make_il_step(lambda th, x: th * x, ic.squared_error, opt, K=1)
      >>> state, metrics = step(ic.init_il_state(jnp.zeros(()), opt), (jnp.array([2.0]), jnp.array([1.0])))
      >>> print(round(float(state.params), 6), float(metrics["loss"]), bool(metrics["relinearised"]))
      0.2 0.5 True
    """
    rule = as_rule(K)
    drift_every = _check_drift_every(drift_every)
    reset_optimizer = _check_flag("reset_optimizer", reset_optimizer)
    drift = uses_drift(rule)
    update = _il_update(_value_grad(apply_fn, loss_fn, damping, microbatch, loss_reduction, drift=drift),
                        optimizer, drift, reset_optimizer)

    def step(state: ILState, batch):
        return update(state, batch, rule, state.step % drift_every == 0)

    return step


def make_il_sweep_step(apply_fn: Callable, loss_fn: Callable, optimizer: optax.GradientTransformation,
                       Ks, *, damping=0.0, microbatch: int | None = None,
                       loss_reduction: str = "mean", drift_every: int = 1,
                       reset_optimizer: bool = False) -> tuple[Callable, RelinRule]:
    """A step that advances one IL run per K value (or rule) at once (one compiled program).

    ``Ks`` holds periods (as for :func:`make_il_step`) and/or rules (:func:`itlin_core.every`,
    :func:`itlin_core.geometric`, :func:`itlin_core.on_drift`), mixed freely. ``damping`` is one
    proximal weight for all runs, or a sequence with one per K (run ``i`` uses ``Ks[i]`` and
    ``damping[i]``; Goldwaser and Ge's Fig. 9 bottom sweeps lambda at a fixed K this way).
    ``microbatch``, ``loss_reduction``, ``drift_every`` and ``reset_optimizer`` as for
    :func:`make_il_step`; the drift
    is measured on the steps a run counts as multiples of ``drift_every`` (all runs step together).

    Returns ``(step, rules)``: ``step(states, batch)`` expects ``states`` stacked along a
    leading axis of length ``len(Ks)`` (see :func:`replicate`) and the same batch for all runs;
    ``rules`` is the stacked :class:`~itlin_core.RelinRule` (``rules.period`` the periods);
    ``step.run_labels`` names the runs (``"K=30"``, ``"K=∞"``, ``"geometric(10, 2)"``) for
    :func:`itlin_core.train`'s divergence warnings.

    Raises:
      ValueError: a bad K, rule or damping, or a damping sequence whose length is not ``len(Ks)``.

    Examples:
      Runs with ``K = 1`` and ``K = None`` side by side: both use fresh features at step 0, and
      at step 1 only gradient descent refreshes them:

      >>> import jax.numpy as jnp, optax
      >>> import itlin_core as ic
      >>> opt = optax.sgd(0.1)
      >>> step, rules = ic.make_il_sweep_step(lambda th, x: th * x, ic.squared_error, opt, [1, None])
      >>> step.run_labels
      ['K=1', 'K=∞']
      >>> states = ic.replicate(ic.init_il_state(jnp.zeros(()), opt), 2)
      >>> for _ in range(2):
      ...     states, metrics = step(states, (jnp.array([2.0]), jnp.array([1.0])))
      >>> metrics["relinearised"].tolist(), states.updates.tolist()
      ([True, False], [2, 1])
    """
    Ks = list(Ks)
    rules = stack_rules(Ks)
    drift_every = _check_drift_every(drift_every)
    reset_optimizer = _check_flag("reset_optimizer", reset_optimizer)
    drift = uses_drift(rules)
    if isinstance(damping, (list, tuple)) or np.ndim(damping) == 1:
        if any(callable(lam) for lam in damping):
            raise ValueError("damping: a sequence (one per K) must hold numbers; a callable rule is not allowed there.")
        lams = [float(check_damping(lam)) for lam in damping]
        if len(lams) != len(Ks):
            raise ValueError(f"damping has {len(lams)} values but there are {len(Ks)} values of K; "
                             "give one damping per K, or a single number for all runs.")
        lams = jnp.asarray(lams, jnp.float32)
    else:
        lams = None
        check_damping(damping)
    # validates microbatch and loss_reduction now rather than at the first step
    _value_grad(apply_fn, loss_fn, 0.0, microbatch, loss_reduction, drift=False)

    def one(state, batch, rule, lam, check):
        lam = damping if lam is None else lam
        vg = _value_grad(apply_fn, loss_fn, lam, microbatch, loss_reduction, drift=drift)
        return _il_update(vg, optimizer, drift, reset_optimizer)(state, batch, rule, check)

    vstep = jax.vmap(one, in_axes=(0, None, 0, None if lams is None else 0, None))
    names = [_run_label(K) for K in Ks]
    if lams is not None:
        names = [f"{n}, damping={float(lam):g}" for n, lam in zip(names, lams)]
    return _sweep(vstep, rules, lams, drift_every, names), rules


def _sweep(vstep, rules, lams, drift_every, names, padded: dict | None = None):
    """The sweep step of :func:`make_il_sweep_step` over the runs of ``rules`` (and ``lams``).

    It carries ``run_labels``, ``runs`` (its run count) and ``with_runs(n)``: the same sweep padded
    to ``n`` runs by repeating the last run (cached, so that :func:`itlin_core.train` compiles it
    once), which :func:`itlin_core.train` uses to split the runs evenly over several devices."""
    runs = len(names)
    padded = {} if padded is None else padded

    def sweep_step(states, batch):
        lead = {jnp.shape(a)[:1] for a in jax.tree.leaves(states)}
        if lead != {(runs,)}:
            raise ValueError(f"the sweep runs {runs} values of K: every leaf of the state must lead with an axis of "
                             f"{runs} runs, got leading axes {sorted(lead)}; build it with "
                             f"ic.replicate(ic.init_il_state(params, optimizer), {runs}).")
        # one unbatched predicate for all runs, so lax.cond really skips the drift's forward pass
        return vstep(states, batch, rules, lams, states.step[0] % drift_every == 0)

    def with_runs(n: int):
        if n == runs:
            return sweep_step
        if n not in padded:
            pad = lambda t: jax.tree.map(lambda a: jnp.concatenate([a, jnp.repeat(a[-1:], n - runs, 0)]), t)
            padded[n] = _sweep(vstep, pad(rules), None if lams is None else pad(lams), drift_every,
                               names + [f"{names[-1]} (padding)"] * (n - runs), padded)
        return padded[n]

    sweep_step.run_labels = names
    sweep_step.runs = runs
    sweep_step.with_runs = with_runs
    return sweep_step


def _run_label(K) -> str:
    """A run's name for warnings, as :class:`~itlin_core.RelinRule` prints it: "K=30", "K=∞",
    "geometric(10, 2)", "on_drift(0.1)"."""
    return str(as_rule(K))


def replicate(tree: PyTree, n: int) -> PyTree:
    """Stack ``n`` copies of a pytree along a new leading axis (for vmapped sweeps).

    Examples:
      Every leaf gains a leading axis of ``n`` copies:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> tree = ic.replicate({"w": jnp.array([1.0, 2.0]), "step": jnp.zeros((), jnp.int32)}, 3)
      >>> tree["w"].tolist(), tree["step"].shape
      ([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]], (3,))
    """
    n = check_whole("n (the number of copies)", n, 1)
    return jax.tree.map(lambda a: jnp.broadcast_to(a, (n,) + jnp.shape(a)), tree)


def make_il_eval(apply_fn: Callable, datasets: Mapping[str, tuple], metrics: Mapping[str, Callable]) -> Callable:
    """Evaluation of both the network and its current linearised proxy.

    Returns ``eval_fn(state) -> dict`` with keys ``f"{data}_{metric}_network"`` (the
    network ``f(theta_t, .)``) and ``f"{data}_{metric}_proxy"`` (the linearised model
    ``f_lin_s(theta_t, .)`` that IL is actually training, linearised at ``state.anchor``; right
    after a relinearisation it equals the network); Goldwaser and Ge's Fig. 2 plots both.

    Examples:
      With the anchor at 0 and the parameters at 0.5, the network ``sin(theta x)`` predicts
      ``sin(0.5)`` at ``x = 1`` and its proxy ``theta x`` predicts 0.5:

      >>> import jax.numpy as jnp, optax
      >>> import itlin_core as ic
      >>> f = lambda theta, x: jnp.sin(theta * x)
      >>> eval_fn = ic.make_il_eval(f, {"train": (jnp.array([1.0]), jnp.array([0.0]))}, {"rmse": ic.rmse})
      >>> state = ic.init_il_state(jnp.array(0.0), optax.sgd(0.1))._replace(params=jnp.array(0.5))
      >>> {k: round(float(v), 4) for k, v in eval_fn(state).items()}
      {'train_rmse_network': 0.4794, 'train_rmse_proxy': 0.5}
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


__all__ = ["ILState", "init_il_state", "make_il_step", "make_il_sweep_step", "period_as_int",
           "replicate", "make_il_eval"]
