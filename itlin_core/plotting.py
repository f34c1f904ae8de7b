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


__all__ = ["use_style", "k_colours", "legend_labels", "STYLE"]
