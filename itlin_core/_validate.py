"""Argument checks shared by the public functions.

Convention: every check raises :class:`ValueError` with a sentence that names the argument,
says what was wrong and what is allowed. Checks are skipped for values that are JAX tracers
(inside ``jit``/``vmap`` the value is not known in Python).
"""

from __future__ import annotations

import math
import numbers

import jax
import numpy as np

# The period used internally for "never relinearise" (K = None or math.inf).
# A step counter in int32 cannot reach it, and ``0 % K == 0`` at step 0 only
# re-anchors at the initial parameters, which ``init_il_state`` already did.
K_NEVER = np.iinfo(np.int32).max


def is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def check_period(K):
    """Return K as an int (``K_NEVER`` for None/inf) or raise ValueError.

    Allowed: a positive integer (a whole float such as ``1e6`` is accepted; periods beyond
    the int32 range are treated as "never", since no int32 step counter reaches them),
    ``None`` or ``math.inf`` (never relinearise), or an integer JAX array (e.g. under ``vmap`` over a sweep of K values; use
    :func:`itlin_core.period_as_int` to build one).
    """
    if K is None:
        return K_NEVER
    if is_traced(K) or isinstance(K, jax.Array):
        if not np.issubdtype(K.dtype, np.integer):
            raise ValueError(
                f"K as an array must have an integer dtype, got {K.dtype}; "
                "build it with itlin_core.period_as_int.")
        if not is_traced(K) and K.size and int(np.min(np.asarray(K))) < 1:
            raise ValueError(
                f"K (the relinearisation period) must be at least 1 in every entry, got {np.asarray(K).tolist()}; "
                "build it with itlin_core.period_as_int, which maps None and math.inf to 'never'.")
        return K
    if isinstance(K, bool) or not isinstance(K, numbers.Real):
        raise ValueError(
            f"K (the relinearisation period) must be a positive integer, None or "
            f"math.inf (never relinearise), got {K!r}.")
    if math.isinf(K) and K > 0:
        return K_NEVER
    if isinstance(K, numbers.Integral) or (math.isfinite(K) and float(K).is_integer()):
        K = int(K)  # 1e6 written as a float is a common way to say "a million steps"
    else:
        raise ValueError(
            f"K (the relinearisation period) must be a whole number of steps, None or "
            f"math.inf (never relinearise), got {K!r}.")
    if K < 1:
        raise ValueError(
            f"K (the relinearisation period) must be at least 1 (K=1 is plain gradient "
            f"descent), got {K}. Use None or math.inf to never relinearise.")
    return min(K, K_NEVER)


def check_damping(damping):
    """Raise ValueError unless ``damping`` is a non-negative finite number,
    a callable, or a traced value."""
    if callable(damping) or is_traced(damping):
        return damping
    if isinstance(damping, (str, bytes, bool)):
        raise ValueError(f"damping must be a non-negative number or a callable eigenvalues -> lambda, "
                         f"got {damping!r} ({type(damping).__name__}).")
    try:
        lam = float(damping)
    except (TypeError, ValueError):
        raise ValueError(
            f"damping must be a non-negative number or a callable eigenvalues -> lambda, "
            f"got {damping!r}.") from None
    if not math.isfinite(lam) or lam < 0:
        raise ValueError(
            f"damping must be a finite number >= 0 (0 is undamped Gauss-Newton), got {damping!r}.")
    return damping


def check_examples(name: str, x) -> int:
    """The number of examples (leading axis) of the array or pytree of arrays ``x``; raises
    ValueError when it has none (an empty batch) or no leading axis."""
    leaves = jax.tree.leaves(x)
    if not leaves or not all(hasattr(a, "shape") and len(a.shape) >= 1 for a in leaves):
        raise ValueError(f"{name} must be an array (or pytree of arrays) with the examples on its leading axis, "
                         f"got {type(x).__name__} of shape {getattr(x, 'shape', None)}.")
    n = leaves[0].shape[0]
    if n == 0:
        raise ValueError(f"{name} holds no examples (leading axis of length 0); an empty batch has no kernel, "
                         "no Gauss-Newton step and no loss to follow.")
    return n


def check_whole(name: str, v, minimum: int) -> int:
    """``v`` as an int, or ValueError unless it is a whole number >= ``minimum`` (a whole float
    such as ``1e4`` and a concrete 0-d array are accepted)."""
    if isinstance(v, (jax.Array, np.ndarray)) and v.ndim == 0 and not is_traced(v):
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
            or not math.isfinite(v) or int(v) != v or v < minimum:
        kind = "a non-negative" if minimum == 0 else "a positive" if minimum == 1 else f"an (>= {minimum})"
        raise ValueError(f"{name} must be {kind} integer, got {v!r}.")
    return int(v)


def check_microbatch(microbatch):
    """``None`` or a positive integer (examples per gradient chunk); returns it as an int."""
    if microbatch is None:
        return None
    if isinstance(microbatch, bool) or not isinstance(microbatch, numbers.Real) \
            or not math.isfinite(microbatch) or int(microbatch) != microbatch or microbatch < 1:
        raise ValueError(f"microbatch must be a positive integer or None, got {microbatch!r}.")
    return int(microbatch)
