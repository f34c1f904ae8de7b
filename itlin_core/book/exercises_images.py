"""Exercise checkers of the image chapters: how often two classifiers agree, how well a linear
probe reads raw pixels, how long a damped Gauss-Newton step is, what frozen BatchNorm statistics
give, and what a run group's settings mean per linearisation (``eta K``, feature updates, epochs).

As in :mod:`itlin_core.book.exercises`, each ``check_*`` compares the student's answer with the
package's own implementation or a reference computed here, prints a verdict with a hint where the
answer is wrong (never the expected number of a number exercise), and returns ``True`` or ``False``.
The settings checkers take the run groups (:class:`itlin_core.book.image_runs.ImageRunConfig`) as
an argument, so that this module imports no chapter.
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import numpy as np

from .exercises import _array, _call, _number, _report, updates_hint


def _flat(tree):
    return np.concatenate([np.ravel(np.asarray(a, dtype=np.float64)) for a in jax.tree.leaves(tree)])


def _classes(a):
    """Class labels from scores ``(n, C)`` (their largest entry) or from labels ``(n,)``."""
    a = np.asarray(a)
    return a.argmax(axis=-1) if a.ndim > 1 else a


def _rate_verdict(rate, want, n, hint, what):
    """The verdict on an agreement rate ``rate`` of ``n`` images (one image of slack), with the
    hints for a percentage, a count and the disagreement before ``hint``."""
    value = _number(rate)
    if value is None:
        return _report(False, f"the rate must be a finite number, got {rate!r}")
    if abs(value - want) <= 1.0 / n + 1e-12:
        return _report(True, f"{what}: the rate {value:.3f} is right (on {n} images)")
    if abs(value - 100 * want) <= 100.0 / n:
        hint = "that looks like a percentage: give the fraction, between 0 and 1"
    elif abs(value - n * want) <= 1.0:
        hint = f"that is a count: divide by the number of images ({n})"
    elif abs(value - (1 - want)) <= 1.0 / n:
        hint = "that is the fraction where they disagree"
    elif not 0 <= value <= 1:
        hint = "a fraction of images is between 0 and 1"
    return _report(False, f"{what}: the rate {value:.3g} is not right", "hint: " + hint)


def check_readout_agreement(rate, phi, targets, phi_test, truth) -> bool:
    """Check how often the minimum-norm read-out fitted on the features ``phi`` and ``targets``
    names, on the test features ``phi_test``, the class of ``truth`` (probabilities ``(n, C)``,
    their largest entry, or labels ``(n,)``) (exercise ``ex-mfi-accuracy``), against
    :func:`itlin_core.min_norm_readout` fitted here on the arrays given (their own precision),
    within one image."""
    from ..metrics import min_norm_readout
    phi, phi_test, targets = np.asarray(phi), np.asarray(phi_test), np.asarray(targets)
    guess = lambda t: (phi_test @ np.asarray(min_norm_readout(phi, t))).argmax(axis=1)
    want_cls = _classes(truth)
    want = float(np.mean(guess(targets) == want_cls))
    onehot = np.eye(targets.shape[1])[targets.argmax(axis=1)]
    other = float(np.mean(guess(onehot) == want_cls))
    value = _number(rate)
    hint = ("compare the largest output of phi_test @ v, v = ic.min_norm_readout(phi, targets), "
            "with the class of each test image (argmax of probabilities, or the label)")
    if value is not None and abs(other - want) > 1.0 / len(want_cls) and abs(value - other) <= 1e-12:
        hint = "that is the read-out fitted on the one-hot classes: fit it on the targets given"
    return _rate_verdict(rate, want, len(want_cls), hint, "read-out and classes")


def check_proxy_agreement(rate, apply, params, anchor, x) -> bool:
    """Check the fraction of the inputs ``x`` on which the network at ``params`` and its proxy,
    linearised at ``anchor`` and evaluated at ``params``, predict the same class (exercise
    ``ex-digits-agree``), against :func:`itlin_core.linearise` evaluated here, within one image."""
    from ..linearise import linearise
    net = _classes(apply(params, x))
    want = float(np.mean(net == _classes(linearise(apply, anchor)(params, x))))
    hint = ("the proxy is ic.linearise(apply, anchor) evaluated at the parameters; compare the "
            "largest output of each with the network's, image by image")
    if want < 1 and _number(rate) == 1.0:
        hint = ("linearise at the run's anchor (state.anchor): linearised at the parameters "
                "themselves, the proxy is the network")
    return _rate_verdict(rate, want, len(net), hint, "network and proxy")


def check_damped_step_norms(norms, lams, apply, params, x, y, *, rtol: float = 1e-2) -> bool:
    """Check the lengths ``|theta_lam - theta_s|`` of the damped Gauss-Newton steps for the
    dampings ``lams`` (exercise ``ex-damp-shrink``), one per damping, against
    :func:`itlin_core.gn_step` with ``damping=lam`` computed here, each within ``rtol`` of it."""
    from ..gauss_newton import gn_step
    from ..ntk import flat_jacobian
    lams = [float(lam) for lam in np.ravel(lams)]
    theta0 = _flat(params)
    steps = [_flat(gn_step(apply, params, x, y, damping=lam)) for lam in lams]
    want = np.array([np.linalg.norm(s - theta0) for s in steps])
    got, failed = _array(norms, want.shape, "the step lengths")
    if failed is not None:
        return failed
    close = lambda v: bool(np.all(np.abs(got - v) <= rtol * np.abs(v)))
    if close(want):
        return _report(True, f"the step lengths at {len(lams)} dampings are right")
    g = np.asarray(flat_jacobian(apply, params, x), np.float64).T @ np.asarray(
        y - apply(params, x), np.float64).reshape(-1)
    if close(np.array([np.linalg.norm(s) for s in steps])):
        hint = "that is the length of the new parameters: subtract the anchor"
    elif close(np.array([np.linalg.norm(g) / lam for lam in lams])):
        hint = "that is the gradient step J^T r / lambda: take the damped GN step, ic.gn_step(..., damping=lam)"
    elif close(want[::-1]):
        hint = "give them in the order of the dampings"
    else:
        hint = "|flat(ic.gn_step(apply, params, X, Y, damping=lam)) - flat(params)| for each lambda"
    return _report(False, "the step lengths are not right", "hint: " + hint)


def _periods(configs):
    """``(cfg, K)`` for each run group and each of its periods (a whole number or ``None``)."""
    return [(cfg, K) for cfg in configs for K in cfg.Ks if K is None or isinstance(K, int)]


def check_reach(fn: Callable, configs) -> bool:
    """Check ``fn(cfg, K) -> (eta_K, updates)`` for a run group's settings ``cfg`` and one of its
    periods ``K`` (``None`` for K = inf): the bound ``cfg.lr * K`` (``math.inf`` for K = inf) and
    the number of feature updates of the run, against
    :func:`itlin_core.book.common.feature_updates` (exercises ``ex-damp-reach``, ``ex-rn-etak``),
    for every period of every group in ``configs``."""
    from .common import feature_updates
    pairs = _periods(configs)
    for cfg, K in pairs:
        got, failed = _call(fn, cfg, K)
        if failed is not None:
            return failed
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return _report(False, f"fn must return two numbers (eta K, feature updates), got {got!r}")
        where = f"lr {cfg.lr:g}, K = {'inf' if K is None else K}, {cfg.steps} steps"
        eta_k, n = (float(v) if _number(v) is not None or v == math.inf else None for v in got)
        want_n = int(feature_updates([K], [cfg.steps])[0, 0])
        if K is None and eta_k != math.inf:
            return _report(False, f"wrong eta K for {where}: got {got[0]!r}",
                           "hint: with K = inf nothing stops the parameters: the bound is math.inf")
        if K is not None and (eta_k is None or abs(eta_k - cfg.lr * K) > 1e-9 * cfg.lr * K):
            hint = ("that is the training time lr * steps: one linearisation lasts K steps"
                    if eta_k is not None and abs(eta_k - cfg.lr * cfg.steps) <= 1e-9 * cfg.lr * cfg.steps
                    else "each step moves a parameter by at most about lr: K steps, lr * K")
            return _report(False, f"wrong eta K for {where}: got {got[0]!r}", "hint: " + hint)
        if n != want_n:
            return _wrong_updates(n, want_n, K, where, got[1])
    return _report(True, f"eta K and the feature updates are right for {len(pairs)} runs")


def _wrong_updates(n, want_n, K, where, got) -> bool:
    """The verdict on a wrong number ``n`` of feature updates (``want_n`` is right), with its hint."""
    return _report(False, f"wrong number of feature updates for {where}: got {got!r}",
                   "hint: " + updates_hint(n, want_n, K))


def check_run_updates(fn: Callable, configs) -> bool:
    """Check ``fn(cfg, K) -> updates``, the number of linearisations (the initial one included) of
    the run of period ``K`` (``None`` for K = inf) in the run group ``cfg`` by the end of its
    ``cfg.steps`` steps, against :func:`itlin_core.book.common.feature_updates` (exercise
    ``ex-cifar-few-count``), for every period of every group in ``configs``."""
    from .common import feature_updates
    pairs = _periods(configs)
    for cfg, K in pairs:
        got, failed = _call(fn, cfg, K)
        if failed is not None:
            return failed
        want_n = int(feature_updates([K], [cfg.steps])[0, 0])
        if _number(got) != want_n:
            return _wrong_updates(_number(got), want_n, K, f"K = {'inf' if K is None else K}, {cfg.steps} steps", got)
    return _report(True, f"the feature updates are right for {len(pairs)} runs")


def check_exact_steps(steps, K: int, n_steps: int) -> bool:
    """Check ``steps``, the steps ``t`` (1 to ``n_steps``) after which an IL run of period ``K``
    has its network equal to its proxy, against the steps at which the anchor moves, the
    multiples of ``K`` (exercise ``ex-cifar-few-relin``)."""
    try:
        got = sorted({int(t) for t in steps})
    except (TypeError, ValueError):
        return _report(False, f"give the steps as a list of whole numbers, got {steps!r}")
    want = [t for t in range(1, n_steps + 1) if t % K == 0]
    if got == want:
        return _report(True, f"the steps {got} are right: K = {K}, {n_steps} steps")
    if got == [t for t in range(1, n_steps + 1) if t % K == 1 % K]:
        hint = "the anchor moves at the end of step K, 2K, ...: the step counter is then a multiple of K"
    elif got == list(range(1, n_steps + 1)):
        hint = "between feature updates the parameters leave the anchor, and the network bends away from its proxy"
    elif 0 in got:
        hint = "count the steps from 1: the question asks after which step"
    else:
        hint = "they agree right after the anchor moved to the current parameters, so theta - theta_s = 0"
    return _report(False, f"the steps {got} are not right", "hint: " + hint)


def check_epochs_per_linearisation(fn: Callable, configs) -> bool:
    """Check ``fn(cfg, K) -> epochs``, the passes over the training subset (``cfg.n_train``
    images) that one linearisation of period ``K`` lasts, ``K * batch / n`` with ``batch`` the
    batch size (at most ``n``; ``None``: full batch) (exercise ``ex-cifar-feat-epochs``), for every
    finite period of every group in ``configs``, within 1e-9 relatively."""
    pairs = [(cfg, K) for cfg, K in _periods(configs) if K is not None]
    for cfg, K in pairs:
        n = cfg.n_train
        batch = n if cfg.batch_size is None else min(cfg.batch_size, n)
        want = K * batch / n
        got, failed = _call(fn, cfg, K)
        if failed is not None:
            return failed
        value = _number(got)
        if value is not None and abs(value - want) <= 1e-9 * want:
            continue
        near = lambda v: value is not None and abs(value - v) <= 1e-9 * abs(v)
        if near(1 / want):
            hint = "upside down: K steps see K * batch images, and an epoch is n images"
        elif near(K * batch):
            hint = "that is the number of images seen: divide by the subset's size n"
        elif near(cfg.steps * batch / n):
            hint = "that is the whole run: one linearisation lasts K steps"
        else:
            hint = "K steps of `batch` images each, divided by n (cfg.n_train)"
        return _report(False, f"wrong epochs for n = {n}, batch {cfg.batch_size}, K = {K}: got {got!r}",
                       "hint: " + hint)
    return _report(True, f"the epochs per linearisation are right for {len(pairs)} runs")


def check_pixel_probe(accuracy, data, n_train: int, ridge: float) -> bool:
    """Check the test accuracy of a linear probe on the raw pixels (exercise ``ex-digits-pixels``):
    :func:`itlin_core.linear_probe` fitted here on the first ``n_train`` training images of
    ``data`` (``x_train``, ``y_train``, ``x_test``, ``y_test``, images flattened to one row each)
    with relative ridge ``ridge``, within one test image. Hints for the probe's training
    accuracy, a percentage, all training images instead of the first ``n_train``, and the
    default ridge instead of ``ridge``."""
    from ..metrics import linear_probe
    x, y = np.asarray(data["x_train"]), np.asarray(data["y_train"])
    xt, yt = np.asarray(data["x_test"]), np.asarray(data["y_test"])
    rows = lambda a: a.reshape(len(a), -1)

    def probe(n, lam):
        r = linear_probe(rows(x[:n]), y[:n], rows(xt), yt, ridge=lam)
        return float(r["test_accuracy"]), float(r["train_accuracy"])

    value, (want, train) = _number(accuracy), probe(n_train, ridge)
    slack = 1.0 / len(yt) + 1e-9
    if value is None:
        return _report(False, f"the accuracy must be a finite number, got {accuracy!r}")
    if abs(value - want) <= slack:
        return _report(True, f"the pixels' probe accuracy {value:.3f} is right (on {len(yt)} test images)")
    near = lambda v: abs(value - v) <= slack
    if near(train) and not near(want):
        hint = "that is the probe's training accuracy: report its test accuracy"
    elif abs(value - 100 * want) <= 100 * slack:
        hint = "that looks like a percentage: give the fraction, between 0 and 1"
    elif near(probe(len(y), ridge)[0]):
        hint = f"fit the probe on the first {n_train} training images only, as the chapter's probes"
    elif near(probe(n_train, 1e-3)[0]):
        hint = "pass the chapter's ridge: ic.linear_probe(..., ridge=cfg.probe_ridge)"
    else:
        hint = "flatten each image to one row of pixels and fit ic.linear_probe on the first training images"
    return _report(False, f"the accuracy {value:.3g} is not right", "hint: " + hint)


def check_frozen_statistics(frozen: Callable, apply, params, x_big, x, x_other, *, rtol: float = 1e-4) -> bool:
    """Check ``frozen(params, x) -> logits``, a BatchNorm network normalising with statistics fixed
    on the batch ``x_big`` (exercise ``ex-rn-frozen``): its logits on ``x`` must equal
    ``apply(params, x, stats=stats)`` with ``_, stats = apply(params, x_big, return_stats=True)``
    (within ``rtol`` of the largest logit), so that an image's logits no longer depend on the
    batch around it. A hint for batch statistics (the logits change with the companions; statistics
    computed on ``x`` itself are the same thing), a general one otherwise (e.g. another batch's
    statistics), and the wrong-shape message."""
    x_big, x, x_other = (np.asarray(a) for a in (x_big, x, x_other))
    stats = jax.jit(lambda p, xb: apply(p, xb, return_stats=True)[1])(params, x_big)
    want = np.asarray(jax.jit(lambda p, xx: apply(p, xx, stats=stats))(params, x))
    got, failed = _call(frozen, params, x)
    if failed is not None:
        return failed
    got, bad = _array(got, want.shape, "the logits")
    if bad is not None:
        return bad
    tol = rtol * max(float(np.abs(want).max()), 1.0)
    if np.max(np.abs(got - want)) <= tol:
        return _report(True, "the logits are those of the frozen statistics")
    other, failed = _call(frozen, params, x_other)
    if failed is None and np.max(np.abs(np.asarray(other)[0] - got[0])) > tol:
        hint = ("the first image's logits change with its companions: those are statistics of the batch itself;"
                " pass stats= computed once on x_big")
    else:
        hint = "_, stats = apply(params, x_big, return_stats=True), then apply(params, x, stats=stats)"
    return _report(False, "the logits are not those of statistics frozen on x_big", "hint: " + hint)


__all__ = ["check_readout_agreement", "check_proxy_agreement", "check_damped_step_norms", "check_reach",
           "check_epochs_per_linearisation", "check_pixel_probe", "check_frozen_statistics"]
