"""Argument checks shared by the public functions.

Convention: every check raises :class:`ValueError` with a sentence that names the argument,
says what was wrong and what is allowed. Checks are skipped for values that are JAX tracers
(inside ``jit``/``vmap`` the value is not known in Python).
"""

from __future__ import annotations

import functools
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


def check_whole(name: str, v, minimum: int, maximum: int | None = None, why: str = "") -> int:
    """``v`` as an int, or ValueError unless it is a whole number >= ``minimum`` (and <= ``maximum``,
    which ``why`` explains; a whole float such as ``1e4`` and a concrete 0-d array are accepted,
    2.5, ``True`` and ``"4"`` not)."""
    if isinstance(v, (jax.Array, np.ndarray)) and v.ndim == 0 and not is_traced(v):
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
            or not math.isfinite(v) or int(v) != v or v < minimum or (maximum is not None and v > maximum):
        kind = "a non-negative" if minimum == 0 else "a positive" if minimum == 1 else f"an (>= {minimum})"
        most = "" if maximum is None else f" of at most {maximum:,}{why}"
        raise ValueError(f"{name} must be {kind} integer{most}, got {v!r}.")
    return int(v)


def check_sizes(name: str, values, length: int | None = None) -> list:
    """``values`` as a list of ints, or ValueError unless it is a sequence (of ``length``) of
    positive whole numbers (layer widths, channels, image sizes); the message names the entry."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__") or \
            (length is not None and len(values) != length):
        raise ValueError(f"{name} must be a sequence of {f'{length} ' if length else ''}positive integers, "
                         f"got {values!r}.")
    return [check_whole(f"{name}[{i}]", v, 1) for i, v in enumerate(values)]


def positive_ints(**sizes) -> list:
    """Each keyword argument as an int, checked by :func:`check_whole` (a positive integer), in order."""
    return [check_whole(name, v, 1) for name, v in sizes.items()]


def check_number(name: str, v, *, minimum: float | None = None, strict: bool = False, note: str = ""):
    """ValueError unless ``v`` is a finite real number (``>= minimum``, or ``> minimum`` when
    ``strict``); a concrete 0-d array is accepted and traced values pass unchecked. Returns ``v``."""
    if is_traced(v):
        return v
    x = v.item() if isinstance(v, (jax.Array, np.ndarray)) and v.ndim == 0 else v
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real) or not math.isfinite(x) or \
            (minimum is not None and (x < minimum or (strict and x == minimum))):
        bound = "" if minimum is None else f" {'>' if strict else '>='} {minimum:g}"
        raise ValueError(f"{name} must be a finite number{bound}{note}, got {v!r}.")
    return v


def _on_host(a) -> bool:
    """Whether ``a`` is a NumPy array or a JAX array held in host memory (the CPU backend), which
    NumPy can read without a copy; an accelerator's array is checked on the accelerator instead of
    being copied to the host."""
    if not isinstance(a, jax.Array):
        return True
    try:
        return all(d.platform == "cpu" for d in a.devices())
    except Exception:      # a deleted or donated buffer: let the JAX path say so
        return False


def check_finite(name: str, x, note: str = ""):
    """ValueError when the concrete array (or pytree of arrays) ``x`` holds NaN or infinity, naming the
    leaf, how many entries and the first; integer and boolean leaves are finite by type. Skipped for JAX
    tracers (under ``jit``, ``vmap`` or ``grad`` the values are unknown, and hot paths pay nothing) and
    for multi-host arrays this process cannot read; a concrete constant seen while tracing is checked once,
    at trace time. Returns ``x``."""
    for path, a in jax.tree_util.tree_leaves_with_path(x):
        if is_traced(a) or not getattr(a, "is_fully_addressable", True):
            continue
        if not hasattr(a, "dtype"):
            try:
                a = np.asarray(a)
            except (TypeError, ValueError):
                continue                                      # not numbers: the caller's own checks say so
        if not jax.numpy.issubdtype(a.dtype, np.inexact) or not a.size:
            continue
        if _on_host(a):      # NumPy reads it in place: no program compiled for each new shape
            if bool(np.isfinite(a).all()):
                continue
        else:
            with jax.ensure_compile_time_eval():     # a constant captured by a function being traced: its value
                if bool(jax.numpy.isfinite(a).all()):
                    continue
        bad = ~np.isfinite(np.asarray(a))
        first = f" (the first at index {tuple(int(i) for i in np.argwhere(bad)[0])})" if bad.ndim else ""
        raise ValueError(f"{name}{jax.tree_util.keystr(path)} holds {int(bad.sum())} NaN or infinite value(s)"
                         f"{first}; it must hold finite numbers{note}.")
    return x


def check_callable(name: str, fn, what: str):
    """TypeError unless ``fn`` is callable; ``what`` says what it should be (e.g. ``"loss_fn(outputs,
    targets) -> scalar"``). Returns ``fn``."""
    if not callable(fn):
        raise TypeError(f"{name} must be a function {what}, got {fn!r} ({type(fn).__name__}).")
    return fn


def numeric_leaves(name: str, tree) -> list:
    """The leaves of ``tree``, or a TypeError naming the first that is not a number or a numeric array
    (a string, an object, a dtype of neither numbers nor booleans)."""
    leaves = jax.tree_util.tree_leaves_with_path(tree)
    for path, a in leaves:
        kind = getattr(getattr(a, "dtype", None), "kind", None)
        if isinstance(a, (str, bytes)) or (kind is not None and kind in "OUS" and not is_traced(a)) \
                or (kind is None and not isinstance(a, numbers.Number)):
            raise TypeError(f"{name}{jax.tree_util.keystr(path)} is {a!r} ({type(a).__name__}); {name} must be a "
                            "pytree of numeric arrays.")
    return [a for _, a in leaves]


def check_step_room(state, steps: int) -> None:
    """ValueError unless the integer step counter ``state.step`` (when the state has a concrete
    one, e.g. :class:`itlin_core.ILState`'s int32) can count ``steps`` more steps without wrapping
    around; an int32 counter stops one short of its maximum, the period that means "never"."""
    step = getattr(state, "step", None)
    if is_traced(step) or not hasattr(step, "dtype") or not np.issubdtype(step.dtype, np.integer) or not step.size \
            or not getattr(step, "is_fully_addressable", True):     # a multi-host array: not readable here
        return
    now, limit = int(np.max(np.asarray(step))), int(np.iinfo(step.dtype).max) - 1
    if now + steps > limit:
        raise ValueError(f"num_steps: the state's step counter ({step.dtype}) is at {now:,}, and {steps:,} more steps "
                         f"would take it past {limit:,}, where it would wrap around to negative steps; train fewer "
                         f"steps (at most {max(limit - now, 0):,}) or start again from a fresh state.")


def _shapes(tree) -> dict:
    return {jax.tree_util.keystr(path): tuple(np.shape(a) if not hasattr(a, "shape") else a.shape)
            for path, a in jax.tree_util.tree_leaves_with_path(tree)}


def tree_mismatch(given, expected, given_name: str = "params", expected_name: str = "this model") -> str | None:
    """``None`` when the pytrees ``given`` and ``expected`` have the same leaves (by path) of the same
    shapes, else a sentence naming the first leaf that differs (its path, the shapes)."""
    g, e = _shapes(given), _shapes(expected)
    if g == e:
        return None
    for path in e:
        if path not in g:
            return f"{given_name} has no leaf {given_name}{path}, which {expected_name} has (shape {e[path]})"
    for path in g:
        if path not in e:
            return f"{given_name}{path} (shape {g[path]}) is a leaf that {expected_name} does not have"
        if g[path] != e[path]:
            return f"{given_name}{path} has shape {g[path]}, but {expected_name} expects {e[path]}"
    return f"{given_name} and {expected_name} list their leaves in another order"


def with_param_check(model: str, init, *fns):
    """``fns`` (each ``fn(params, ...)``) wrapped to first check ``params`` against what ``init``
    builds (its shapes found once by ``jax.eval_shape``; shapes are static, so the check also runs
    under ``jit`` and ``vmap``): parameters of another model raise a ValueError naming the leaf."""
    expected = []

    def check(params):
        if not expected:
            expected.append(jax.eval_shape(init, jax.random.PRNGKey(0)))
        bad = tree_mismatch(params, expected[0], "params", f"this {model}")
        if bad:
            raise ValueError(f"{model}: {bad}. These parameters belong to another model; build them with this "
                             "model's init (model.init(key)).")

    def wrap(fn):
        @functools.wraps(fn)
        def checked(params, *args, **kwargs):
            check(params)
            return fn(params, *args, **kwargs)
        return checked

    return [wrap(fn) for fn in fns]


def check_microbatch(microbatch):
    """``None`` or a positive integer (examples per gradient chunk); returns it as an int."""
    if microbatch is None:
        return None
    if isinstance(microbatch, bool) or not isinstance(microbatch, numbers.Real) \
            or not math.isfinite(microbatch) or int(microbatch) != microbatch or microbatch < 1:
        raise ValueError(f"microbatch must be a positive integer or None, got {microbatch!r}.")
    return int(microbatch)
