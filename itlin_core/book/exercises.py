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
                if K is None:
                    hint = "K = inf still linearises once: the features of step 0 serve the whole run"
                elif value == want - 1:
                    hint = "one too few: the linearisation at step 0 counts too"
                else:
                    hint = "refreshes happen at steps 0, K, 2K, ... that are below T: count them (round up, not down)"
                return _report(False, f"wrong count for T = {T}, K = {K}: got {got!r}", "hint: " + hint)
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



__all__ = ["check_gradient_flow", "check_half_life", "check_kernel_form", "check_total_variation",
           "check_feature_update_count", "check_geometric_count", "RANDOM_ALIGNMENT", "check_random_alignment",
           "check_wcd", "check_silu_constant"]
