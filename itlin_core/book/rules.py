"""Relinearisation rules compared at equal numbers of feature updates: the book's verdicts on
the refresh rules (:mod:`itlin_core.relinearise`), shared by the chapter "When should the
features be refreshed?" and the CIFAR10 run group that tries the rules at scale.

Convention: a sweep's history ``hist`` holds ``families`` (``"fixed"``, ``"geometric"`` or
``"drift"`` per run, :func:`itlin_core.book.common.rule_family`), ``labels``, ``updates``
(linearisations used so far, ``(evals, runs)``) and the metric compared (``(evals, runs)``); for
an accuracy also ``n_test``. The fixed periods form the reference curve, interpolated in the
logarithm of the number of updates."""

from __future__ import annotations

import math

import numpy as np


def compare_at_equal_updates(hist: dict, cfg, metric: str = "test_accuracy_proxy",
                             lower_is_better: bool = False) -> list:
    """For every geometric and drift run: its final ``metric`` against the fixed-period curve
    interpolated at the same number of updates (linearly in log updates; for a loss, where
    ``lower_is_better``, the logarithm of the loss is interpolated, since losses span decades).
    Fixed runs whose final value is not finite (diverged) are left out of the curve.

    Returns dicts with ``label``, ``family``, ``updates``, ``accuracy`` (the run's final value of
    ``metric``), ``fixed_accuracy`` (the curve's, NaN where the run's count lies outside the fixed
    runs' range), ``difference`` (for an accuracy the difference; for a loss the relative
    difference ``value / fixed - 1``), ``gain`` (the difference signed so that positive is
    better), ``unit`` (``"points"`` or ``"relative"``) and ``verdict`` (``"better"``, ``"worse"``,
    ``"tied"``: within ``cfg.tie_images`` test images for an accuracy, within the fraction
    ``cfg.tie_relative`` for a loss; ``"diverged"``; or ``"outside"``)."""
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
        if not math.isfinite(v):
            verdict = "diverged"
        elif u == 1:         # only the initial linearisation: the run is K = inf, step for step
            verdict = "never refreshed"
        elif not inside:
            verdict = "outside"
        else:
            verdict = "tied" if abs(diff) < tie else "better" if gain > 0 else "worse"
        rows.append({"label": hist["labels"][i], "family": str(fam[i]), "updates": int(u), "accuracy": v,
                     "fixed_accuracy": ref, "difference": diff, "gain": gain, "verdict": verdict,
                     "unit": "relative" if lower_is_better else "points"})
    return rows


def _difference_text(row: dict) -> str:
    if row["unit"] == "points":
        return f"{100 * row['difference']:+.1f} points ({row['label']})"
    return f"{100 * row['difference']:+.0f}% ({row['label']})"


def verdict_sentence(rows: list, tie_images: int | None = None, *, tie_relative: float | None = None) -> str:
    """One sentence that says what wins at equal numbers of updates, generated from ``rows``
    (:func:`compare_at_equal_updates`); name the tie used there: ``tie_images`` for accuracies,
    ``tie_relative`` for losses."""
    inside = [r for r in rows if r["verdict"] in ("better", "tied", "worse")]
    diverged = [r["label"] for r in rows if r["verdict"] == "diverged"]
    never = [r["label"] for r in rows if r["verdict"] == "never refreshed"]
    notes = ([f"{', '.join(diverged)} diverged"] if diverged else []) + (
        [f"{', '.join(never)} never refreshed, so {'it is' if len(never) == 1 else 'each is'} the K = ∞ run"]
        if never else [])
    tail = f" ({'; '.join(notes)})" if notes else ""
    if not inside:
        return ("No adaptive run refreshed the features a number of times inside the fixed periods' range, so "
                f"none can be compared{tail}.")
    counts = {v: sum(r["verdict"] == v for r in inside) for v in ("better", "tied", "worse")}
    best = max(inside, key=lambda r: r["gain"])
    worst = min(inside, key=lambda r: r["gain"])
    within = (f"{tie_images} test images" if tie_relative is None else f"{100 * tie_relative:g}% of the fixed period's test error")
    head = (f"Of the {len(inside)} adaptive runs compared, {counts['better']} beat the fixed period at the same "
            f"number of updates, {counts['tied']} tie with it (within {within}) and "
            f"{counts['worse']} fall behind it")
    what = ("the differences" if inside[0]["unit"] == "points"
            else "the relative differences in test error (negative is better)")
    return f"{head}{tail}; {what} range from {_difference_text(worst)} to {_difference_text(best)}."


def never_refreshed(hist: dict, family: str = "drift") -> list:
    """The labels of the runs of ``family`` that used no linearisation after the initial one."""
    upd, fam = np.asarray(hist["updates"][-1]), np.asarray(hist["families"])
    return [hist["labels"][i] for i in np.where(fam == family)[0] if upd[i] == 1]


def refresh_shares(hist: dict, by_step: int, family: str = "drift") -> dict:
    """``{label: share}`` for the runs of ``family``: the fraction of a run's refreshes (its
    linearisations after the initial one) made at evaluations up to ``by_step``; NaN for a run
    that never refreshed."""
    upd, fam = np.asarray(hist["updates"]), np.asarray(hist["families"])
    upto = np.asarray(hist["eval_step"]) <= by_step
    out = {}
    for i in np.where(fam == family)[0]:
        refreshes = upd[-1, i] - 1
        out[hist["labels"][i]] = float((upd[upto, i][-1] - 1) / refreshes) if refreshes > 0 else math.nan
    return out


__all__ = ["compare_at_equal_updates", "verdict_sentence", "never_refreshed", "refresh_shares"]
