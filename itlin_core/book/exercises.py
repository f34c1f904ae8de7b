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



__all__ = ["check_gradient_flow", "check_half_life", "check_kernel_form", "check_total_variation"]
