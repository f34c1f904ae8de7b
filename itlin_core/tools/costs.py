"""What the recorded image runs cost, read back from the files the runs wrote: the tables of the
page "Running the chapters on a GPU".

Three kinds of file, none typed by hand:

* the records ``book/results/<chapter>-<preset>.json``: each run group keeps its wall time,
  compile time and the device allocator's peak (:func:`itlin_core.book.image_chapters.measured_costs`);
* a queue log ``book/results/timings/<machine>-<date>-queue.log``: one line ``<unix time> begin
  <chapter> <group>`` or ``... end <chapter> <group> rc=<code>`` per record command, written by
  the shell script beside it, so a chapter's whole time (processes, data loading and all) is the
  span from its first ``begin`` to its last ``end``;
* benchmark output ``book/results/timings/<machine>-<date>-bench.txt``: what ``python -m
  itlin_core.tools.bench`` printed, saved with ``>``.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..book.image_chapters import CHAPTERS
from ..book.records import default_results_dir, group_origin, load_results

#: The columns of :func:`group_costs`.
COLUMNS = ("chapter", "run group", "device", "runs", "steps", "compile (s)", "steps/s after compiling",
           "peak memory (GiB)", "group time (s)")


def _timings_dir(results_dir=None) -> Path:
    return Path(results_dir or default_results_dir()) / "timings"


def short_device(kind: str) -> str:
    """A device's model for a narrow table column ("H100" for "NVIDIA H100 80GB HBM3"); the whole
    name where it holds no model number. The line under the table keeps the full names.

    Examples:
      >>> [short_device(k) for k in ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "Tesla T4", "cpu")]
      ['H100', 'H200', 'T4', 'cpu']
    """
    m = re.search(r"\b([A-Z]{1,2}\d{1,4}[A-Za-z]?)\b", kind)
    return m.group(1) if m else kind


def group_costs(preset: str = "colab", platform: str = "gpu", results_dir=None) -> list:
    """One row per run group of every image chapter recorded at ``preset`` on ``platform``
    (:data:`COLUMNS`), and ``(chapter, device, jax version, date)`` for each device and date a
    chapter's groups were computed on (:func:`~itlin_core.book.records.group_origin`: a record
    may merge groups from several machines): ``(rows, sources)``. Chapters without such a record
    are left out (see :func:`missing`)."""
    rows, sources = [], []
    for chapter in CHAPTERS:
        record = load_results(chapter, (preset,), results_dir=results_dir)
        if record is None or record.get("device", {}).get("platform") != platform:
            continue
        for name, rec in record["data"].items():
            origin = group_origin(record, name)
            device = origin["device"]["device_kind"]
            source = (chapter, device, origin["versions"]["jax"], origin["created"][:10])
            sources += [] if source in sources else [source]
            steps = int(rec["eval_step"][-1])
            compile_s, seconds = rec.get("compile_seconds"), float(rec["seconds"])
            rate = steps / (seconds - compile_s) if compile_s is not None and seconds > compile_s else None
            peak = rec.get("peak_device_bytes")
            rows.append((chapter, name, short_device(device), len(rec["labels"]), f"{steps:,}",
                         "-" if compile_s is None else f"{compile_s:.0f}", "-" if rate is None else f"{rate:.0f}",
                         "-" if peak is None else f"{peak / 2**30:.2f}", f"{seconds:.0f}"))
    return rows, sources


def missing(preset: str = "colab", platform: str = "gpu", results_dir=None) -> list:
    """The image chapters with no record at ``preset`` from ``platform``."""
    out = []
    for chapter in CHAPTERS:
        record = load_results(chapter, (preset,), results_dir=results_dir)
        if record is None or record.get("device", {}).get("platform") != platform:
            out.append(chapter)
    return out


def chapter_times(log) -> dict:
    """``{chapter: (seconds, groups finished, every command succeeded)}`` from a queue log: the
    span from the chapter's first ``begin`` to its last ``end``, for chapters whose every begun
    group ended.

    Raises:
      ValueError: a line that is not ``<unix time> <word> ...``."""
    begun, ended, ok = {}, {}, {}
    for n, line in enumerate(Path(log).read_text().splitlines(), 1):
        parts = line.split()
        if len(parts) < 2 or not parts[0].isdigit():
            raise ValueError(f"{log}, line {n}: expected '<unix time> <event> ...', got {line!r}.")
        t, event = int(parts[0]), parts[1]
        if event in ("begin", "end") and len(parts) >= 4:
            chapter = parts[2]
            if event == "begin":
                begun.setdefault(chapter, []).append(t)
            else:
                ended.setdefault(chapter, []).append(t)
                ok[chapter] = ok.get(chapter, True) and line.endswith("rc=0")
    return {c: (max(ended[c]) - min(begun[c]), len(ended[c]), ok[c])
            for c in begun if len(ended.get(c, ())) == len(begun[c])}


def bench_result(path) -> tuple:
    """``(device line, IL step / SGD step)`` from the saved output of ``python -m
    itlin_core.tools.bench``.

    Raises:
      ValueError: a file without the benchmark's ``device:`` and ratio lines."""
    text = Path(path).read_text()
    device = re.search(r"^device: (.+)$", text, re.M)
    ratio = re.search(r"^IL step / SGD step = ([0-9.]+)", text, re.M)
    if not device or not ratio:
        raise ValueError(f"{path} is not the output of 'python -m itlin_core.tools.bench' (no device or ratio line).")
    return device.group(1), float(ratio.group(1))


def costs_markdown(preset: str = "colab", results_dir=None) -> str:
    """The GPU page's measured costs as Markdown: the per-group table of every chapter recorded on
    a GPU at ``preset``, each chapter's whole time from the queue logs, the chapters not recorded
    yet, and the benchmark ratios of every saved benchmark output."""
    rows, sources = group_costs(preset, results_dir=results_dir)
    out = []
    if rows:
        out += ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
        out += ["| " + " | ".join(f"`{c}`" if i < 2 else str(c) for i, c in enumerate(r)) + " |" for r in rows]
        out += ["", "Measured on: " + "; ".join(f"{c}: {dev}, JAX {jax}, {date}" for c, dev, jax, date in sources)
                + ". *Steps/s after compiling* divides the group's steps by its wall time less its compile time "
                "(evaluations included); *peak memory* is the GPU allocator's peak in a process that recorded that "
                "group alone."]
    else:
        out += [f"No image chapter has a `{preset}` record from a GPU yet."]
    left = missing(preset, results_dir=results_dir)
    if left:
        out += ["", f"Not recorded on a GPU at `{preset}` yet: " + ", ".join(f"`{c}`" for c in left) + "."]
    timings = _timings_dir(results_dir)
    logs = sorted(timings.glob("*-queue.log")) if timings.is_dir() else []
    for log in logs:
        times = chapter_times(log)
        if times:
            out += ["", f"Whole chapters, from `{log.name}` (the queue run of that day, every record command, Python "
                        "start and data loading included; groups recorded later are not in it): " + "; ".join(f"`{c}` {s / 60:.1f} min ({n} groups{'' if ok else ', a command failed'})"
                                                  for c, (s, n, ok) in times.items()) + "."]
    benches = sorted(timings.glob("*-bench.txt")) if timings.is_dir() else []
    if benches:
        out += ["", "| saved benchmark output | device | IL step / SGD step |", "| --- | --- | --- |"]
        out += [f"| `{b.name}` | {bench_result(b)[0]} | {bench_result(b)[1]:.2f} |" for b in benches]
    return "\n".join(out)


__all__ = ["COLUMNS", "short_device", "group_costs", "missing", "chapter_times", "bench_result", "costs_markdown"]
