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
import io
import os
from pathlib import Path

import numpy as np

from .._io import atomic_write
from .common import k_label

#: Where the chapters write their figures' data, relative to the notebook's folder.
FOLDER = "_data"
#: The columns every row starts with; the record's metrics follow, in sorted order.
KEY_COLUMNS = ("group", "run", "K", "damping", "step", "feature_updates")
#: The columns of a filters file.
FILTER_COLUMNS = ("run", "step", "filter", "row", "column", "channel", "weight")


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_" for c in name):
        raise ValueError(f"name must be a file name of letters, digits, '-' and '_', got {name!r}.")
    return name


def _check_replaceable(path: Path, header) -> None:
    """Refuse to replace a file this writer did not make: one whose first line is not the header
    of the same kind of table (a figure's: :data:`KEY_COLUMNS` first; filters': :data:`FILTER_COLUMNS`).
    An empty file, or one of ours cut short after its header line, holds nothing to lose."""
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not a figure's data file; move it away or choose another name.")
    if not path.exists():
        return
    ours = KEY_COLUMNS if tuple(header[:len(KEY_COLUMNS)]) == KEY_COLUMNS else tuple(header)
    try:
        with open(path, newline="", encoding="utf-8") as f:
            first = next(csv.reader(f), None)
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        why = f"it cannot be read as CSV text: {e}"
    else:
        if first is None or tuple(first[:len(ours)]) == ours:
            return
        why = f"its first line is {','.join(first)[:80]!r}, not the header {','.join(ours)!r}"
    raise ValueError(f"{path} was not written by figure_data ({why}); it was left as it is. Move it away, or "
                     "pass overwrite=True to replace it.")


def _write_atomic(path: Path, header, rows, overwrite: bool = False) -> Path:
    """Write a CSV to a temporary file in the same folder, read it back and compare every cell
    with what was meant, then rename it over ``path`` (:func:`itlin_core._io.atomic_write`); a
    file there that this writer did not make is refused unless ``overwrite``."""
    if not overwrite:
        _check_replaceable(path, header)
    want = [["" if c is None else str(c) for c in row] for row in [header, *rows]]
    buffer = io.StringIO()
    csv.writer(buffer).writerows(want)
    blob = buffer.getvalue().encode("utf-8")

    def write(f):
        f.write(blob)
        os.fchmod(f.fileno(), 0o644)    # mkstemp makes it private; a download is for everyone

    def verify(tmp: Path):
        with open(tmp, newline="", encoding="utf-8") as f:
            back = list(csv.reader(f))
        if back != want:
            raise OSError(f"{path}: the table read back from the new file differs from the one written "
                          "(a full disk?); the old file was kept.")

    atomic_write(path, write, "wb", verify=verify)
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


def write_figure_csv(results, groups, name: str, folder=FOLDER, overwrite: bool = False) -> Path:
    """Write the curves of ``groups`` (:func:`figure_rows`) to ``<folder>/<name>.csv``
    atomically; returns the path. ``name`` is the figure's label (letters, digits, ``-``, ``_``).

    The table goes to a temporary file in the same folder, is read back and compared cell by
    cell, and only then renamed over ``<name>.csv``; killed or failing at any point, the writer
    leaves the previous file whole. An existing file is replaced only if this writer made it (its
    first line is a figure table's header; an empty file, or one cut short after that line,
    counts as ours);
    anything else raises ValueError and is left as it is, unless ``overwrite=True``.

    Examples:
      >>> import tempfile
      >>> rec = {"labels": ["K=10"], "Ks": [10], "dampings": [0.0], "eval_step": [0, 20],
      ...        "feature_updates": np.array([[1], [2]]), "metrics": {"test_accuracy_proxy": np.array([[0.1], [0.25]])}}
      >>> path = write_figure_csv({"fig2": rec}, ["fig2", "fig3"], "fig-2", folder=tempfile.mkdtemp())  # no fig3
      >>> path.name
      'fig-2.csv'
      >>> print(path.read_text(), end="")
      group,run,K,damping,step,feature_updates,test_accuracy_proxy
      fig2,K=10,10,0,0,1,0.1
      fig2,K=10,10,0,20,2,0.25
    """
    header, rows = figure_rows(results, list(groups))
    return _write_atomic(Path(folder) / f"{_check_name(name)}.csv", header, rows, overwrite)


def write_filters_csv(rec, name: str, folder=FOLDER, overwrite: bool = False) -> Path:
    """Write the first-layer filters a record kept (``rec["filters"]``, shape (evaluations, runs,
    height, width, channels, filters)) to ``<folder>/<name>.csv``, one row per weight; a record
    without filters (or ``None``) gives the header only. Written, and an existing file replaced,
    as by :func:`write_figure_csv` (the header that marks the file as ours: :data:`FILTER_COLUMNS`).

    Examples:
      >>> import tempfile
      >>> folder = tempfile.mkdtemp()
      >>> rec = {"labels": ["K=1"], "eval_step": [0, 10], "filters": np.array([0.0, 0.5]).reshape(2, 1, 1, 1, 1, 1)}
      >>> print(write_filters_csv(rec, "filters", folder=folder).read_text(), end="")
      run,step,filter,row,column,channel,weight
      K=1,0,0,0,0,0,0
      K=1,10,0,0,0,0,0.5
      >>> write_filters_csv(None, "no-filters", folder=folder).read_text().splitlines()   # the header only
      ['run,step,filter,row,column,channel,weight']
    """
    header = list(FILTER_COLUMNS)
    rows = []
    if rec is not None and "filters" in rec:
        w = np.asarray(rec["filters"], dtype=np.float64)
        for e, i, r, c, ch, k in np.ndindex(*w.shape):
            rows.append([rec["labels"][i], int(rec["eval_step"][e]), k, r, c, ch, _number(w[e, i, r, c, ch, k])])
    return _write_atomic(Path(folder) / f"{_check_name(name)}.csv", header, rows, overwrite)


__all__ = ["FOLDER", "KEY_COLUMNS", "FILTER_COLUMNS", "figure_rows", "write_figure_csv", "write_filters_csv"]
