"""The numbers behind the image chapters' figures, as CSV files a reader can download.

Each figure of an image chapter is drawn from run groups of a record. :func:`write_figure_csv`
writes those groups' curves as one long table (one row per group, run and evaluation: the
settings that tell the runs apart, the step, the feature updates used so far, and every metric
the record holds), which is everything the figure plots; :func:`write_filters_csv` writes the
first-layer filters of the filter figures. The chapters write them next to the notebook, in
``_data/`` (git ignores it), while the book is built, and link them with Sphinx's ``{download}``
role, so each file holds the record the page shows. A group missing from the record is left out;
a figure whose groups are all missing gets a file with the header only, so its link still works.
"""

from __future__ import annotations

import csv
import os
import tempfile
from pathlib import Path

import numpy as np

from .common import k_label

#: Where the chapters write their figures' data, relative to the notebook's folder.
FOLDER = "_data"
#: The columns every row starts with; the record's metrics follow, in sorted order.
KEY_COLUMNS = ("group", "run", "K", "damping", "step", "feature_updates")


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_" for c in name):
        raise ValueError(f"name must be a file name of letters, digits, '-' and '_', got {name!r}.")
    return name


def _write_atomic(path: Path, header, rows) -> Path:
    """Write a CSV through a temporary file in the same folder and rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(rows)
        os.chmod(tmp, 0o644)    # mkstemp makes it private; a download is for everyone
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _number(v) -> str:
    """A value as CSV text: integers as integers, floats with all the digits of a float32, NaN empty."""
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    v = float(v)
    return "" if not np.isfinite(v) else f"{v:.8g}"


def figure_rows(results, groups) -> tuple[list, list]:
    """``(header, rows)`` of the long table behind a figure: for each of ``groups`` that
    ``results`` (``{group: record}`` or ``None``) holds, one row per run and evaluation."""
    present = [g for g in groups if results and g in results]
    metrics = sorted({m for g in present for m, v in results[g]["metrics"].items() if np.ndim(v) == 2})
    rows = []
    for g in present:
        rec = results[g]
        steps, updates = np.asarray(rec["eval_step"]), np.asarray(rec["feature_updates"])
        dampings = rec.get("dampings") or [0.0] * len(rec["Ks"])
        values = {m: np.asarray(rec["metrics"][m], dtype=np.float64) for m in metrics if m in rec["metrics"]}
        for i, label in enumerate(rec["labels"]):
            for e, step in enumerate(steps):
                rows.append([g, label, k_label(rec["Ks"][i])[2:], _number(dampings[i]), int(step),
                             int(updates[e, i])]
                            + [_number(values[m][e, i]) if m in values else "" for m in metrics])
    return list(KEY_COLUMNS) + metrics, rows


def write_figure_csv(results, groups, name: str, folder=FOLDER) -> Path:
    """Write the curves of ``groups`` (:func:`figure_rows`) to ``<folder>/<name>.csv``
    atomically; returns the path. ``name`` is the figure's label (letters, digits, ``-``, ``_``)."""
    header, rows = figure_rows(results, list(groups))
    return _write_atomic(Path(folder) / f"{_check_name(name)}.csv", header, rows)


def write_filters_csv(rec, name: str, folder=FOLDER) -> Path:
    """Write the first-layer filters a record kept (``rec["filters"]``, shape (evaluations, runs,
    height, width, channels, filters)) to ``<folder>/<name>.csv``, one row per weight; a record
    without filters (or ``None``) gives the header only."""
    header = ["run", "step", "filter", "row", "column", "channel", "weight"]
    rows = []
    if rec is not None and "filters" in rec:
        w = np.asarray(rec["filters"], dtype=np.float64)
        for e, i, r, c, ch, k in np.ndindex(*w.shape):
            rows.append([rec["labels"][i], int(rec["eval_step"][e]), k, r, c, ch, _number(w[e, i, r, c, ch, k])])
    return _write_atomic(Path(folder) / f"{_check_name(name)}.csv", header, rows)


__all__ = ["FOLDER", "KEY_COLUMNS", "figure_rows", "write_figure_csv", "write_filters_csv"]
