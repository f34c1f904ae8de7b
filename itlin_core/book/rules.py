"""Relinearisation rules compared at equal numbers of feature updates: the book's verdicts on
the refresh rules (:mod:`itlin_core.relinearise`), shared by the chapter "When should the
features be refreshed?" and the CIFAR10 run group that tries the rules at scale.

Convention: a sweep's history ``hist`` holds ``families`` (``"fixed"``, ``"geometric"`` or
``"drift"`` per run, :func:`itlin_core.book.common.rule_family`), ``labels``, ``updates``
(linearisations used so far, ``(evals, runs)``) and the metric compared (``(evals, runs)``); for
an accuracy also ``n_test``. The fixed periods form the reference curve, interpolated in the
logarithm of the number of updates; a verdict sets a run against the two fixed periods that
bracket its number of updates."""

from __future__ import annotations

import math

import numpy as np


def compare_at_equal_updates(hist: dict, cfg, metric: str = "test_accuracy_proxy",
                             lower_is_better: bool = False) -> list:
    """For every geometric and drift run: its final ``metric`` against the fixed-period curve
    interpolated at the same number of updates (linearly in log updates; for a loss, where
    ``lower_is_better``, the logarithm of the loss is interpolated, since losses span decades).
    Fixed runs whose final value is not finite (diverged) are left out of the curve.

    The verdict does not rest on the interpolation, which is a guess between two runs and can
    dip where the fixed curve is not monotone: a run is ``"better"`` only when it beats *both*
    fixed periods whose numbers of updates bracket its own by more than a tie (``cfg.tie_images``
    test images for an accuracy, the fraction ``cfg.tie_relative`` for a loss), ``"worse"`` only
    when both beat it by more than a tie, and ``"tied"`` otherwise (within a tie of one of them,
    or between the two).

    Returns dicts with ``label``, ``family``, ``updates``, ``accuracy`` (the run's final value of
    ``metric``), ``fixed_accuracy`` (the interpolated curve's, NaN where the run's count lies
    outside the fixed runs' range), ``bracket`` (the labels of the two bracketing fixed periods,
    one label twice where a fixed period used exactly as many updates), ``difference`` (from the
    interpolated curve: for an accuracy the difference, for a loss the relative difference
    ``value / fixed - 1``), ``gain`` (the difference signed so that positive is better), ``unit``
    (``"points"`` or ``"relative"``) and ``verdict`` (``"better"``, ``"worse"``, ``"tied"``,
    ``"diverged"``, ``"never refreshed"`` or ``"outside"``).

    Examples:
      >>> import types
      >>> hist = {"families": ["fixed", "fixed", "fixed", "geometric", "geometric", "drift"], "n_test": 500,
      ...         "labels": ["K=1", "K=10", "K=100", "geometric(3, 2)", "geometric(9, 2)", "on_drift(0.2)"],
      ...         "updates": np.array([[600, 60, 6, 20, 30, 1]]),
      ...         "test_accuracy_proxy": np.array([[0.9, 0.8, 0.85, 0.88, 0.84, 0.7]])}
      >>> rows = compare_at_equal_updates(hist, types.SimpleNamespace(tie_images=3, tie_relative=0.02))
      >>> [(r["label"], r["verdict"], r["bracket"], round(r["fixed_accuracy"], 3)) for r in rows]
      ... # doctest: +NORMALIZE_WHITESPACE
      [('geometric(3, 2)', 'better', ('K=100', 'K=10'), 0.824),
       ('geometric(9, 2)', 'tied', ('K=100', 'K=10'), 0.815),
       ('on_drift(0.2)', 'never refreshed', None, nan)]

      ``geometric(9, 2)`` lies above the interpolated curve by more than a tie, but below
      ``K=100``: with a fixed curve that dips, it is not counted as better.
    """
    val, upd = np.asarray(hist[metric][-1], float), np.asarray(hist["updates"][-1])
    fam = np.asarray(hist["families"])
    fixed = np.where((fam == "fixed") & np.isfinite(val))[0]
    order = fixed[np.argsort(upd[fixed])]
    to_y = np.log if lower_is_better else (lambda v: v)
    xs, ys = np.log(upd[order].astype(float)), to_y(val[order])
    tie = cfg.tie_relative if lower_is_better else cfg.tie_images / hist["n_test"]
    rows = []
    for i in np.where(fam != "fixed")[0]:
        u, v = float(upd[i]), float(val[i])
        inside = len(xs) > 0 and xs[0] <= math.log(u) <= xs[-1]
        ref = float(np.exp(np.interp(math.log(u), xs, ys)) if lower_is_better else np.interp(math.log(u), xs, ys)) \
            if inside else math.nan
        diff = v / ref - 1 if lower_is_better else v - ref
        gain = -diff if lower_is_better else diff
        bracket = None
        if inside:   # the fixed periods at or just below, and at or just above, the run's count
            j = [int(np.searchsorted(xs, math.log(u), side="right")) - 1,
                 int(np.searchsorted(xs, math.log(u), side="left"))]
            bracket = tuple(hist["labels"][order[k]] for k in j)
            # how much the run beats each bracketing period (positive is better), in the tie's unit
            beats = [1 - v / val[order[k]] if lower_is_better else v - val[order[k]] for k in j]
        if not math.isfinite(v):
            verdict = "diverged"
        elif u == 1:         # only the initial linearisation: the run is K = inf, step for step
            verdict = "never refreshed"
        elif not inside:
            verdict = "outside"
        else:
            verdict = "better" if min(beats) >= tie else "worse" if max(beats) <= -tie else "tied"
        rows.append({"label": hist["labels"][i], "family": str(fam[i]), "updates": int(u), "accuracy": v,
                     "fixed_accuracy": ref, "bracket": bracket, "difference": diff, "gain": gain,
                     "verdict": verdict, "unit": "relative" if lower_is_better else "points"})
    return rows


def verdict_counts(rows: list) -> dict:
    """How many rows of :func:`compare_at_equal_updates` got each verdict, for a chapter's
    hand-written sentence under its comparison: ``runs`` (all adaptive runs), ``better``,
    ``tied``, ``worse``, their sum ``compared``, ``diverged``, ``never`` (never refreshed) and
    ``outside``; and ``best`` and ``worst``, the compared rows of largest and smallest ``gain``
    (``None`` when no run is compared).

    Examples:
      >>> rows = [{"label": "a", "verdict": "better", "gain": 0.03}, {"label": "b", "verdict": "tied", "gain": -0.001},
      ...         {"label": "c", "verdict": "never refreshed", "gain": math.nan}]
      >>> c = verdict_counts(rows)
      >>> c["runs"], c["better"], c["tied"], c["compared"], c["never"], c["best"]["label"], c["worst"]["label"]
      (3, 1, 1, 2, 1, 'a', 'b')
    """
    count = lambda v: sum(r["verdict"] == v for r in rows)
    inside = [r for r in rows if r["verdict"] in ("better", "tied", "worse")]
    return {"runs": len(rows), "better": count("better"), "tied": count("tied"), "worse": count("worse"),
            "compared": len(inside), "diverged": count("diverged"), "never": count("never refreshed"),
            "outside": count("outside"),
            "best": max(inside, key=lambda r: r["gain"]) if inside else None,
            "worst": min(inside, key=lambda r: r["gain"]) if inside else None}


def never_refreshed(hist: dict, family: str = "drift") -> list:
    """The labels of the runs of ``family`` that used no linearisation after the initial one.

    Examples:
      >>> hist = {"families": ["fixed", "drift", "drift"], "labels": ["K=1", "on_drift(0.1)", "on_drift(0.4)"],
      ...         "updates": np.array([[1, 1, 1], [50, 3, 1]])}
      >>> never_refreshed(hist)
      ['on_drift(0.4)']
    """
    upd, fam = np.asarray(hist["updates"][-1]), np.asarray(hist["families"])
    return [hist["labels"][i] for i in np.where(fam == family)[0] if upd[i] == 1]


def refresh_shares(hist: dict, by_step: int, family: str = "drift") -> dict:
    """``{label: share}`` for the runs of ``family``: the fraction of a run's refreshes (its
    linearisations after the initial one) made at evaluations up to ``by_step``; NaN for a run
    that never refreshed.

    Examples:
      >>> hist = {"families": ["fixed", "drift", "drift"], "labels": ["K=1", "on_drift(0.1)", "on_drift(0.4)"],
      ...         "eval_step": np.array([0, 50, 100]), "updates": np.array([[1, 1, 1], [50, 2, 1], [100, 5, 1]])}
      >>> refresh_shares(hist, by_step=50)    # 1 of on_drift(0.1)'s 4 refreshes came by step 50
      {'on_drift(0.1)': 0.25, 'on_drift(0.4)': nan}
    """
    upd, fam = np.asarray(hist["updates"]), np.asarray(hist["families"])
    upto = np.asarray(hist["eval_step"]) <= by_step
    out = {}
    for i in np.where(fam == family)[0]:
        refreshes = upd[-1, i] - 1
        out[hist["labels"][i]] = float((upd[upto, i][-1] - 1) / refreshes) if refreshes > 0 else math.nan
    return out


__all__ = ["compare_at_equal_updates", "verdict_counts", "never_refreshed", "refresh_shares"]
