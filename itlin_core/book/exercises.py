"""Checker functions that give a student immediate feedback on an exercise answer.

Each ``check_*`` function runs the student's answer against the reference implementation in
``itlin_core`` on a few random problems, prints a short verdict (what was tested, and where an
answer went wrong, with the expected value), and returns ``True`` or ``False``.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ..flow import gradient_flow


def _report(ok: bool, what: str, detail: str = "") -> bool:
    print(("✔ " if ok else "✘ ") + what + (f"\n  {detail}" if detail else ""))
    return ok


def _random_problem(key, n=6, p=10, rank=None):
    k1, k2, k3 = jax.random.split(key, 3)
    phi = jax.random.normal(k1, (n, p)) / math.sqrt(p)
    if rank is not None:  # a singular kernel: only `rank` independent feature rows
        phi = phi.at[rank:].set(phi[:rank][jnp.arange(n - rank) % rank])
    return phi @ phi.T, jax.random.normal(k2, (n,)), jax.random.normal(k3, (n,))


def check_gradient_flow(fn: Callable, *, rtol: float = 1e-4) -> bool:
    """Check ``fn(ntk, f0, y, t) -> f_t`` against the closed-form gradient flow
    ``f_t = y + exp(-ntk t) (f0 - y)`` (Goldwaser and Ge, App. B) for several kernels and times."""
    for seed, rank in [(0, None), (1, None), (2, 3)]:
        ntk, f0, y = _random_problem(jax.random.key(seed), rank=rank)
        for t in [0.0, 0.3, 2.0, 20.0]:
            try:
                got = np.asarray(fn(ntk, f0, y, t), dtype=np.float64).reshape(-1)
            except Exception as e:  # the student's code raised: say so rather than crash
                return _report(False, "your function raised an exception", f"{type(e).__name__}: {e}")
            want = np.asarray(gradient_flow(ntk, f0, y, t)[0], dtype=np.float64).reshape(-1)
            if got.shape != want.shape:
                return _report(False, "wrong output shape", f"expected {want.shape}, got {got.shape}")
            if not np.allclose(got, want, rtol=rtol, atol=rtol * max(1.0, np.abs(want).max())):
                return _report(False, f"wrong values at t = {t} (kernel {'singular' if rank else 'invertible'})",
                               f"expected {np.round(want, 4)}\n  got      {np.round(got, 4)}")
    return _report(True, "correct on 3 kernels (one singular) and 4 times, t = 0 included")


def check_half_life(answer: float, ntk, *, rtol: float = 1e-3) -> bool:
    """Check the time after which the slowest-decaying part of the training residual has
    halved under gradient flow with kernel ``ntk``: ``ln 2 / lambda_min``."""
    ev = np.linalg.eigvalsh(np.asarray(ntk, dtype=np.float64))
    want = math.log(2.0) / ev[0]
    ok = bool(np.isfinite(answer)) and abs(float(answer) - want) <= rtol * want
    hint = "" if ok else ("hint: along the eigenvector with eigenvalue lambda the residual is "
                          "multiplied by exp(-lambda t); which eigenvalue is the slowest?")
    what = f"half-life of the slowest direction = {float(answer):.4g}" + ("" if ok else " is not right")
    return _report(ok, what, hint)



def check_kernel_form(fn: Callable, *, rtol: float = 1e-6) -> bool:
    """Check ``fn(J, r, lam) -> d`` against the primal damped Gauss-Newton direction
    ``(J^T J + lam I)^{-1} J^T r`` on random wide and tall matrices (float64 NumPy)."""
    rng = np.random.default_rng(0)
    for n, p in [(3, 7), (6, 20), (9, 4)]:
        J, r = rng.normal(size=(n, p)), rng.normal(size=n)
        for lam in [0.1, 1.0, 10.0]:
            want = np.linalg.solve(J.T @ J + lam * np.eye(p), J.T @ r)
            try:
                got = np.asarray(fn(J, r, lam), dtype=np.float64).reshape(-1)
            except Exception as e:
                return _report(False, "your function raised an exception", f"{type(e).__name__}: {e}")
            if got.shape != want.shape or not np.allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max()):
                return _report(False, f"wrong direction for J of shape {J.shape} and lam = {lam}",
                               f"expected shape {want.shape}, got {got.shape}; max error "
                               f"{np.abs(got - want).max() if got.shape == want.shape else float('nan'):.3g}")
    return _report(True, "matches (J^T J + lam I)^-1 J^T r for wide and tall J and three dampings")



def check_total_variation(fn: Callable, *, rtol: float = 1e-6) -> bool:
    """Check ``fn(values) -> float``, the total variation ``sum_i |v_{i+1} - v_i|`` of a function
    sampled on an evenly spaced grid, on a few functions with known answers."""
    cases = [("a constant", np.full(50, 3.0), 0.0),
             ("a straight line from 0 to 2", np.linspace(0.0, 2.0, 50), 2.0),
             ("one period of sin on 1001 points", np.sin(np.linspace(0, 2 * np.pi, 1001)), 4.0),
             ("a zig-zag 0,1,0,1,0", np.array([0.0, 1.0, 0.0, 1.0, 0.0]), 4.0)]
    for name, values, want in cases:
        try:
            got = float(fn(values))
        except Exception as e:
            return _report(False, "your function raised an exception", f"{type(e).__name__}: {e}")
        if not abs(got - want) <= rtol * max(1.0, want) + 1e-4 * (name.startswith("one period")):
            return _report(False, f"wrong total variation for {name}", f"expected {want:g}, got {got:g}")
    return _report(True, "correct on a constant, a line, a sine and a zig-zag")



def _number(x):
    """``x`` as a float, or ``None`` for anything that is not a finite number."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _call(fn, *args):
    """``(value, None)`` or ``(None, report)`` when the student's function raised."""
    try:
        return fn(*args), None
    except Exception as e:  # the student's code raised: say so rather than crash
        return None, _report(False, "your function raised an exception", f"{type(e).__name__}: {e}")


def updates_hint(value, want: int, K) -> str:
    """The hint for a wrong count ``value`` of feature updates (``want`` is right) of period ``K``."""
    if K is None:
        return "K = inf still linearises once: the features of step 0 serve the whole run"
    if value == want - 1:
        return "one too few: the linearisation at step 0 counts too"
    return "refreshes happen at steps 0, K, 2K, ... below the number of steps: count them, ceil(steps / K)"


def check_feature_update_count(fn: Callable) -> bool:
    """Check ``fn(T, K) -> int``, the number of linearisations (the initial one included) that a run of
    ``T`` steps with period ``K`` uses (``K=None`` for K = inf), against the count the book's figures
    use (:func:`itlin_core.book.common.feature_updates`), for periods that divide ``T`` and periods
    that do not (exercise ``ex-il-count``)."""
    from .common import feature_updates
    for T in (1, 7, 10, 100, 1001):
        for K in (1, 3, 10, 250, None):
            got, failed = _call(fn, T, K)
            if failed is not None:
                return failed
            want, value = int(feature_updates([K], [T])[0, 0]), _number(got)
            if value != want:
                return _report(False, f"wrong count for T = {T}, K = {K}: got {got!r}",
                               "hint: " + updates_hint(value, want, K))
    return _report(True, "correct for 25 pairs of T and K, with periods that do not divide T and K = inf")


def check_geometric_count(fn: Callable) -> bool:
    """Check ``fn(T, K0, r) -> count``, the number of linearisations of a run of ``T`` steps under the
    geometric rule (periods ``K0, K0 r, K0 r^2, ...``, ignoring their rounding to whole steps)
    against the compiled rule's schedule, :func:`itlin_core.relin_steps`; the rounding may change
    the count by one (exercise ``ex-refresh-count``)."""
    from .. import relinearise
    for K0, r in ((10, 1.5), (3, 2.0), (50, 1.2)):
        for T in (10**2, 10**3, 10**4, 10**5):
            got, failed = _call(fn, T, K0, r)
            if failed is not None:
                return failed
            want, value = len(relinearise.relin_steps(relinearise.geometric(K0, r), T)), _number(got)
            if value is None or abs(value - want) > 1:
                return _report(False, f"wrong count for T = {T}, K0 = {K0}, r = {r}: got {got!r}",
                               "hint: the j-th refresh comes at K0 (r^j - 1) / (r - 1); count the j >= 0 with "
                               "s_j < T (solve for j with a logarithm), and do not forget the refresh at step 0")
    return _report(True, "within one of the rule's own schedule for 12 runs (three rules, T = 1e2 ... 1e5)")


#: The expected alignment of a feature pointing in a uniformly random direction of the plane, with
#: the four XOR centres on the diagonals: the mean of cos(theta) for theta uniform on [0, pi/4].
RANDOM_ALIGNMENT = 2 * math.sqrt(2) / math.pi


def check_random_alignment(answer: float, *, rtol: float = 1e-3) -> bool:
    """Check the expected feature alignment of a random direction against the XOR centres
    (exercise ``ex-xor-random``): ``E[cos(theta)]`` for the angle to the nearest diagonal."""
    try:
        value = float(answer)
    except (TypeError, ValueError):
        return _report(False, f"the answer must be a number, got {answer!r}")
    ok = math.isfinite(value) and abs(value - RANDOM_ALIGNMENT) <= rtol * RANDOM_ALIGNMENT
    if ok:
        return _report(True, f"E[a(w)] = {value:.4f} is right")
    if abs(value - math.cos(math.pi / 8)) < 1e-3:
        hint = "that is the cosine of the average angle; average the cosine itself over the angle"
    elif value > 1 or value < 0:
        hint = "an alignment is a cosine between 0 and 1 here"
    else:
        hint = "the angle to the nearest diagonal is uniform on [0, pi/4]: integrate cos against that density"
    return _report(False, f"E[a(w)] = {value:.4g} is not right", "hint: " + hint)


def check_wcd(answer: float, u, u_star, *, rtol: float = 1e-6) -> bool:
    """Check a weighted cosine distance computed by hand for the student units ``u`` and teacher
    units ``u_star`` (exercise ``ex-mf-wcd``) against :func:`itlin_core.weighted_cosine_distance`."""
    from ..metrics import weighted_cosine_distance
    u, u_star = np.asarray(u, dtype=np.float64), np.asarray(u_star, dtype=np.float64)
    want = float(weighted_cosine_distance(u, u_star))
    try:
        value = float(answer)
    except (TypeError, ValueError):
        return _report(False, f"the answer must be a number, got {answer!r}")
    if math.isfinite(value) and abs(value - want) <= rtol * max(1.0, want):
        return _report(True, f"WCD = {value:.4f} is right")
    cos = (u / np.linalg.norm(u, axis=1, keepdims=True)) @ (u_star / np.linalg.norm(u_star, axis=1, keepdims=True)).T
    unweighted = 2 * float(np.mean(1 - cos.max(axis=1)))
    if abs(value - unweighted) <= 1e-6 * max(1.0, unweighted):
        hint = "each unit counts with its share of the squared norm, p_i = |u_i|^2 / sum_k |u_k|^2, not equally"
    elif abs(value - want / 2) <= 1e-6:
        hint = "the definition has a factor 2 in front of the sum"
    else:
        hint = "for each student unit take its largest cosine with any teacher unit, then weight 1 - that cosine"
    return _report(False, f"WCD = {value:.4g} is not right", "hint: " + hint)


def check_silu_constant(c: float, *, rtol: float = 1e-3) -> bool:
    """Check ``c`` in ``max_z |ReLU(z) - SiLU_beta(z)| = c / beta`` (exercise ``ex-mf-silu``) against a
    fine grid of the package's own activations at two temperatures."""
    from ..activations import activation_pair
    z = np.linspace(-40.0, 40.0, 400_001)
    wants = []
    for beta in (1.0, 4.0):
        relu, silu = activation_pair("relu")[0], activation_pair("silu", beta)[0]
        wants.append(beta * float(np.max(np.abs(np.asarray(relu(z)) - np.asarray(silu(z))))))
    want = float(np.mean(wants))
    try:
        value = float(c)
    except (TypeError, ValueError):
        return _report(False, f"the answer must be a number, got {c!r}")
    if math.isfinite(value) and abs(value - want) <= rtol * want:
        return _report(True, f"c = {value:.4f} is right (the same at beta = 1 and beta = 4)")
    hint = ("the maximum of s * sigmoid(-s) over s > 0 (substitute s = beta |z|); it is attained where "
            "s * sigmoid(s) = 1" if value > 0 else "c must be positive: the gap |z| sigmoid(-beta |z|) is")
    return _report(False, f"c = {value:.4g} is not right", "hint: " + hint)



def _array(answer, shape, what="your answer"):
    """``(array, None)``: ``answer`` as float64 with ``shape`` (size-1 axes ignored), or
    ``(None, report)`` saying what is wrong with it (not numbers, wrong shape, NaN or infinity)."""
    try:
        a = np.asarray(answer, dtype=np.float64)
    except (TypeError, ValueError):
        return None, _report(False, f"{what} must be an array of numbers, got {type(answer).__name__}")
    if a.size != math.prod(shape) or np.squeeze(a).shape != tuple(d for d in shape if d != 1):
        return None, _report(False, f"{what} has the wrong shape", f"expected {tuple(shape)}, got {a.shape}")
    if not np.all(np.isfinite(a)):
        return None, _report(False, f"{what} contains NaN or infinity")
    return a.reshape(shape), None


def _close(a, b, rtol):
    """``a`` equals ``b`` within ``rtol`` times the larger of 1 and b's largest entry."""
    return bool(np.max(np.abs(a - b)) <= rtol * max(1.0, float(np.max(np.abs(b)))))


def check_lin_slope(slope, apply, params, x, u, *, rtol: float = 1e-4) -> bool:
    """Check the directional derivative ``J_s(x) u`` (exercise ``ex-lin-slope``) against
    ``jax.jvp`` of the network at the anchor ``params`` along ``u``; the tolerance is ``rtol``
    times the larger of 1 and the outputs' size (float32 rounding of ``f_lin(...) - f``)."""
    f = lambda p: apply(p, x)
    f0, want = (np.asarray(a, dtype=np.float64) for a in jax.jvp(f, (params,), (u,)))
    got, failed = _array(slope, want.shape, "the slope")
    if failed is not None:
        return failed
    tol = rtol * max(1.0, float(np.abs(f0).max()))
    if np.max(np.abs(got - want)) <= tol:
        return _report(True, f"J_s(x) u is right at the {len(want)} inputs")
    if np.max(np.abs(got + want)) <= tol:
        hint = "wrong sign: the slope is f_lin one unit along +u minus f_lin at the anchor"
    elif np.max(np.abs(got - want - f0)) <= tol:
        hint = "that is f_lin one unit along u; subtract its value at the anchor"
    elif np.max(np.abs(got - (np.asarray(f(jax.tree.map(lambda p, d: p + d, params, u))) - f0))) <= tol:
        hint = "that is the network's change one unit along u; take the linearisation's, which is exact"
    else:
        hint = "evaluate ic.linearise(apply, params) one unit along u and at the anchor, and subtract"
    return _report(False, "J_s(x) u is not right", "hint: " + hint)


def check_ntk_rank(rank, ntk, *, rtol: float = 1e-6) -> bool:
    """Check the numerical rank of a kernel matrix (exercises ``ex-lin-gram``, ``ex-quintic-bias``):
    the number of its eigenvalues (float64 ``eigvalsh``) above ``rtol`` times the largest."""
    ev = np.linalg.eigvalsh(np.asarray(ntk, dtype=np.float64))
    want, n = int(np.sum(ev > rtol * ev.max())), len(ev)
    value = _number(rank)
    if value is None or value != int(value):
        return _report(False, f"a rank is a whole number, got {rank!r}")
    if value == want:
        return _report(True, f"rank {int(value)} of {n} is right (eigenvalues above {rtol:g} times the largest)")
    if value > n:
        hint = f"the kernel is {n} x {n}: its rank is at most {n}"
    elif value == n or value == int(np.sum(ev > 0)):
        hint = (f"the computed kernel has rounding errors, so few eigenvalues are exactly 0: count those "
                f"above {rtol:g} times the largest")
    elif value == int(np.sum(ev > rtol)):
        hint = f"the threshold is relative: {rtol:g} times the largest eigenvalue, not {rtol:g}"
    else:
        hint = f"count the eigenvalues above {rtol:g} times the largest (np.linalg.eigvalsh)"
    return _report(False, f"rank {int(value)} is not right", "hint: " + hint)


def check_anchor_gradient(grad, apply, params, x, labels, *, rtol: float = 1e-4) -> bool:
    """Check a gradient of the softmax cross-entropy at the anchor (exercise ``ex-il-grad``),
    as a tree like ``params`` or one flat vector, against ``jax.grad`` through the network
    itself; the tolerance is ``rtol`` times the gradient's largest entry (float32 rounding)."""
    from ..losses import softmax_cross_entropy
    flat = lambda t: np.concatenate([np.ravel(np.asarray(a, dtype=np.float64)) for a in jax.tree.leaves(t)])
    want = flat(jax.grad(lambda p: softmax_cross_entropy(apply(p, x), labels))(params))
    try:
        raw = flat(grad) if jax.tree.structure(grad) == jax.tree.structure(params) else np.asarray(grad, float)
    except (TypeError, ValueError):
        return _report(False, f"the gradient must be a tree like params or an array, got {type(grad).__name__}")
    got, failed = _array(raw, want.shape, "the gradient")
    if failed is not None:
        if np.size(raw) == np.size(apply(params, x)):
            return _report(False, "that has one entry per output, not per parameter",
                           "hint: differentiate with respect to the parameters, jax.grad(loss)(params)")
        return failed
    scale = rtol * float(np.abs(want).max())
    if np.max(np.abs(got - want)) <= scale:
        return _report(True, f"the gradient at the anchor is the network's ({want.size} parameters)")
    hint = ("wrong sign: jax.grad gives the loss's gradient, not the descent direction"
            if np.max(np.abs(got + want)) <= scale else
            "take jax.grad of softmax_cross_entropy(f_lin(q, x), labels) with respect to q, at q = the anchor")
    return _report(False, "the gradient is not the network's at the anchor", "hint: " + hint)


def check_flow_limit(f_inf_test, ntk, f0, y, ntk_test_train, f0_test, *, rtol: float = 1e-6) -> bool:
    """Check the function at ``t = inf`` on test inputs (exercise ``ex-flow-minnorm``) against
    :func:`itlin_core.gradient_flow` at ``t = math.inf``, within ``rtol`` times the larger of 1 and
    its largest value."""
    as64 = lambda a: np.asarray(a, dtype=np.float64)
    ntk, f0, y, kx, f0_test = map(as64, (ntk, f0, y, ntk_test_train, f0_test))
    want = as64(gradient_flow(ntk, f0, y, math.inf, kx, f0_test)[1])
    got, failed = _array(f_inf_test, want.shape, "f_inf on the test inputs")
    if failed is not None:
        return failed
    if _close(got, want, rtol):
        return _report(True, f"f_inf is right on the {len(want)} test inputs")
    change = kx @ np.linalg.lstsq(ntk, (y - f0).reshape(len(ntk), -1), rcond=None)[0]
    if _close(got, want - f0_test, 1e-4):
        hint = "that is the change f_inf - f_0: add the initial function on the test inputs"
    elif _close(got, f0_test + (kx @ np.linalg.lstsq(ntk, y.reshape(len(ntk), -1), rcond=None)[0]).reshape(
            want.shape), 1e-4):
        hint = "regress the initial residual Y - f_0(X), not the targets"
    elif _close(got, f0_test - change.reshape(want.shape), 1e-4):
        hint = "wrong sign: the function moves towards the targets, by + Theta(x, X) Theta^-1 (Y - f_0)"
    else:
        hint = "f_inf(x) = f_0(x) + Theta(x, X) Theta(X, X)^-1 (Y - f_0(X))"
    return _report(False, "f_inf on the test inputs is not right", "hint: " + hint)


def check_heavy_damping(rel_err, lam, apply, params, x, y, *, rtol: float = 0.05) -> bool:
    """Check the relative error ``|lam d - g| / |g|`` between ``lam`` times the damped GN
    direction ``d`` (:func:`itlin_core.gn_direction`) and the squared error's gradient ``g``
    (exercise ``ex-gn-heavy``), recomputed here, within ``rtol`` of it (float32 rounding)."""
    from ..gauss_newton import gn_direction
    from ..losses import squared_error
    flat = lambda t: np.concatenate([np.ravel(np.asarray(a, dtype=np.float64)) for a in jax.tree.leaves(t)])
    g = flat(jax.grad(lambda p: squared_error(apply(p, x), y))(params))
    d = lam * flat(gn_direction(apply, params, x, y, damping=lam))
    want = float(np.linalg.norm(d - g) / np.linalg.norm(g))
    value = _number(rel_err)
    if value is None:
        return _report(False, f"the relative error must be a finite number, got {rel_err!r}")
    if abs(value - want) <= rtol * want + 1e-7:
        return _report(True, f"relative error {value:.2g} at lambda = {lam:.3g} is right")
    if abs(value - float(np.linalg.norm(d + g) / np.linalg.norm(g))) <= 1e-3:
        hint = "wrong sign: gn_direction is subtracted from the parameters, as the gradient is"
    elif abs(value - float(np.linalg.norm(d / lam - g) / np.linalg.norm(g))) <= 1e-3:
        hint = "multiply the direction by lambda before comparing it with the gradient"
    elif abs(value - float(np.linalg.norm(d - g))) <= 1e-3 * float(np.linalg.norm(d - g)):
        hint = "that is the absolute error: divide by the gradient's norm"
    else:
        hint = "compare lam * flat(ic.gn_direction(..., damping=lam)) with the flat loss gradient"
    return _report(False, f"relative error {value:.3g} is not right", "hint: " + hint)



__all__ = ["check_gradient_flow", "check_half_life", "check_kernel_form", "check_total_variation",
           "check_feature_update_count", "check_geometric_count", "RANDOM_ALIGNMENT", "check_random_alignment",
           "check_wcd", "check_silu_constant", "check_lin_slope", "check_ntk_rank", "check_anchor_gradient",
           "check_flow_limit", "check_heavy_damping"]
