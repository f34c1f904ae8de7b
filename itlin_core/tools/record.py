"""Record an image chapter's run groups on real data, for the book to plot.

``python -m itlin_core.tools.record CHAPTER --preset laptop --data DIR`` trains the chapter's run
groups at the preset (:func:`itlin_core.book.image_chapters.run_groups`) on the real data set in
``DIR`` (CIFAR10 as ``DIR/cifar-10-batches-py/`` or its archive, MNIST as the four idx files in
``DIR`` or ``DIR/mnist``), with a progress bar and a checkpoint per group, and writes
``book/results/<chapter>-<preset>.json`` (:func:`itlin_core.book.records.save_results`,
atomically). Interrupted, the same command resumes every group from its checkpoint exactly
(bit for bit). ``--names`` records some groups only and merges them into the preset's existing
record, so a chapter can be recorded over several sittings.

Files are checked against their published checksums unless ``--no-verify``; a copy that is not
the original (a re-encoded CIFAR10) must then say what it is with ``--data-note``, which the
record keeps and the chapters print under their figures. Stand-in data are never recorded:
the command loads only the folder it is given, and refuses, with a sentence naming what is
missing, a folder without the files.

The runs of each group are split over every visible device (``--devices N``: the first N;
:mod:`itlin_core.sharding`), and the command prints the mesh it uses. On several hosts, start the
same command on each with ``--coordinator HOST:PORT --num-processes N --process-id I`` (or
``--distributed`` alone where :func:`jax.distributed.initialize` finds the cluster itself, as on
Slurm): the mesh then spans every host, each host reads the data from its own ``--data`` folder,
and process 0 alone writes the checkpoints (which every host must see, on a shared file system)
and the record.

Each group's record keeps its costs: wall time, compile time and the device allocator's peak
(:func:`itlin_core.book.image_chapters.measured_costs`), which the command prints at the end. The
peak counts from the start of the process, so to measure each group's own peak, record one group
per command (``--names fig2``, then ``--names fig3``, ...).

Groups recorded on different machines (two GPU sessions, say) come together with ``--merge
FILE[:GROUP,...] ...`` (:func:`merge_records`), which trains nothing: each group keeps the device,
software and date it was computed with, in the group's ``origin`` where they differ from the
record's (:func:`itlin_core.book.records.group_origin`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax

import itlin_core as ic

from ..book.image_chapters import CHAPTERS, RECORDED_PRESETS, cost_line, run_chapter, run_groups
from ..book.image_records import config_matches
from ..book.image_runs import image_data
from ..book.records import (ORIGIN_FIELDS, default_checkpoint_dir, device_description, group_origin, keep_origin,
                      load_results, results_path, save_results, software_versions)


def missing_data(dataset: str, data_dir) -> str | None:
    """A sentence saying what ``data_dir`` lacks for ``dataset``, or ``None`` when the files are
    there (their contents are checked when they are loaded)."""
    root = Path(data_dir)
    if not root.is_dir():
        return f"--data {root} is not a folder."
    if dataset == "cifar10":
        folders = [root / "cifar-10-batches-py", root]
        if (root / "cifar-10-python.tar.gz").exists() or any(
                all((f / n).exists() for n in ("data_batch_1", "test_batch")) for f in folders):
            return None
        return (f"--data {root} holds no CIFAR10: expected {root / 'cifar-10-batches-py'}/ (data_batch_1 ... "
                f"data_batch_5, test_batch) or {root / 'cifar-10-python.tar.gz'}.")
    names = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    for folder in (root / "mnist", root):
        if all((folder / n).exists() or (folder / (n + ".gz")).exists() for n in names):
            return None
    return f"--data {root} holds no MNIST: expected the four files {', '.join(n + '.gz' for n in names)} in it."


def stale_groups(recorded: dict, groups: dict) -> tuple[dict, list]:
    """``(kept, stale)``: the groups of a record (``{name: record}``) that match the chapter's
    settings ``groups`` now, and the names of those that do not (settings changed since, or a
    group the chapter no longer has). A ValueError names a group whose record or ``config`` is not a
    dict (a hand-edited record)."""
    if not isinstance(recorded, dict):
        raise ValueError(f"its data must be a dict of run groups, got {type(recorded).__name__}")
    for k, v in recorded.items():
        if not isinstance(v, dict) or not isinstance(v.get("config", {}), dict):
            what = "record" if not isinstance(v, dict) else "config"
            raise ValueError(f"the {what} of its group {k!r} must be a dict, got "
                             f"{type(v if what == 'record' else v['config']).__name__}")
    kept = {k: v for k, v in recorded.items() if k in groups and config_matches(v.get("config", {}), groups[k])}
    return kept, [k for k in recorded if k not in kept]


def record_chapter(chapter: str, preset: str, data_dir, *, names=None, verify: bool = True,
                   data_note: str | None = None, checkpoint_dir=None, results_dir=None, progress=None,
                   mesh="auto") -> Path:
    """Train and record ``chapter`` at ``preset`` on the data in ``data_dir``; returns the path of
    the record written. ``names``: these groups only, merged into the existing record of the
    preset. Each group's runs are split over the devices of ``mesh`` (default every visible
    device); only process 0 writes the record. Raises ValueError (naming what is wrong) for an
    unknown chapter, group or preset, missing data files, or ``verify=False`` without a
    ``data_note``; an unreadable existing record before training, or, should it become unreadable
    while the groups train, after saving the new groups beside it (:func:`save_results`)."""
    if chapter not in CHAPTERS:
        raise ValueError(f"unknown chapter {chapter!r}; the image chapters are {', '.join(CHAPTERS)}.")
    if preset not in RECORDED_PRESETS:
        raise ValueError(f"--preset must be one of {', '.join(RECORDED_PRESETS)}, got {preset!r}.")
    if not verify and not (data_note and data_note.strip()):
        raise ValueError("--no-verify records data that are not checked against the originals: say what they are "
                         "with --data-note (e.g. 'CIFAR10 decoded from a JPEG copy').")
    groups = run_groups(chapter, preset)
    names = list(groups) if not names else list(names)
    unknown = [n for n in names if n not in groups]
    if unknown:
        raise ValueError(f"unknown run group(s) {unknown} for chapter {chapter!r}; it has {list(groups)}.")
    datasets = sorted({groups[n].dataset for n in names})
    for dataset in datasets:
        problem = missing_data(dataset, data_dir)
        if problem:
            raise ValueError(problem)
    try:    # read the existing record (and its groups' settings) before training: a damaged one costs no training
        previous = load_results(chapter, (preset,), results_dir=results_dir)
    except ValueError as err:
        raise ValueError(f"{err} Nothing was trained and the file was left as it is.") from None
    try:
        kept, stale = stale_groups(previous["data"], groups) if previous is not None else ({}, [])
    except ValueError as err:
        raise ValueError(f"{results_path(chapter, preset, results_dir)} is damaged: {err}. Restore it (git checkout) "
                         "or record the run again. Nothing was trained and the file was left as it is.") from None
    data = {d: image_data(d, preset, data_dir=data_dir, stand_in=False, verify=verify, progress=progress)
            for d in datasets}
    results = run_chapter(chapter, preset, data=data, names=names, checkpoint_dir=checkpoint_dir, progress=progress,
                          mesh=mesh)
    if any(r["stand_in"] for r in results.values()):    # cannot happen with stand_in=False; never record it
        raise RuntimeError("stand-in data reached a record; nothing was written.")
    if set(names) != set(groups):     # merge with the record as it is now: another record command of this
        try:                           # chapter may have saved meanwhile
            previous = load_results(chapter, (preset,), results_dir=results_dir)
            kept, stale = stale_groups(previous["data"], groups) if previous is not None else ({}, [])
        except ValueError:             # damaged meanwhile: save_results keeps it and saves the new groups beside it
            previous, kept, stale = None, {}, []
    if previous is not None and set(names) != set(groups):
        for name in stale:
            if name not in results:
                print(f"note: {chapter}/{name} in the existing record was made with other settings than the chapter's "
                      "now; it is left out of the new record (git history keeps it). Record it again with "
                      f"--names {name}.", flush=True)
        kept = keep_origin(previous, [k for k in kept if k not in results], device_description(), software_versions())
        results = {**kept, **results}
        results = {k: results[k] for k in groups if k in results}    # the chapter's order
    note = data_note.strip() if data_note else None
    if not ic.sharding.is_writer():    # another host of a multi-host run: process 0 writes the record
        return results_path(chapter, preset, results_dir)
    return save_results(chapter, preset, results, seed=0, results_dir=results_dir, note=note)


def merge_records(chapter: str, preset: str, sources, *, results_dir=None) -> Path:
    """Merge run groups recorded elsewhere (on another machine, in another session) into the
    record of ``chapter`` at ``preset`` in ``results_dir``; returns the path written.

    ``sources``: ``[(file, names)]``, each a record written by the record command (a file
    ``<chapter>-<preset>.json``) and the groups to take from it (``None``: all of them). A group
    comes from the first source that gives it; the existing record's groups that no source gives
    are kept. Every group taken must hold the chapter's current settings. The merged file says
    where its newest source was computed, and each group computed on another device or with
    other software keeps its own :func:`~itlin_core.book.records.group_origin`, so nothing is
    relabelled. The sources must agree on the seed and the data note. A ValueError names a
    missing file or group, a group recorded with other settings, or sources that disagree."""
    if chapter not in CHAPTERS:
        raise ValueError(f"unknown chapter {chapter!r}; the image chapters are {', '.join(CHAPTERS)}.")
    if preset not in RECORDED_PRESETS:
        raise ValueError(f"--preset must be one of {', '.join(RECORDED_PRESETS)}, got {preset!r}.")
    groups, target = run_groups(chapter, preset), results_path(chapter, preset, results_dir).resolve()
    taken = []
    for file, names in sources:
        path = Path(file)
        if path.name != target.name:
            raise ValueError(f"--merge {file}: a record of {chapter} at {preset} is a file named {target.name}.")
        record = load_results(chapter, (preset,), results_dir=path.parent)
        if record is None:
            raise ValueError(f"--merge {file}: no such file.")
        names = list(record["data"]) if names is None else list(names)
        for name in names:
            if name not in record["data"]:
                raise ValueError(f"--merge {file}: it holds no group {name!r}; it has {list(record['data'])}.")
            if name not in groups or not config_matches(record["data"][name].get("config", {}), groups[name]):
                raise ValueError(f"--merge {file}: its group {name!r} was recorded with other settings than the "
                                 "chapter's now (or the chapter no longer has it); record it again instead.")
        taken.append((record, names))
    existing = load_results(chapter, (preset,), results_dir=target.parent)
    if existing is not None:
        kept, _ = stale_groups(existing["data"], groups)
        taken.append((existing, list(kept)))
    if not taken:
        raise ValueError("--merge needs at least one record file.")
    for field in ("seed", "note"):
        values = {repr(record.get(field)) for record, _ in taken}
        if len(values) > 1:
            raise ValueError(f"the records to merge disagree on their {field} ({', '.join(sorted(values))}); "
                             "merge only records of the same seed and data.")
    newest = max((record for record, _ in taken), key=lambda r: r["created"])
    origin = {k: newest[k] for k in ORIGIN_FIELDS}
    merged = {}
    for record, names in taken:
        for name, group in keep_origin(record, names, origin["device"], origin["versions"]).items():
            merged.setdefault(name, group)
    merged = {k: merged[k] for k in groups if k in merged}
    return save_results(chapter, preset, merged, seed=newest["seed"], results_dir=target.parent,
                        note=newest.get("note"), origin=origin)


def _merge_sources(specs) -> list:
    """``--merge FILE[:GROUP,GROUP...]`` arguments as :func:`merge_records`' sources."""
    out = []
    for spec in specs:
        file, _, names = spec.partition(":")
        out.append((file, [n for n in names.split(",") if n] or None))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m itlin_core.tools.record", description=__doc__.split("\n\n")[0])
    parser.add_argument("chapter", help=f"one of {', '.join(CHAPTERS)}")
    parser.add_argument("--preset", required=True, help=f"one of {', '.join(RECORDED_PRESETS)}")
    parser.add_argument("--data", help="folder holding the data set (see the module docstring)")
    parser.add_argument("--merge", nargs="+", metavar="FILE[:GROUP,...]",
                        help="merge these records (made elsewhere) into the one in --results-dir; trains nothing")
    parser.add_argument("--names", nargs="+", help="record these run groups only (merged into the existing record)")
    parser.add_argument("--no-verify", action="store_true", help="do not check the files' checksums (a copy)")
    parser.add_argument("--data-note", help="what the data are, kept in the record (required with --no-verify)")
    parser.add_argument("--checkpoint-dir", help="where checkpoints go (default: the book's checkpoint folder)")
    parser.add_argument("--results-dir", help="where the record goes (default: book/results)")
    parser.add_argument("--devices", type=int, help="split the runs over the first N devices (default: all)")
    parser.add_argument("--distributed", action="store_true", help="a multi-host run: jax.distributed.initialize()")
    parser.add_argument("--coordinator", help="multi-host: HOST:PORT of process 0 (implies --distributed)")
    parser.add_argument("--num-processes", type=int, help="multi-host: the number of processes (hosts)")
    parser.add_argument("--process-id", type=int, help="multi-host: this process's index, 0 ... N-1")
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    args = parser.parse_args(argv)
    try:
        return _record(args)
    except Exception as err:  # noqa: BLE001 - every failure ends in one sentence (--debug: the traceback)
        if args.debug:
            raise
        print(f"error: {failure_sentence(err, args)}", file=sys.stderr)
        return EXIT_CODES["input" if isinstance(err, ValueError) else _kind(err) or "other"]
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(f"\ninterrupted: {_resume_hint(args)}", file=sys.stderr)
        return 130


#: The command's exit status per kind of failure: a bad argument, file or setting (``ValueError``),
#: data that are missing or fail their checksum, the device's memory, anything else. 0: recorded;
#: 130: interrupted (Ctrl-C).
EXIT_CODES = {"input": 2, "data": 3, "memory": 4, "other": 1}


def _kind(err: BaseException):
    """``"data"``, ``"memory"`` or ``None``: the kind of a failure that is not a ValueError."""
    if isinstance(err, ic.datasets.DatasetError):
        return "data"
    if isinstance(err, MemoryError) or "RESOURCE_EXHAUSTED" in str(err) or "out of memory" in str(err).lower():
        return "memory"
    return None


def _resume_hint(args) -> str:
    where = args.checkpoint_dir or default_checkpoint_dir()
    return (f"each group keeps its progress up to its last checkpoint in {where}; run the same command again "
            "to resume from there (groups already recorded are not trained again).")


def failure_sentence(err: BaseException, args) -> str:
    """The one sentence the command prints for ``err``: what went wrong, the file involved where
    there is one, and what to do next."""
    kind = _kind(err)
    text = str(err).strip() or type(err).__name__
    if isinstance(err, ValueError):
        return text
    if kind == "data":    # the library's hints name its own argument; the command's flags are these
        text = text.replace("load it with verify=False", "record it with --no-verify and say what it is with "
                            "--data-note").replace("pass verify=False", "pass --no-verify (with --data-note)")
        text = text.replace("(it is downloaded again with verify=True)", "and put an intact copy in its place")
        return text.replace("pass data_dir= (or set ITLIN_DATA_DIR)", "pass --data")
    if kind == "memory":
        return (f"the device ran out of memory while training ({type(err).__name__}). Record fewer groups at once "
                "(--names), a smaller preset, or on a device with more memory; "
                + _resume_hint(args))
    return (f"{type(err).__name__}: {text}. The command does not know this failure: run it again with --debug "
            "to see the traceback, and report it. Meanwhile, " + _resume_hint(args))


def _record(args) -> int:
    """The command's work, once its arguments are parsed."""
    if args.merge:
        if args.data or args.names:
            raise ValueError("--merge trains nothing: give it without --data and --names (name the groups to take "
                             "as FILE:GROUP,GROUP).")
        path = merge_records(args.chapter, args.preset, _merge_sources(args.merge), results_dir=args.results_dir)
        record = load_results(args.chapter, (args.preset,), results_dir=args.results_dir)
        for name in record["data"]:
            print(f"{args.chapter}/{name}: {group_origin(record, name)['device']['device_kind']}, "
                  f"{group_origin(record, name)['created'][:10]}")
        print(f"merged into {path}")
        return 0
    if not args.data:
        raise ValueError("--data is required to record (the folder holding the data set); --merge FILE ... merges "
                         "records made elsewhere instead.")
    mesh = _mesh(args)
    print(f"mesh: {ic.describe_mesh(mesh)}", flush=True)
    path = record_chapter(args.chapter, args.preset, args.data, names=args.names, verify=not args.no_verify,
                          data_note=args.data_note, checkpoint_dir=args.checkpoint_dir,
                          results_dir=args.results_dir, progress="text", mesh=mesh)
    record = load_results(args.chapter, (args.preset,), results_dir=args.results_dir)
    for name in (args.names or record["data"]) if record is not None and ic.sharding.is_writer() else ():
        print(f"{args.chapter}/{name}: {cost_line(record['data'][name])}")
    print(f"recorded {path}")
    return 0


def _mesh(args):
    """The run mesh the command's flags ask for, after starting JAX's multi-host runtime if asked."""
    if args.coordinator or args.distributed or args.num_processes is not None or args.process_id is not None:
        given = {k: v for k, v in (("coordinator_address", args.coordinator), ("num_processes", args.num_processes),
                                   ("process_id", args.process_id)) if v is not None}
        if given and len(given) < 3:
            raise ValueError("--coordinator, --num-processes and --process-id go together (or use --distributed "
                             f"alone where JAX detects the cluster); got only {', '.join(given)}.")
        jax.distributed.initialize(**given)
    devices = jax.devices()
    if args.devices is not None and not 1 <= args.devices <= len(devices):
        raise ValueError(f"--devices must be between 1 and the {len(devices)} visible device(s), got {args.devices}.")
    return ic.run_mesh(devices[:args.devices] if args.devices else devices)


__all__ = ["missing_data", "stale_groups", "record_chapter", "merge_records", "failure_sentence", "EXIT_CODES", "main"]

if __name__ == "__main__":
    sys.exit(main())
