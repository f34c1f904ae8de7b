"""Shared figure style for the chapters: one look, colours that mean the same thing everywhere."""

from __future__ import annotations

import math

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np

from .experiments import k_label

STYLE = {
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "figure.figsize": (9.0, 3.4),
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 8,
    "legend.frameon": False,
}


def use_style():
    """Apply the book's matplotlib style (call once per notebook)."""
    mpl.rcParams.update(STYLE)


def k_colours(Ks):
    """A colour per K, from dark (K = 1, gradient descent) to light (K large); K = inf is black."""
    finite = [k for k in Ks if k is not None and k != math.inf]
    cmap = plt.get_cmap("viridis")
    logs = np.log10([max(int(k), 1) for k in finite]) if finite else np.array([])
    top = max(logs.max(), 1.0) if len(logs) else 1.0
    out = {}
    for k in Ks:
        if k is None or k == math.inf:
            out[k] = "black"
        else:
            out[k] = cmap(0.85 * math.log10(max(int(k), 1)) / top)
    return out


def legend_labels(Ks):
    """Legend labels for a list of K values."""
    return [k_label(k) for k in Ks]


def run_colours(record):
    """A colour per run of an image-run record (:func:`itlin_core.image_runs.summarise`): by K
    as :func:`k_colours` when the runs differ in K, else along a colour map (e.g. by damping)."""
    Ks = record["Ks"]
    if len(set(map(str, Ks))) == len(Ks):
        cmap = k_colours(Ks)
        return [cmap[k] for k in Ks]
    cmap = plt.get_cmap("plasma")
    n = len(Ks)
    return [cmap(0.85 * i / max(n - 1, 1)) for i in range(n)]


def plot_record_curves(ax, record, metric: str = "test_accuracy_proxy", *, x: str = "step", label_suffix: str = "",
                       linestyle="-", colours=None, percent: bool = True, runs=None, ylabel: str | None = None):
    """Plot one metric of an image-run record against training steps (``x="step"``) or the
    number of linearisations so far (``x="feature_updates"``), one line per run, labelled by K
    (and lambda). Accuracies are shown in percent. Runs that diverged end where they diverged
    (their later evaluations are NaN in the record) and get a cross at their last finite value.
    Returns the lines."""
    steps = np.asarray(record["eval_step"], dtype=float)
    values = np.asarray(record["metrics"][metric], dtype=float) * (100.0 if percent and "accuracy" in metric else 1.0)
    colours = colours or run_colours(record)
    lines = []
    for i, label in enumerate(record["labels"]):
        if runs is not None and i not in runs:
            continue
        xs = steps if x == "step" else np.asarray(record["feature_updates"], dtype=float)[:, i]
        (line,) = ax.plot(xs, values[:, i], linestyle=linestyle, color=colours[i], label=label + label_suffix)
        lines.append(line)
        if record["diverged_at"][i] is not None:
            ok = np.isfinite(values[:, i])
            if ok.any():
                j = np.flatnonzero(ok)[-1]
                ax.plot(xs[j], values[j, i], "x", color=colours[i], markersize=8)
    ax.set_xlabel("training step" if x == "step" else "linearisations used (feature updates)")
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    elif metric.startswith("probe") and "accuracy" in metric:
        ax.set_ylabel(f"linear probe on block {metric[5]}: test accuracy" + (" (%)" if percent else ""))
    elif "accuracy" in metric:
        ax.set_ylabel(metric.split("_")[0] + " accuracy" + (" (%)" if percent else ""))
    else:
        ax.set_ylabel(metric.replace("_", " "))
    return lines


def provenance(record_or_results, preset: str | None = None) -> str:
    """One line saying where the plotted numbers come from: a recorded colab/paper run (with its
    device and date), or a smoke run on stand-in data that is *not* CIFAR10 or MNIST."""
    if isinstance(record_or_results, dict) and "data" in record_or_results and "preset" in record_or_results:
        r = record_or_results
        dev = r.get("device", {}).get("device_kind", "unknown device")
        groups = r["data"].values() if isinstance(r["data"], dict) else []
        stand_in = any(isinstance(g, dict) and g.get("stand_in") for g in groups)
        return (f"recorded {r['preset']} run on {dev}, {r.get('created', '?')}"
                + (", on stand-in data: not CIFAR10/MNIST results" if stand_in else ""))
    first = next(iter(record_or_results.values()))
    if first.get("stand_in"):
        return f"{preset or 'smoke'} run on in-format stand-in data: not CIFAR10/MNIST results"
    return f"{preset} run, just computed"


__all__ = ["use_style", "k_colours", "legend_labels", "STYLE", "run_colours", "plot_record_curves", "provenance"]
