"""Shared figure style for the chapters: one look, colours that mean the same thing everywhere."""

from __future__ import annotations

import math

import matplotlib as mpl
import matplotlib.scale  # noqa: F401  (mpl.scale)
import matplotlib.ticker  # noqa: F401  (mpl.ticker)
import matplotlib.pyplot as plt
import numpy as np

import itlin_core as ic

from .common import k_label, parse_rule, rule_family

#: The book's figure style. Figures are shown at the width of the page's text column (660 px on
#: a desktop screen, measured in the built book), so what a reader sees of a font is roughly
#: ``size_pt / 72 * 660 / figure_width_in`` pixels: the sizes below keep every text at 12 px
#: (9 pt) or more up to figures ``MAX_FIG_WIDTH`` inches wide (issue 42); wider figures would
#: shrink it, so a figure with more panels than fit puts them in two rows instead.
STYLE = {
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "figure.figsize": (9.0, 3.4),
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 12,            # text without a size of its own (annotations, ax.text)
    "axes.titlesize": 13,
    "axes.labelsize": 12.5,
    "xtick.labelsize": 12,
    "ytick.labelsize": 12,
    "legend.fontsize": 12,
    "legend.frameon": False,
    "figure.titlesize": 13,
    "lines.linewidth": 1.8,
}

#: The widest figure the book draws, in inches: wider ones put their panels in two rows.
MAX_FIG_WIDTH = 9.0


def plain_number(x: float, exponent: bool = False) -> str:
    """A tick value of a log axis as plain text: ``0.01``, ``1``, ``100``, ``2e-5``, ``1e6`` (with
    ``exponent``: ``1e-2``, ``1e0``, ``1e2``).

    Matplotlib writes log ticks as 10 with a raised exponent, drawn at 70 % of the label's size, below
    the book's smallest legible text (issue 42); plain numbers keep the whole label at tick size.

    Examples:
      >>> [plain_number(v) for v in (1e-6, 2.5e-5, 0.001, 0.03, 1.0, 100.0, 1e4, 1e6)]
      ['1e-6', '2.5e-5', '0.001', '0.03', '1', '100', '10000', '1e6']
      >>> [plain_number(v, exponent=True) for v in (0.03, 1.0, 100.0)]
      ['3e-2', '1e0', '1e2']
    """
    if x == 0 or (not exponent and 1e-3 <= abs(x) < 1e5):
        return np.format_float_positional(x, precision=3, fractional=False, trim="-")
    mantissa, exponent = f"{x:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


class PlainLogFormatter(mpl.ticker.LogFormatter):
    """Matplotlib's log-axis formatter (which ticks get a label), labels as :func:`plain_number`, one
    form per axis: written out within 0.001 ... 100000, all as exponents on an axis reaching beyond."""

    def _num_to_string(self, x, vmin, vmax):
        lo, hi = sorted((abs(vmin), abs(vmax)))
        return plain_number(x, exponent=not (lo >= 1e-3 * (1 - 1e-9) and hi < 1e5))


class PlainLogScale(mpl.scale.LogScale):
    """The ``"log"`` scale with :class:`PlainLogFormatter` labels (:func:`use_style` registers it)."""

    def set_default_locators_and_formatters(self, axis):
        super().set_default_locators_and_formatters(axis)
        axis.set_major_formatter(PlainLogFormatter(self.base))
        axis.set_minor_formatter(PlainLogFormatter(self.base, labelOnlyBase=self.subs is not None))


def use_style():
    """Apply the book's matplotlib style (call once per notebook). It also makes every log axis
    label its ticks with plain numbers (:class:`PlainLogScale`), in full-size text.

    Examples:
      >>> with mpl.rc_context():       # here only inside the block; a notebook calls it once, for all figures
      ...     use_style()
      ...     mpl.rcParams["figure.dpi"], mpl.rcParams["axes.spines.top"]
      (110.0, False)
    """
    mpl.rcParams.update(STYLE)
    mpl.scale.register_scale(PlainLogScale)


#: The part of viridis the finite periods are spread over: from blue-purple (K = 1) to
#: yellow-green, leaving out the darkest end (so that K = 1 stays distinct from K = inf's
#: black) and the palest (which hardly shows on white).
K_CMAP_RANGE = (0.2, 0.85)


def k_colours(Ks):
    """A colour per K, from dark (K = 1, gradient descent) to light (K large); K = inf is black.

    The distinct finite periods are spread evenly over viridis by rank, not by log K, so
    neighbouring periods (K = 1 and K = 10 beside K = 1000) never get near-identical colours.

    Examples:
      >>> colours = k_colours([1, 10, 1000, None])
      >>> colours[None], len(set(colours.values())), colours[1] == plt.get_cmap("viridis")(K_CMAP_RANGE[0])
      ('black', 4, True)
    """
    finite = sorted({int(k) for k in Ks if k is not None and not isinstance(k, str) and k != math.inf})
    cmap, (lo, hi) = plt.get_cmap("viridis"), K_CMAP_RANGE
    rank = {k: (lo + (hi - lo) * i / max(len(finite) - 1, 1)) for i, k in enumerate(finite)}
    # rule specs (``"geometric(...)"``, ``"on_drift(...)"``) take the colour of their family in
    # RULE_STYLE, darker for each further rule of the family
    specs = {fam: [k for k in dict.fromkeys(Ks) if isinstance(k, str) and rule_family(k) == fam]
             for fam in ("geometric", "drift")}

    def colour(k):
        if isinstance(k, str):
            same = specs[rule_family(k)]
            base = np.array(mpl.colors.to_rgb(RULE_STYLE[rule_family(k)][1]))
            return tuple(base * (1 - 0.45 * same.index(k) / max(len(same) - 1, 1)))
        return "black" if k is None or k == math.inf else cmap(rank[int(k)])

    return {k: colour(k) for k in Ks}


def run_colours(record):
    """A colour per run of an image-run record (:func:`itlin_core.book.image_records.summarise`): by K
    as :func:`k_colours` when the runs differ in K, else along a colour map (e.g. by damping)."""
    Ks = record["Ks"]
    if len(set(map(str, Ks))) == len(Ks):
        cmap = k_colours(Ks)
        return [cmap[k] for k in Ks]
    cmap = plt.get_cmap("plasma")
    n = len(Ks)
    return [cmap(0.75 * i / max(n - 1, 1)) for i in range(n)]


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


#: The smallest ``lr * curvature / 2`` a stability panel draws (smaller values sit on it).
STABILITY_FLOOR = 1e-3


def plot_stability(ax, record, colours=None):
    """``lr * curvature / 2`` of each run of an SGD record that measured its curvature
    (:func:`itlin_core.max_curvature` at each evaluation's anchor) against the training step, on a
    log scale, with the stability bound 1 dotted (above it, gradient descent on that
    linearisation's quadratic model grows along its sharpest direction). A run that diverged
    ends at its last positive finite value with a cross. Values below :data:`STABILITY_FLOOR` (a
    collapsed network just before it diverges) are drawn at that floor, so that one of them does
    not stretch the axis over many decades. Returns the ratios ``(evaluations, runs)``."""
    ratio = np.asarray(record["metrics"]["curvature"], float) * record["config"]["lr"] / 2
    steps = np.asarray(record["eval_step"], float)
    colours = colours or run_colours(record)
    for i, label in enumerate(record["labels"]):
        ok = np.flatnonzero(np.isfinite(ratio[:, i]) & (ratio[:, i] > 0))    # a zero has no place on the log axis
        shown = np.where(ratio[:, i] > 0, np.maximum(ratio[:, i], STABILITY_FLOOR), np.nan)
        ax.plot(steps, shown, color=colours[i], label=label)
        if record["diverged_at"][i] is not None and len(ok):
            ax.plot(steps[ok[-1]], shown[ok[-1]], "x", color=colours[i], markersize=8)
    ax.axhline(1.0, color="k", lw=1, ls=(0, (1, 3)))
    ax.set(yscale="log", xlabel="training step", ylabel=r"$\eta\,\kappa_{\max}/2$ at the anchor")
    return ratio


def stand_in_title(results) -> str:
    """A second title line warning that the figure shows stand-in data (the ``smoke`` preset's
    in-format random images), or ``""`` for a record of real data: which record a figure shows is
    said once, in the chapter's section *The runs*, not in every title."""
    groups = (results or {}).values()
    return "\n(stand-in data: not CIFAR10/MNIST results)" if any(g.get("stand_in") for g in groups) else ""


def stability_figure(results, source, groups) -> dict | None:
    """One panel per group of ``groups`` (names in ``results``; a dict ``{name: panel title}`` names
    the panels) that measured its curvature: :func:`plot_stability` of its runs. Returns
    ``{"crossed": (group, label) of every run whose ratio exceeded 1, "diverged": likewise for the
    runs that diverged, "largest": the largest ratio}``, or ``None`` (and says so) when no such
    group is in the record shown.

    Examples:
      >>> import matplotlib; matplotlib.use("Agg")
      >>> rec = {"metrics": {"curvature": np.array([[10.0, 10.0], [50.0, 300.0]])}, "config": {"lr": 0.01},
      ...        "eval_step": [0, 10], "labels": ["K=1", "K=10"], "Ks": [1, 10], "diverged_at": [None, 10]}
      >>> out = stability_figure({"fig3": rec}, "a made-up record", ["fig3", "fig11"])   # fig11: not in it
      source: a made-up record
      >>> plt.close(plt.gcf())
      >>> out   # lr * curvature / 2 peaked at 0.25 for K=1 and 1.5 for K=10
      {'crossed': [('fig3', 'K=10')], 'diverged': [('fig3', 'K=10')], 'largest': 1.5}
      >>> stability_figure({"fig3": rec}, "a made-up record", ["fig2"])
      Not shown: the record shown did not measure the curvature of its linearisations.
    """
    recs = [(g, results[g]) for g in groups if g in (results or {}) and "curvature" in results[g]["metrics"]]
    if not recs:
        print("Not shown: the record shown did not measure the curvature of its linearisations.")
        return None
    cols = min(2, len(recs))                    # two panels a row: legible at page width
    rows = -(-len(recs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(min(5.5 * cols, MAX_FIG_WIDTH), 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(recs):]:
        ax.set_visible(False)
    out = {"crossed": [], "diverged": [], "largest": -math.inf}
    titles = [(groups.get(g) if isinstance(groups, dict) else None) or f"{g} (lr {rec['config']['lr']:g})"
              for g, rec in recs]    # a group by its name in the settings table, unless named here
    for ax, (name, rec), title in zip(axes.flat, recs, titles):
        ratio = plot_stability(ax, rec)
        ax.set_title(title)
        legend_below(ax, ncol=3)             # under the panel: the runs' lines fill it
        peak = np.nanmax(np.where(np.isfinite(ratio), ratio, np.nan), axis=0)
        out["crossed"] += [(name, label) for label, r in zip(rec["labels"], peak) if r > 1]
        out["diverged"] += [(name, label) for label, d in zip(rec["labels"], rec["diverged_at"]) if d is not None]
        out["largest"] = max(out["largest"], float(np.nanmax(peak)))
    fig.tight_layout()
    plt.show()
    print(f"source: {source}")
    return out


def panels(n: int, row_height: float = 3.4, **kwargs):
    """``n`` panels two to a row at the widest legible width, laid out by matplotlib's constrained
    layout (which leaves room for legends under the panels): three panels become a 2 x 2 grid
    whose fourth cell is left free, for a legend (:func:`figure_legend`). Returns ``(fig, axes,
    spare)``, ``spare`` the free cell or ``None``; ``kwargs`` go to ``plt.subplots``.

    Examples:
      >>> fig, axes, spare = panels(3)
      >>> len(axes), spare is not None, fig.get_size_inches().tolist()
      (3, True, [9.0, 6.8])
      >>> plt.close(fig)
    """
    cols = 1 if n == 1 else 2
    fig, grid = plt.subplots(-(-n // cols), cols, figsize=(MAX_FIG_WIDTH, row_height * -(-n // cols)),
                             squeeze=False, layout="constrained", **kwargs)
    cells = list(grid.flat)
    for ax in cells[n:]:
        ax.axis("off")
    return fig, cells[:n], (cells[n] if len(cells) > n else None)


def figure_legend(fig, axes, where=None, ncol: int = 2, order=None):
    """One legend for the panels ``axes``, each label once (sorted by ``order(label)`` if given):
    in the free cell ``where`` of :func:`panels` if given, else under the whole figure (which
    must use constrained layout).

    Examples:
      >>> fig, axes, spare = panels(3)
      >>> for ax in axes:
      ...     _ = ax.plot([0, 1], [0, 1], label="K=1")
      >>> [t.get_text() for t in figure_legend(fig, axes, spare).get_texts()]
      ['K=1']
      >>> plt.close(fig)
    """
    seen = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    if order is not None:
        seen = dict(sorted(seen.items(), key=lambda item: order(item[0])))
    if where is not None:
        return where.legend(list(seen.values()), list(seen), loc="center", frameon=False)
    return fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncol=ncol, frameon=False)


def legend_below(ax, ncol: int = 2, **kwargs):
    """A legend under the axes, below the x label, so that it covers no data (the layout makes room
    for it); for panels whose curves fill every corner.

    Examples:
      >>> from matplotlib.figure import Figure
      >>> ax = Figure().subplots()
      >>> _ = ax.plot([0, 1], [0, 1], label="K=1")
      >>> legend_below(ax).get_bbox_to_anchor() is not None
      True
    """
    return ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=ncol, frameon=False, **kwargs)


def mark_feature_updates(ax, record, colours=None, runs=None):
    """Dotted lines at the feature updates of every run with a finite K > 1 or a geometric rule
    (``runs``: only these), in the run's colour (else grey), on axes without vertical grid lines."""
    ax.grid(False, axis="x")
    last = int(record["eval_step"][-1])
    for i, K in enumerate(record["Ks"]):
        if K is None or (runs is not None and i not in runs):
            continue
        if isinstance(K, str):   # a rule: its scheduled updates; a drift rule's are not known in advance
            at = ic.relin_steps(parse_rule(K), last + 1)[1:] if rule_family(K) == "geometric" else []
        elif K <= 1:
            continue
        else:
            at = range(K, last + 1, K)
        for s in at:
            ax.axvline(s, color="grey" if colours is None else colours[i], lw=0.6, ls=":")


def k_axis(ax, Ks) -> list:
    """A logarithmic x axis over the periods ``Ks`` with a tick and label per K; K = inf (``None``)
    sits one decade beyond the largest finite K. Returns the x position of each K.

    Examples:
      >>> import matplotlib; matplotlib.use("Agg")
      >>> fig, ax = plt.subplots()
      >>> k_axis(ax, [1, 10, None]), [t.get_text() for t in ax.get_xticklabels()]
      ([1, 10, 100], ['1', '10', '∞'])
      >>> plt.close(fig)
    """
    finite = [k for k in Ks if k is not None]
    x_inf = 10 * max(finite) if finite else 1
    xs = [k if k is not None else x_inf for k in Ks]
    ax.set_xscale("log")
    ax.set_xticks(sorted(set(xs)), [k_label(k)[2:] for k in sorted(set(Ks), key=lambda k: x_inf if k is None else k)])
    ax.minorticks_off()
    ax.set_xlabel("relinearisation period K (steps)")
    return xs


#: Marker and colour of each family of relinearisation rules (the chapter on refresh rules).
RULE_STYLE = {"fixed": ("o", "C0"), "geometric": ("s", "C2"), "drift": ("^", "C3")}


def rules_against_updates(ax, hist, metric: str, *, ylabel: str, ratio: float | None = None, log_y: bool = False,
                          annotate_fixed: bool = True):
    """The final ``metric`` of every run of a refresh-rule sweep (:mod:`itlin_core.book.refresh_rules`)
    against the feature updates it used (log axis): the fixed periods joined by a line (their K on a top
    axis where ``annotate_fixed`` and the neighbours leave room), the geometric runs (growth factor
    ``ratio``, named in the legend unless ``None``) and the drift-triggered runs as markers
    (:data:`RULE_STYLE`). Runs that diverged are left out.

    Examples:
      >>> import matplotlib; matplotlib.use("Agg")
      >>> hist = {"families": ["fixed", "fixed", "geometric", "drift"], "labels": ["K=1", "K=10", "g", "d"],
      ...         "updates": np.array([[1, 1, 1, 1], [100, 10, 6, 4]]),
      ...         "acc": np.array([[0.1, 0.1, 0.1, 0.1], [0.9, 0.8, 0.85, np.nan]])}   # the drift run diverged
      >>> fig, ax = plt.subplots()
      >>> rules_against_updates(ax, hist, "acc", ylabel="final accuracy", ratio=2.0)
      >>> [(line.get_label(), line.get_xdata().tolist()) for line in ax.get_lines()]
      [('fixed period K', [10, 100]), ('geometric, ratio 2', [6]), ('drift-triggered', [])]
      >>> plt.close(fig)
    """
    fam = np.asarray(hist["families"])
    val, upd = np.asarray(hist[metric][-1], float), np.asarray(hist["updates"][-1])
    names = {"fixed": "fixed period K", "drift": "drift-triggered",
             "geometric": "geometric periods" if ratio is None else f"geometric, ratio {ratio:g}"}
    for family, (marker, colour) in RULE_STYLE.items():
        idx = np.where((fam == family) & np.isfinite(val))[0]
        idx = idx[np.argsort(upd[idx])]
        ax.plot(upd[idx], val[idx], marker=marker, color=colour, ls="-" if family == "fixed" else "none", ms=7,
                label=names[family])
        if family == "fixed" and annotate_fixed:  # their K on a top axis, clear of the data
            shown = []                           # no two labels closer than 0.6 decades
            for i in idx:
                shown += [i] if not shown or math.log10(upd[i] / upd[shown[-1]]) >= 0.6 else []
            ax.set_xscale("log")
            top = ax.twiny()                     # the same log x axis at the top, with ticks at those K
            top.set(xscale="log", xlim=ax.get_xlim(), xlabel="K of the fixed period")
            top.set_xticks([upd[i] for i in shown], [hist["labels"][i].removeprefix("K=") for i in shown])
            top.xaxis.set_minor_locator(mpl.ticker.NullLocator())
            top.grid(False)
    ax.set(xscale="log", yscale="log" if log_y else "linear", ylabel=ylabel,
           xlabel="feature updates used\n(initial linearisation included)")


__all__ = ["plain_number", "PlainLogFormatter", "PlainLogScale", "STABILITY_FLOOR", "panels", "figure_legend", "legend_below", "plot_stability", "stability_figure", "use_style", "k_colours", "STYLE", "MAX_FIG_WIDTH", "run_colours", "plot_record_curves", "mark_feature_updates", "k_axis", "RULE_STYLE", "rules_against_updates"]
