r"""Iterative linearisation (Goldwaser and Ge, §3, Algorithm 3, eqs. (8)-(9); App. A eqs. (12)-(13)).

Training alternates between two kinds of update:

* every step, the parameters take an optimiser step on the *linearised* model

  .. math:: f^{\mathrm{lin}}_{s}(\theta, x) = f(\theta_s, x) + J(\theta_s, x)(\theta - \theta_s),

* every ``K`` steps (when ``step % K == 0``) the anchor moves, ``theta_s <- theta``,
  which refreshes the features ``J(theta_s, .)`` and with them the empirical NTK.

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

from ._validate import check_damping, check_period
from .linearise import linearise, linearised_value_and_grad

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


def make_il_step(apply_fn: Callable, loss_fn: Callable, optimizer: optax.GradientTransformation,
                 K, *, damping=0.0, microbatch: int | None = None, loss_reduction: str = "mean") -> Callable:
    r"""One step of iterative linearisation (Goldwaser and Ge, Algorithm 3; eqs. (8)-(9), (12)-(13)).

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
      damping: optional proximal weight ``lambda`` (Goldwaser and Ge, §4.3, Fig. 9 bottom).
      microbatch, loss_reduction: accumulate the gradient over chunks of this many examples of
        a ``"mean"`` or ``"sum"`` loss (memory; see :func:`linearised_value_and_grad`);
        ``None`` takes the whole batch at once.

    Returns:
      ``step``; ``metrics`` holds ``loss`` (the proxy's loss before the update, which is the
      network's loss on steps that relinearise) and ``relinearised`` (bool: this step's
      features were refreshed, ``t % K == 0``).

    Raises:
      ValueError: K is not a positive whole number / None / inf, or damping is negative.

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
        anchor = optax.tree_utils.tree_where(relin_next, params, state.anchor)
        new_state = ILState(params=params, anchor=anchor, opt_state=opt_state, step=state.step + 1)
        return new_state, {"loss": loss, "relinearised": (state.step % period) == 0}

    return step


def make_il_sweep_step(apply_fn: Callable, loss_fn: Callable, optimizer: optax.GradientTransformation,
                       Ks, *, damping=0.0, microbatch: int | None = None,
                       loss_reduction: str = "mean") -> tuple[Callable, jax.Array]:
    """A step that advances one IL run per K value at once (one compiled program).

    ``damping`` is one proximal weight for all runs, or a sequence with one per K (run ``i``
    uses ``Ks[i]`` and ``damping[i]``; Goldwaser and Ge's Fig. 9 bottom sweeps lambda at a
    fixed K this way). ``microbatch`` and ``loss_reduction`` as for :func:`make_il_step`.

    Returns ``(step, periods)``: ``step(states, batch)`` expects ``states`` stacked along a
    leading axis of length ``len(Ks)`` (see :func:`replicate`) and the same batch for all runs;
    ``step.run_labels`` names the runs (``"K=30"``, ``"K=never"``) for :func:`itlin_core.train`'s
    divergence warnings.

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
    runs = len(periods)

    def sweep_step(states, batch):
        lead = {jnp.shape(a)[:1] for a in jax.tree.leaves(states)}
        if lead != {(runs,)}:
            raise ValueError(f"the sweep runs {runs} values of K: every leaf of the state must lead with an axis of "
                             f"{runs} runs, got leading axes {sorted(lead)}; build it with "
                             f"ic.replicate(ic.init_il_state(params, optimizer), {runs}).")
        return vstep(states, batch, periods, lams)

    # names for train's divergence warnings: "K=30", "K=never", with ", damping=0.1" per run
    names = ["K=never" if K is None or (isinstance(K, float) and math.isinf(K)) else f"K={K:g}"
             if isinstance(K, float) else f"K={K}" for K in Ks]
    if lams is not None:
        names = [f"{n}, damping={float(lam):g}" for n, lam in zip(names, lams)]
    sweep_step.run_labels = names
    return sweep_step, periods


def replicate(tree: PyTree, n: int) -> PyTree:
    """Stack ``n`` copies of a pytree along a new leading axis (for vmapped sweeps)."""
    return jax.tree.map(lambda a: jnp.broadcast_to(a, (n,) + jnp.shape(a)), tree)


def make_il_eval(apply_fn: Callable, datasets: Mapping[str, tuple], metrics: Mapping[str, Callable]) -> Callable:
    """Evaluation of both the network and its current linearised proxy.

    Returns ``eval_fn(state) -> dict`` with keys ``f"{data}_{metric}_network"`` (the
    network ``f(theta_t, .)``) and ``f"{data}_{metric}_proxy"`` (the linearised model
    ``f_lin_s(theta_t, .)`` that IL is actually training, linearised at ``state.anchor``; right
    after a relinearisation it equals the network); Goldwaser and Ge's Fig. 2 plots both.
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
