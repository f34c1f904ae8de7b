r"""When to refresh the features: relinearisation rules, fixed, geometric or drift-triggered.

Goldwaser and Ge study a fixed period ``K`` and leave adaptive periods to future work (§6.1):
the empirical NTK moves fastest early in training (Fort et al., 2020), so a fixed period spends
feature updates where they are least needed. A *rule* decides, inside the compiled step, whether
the next step uses fresh features. Three rules:

* :func:`every` ``(K)``: relinearise at steps ``0, K, 2K, ...`` (an integer ``K`` given to
  :func:`itlin_core.make_il_step` means ``every(K)``);
* :func:`geometric` ``(K0, ratio)``: the ``j``-th period lasts ``round(K0 * ratio**j)`` steps, so
  updates are dense early and sparse late (``geometric(K, 1)`` is ``every(K)``);
* :func:`on_drift` ``(tol)``: relinearise after a step at which the linear proxy has drifted
  from the network by at least ``tol``, measured by

  .. math:: d_t = \frac{\|f(\theta_t, X) - f^{\mathrm{lin}}_s(\theta_t, X)\|}
                       {\|f(\theta_t, X) - f(\theta_s, X)\|},

  Frobenius norms over the outputs of the step's batch ``X``. ``d_t`` is the part of the
  network's change since the last refresh that the linear model gets wrong, as a fraction of
  that change: 0 while the network is still linear in its parameters (the lazy regime), near 1
  when the proxy explains nothing of the change. It is 0 right after a refresh, where
  ``theta_t = theta_s``. The network and its proxy are computed by different programs, which may
  round differently: right after a refresh the gap and the change are then the same rounding
  error, and their ratio would read 1. So a gap below ``2**-16`` of ``||f(theta_t, X)||`` (about
  500 float32 roundings) counts as none: ``d_t = 0``.

Convention: a rule is a :class:`RelinRule` of arrays ``(period, ratio, tol)``, and the next step
relinearises when the current period (``period * ratio**j`` for the ``j``-th) has elapsed *or*
``d_t >= tol``: ``every(K) = (K, 1, inf)``, ``geometric(K0, r) = (K0, r, inf)``,
``on_drift(tol) = (never, 1, tol)``, and ``on_drift(tol, max_period=K)`` combines the two.
Because a rule is arrays, rules of different kinds stack (:func:`stack_rules`) and one ``vmap``
runs them side by side; the decision is a ``jnp.where`` on these arrays, no Python per step.

Cost: ``every`` and ``geometric`` cost a few integer operations. ``on_drift`` needs the network's
outputs at the current parameters, which an IL step does not otherwise compute: one extra
forward pass (the proxy's outputs and ``f(theta_s, X)`` come from the step's own linearisation).
With ``drift_every=m`` (an argument of :func:`itlin_core.make_il_step`) the drift is measured
only at every ``m``-th step, in a ``lax.cond`` that skips the forward pass in between, so the
overhead falls to one forward pass per ``m`` steps.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ._validate import K_NEVER, check_period, check_whole, is_traced

#: The texts :meth:`RelinRule.parse` reads: ``K=<period>`` (or a bare period), or a rule's call.
_SPEC = re.compile(r"^(?:K\s*=\s*)?(?P<k>[^()=]+)$|^(?P<name>every|geometric|on_drift)\s*\((?P<args>.*)\)$")


def _number(text: str, spec: str) -> float:
    """``text`` as a number (a whole float becomes an int), or a ValueError naming ``spec``."""
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"the arguments of the relinearisation rule {spec!r} must be numbers, got {text!r}.") from None
    return int(v) if math.isfinite(v) and v.is_integer() else v


# Periods at or beyond this (from ratio**j growing) mean "never": 2**30 steps is out of reach,
# and float32 holds it exactly, so the cast to int32 cannot overflow.
_FAR = 2.0 ** 30


class RelinRule(NamedTuple):
    """A relinearisation rule (a pytree of arrays; stacked rules vmap).

    Attributes:
      period: int32, the length of the first period in steps (``K_NEVER``: no schedule).
      ratio: float32 >= 1, each period is ``ratio`` times the previous one (1: fixed period).
      tol: float32 >= 0, relinearise after a step whose drift ``d_t >= tol`` (``inf``: never).

    Examples:
      A rule is three arrays; ``geometric(10, 2)`` has a first period of 10 steps, doubling, and no
      drift trigger:

      >>> import itlin_core as ic
      >>> rule = ic.geometric(10, 2.0)
      >>> rule.period.item(), rule.ratio.item(), rule.tol.item(), str(rule)
      (10, 2.0, inf, 'geometric(10, 2)')
    """

    period: jax.Array
    ratio: jax.Array
    tol: jax.Array

    @classmethod
    def parse(cls, spec) -> "RelinRule":
        """The rule a value or a text names, the one syntax of records, tables and settings.

        Accepted: a rule (returned as is); a period as :func:`itlin_core.make_il_step` takes it
        (a positive whole number, ``None`` or ``math.inf``); or a text ``"K=10"`` (also ``"10"``,
        ``"K=1e3"``, ``"every(10)"``), ``"K=∞"`` (also ``"K=inf"``, ``"never"``),
        ``"geometric(K0, ratio)"``, ``"on_drift(tol)"`` or ``"on_drift(tol, max_period=K)"``.
        ``str`` of a rule is such a text, and ``RelinRule.parse(str(rule))`` is the rule again.

        Raises:
          ValueError: any other text or value, or arguments the rule refuses (``K0 < 1``,
            ``ratio < 1``, ``tol < 0``, NaN).

        >>> import itlin_core as ic
        >>> rule = ic.RelinRule.parse("geometric(10, 1.5)")
        >>> str(rule), str(ic.RelinRule.parse("K=1000")), str(ic.RelinRule.parse(None))
        ('geometric(10, 1.5)', 'K=1e3', 'K=∞')
        """
        if not isinstance(spec, str):
            return as_rule(spec)
        text = " ".join(spec.split())
        m = _SPEC.match(text)
        if m is None:
            raise ValueError(f"a relinearisation rule must read 'K=<period>', 'K=∞', 'geometric(K0, ratio)', "
                             f"'on_drift(tol)' or 'on_drift(tol, max_period=K)', got {spec!r}.")
        name = m.group("name")
        if name is None:                                    # K=..., a bare number, never
            value = m.group("k").strip()
            if value in ("∞", "inf", "never", "None"):
                return every(None)
            try:
                return every(_number(value, spec))
            except ValueError as err:
                if "must be numbers" not in str(err):
                    raise
                raise ValueError(f"a relinearisation rule must read 'K=<period>', 'K=∞', 'geometric(K0, ratio)', "
                                 f"'on_drift(tol)' or 'on_drift(tol, max_period=K)', got {spec!r}.") from None
        args = [a.strip() for a in m.group("args").split(",")]
        if name == "every" and len(args) == 1:
            return every(_number(args[0], spec))
        if name == "geometric" and len(args) == 2:
            return geometric(_number(args[0], spec), _number(args[1], spec))
        if name == "on_drift" and len(args) in (1, 2):
            max_period = None
            if len(args) == 2:
                key, _, value = args[1].partition("=")
                if key.strip() != "max_period":
                    raise ValueError(f"on_drift's second argument is max_period=K, got {spec!r}.")
                max_period = _number(value.strip(), spec)
            return on_drift(_number(args[0], spec), max_period=max_period)
        raise ValueError(f"wrong number of arguments in the relinearisation rule {spec!r}: every(K), "
                         "geometric(K0, ratio), on_drift(tol) or on_drift(tol, max_period=K).")

    def __str__(self) -> str:
        if np.ndim(self.period):                             # stacked rules: one text per run
            return "[" + ", ".join(str(RelinRule(*(np.asarray(v)[i] for v in self)))
                                   for i in range(np.shape(self.period)[0])) + "]"
        period, ratio, tol = (np.asarray(v).item() for v in self)
        never = period >= K_NEVER
        if math.isfinite(tol):
            return f"on_drift({tol:.3g})" if never else f"on_drift({tol:.3g}, max_period={period})"
        if ratio != 1:
            return f"geometric({period}, {ratio:g})"
        if never:
            return "K=∞"
        if period >= 1000 and 10 ** round(math.log10(period)) == period:
            return f"K=1e{round(math.log10(period))}"
        return f"K={period}"

    def describe(self) -> str:
        """The rule in words, for legends, sliders and tables that a reader sees (``str`` is the
        text :meth:`parse` reads back, which is for code and records): a fixed period reads
        ``"K = 10"``, never ``"K = ∞"``, a geometric rule ``"geometric, K₀ = 10, ζ = 2"`` and a
        drift rule ``"on drift, d̄ = 0.2"`` (with ``", K ≤ 500"`` when it has a longest period), in
        the symbols of the chapter on refresh rules.

        >>> import itlin_core as ic
        >>> [ic.RelinRule.parse(s).describe() for s in ("K=1e3", "geometric(10, 2)", "on_drift(0.2)")]
        ['K = 1,000', 'geometric, K₀ = 10, ζ = 2', 'on drift, d̄ = 0.2']
        """
        if np.ndim(self.period):
            raise ValueError("describe() needs a single rule; index a stacked rule first.")
        period, ratio, tol = (np.asarray(v).item() for v in self)
        never = period >= K_NEVER
        if math.isfinite(tol):
            return f"on drift, d̄ = {tol:.3g}" + ("" if never else f", K ≤ {period:,}")
        if ratio != 1:
            return f"geometric, K₀ = {period:,}, ζ = {ratio:g}"
        return "K = ∞" if never else f"K = {period:,}"

    def feature_updates(self, steps) -> np.ndarray:
        """The number of linearisations a run under this rule has used after each of ``steps``
        steps, the initial one included: ``ceil(t / K)`` (at least 1) for a fixed period, 1 for
        never, the schedule's count for a geometric rule (:func:`relin_steps`). A drift rule's
        count depends on the run (its ``state.updates``), so it raises ValueError.

        >>> import itlin_core as ic
        >>> ic.every(10).feature_updates([0, 10, 11, 95]).tolist()
        [1, 1, 2, 10]
        """
        t = np.asarray(steps, dtype=np.int64).reshape(-1)
        period, ratio, tol = (np.asarray(v).item() for v in self)
        if math.isfinite(tol):
            raise ValueError(f"the number of feature updates of {self} depends on the run; read it from the run's "
                             "state.updates instead.")
        if period >= K_NEVER:
            return np.ones(len(t), np.int64)
        if ratio == 1:
            return np.maximum(1, -(-t // period))
        starts = np.asarray(relin_steps(self, int(t.max(initial=0))), np.int64)
        return np.maximum(1, np.searchsorted(starts, t, side="left"))


def _real(name, value, *, low, allow_inf):
    if is_traced(value):
        return value
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.ndarray, jax.Array)) \
            or np.ndim(value) != 0:
        raise ValueError(f"{name} must be a real number, got {value!r}.")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must be a number, got NaN.")
    if value < low or (math.isinf(value) and not allow_inf):
        allowed = f"a number >= {low:g}" + (" (math.inf allowed)" if allow_inf else ", finite")
        raise ValueError(f"{name} must be {allowed}, got {value!r}.")
    return value


def _rule(period, ratio, tol) -> RelinRule:
    return RelinRule(period=jnp.asarray(period, jnp.int32), ratio=jnp.asarray(ratio, jnp.float32),
                     tol=jnp.asarray(tol, jnp.float32))


def every(K) -> RelinRule:
    """Relinearise every ``K`` steps (steps 0, K, 2K, ...): Goldwaser and Ge's fixed period.

    ``K`` as for :func:`itlin_core.make_il_step`: a positive whole number, ``None`` or ``math.inf``
    (never). ``every(1)`` is gradient descent.

    >>> import itlin_core as ic
    >>> ic.every(10).period.item(), ic.every(None).period.item() == ic.every(float("inf")).period.item()
    (10, True)
    """
    return _rule(check_period(K), 1.0, math.inf)


def geometric(K0, ratio) -> RelinRule:
    """Geometrically growing periods: ``K0, K0*ratio, K0*ratio**2, ...`` (each rounded to whole steps).

    Feature updates are dense early in training, where the empirical NTK moves fastest, and sparse
    late. ``ratio = 1`` is :func:`every` ``(K0)``. A period that would reach 2**30 steps means never.

    Raises:
      ValueError: ``K0`` is not a positive whole number, or ``ratio`` is below 1, infinite or NaN.

    >>> import itlin_core as ic
    >>> ic.relin_steps(ic.geometric(2, 2.0), 40)
    [0, 2, 6, 14, 30]
    """
    K0 = check_period(K0)
    if not is_traced(K0) and K0 == K_NEVER:
        raise ValueError("K0 (the first period of geometric) must be a finite whole number of steps, got never "
                         "(None or math.inf); use ic.every(None) to never relinearise.")
    ratio = _real("ratio (the growth of geometric's periods)", ratio, low=1.0, allow_inf=False)
    # beyond 2**30 the second period is already "never"; clipping keeps it inside float32
    return _rule(K0, ratio if is_traced(ratio) else min(ratio, _FAR), math.inf)


def on_drift(tol, *, max_period=None) -> RelinRule:
    r"""Relinearise after a step at which the drift ``d_t`` (module docstring) is at least ``tol``.

    ``on_drift(0)`` relinearises at every step (gradient descent); ``on_drift(math.inf)`` never
    (the linearised model). ``max_period=K`` also relinearises at the latest ``K`` steps after the
    previous update (a fixed period as a safety net).

    Raises:
      ValueError: ``tol`` is negative or NaN, or ``max_period`` is not a valid period.

    >>> import itlin_core as ic
    >>> float(ic.on_drift(0.1).tol)
    0.10000000149011612
    """
    tol = _real("tol (the drift threshold of on_drift)", tol, low=0.0, allow_inf=True)
    if not is_traced(tol) and tol > float(np.finfo(np.float32).max):   # a Python float: no float32 cast
        tol = math.inf          # no drift reaches it: beyond float32, say so exactly
    return _rule(check_period(max_period), 1.0, tol)


def as_rule(K) -> RelinRule:
    """A rule from what ``make_il_step`` accepts as ``K``: a :class:`RelinRule`, or a period (``every``)."""
    if isinstance(K, RelinRule):
        return K
    if isinstance(K, jax.Array) or is_traced(K):   # an int32 period array (period_as_int)
        K = check_period(K)
        return RelinRule(period=K, ratio=jnp.ones(jnp.shape(K), jnp.float32),
                         tol=jnp.full(jnp.shape(K), jnp.inf, jnp.float32))
    return every(K)


def stack_rules(rules: Sequence) -> RelinRule:
    """Stack rules (or periods, meaning :func:`every`) along a leading run axis, for a vmapped sweep.

    Examples:
      Rules of different kinds stack into one rule of arrays with a run axis of length 3:

      >>> import itlin_core as ic
      >>> rules = ic.stack_rules([10, ic.geometric(5, 2.0), ic.on_drift(0.1)])
      >>> rules.period.shape, str(rules)
      ((3,), '[K=10, geometric(5, 2), on_drift(0.1)]')
    """
    rules = [as_rule(r) for r in rules]
    if not rules:
        raise ValueError("stack_rules needs at least one rule, got an empty sequence.")
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *rules)


def uses_drift(rule: RelinRule) -> bool:
    """Whether any run of ``rule`` can be triggered by drift (``tol`` not all infinite); True when traced."""
    if is_traced(rule.tol):
        return True
    return bool(np.any(np.isfinite(np.asarray(rule.tol))))


def period_length(rule: RelinRule, j) -> jax.Array:
    """Length (int32 steps) of the ``j``-th period of ``rule`` (``j = 0`` the first)."""
    grown = rule.period.astype(jnp.float32) * rule.ratio ** jnp.asarray(j, jnp.float32)
    grown = jnp.where(grown >= _FAR, K_NEVER, jnp.round(jnp.minimum(grown, _FAR)).astype(jnp.int32))
    never = rule.period >= K_NEVER
    return jnp.where((rule.ratio == 1) | never, rule.period, jnp.maximum(grown, 1))


def relinearise_next(rule: RelinRule, step, last, index, drift) -> jax.Array:
    """Whether step ``step + 1`` relinearises (bool): the ``index``-th period, begun at ``last``,
    has elapsed, or the drift measured at ``step`` reached ``tol`` (NaN drift never triggers)."""
    scheduled = (step + 1 - last) >= period_length(rule, index)
    triggered = jnp.isfinite(rule.tol) & (drift >= rule.tol)
    return scheduled | triggered


def relin_steps(rule: RelinRule, steps: int) -> list:
    """The steps below ``steps`` at which a rule's schedule relinearises, ignoring drift (for
    plots, exercises and tests). Uses :func:`period_length`, so it is the compiled step's schedule.

    >>> import itlin_core as ic
    >>> ic.relin_steps(ic.every(3), 10)
    [0, 3, 6, 9]
    """
    steps = check_whole("steps", steps, 0)
    out, start, j, block = [], 0, 0, 1024
    while start < steps:
        lengths = np.asarray(period_length(rule, jnp.arange(j, j + block))).astype(np.int64)
        starts = start + np.concatenate([[0], np.cumsum(lengths)])
        out.extend(int(t) for t in starts[:-1] if t < steps)
        if lengths[-1] >= K_NEVER:
            break
        start, j, block = int(starts[-1]), j + block, min(4 * block, 1 << 20)
    return out


#: Gaps below this fraction of the outputs' norm are rounding, not drift (module docstring).
ROUNDING_FLOOR = 2.0 ** -16


def drift_ratio(squared_gap, squared_change, squared_size) -> jax.Array:
    """``d_t`` from ``||f - f_lin||^2``, ``||f - f_s||^2`` and ``||f||^2``: 0 when the gap is below
    the rounding floor (``ROUNDING_FLOOR * ||f||``), inf when only the proxy is wrong (a change of
    zero with a gap above the floor).

    >>> from itlin_core.relinearise import drift_ratio
    >>> [float(drift_ratio(g, c, 1.0)) for g, c in ((0.0, 0.0), (1e-14, 1e-14), (0.01, 0.04))]
    [0.0, 0.0, 0.5]
    """
    floor = jnp.asarray(ROUNDING_FLOOR, jnp.result_type(squared_size)) ** 2 * squared_size
    return jnp.where(squared_gap <= floor, 0.0, jnp.sqrt(squared_gap) / jnp.sqrt(squared_change))


__all__ = ["RelinRule", "every", "geometric", "on_drift", "as_rule", "stack_rules", "uses_drift",
           "period_length", "relinearise_next", "relin_steps", "drift_ratio"]
