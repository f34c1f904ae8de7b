"""The recording queue: every run group of the four image chapters at one preset, recorded one
group per record command, in a fixed order, within a wall-clock budget per call, and resumable.

``python -m itlin_core.tools.queue --preset colab --data DIR --budget 540`` records, in the order
of :func:`queue` (the chapters of :data:`~itlin_core.book.image_chapters.CHAPTERS`, each
chapter's groups in its table's order), every group that ``book/results`` does not yet hold
with the chapter's current settings (:func:`pending`). Each group runs as its own
``python -m itlin_core.tools.record CHAPTER --names GROUP`` process (so that its device memory
peak is its own), which checkpoints as it trains. When the budget is spent the running group is
stopped (its last checkpoint stays on disk, written atomically) and the command exits with
status 3; the same command run again skips what is recorded and resumes the interrupted group
from its checkpoint, bit for bit. So a lent GPU whose commands may run at most ten minutes
records a whole preset over several calls of, say, nine minutes each. Exit status 0 means the
queue is empty.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from ..book.image_chapters import CHAPTERS, run_groups
from ..book.image_records import config_matches
from ..book.records import load_results


def queue(preset: str) -> list:
    """Every ``(chapter, group)`` of the image chapters at ``preset``, in recording order."""
    return [(chapter, name) for chapter in CHAPTERS for name in run_groups(chapter, preset)]


def pending(preset: str, results_dir=None) -> list:
    """The ``(chapter, group)`` pairs of :func:`queue` that the results files do not hold with the
    chapter's current settings (missing, or recorded with other settings)."""
    out = []
    for chapter in CHAPTERS:
        record = load_results(chapter, (preset,), results_dir=results_dir)
        recorded = {} if record is None else record["data"]
        groups = run_groups(chapter, preset)
        out += [(chapter, name) for name, cfg in groups.items()
                if name not in recorded or not config_matches(recorded[name].get("config", {}), cfg)]
    return out


def record_command(chapter: str, group: str, preset: str, data_dir, *, verify: bool = True,
                   data_note: str | None = None, results_dir=None, checkpoint_dir=None,
                   python: Sequence[str] = (sys.executable, "-m", "itlin_core.tools.record")) -> list:
    """The record command that records one group (``python`` is the program that runs it)."""
    cmd = [*python, chapter, "--preset", preset, "--data", str(data_dir), "--names", group]
    if not verify:
        cmd.append("--no-verify")
    for flag, value in (("--data-note", data_note), ("--results-dir", results_dir),
                        ("--checkpoint-dir", checkpoint_dir)):
        if value is not None:
            cmd += [flag, str(value)]
    return cmd


def run_queue(preset: str, data_dir, *, budget: float = 540.0, log=print, **command) -> dict:
    """Record the :func:`pending` groups of ``preset`` one after another for at most ``budget``
    seconds (``command``: the keyword arguments of :func:`record_command`). Returns
    ``{"recorded": [...], "stopped": (chapter, group) or None, "left": pending pairs, "failed":
    [...]}``; a group whose command fails is reported and the queue goes on with the next."""
    if not (isinstance(budget, (int, float)) and budget > 0):
        raise ValueError(f"budget must be a positive number of seconds, got {budget!r}.")
    results_dir = command.get("results_dir")
    start, done, failed, stopped = time.monotonic(), [], [], None
    for chapter, group in pending(preset, results_dir):
        left = budget - (time.monotonic() - start)
        if left <= 0:
            break
        log(f"queue: {chapter}/{group} ({left:.0f} s of the budget left)")
        try:
            rc = subprocess.run(record_command(chapter, group, preset, data_dir, **command), timeout=left).returncode
        except subprocess.TimeoutExpired:
            stopped = (chapter, group)
            log(f"queue: budget spent during {chapter}/{group}; its checkpoint stays, run the same command again")
            break
        (done if rc == 0 else failed).append((chapter, group))
        if rc:
            log(f"queue: {chapter}/{group} failed (exit status {rc}); going on with the next group")
    left = pending(preset, results_dir)
    log(f"queue: {len(done)} group(s) recorded in this call, {len(left)} left")
    return {"recorded": done, "stopped": stopped, "left": left, "failed": failed}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m itlin_core.tools.queue", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", required=True, help="laptop, colab or paper")
    parser.add_argument("--data", required=True, help="folder holding CIFAR10 and MNIST (see the record command)")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds this call may run (default 540)")
    parser.add_argument("--no-verify", action="store_true", help="do not check the files' checksums (a copy)")
    parser.add_argument("--data-note", help="what the data are (required with --no-verify)")
    parser.add_argument("--results-dir", help="where the records go (default: book/results)")
    parser.add_argument("--checkpoint-dir", help="where checkpoints go (default: the book's checkpoint folder)")
    parser.add_argument("--list", action="store_true", help="print the pending groups and stop")
    args = parser.parse_args(argv)
    try:
        if args.list:
            for chapter, group in pending(args.preset, args.results_dir):
                print(f"{chapter}/{group}")
            return 0
        out = run_queue(args.preset, Path(args.data), budget=args.budget, verify=not args.no_verify,
                        data_note=args.data_note, results_dir=args.results_dir, checkpoint_dir=args.checkpoint_dir)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0 if not out["left"] else 3


__all__ = ["queue", "pending", "record_command", "run_queue", "main"]

if __name__ == "__main__":
    sys.exit(main())
