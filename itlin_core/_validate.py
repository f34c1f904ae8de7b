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


def check_microbatch(microbatch):
    """``None`` or a positive integer (examples per gradient chunk); returns it as an int."""
    if microbatch is None:
        return None
    if isinstance(microbatch, bool) or not isinstance(microbatch, numbers.Real) \
            or not math.isfinite(microbatch) or int(microbatch) != microbatch or microbatch < 1:
        raise ValueError(f"microbatch must be a positive integer or None, got {microbatch!r}.")
    return int(microbatch)
