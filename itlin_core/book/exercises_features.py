"""Exercise checkers about features, fitted curves and Gauss-Newton steps: how far weights moved,
how aligned the units that matter are, the mean-field kernel at initialisation, a power law's
extrapolation, truncated GN's distance to the GN step, the NTK's smallest direction, the two ends
of the drift-triggered refresh rule, GN's slowest rate at the damping's floor, damping against a
shorter Gauss-Newton step.

As in :mod:`itlin_core.book.exercises`, each ``check_*`` compares the student's answer with the
package's own implementation or a reference computed here, prints a verdict with a hint where the
answer is wrong (never the expected number of a number exercise), and returns ``True`` or ``False``.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import numpy as np

from .exercises import _array, _call, _close, _number, _report


def _flat(tree):
    return np.concatenate([np.ravel(np.asarray(a, dtype=np.float64)) for a in jax.tree.leaves(tree)])


def check_relative_change(answer, new, old, *, rtol: float = 1e-4) -> bool:
    """Check a relative change ``|new - old| / |old|`` of weights (arrays or trees of arrays, all
    entries together; exercises ``ex-xor-lazy``, ``ex-digits-filters``) against the norm computed
    here in float64, within ``rtol`` of it."""
    new, old = _flat(new), _flat(old)
    want = float(np.linalg.norm(new - old) / np.linalg.norm(old))
    value = _number(answer)
    if value is None:
        return _report(False, f"the relative change must be a finite number, got {answer!r}")
    if abs(value - want) <= rtol * max(want, 1e-12):
        return _report(True, f"relative change {value:.3g} is right")
    near = lambda v: abs(value - v) <= 1e-3 * max(abs(v), 1e-12)
    if near(np.linalg.norm(new - old)):
        hint = "that is the absolute change: divide by the norm of the initial weights"
    elif near(np.linalg.norm(new - old) / np.linalg.norm(new)):
        hint = "divide by the norm of the initial weights, not of the final ones"
    elif near(abs(np.linalg.norm(new) - np.linalg.norm(old)) / np.linalg.norm(old)):
        hint = "that is the change of the norm; take the norm of the change, |W - W0|"
    else:
        hint = "|W - W0| / |W0|, with the norm over all entries together (np.linalg.norm of the arrays)"
    return _report(False, f"relative change {value:.3g} is not right", "hint: " + hint)


def _xor_runs(seed):
    """A stand-in for the XOR chapter's results: three runs of 12 units with random first-layer
    weights ``w1`` (runs, units, 2), output weights ``w2`` (runs, units) and their alignments."""
    from .. import data
    from ..metrics import feature_alignment
    rng = np.random.default_rng(seed)
    w1 = rng.normal(size=(3, 12, 2)) * rng.uniform(0.1, 3.0, size=(3, 12, 1))
    w2 = rng.normal(size=(3, 12))
    align = np.stack([np.asarray(feature_alignment(w, data.XOR_CENTRES)) for w in w1])
    return {"w1": w1, "w2": w2, "alignment": align}


def check_weighted_alignment(fn: Callable) -> bool:
    """Check ``fn(run, i) -> float``, the mean alignment of run ``i`` weighting each unit by
    ``|w2_i| |w1_i|`` (exercise ``ex-xor-weighted``), on stand-in runs with random weights,
    against that weighted average computed here (within 1e-6)."""
    for seed in (0, 1):
        run = _xor_runs(seed)
        for i in range(3):
            got, failed = _call(fn, run, i)
            if failed is not None:
                return failed
            w = np.abs(run["w2"][i]) * np.linalg.norm(run["w1"][i], axis=1)
            a = run["alignment"][i]
            want, value = float(np.sum(w * a) / np.sum(w)), _number(got)
            if value is not None and abs(value - want) <= 1e-6:
                continue
            near = lambda v: value is not None and abs(value - v) <= 1e-6
            if near(a.mean()):
                hint = "that is the plain mean: weight each unit by |w2_i| |w1_i|"
            elif near(np.sum(np.abs(run["w2"][i]) * a) / np.sum(np.abs(run["w2"][i]))):
                hint = "weight by |w2_i| times the norm of the unit's first-layer weights |w1_i|"
            elif near(np.sum(w * a)):
                hint = "divide by the sum of the weights"
            else:
                hint = "sum of weight times alignment, divided by the sum of the weights"
            return _report(False, f"wrong weighted alignment for run {i} of a test set: got {got!r}", "hint: " + hint)
    return _report(True, "right on 6 test runs with random first- and second-layer weights")


def check_init_kernel(kernel, params, x, net) -> bool:
    """Check the mean-field NTK at initialisation written as a Kronecker product (exercise
    ``ex-mfi-init-kernel``) against :func:`itlin_core.mean_field_ntk` for ``params`` (whose
    output weights must be zero), within 1e-6 of its largest entry."""
    from ..mean_field import mean_field_ntk
    if np.any(np.asarray(params["v"]) != 0):
        return _report(False, "these parameters are not at initialisation: their output weights v are not 0")
    want = np.asarray(mean_field_ntk(params, x, net=net), dtype=np.float64)
    got, failed = _array(kernel, want.shape, "the kernel")
    if failed is not None:
        return failed
    scale = float(np.abs(want).max())
    if np.max(np.abs(got - want)) <= 1e-6 * scale:
        return _report(True, f"the {want.shape[0]} x {want.shape[1]} kernel at initialisation is right")
    n, m = len(x), np.asarray(params["u"]).shape[0]
    c = want.shape[0] // n
    swapped = want.reshape(n, c, n, c).transpose(1, 0, 3, 2).reshape(want.shape)
    ratio = float(np.sum(got * want) / np.sum(want * want))
    if np.max(np.abs(got - swapped)) <= 1e-6 * scale and c > 1:
        hint = "the rows are ordered example-major, (n, c) -> n C + c: the kernel of the examples comes first"
    elif np.max(np.abs(got - ratio * want)) <= 1e-6 * abs(ratio) * scale and abs(ratio - 1) > 1e-3:
        hint = f"the structure is right but the scale is not: check the factor 1/M^2 (M = {m})"
    else:
        hint = "with v = 0 only the hidden-features term G G^T / M^2 is left, once per output"
    return _report(False, "the kernel is not the NTK at initialisation", "hint: " + hint)


def check_power_law_prediction(pred, ns, losses) -> bool:
    """Check a test loss predicted at the largest ``N`` (exercise ``ex-mf-extrapolate``) against
    the power law ``L = b N^-a`` fitted by least squares to ``log L`` against ``log N`` on all
    but the largest ``N`` (``np.polyfit``), within 1e-6 relatively."""
    logn, logl = np.log(np.asarray(ns, float)), np.log(np.asarray(losses, float))
    fit = lambda keep: float(np.exp(np.polyval(np.polyfit(logn[keep], logl[keep], 1), logn[-1])))
    want, value = fit(slice(None, -1)), _number(pred)
    if value is None or value <= 0:
        return _report(False, f"a predicted loss is a positive number, got {pred!r}")
    if abs(value - want) <= 1e-6 * want:
        return _report(True, f"the prediction at N = {int(ns[-1])} is right")
    near = lambda v: abs(value - v) <= 1e-4 * v
    if near(math.exp(logl[-1])):
        hint = "that is the measured loss: predict it from the fit to the smaller N"
    elif near(fit(slice(None))):
        hint = "leave the largest N out of the fit, then predict it"
    else:
        hint = "fit a straight line to log(loss) against log(N) (np.polyfit, degree 1), then evaluate it"
    return _report(False, f"the prediction {value:.3g} is not right", "hint: " + hint)


def check_tgn_distance(distance, budget, apply, params, x, y, optimizer, *, rtol: float = 1e-3) -> bool:
    """Check the relative distance ``|theta_TGN - theta_GN| / |theta_GN - theta_0|`` of truncated
    Gauss-Newton with ``optimizer`` for ``budget`` inner steps from the exact GN step (exercise
    ``ex-gn-tgn``), against :func:`itlin_core.tgn_step` and :func:`itlin_core.gn_step` run here
    on the squared error, within ``rtol`` of it."""
    from ..gauss_newton import gn_step, tgn_step
    from ..losses import squared_error
    theta0, exact = _flat(params), _flat(gn_step(apply, params, x, y))
    tgn = _flat(tgn_step(apply, params, x, y, loss_fn=squared_error, optimizer=optimizer,
                         num_steps=int(budget)).params)
    scale, gap = np.linalg.norm(exact - theta0), np.linalg.norm(tgn - exact)
    value = _number(distance)
    if value is None:
        return _report(False, f"the distance must be a finite number, got {distance!r}")
    if abs(value - gap / scale) <= rtol * gap / scale:
        return _report(True, f"the relative distance after {int(budget)} inner steps is right")
    near = lambda v: abs(value - v) <= 1e-3 * v
    if near(gap):
        hint = "that is the absolute distance: divide by the length of the GN step, |theta_GN - theta_0|"
    elif near(gap / np.linalg.norm(exact)):
        hint = "divide by the length of the GN step, |theta_GN - theta_0|, not by |theta_GN|"
    elif near(np.linalg.norm(tgn - theta0) / scale):
        hint = "that is how far the inner solver moved from the anchor: measure its distance to the GN step"
    else:
        hint = "flatten the parameters of ic.tgn_step(...).params and of ic.gn_step(...), and compare"
    return _report(False, f"the relative distance {value:.3g} is not right", "hint: " + hint)


def check_hard_pair(lam_min, p_min, k_star, apply, params, x, y, lr, *, rtol: float = 0.02) -> bool:
    """Check the smallest eigenvalue of the NTK at ``params`` on the inputs ``x`` (the copied
    input included), that direction's share ``p_min`` of the squared gradient norm and the steps
    ``k_star = {nu: k}`` of :func:`itlin_core.gd_steps_to_tolerance` at learning rate ``lr``
    (exercise ``ex-gn-tgn-duplicate``), against the same quantities computed here from
    :func:`itlin_core.empirical_ntk` (eigenvalues in float64), within ``rtol``."""
    from ..gauss_newton import gd_steps_to_tolerance
    from ..ntk import empirical_ntk, kernel_matrix
    theta = np.asarray(kernel_matrix(empirical_ntk(apply, params, x, full=True)), dtype=np.float64)
    r = np.asarray(apply(params, x) - y, dtype=np.float64).reshape(-1)
    s, u = np.linalg.eigh(theta)
    along = (u.T @ r) ** 2
    shares = np.clip(s, 0, None) * along / np.sum(np.clip(s, 0, None) * along)
    near = lambda v, w: abs(v - w) <= rtol * abs(w)
    lam, p = _number(lam_min), _number(p_min)
    if lam is None or p is None:
        return _report(False, "lambda_min and p_min must be finite numbers, got "
                              f"{lam_min!r} and {p_min!r}")
    if not near(lam, s[0]):
        hint = ("that is the largest eigenvalue: take the smallest" if near(lam, s[-1]) else
                "np.linalg.eigvalsh of the NTK on the inputs with the copy (ic.kernel_matrix of "
                "ic.empirical_ntk(..., full=True)), in float64")
        return _report(False, f"lambda_min = {lam:.3g} is not right", "hint: " + hint)
    if not near(p, shares[0]):
        if near(p, along[0] / np.sum(along)):
            hint = "that is the residual's share: the gradient weighs each direction by its eigenvalue"
        elif not 0 <= p <= 1:
            hint = "a share is between 0 and 1"
        else:
            hint = "p_i = lambda_i (u_i^T r)^2 / sum_k lambda_k (u_k^T r)^2, for the smallest lambda_i"
        return _report(False, f"p_min = {p:.3g} is not right", "hint: " + hint)
    if not isinstance(k_star, dict) or not k_star:
        return _report(False, "k_star must be a dict {tolerance: steps}, got " + type(k_star).__name__)
    for nu, k in k_star.items():
        want, got = gd_steps_to_tolerance(theta, r, lr, nu, max_steps=10**9), _number(k)
        if got is None or want is None or abs(got - want) > rtol * want:
            return _report(False, f"k*({nu:g}) = {k!r} is not right",
                           "hint: ic.gd_steps_to_tolerance(theta, r, eta, nu) with the kernel and the "
                           "residual on the inputs with the copy, at the chapter's learning rate")
    return _report(True, f"lambda_min, p_min and k* at {len(k_star)} tolerances are right")


def check_drift_rule_ends(fn: Callable) -> bool:
    """Check ``fn(rule) -> state``, a short IL run (the state :func:`itlin_core.train` returns) from
    one initialisation on one sequence of minibatches, for the two ends of the drift rule (exercise
    ``ex-refresh-ends``): ``on_drift(0.0)`` must give exactly the parameters and feature-update count
    of ``K = 1``, ``on_drift(inf)`` exactly those of ``K = None``, and ``K = 1`` must differ from
    ``K = None`` (a function that ignores its rule would pass the first two)."""
    from ..relinearise import on_drift
    runs = {}
    for name, rule in (("on_drift(0.0)", on_drift(0.0)), ("K=1", 1), ("on_drift(inf)", on_drift(math.inf)),
                       ("K=None", None)):
        got, failed = _call(fn, rule)
        if failed is not None:
            return failed
        if not hasattr(got, "params") or not hasattr(got, "updates"):
            return _report(False, f"fn({name}) must return the IL state of ic.train (with .params and .updates), "
                                  f"got {type(got).__name__}")
        runs[name] = (_flat(got.params), int(got.updates))
    if np.array_equal(runs["K=1"][0], runs["K=None"][0]):
        return _report(False, "K = 1 and K = None gave the same parameters",
                       "hint: your function does not use its rule: pass it to ic.make_il_step")
    for drift, fixed in (("on_drift(0.0)", "K=1"), ("on_drift(inf)", "K=None")):
        (a, na), (b, nb) = runs[drift], runs[fixed]
        if a.shape != b.shape or not np.array_equal(a, b):
            close = a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-7)
            return _report(False, f"{drift} and {fixed} gave different parameters",
                           "hint: " + ("nearly equal is not enough: both must take the same arithmetic path"
                                       if close else "start every run from the same parameters and train it on the"
                                       " same minibatches (build them once, outside fn)"))
        if na != nb:
            return _report(False, f"{drift} used {na} feature updates and {fixed} {nb}")
    return _report(True, "both ends of the drift rule are the fixed periods, parameters and feature updates exactly")


def _constant_factor(fn, ratio, grid) -> bool:
    """Whether ``fn`` is ``lam / (lam + eps)`` times the constant ``ratio`` on every pair of ``grid``."""
    for lam, eps in grid:
        got, failed = _call(fn, lam, eps)
        if failed is not None or _number(got) is None or abs(_number(got) - ratio * lam / (lam + eps)) > 1e-9 * abs(
                ratio * lam / (lam + eps)):
            return False
    return True


def check_floor_rate(fn: Callable) -> bool:
    """Check ``fn(lam_min, eps0) -> q_min``, the smallest eigenvalue of GN's ``Q = Theta (Theta +
    lambda I)^{-1}`` while the damping sits at its floor ``lambda = eps0`` (exercise ``ex-mf-floor``
    (a); the lower end of the band of eq-mf-rate is ``2 q_min / N``): ``lam_min / (lam_min + eps0)``,
    on a grid of eigenvalues far below, near and far above the floor, within ``1e-9`` relative.
    Hints for the approximation ``lam_min / eps0``, the complement ``eps0 / (lam_min + eps0)`` and
    the band's end ``2 q_min / N`` for some ``N``."""
    grid = [(lam, eps) for eps in (1e-7, 1e-5, 1e-3) for lam in (1e-3 * eps, eps, 1e3 * eps)]
    for lam, eps in grid:
        got, failed = _call(fn, lam, eps)
        if failed is not None:
            return failed
        value, want = _number(got), lam / (lam + eps)
        if value is not None and abs(value - want) <= 1e-9 * want:
            continue
        where = f"lam_min = {lam:g}, eps0 = {eps:g}"
        if value is None:
            return _report(False, f"fn({lam:g}, {eps:g}) must be a finite number, got {got!r}")
        if abs(value - lam / eps) <= 1e-9 * lam / eps:
            hint = "lam_min / eps0 is its approximation when lam_min << eps0; write the eigenvalue of Q itself"
        elif abs(value - eps / (lam + eps)) <= 1e-9 * eps / (lam + eps):
            hint = "that is 1 - q_min, the part that the damping removes"
        elif _constant_factor(fn, value / want, grid):
            hint = f"that is q_min times {value / want:.3g}: leave out the 2 / N of the band, q_min is an eigenvalue of Q"
        else:
            hint = "each eigenvalue t of Theta becomes t / (t + lambda) in Q, with lambda = eps0 at the floor"
        return _report(False, f"q_min is not right for {where}: got {value:.3g}", "hint: " + hint)
    return _report(True, f"q_min = lam_min / (lam_min + eps0) is right on {len(grid)} pairs")


def check_damping_vs_step(test_rmse: dict, apply, params, data, iterations: int, *, rtol: float = 1e-3) -> bool:
    """Check ``{(damping, step): test RMSE}`` after ``iterations`` Gauss-Newton iterations
    (:func:`itlin_core.gn_iterate`) from ``params`` on ``data`` (``x_train``, ``y_train``, ``x_test``,
    ``y_test``) for the three settings of exercise ``ex-quintic-lr``: ``(1e-3, 1.0)``, ``(1e-3, 0.3)``
    and ``(10.0, 1.0)``, each against the run computed here, within ``rtol``. Hints for a missing
    setting, the training RMSE, the squared error and a run of another length."""
    from ..gauss_newton import gn_iterate
    from ..losses import rmse
    want = [(1e-3, 1.0), (1e-3, 0.3), (10.0, 1.0)]
    if not isinstance(test_rmse, dict) or any(k not in test_rmse for k in want):
        got = list(test_rmse) if isinstance(test_rmse, dict) else type(test_rmse).__name__
        return _report(False, f"give a dict with the keys {want} (damping, step), got {got}")
    x, y, xt, yt = (data[k] for k in ("x_train", "y_train", "x_test", "y_test"))
    for lam, lr in want:
        value = _number(test_rmse[lam, lr])
        if value is None:
            return _report(False, f"the test RMSE for damping {lam:g}, step {lr:g} must be a finite number, "
                                  f"got {test_rmse[lam, lr]!r}")
        # jitted as a chapter runs it: the undamped runs can be chaotic, so rounding must match
        end = lambda n: jax.jit(lambda p: gn_iterate(apply, p, x, y, n, lr=lr, damping=lam))(params)
        p_end = end(iterations)
        ref, train = float(rmse(apply(p_end, xt), yt)), float(rmse(apply(p_end, x), y))
        if abs(value - ref) <= rtol * ref:
            continue
        near = lambda v: abs(value - v) <= rtol * abs(v)
        if near(train):
            hint = "that is the training RMSE: evaluate on the test points"
        elif near(ref ** 2):
            hint = "that is the mean squared error: take its square root (ic.rmse)"
        elif near(float(rmse(apply(end(2 * iterations), xt), yt))) or near(float(rmse(apply(end(max(1, iterations // 2)),
                                                                                           xt), yt))):
            hint = f"run exactly {iterations} iterations (the chapter's cfg.iterations) for every setting"
        else:
            hint = "ic.gn_iterate(apply, params, x_train, y_train, iterations, lr=step, damping=damping) from the same params"
        return _report(False, f"the test RMSE for damping {lam:g}, step {lr:g} is not right: got {value:.4g}",
                       "hint: " + hint)
    return _report(True, "the three test RMSEs are right")


__all__ = ["check_relative_change", "check_weighted_alignment", "check_init_kernel", "check_power_law_prediction",
           "check_tgn_distance", "check_hard_pair", "check_drift_rule_ends", "check_floor_rate",
           "check_damping_vs_step"]
