"""Executing the book's notebooks into Jupyter Book's execution cache, several at a time.

    python -m itlin_core.tools.execution [--jobs 2] [--cache _build/.jupyter_cache]

Jupyter Book 1 (``execute_notebooks: cache`` in ``_config.yml``) executes every notebook whose
code is not in its cache, one after another. ``make book`` first runs this module, which executes
the missing notebooks of ``_toc.yml`` in ``--jobs`` processes at once and stores each executed
notebook in the same cache, exactly as Jupyter Book would (the cache is keyed on the notebook's
code, and each notebook runs with its own folder as working directory); the build that follows
then finds every notebook in the cache and only renders. A notebook that fails is not cached,
so the build executes it again and reports the failing cell as usual. Each worker, and the
kernels it starts, keeps to its own share of the CPU cores (``core_share``): left to themselves,
two notebooks each run XLA's thread pool on every core and slow each other down badly.

The notebooks start longest first (the times measured by the previous run, kept in
``execution-seconds.json`` beside the cache, or else the order of ``SLOWEST_FIRST``), so that the
longest notebook does not start last; a notebook the previous run did not time starts before
the timed ones, since it may be long. That file is written atomically and read back before it
replaces the old one (:func:`write_times`); a damaged one stops the command before any notebook
runs, with a sentence that names it (:func:`read_times`), and is never replaced.

``cache_executed`` stores a notebook executed elsewhere; the test suite uses it to hand the
notebooks nbval has just executed to the smoke book build (``conftest.py``), so that ``make
test`` executes each notebook once.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import multiprocessing
import os
import pathlib
import sys
import time

from .._io import atomic_write

# Only the order in which notebooks start when no measured times exist yet (a fresh clone):
# the slowest first, as measured at the book preset on a 2-core CPU (a fresh `make book`, 2026-11-29, the
# recorded sweeps read back: quintic_damping 116 s, digits_cnn 82, iterative_linearisation 81, gauss_newton 73,
# linearisation 69, mean_field_gn 56, xor_features 47, gradient_flow 42; refresh_rules, 223 s then, took 100 s
# alone on one core once its sweep was recorded too; the rest under 40).
SLOWEST_FIRST = ("quintic_damping", "refresh_rules", "digits_cnn", "iterative_linearisation", "gauss_newton",
                 "linearisation", "mean_field_gn", "xor_features", "gradient_flow")
TIMES_FILE = "execution-seconds.json"

#: XLA flags that make the CPU back end compile about twice as fast and run somewhat slower machine code
#: (the test suite's, ``TEST_XLA_FLAGS`` in the Makefile, which gives the measurements): results agree with the
#: default build to float32 rounding.
FAST_COMPILE_FLAGS = ("--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true "
                      "--xla_cpu_use_fusion_emitters=false --xla_cpu_opt_preset=CPU_OPT_PRESET_FAST_COMPILE "
                      "--xla_cpu_parallel_codegen_split_count=1")
#: The notebooks that compiling dominates at the ``book`` preset, executed with :data:`FAST_COMPILE_FLAGS`. Chosen
#: by timing each notebook at ``book`` alone on one core of the 2-core machine, without and with them (2026-11-28,
#: ``book/results/timings/cpu-2core-2026-11-28-xla-flags.txt``): resnet_mnist 95 -> 26 s, linearisation 56 -> 45,
#: cifar_few_updates 28 -> 12, cifar_features 35 -> 17, cifar_damping 33 -> 17. The others spend their time in long
#: compiled loops and ran slower with them (iterative_linearisation 56 -> 131 s, xor_features 28 -> 67,
#: mean_field_images 116 -> 143), so they keep XLA's default.
COMPILE_BOUND = ("resnet_mnist", "linearisation", "cifar_few_updates", "cifar_features", "cifar_damping")
#: The notebooks that, at the ``smoke`` preset of ``make test``, spend most of their time running compiled training
#: loops rather than compiling them. The test suite compiles with :data:`FAST_COMPILE_FLAGS`, whose optimisation
#: level 0 makes such loops about three times slower, so these kernels get level 1 instead
#: (:func:`smoke_kernel_flags`). Chosen by timing each notebook's kernel at ``smoke``, two at a time on the 2-core
#: machine (2026-11-28), at level 0 and at level 1 (the other flags kept): digits_cnn 75 -> 45 s,
#: refresh_rules 89 -> 50, iterative_linearisation 24 -> 20, quintic_damping 14 -> 10, mean_field_images 23 -> 20;
#: the image chapters ran slower at level 1 (resnet_mnist 76 -> 102 s, cifar_few_updates 55 -> 77, cifar_damping
#: 44 -> 61), and XLA's default flags were slower still for all but digits_cnn (62 s).
RUN_BOUND_AT_SMOKE = ("digits_cnn", "refresh_rules", "iterative_linearisation", "quintic_damping", "mean_field_images")


def toc_notebooks(root) -> list[pathlib.Path]:
    """The notebooks (``.ipynb``) that ``_toc.yml`` under ``root`` lists, in its order."""
    import yaml

    root = pathlib.Path(root)
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = []

    def walk(entries):
        for entry in entries or ():
            if "file" in entry:
                files.append(entry["file"])
            for key in ("sections", "chapters", "parts"):
                walk(entry.get(key))

    files.append(toc["root"])
    walk(toc.get("chapters"))
    walk(toc.get("parts"))
    return [root / f"{f}.ipynb" for f in files if (root / f"{f}.ipynb").is_file()]


def _read(path):
    import nbformat

    return nbformat.read(str(path), as_version=4)


def is_cached(cache_dir, path) -> bool:
    """Whether the cache at ``cache_dir`` holds an executed copy of the notebook's current code."""
    from jupyter_cache import get_cache

    try:
        get_cache(str(cache_dir)).match_cache_notebook(_read(path))
    except KeyError:
        return False
    return True


def mark_notebook(book_dir, name: str, state: str) -> None:
    """Marks notebook ``name`` as ``"expected"`` (a test session will run it) or ``"done"`` (its
    last cell has run, passed or not) in ``book_dir/_notebooks``, for :func:`wait_for_notebooks`
    (``conftest.py`` at the repository root writes the marks under ``make test``)."""
    if state not in ("expected", "done"):
        raise ValueError(f"state must be 'expected' or 'done', got {state!r}.")
    marks = pathlib.Path(book_dir) / "_notebooks"
    marks.mkdir(parents=True, exist_ok=True)
    (marks / f"{state}-{name}").touch()


def wait_for_notebooks(book_dir, timeout: float = 3600.0, poll: float = 2.0) -> list:
    """Waits until every notebook marked ``"expected"`` in ``book_dir`` (:func:`mark_notebook`)
    is marked ``"done"``, for at most ``timeout`` seconds, and returns the names still not done
    (empty when all are). With no notebook expected it returns at once."""
    marks, end = pathlib.Path(book_dir) / "_notebooks", time.monotonic() + timeout
    while True:
        expected = {p.name[len("expected-"):] for p in marks.glob("expected-*")}
        waiting = sorted(expected - {p.name[len("done-"):] for p in marks.glob("done-*")})
        if not waiting or time.monotonic() > end:
            return waiting
        time.sleep(poll)


def cache_executed(cache_dir, path, nb, seconds: float) -> None:
    """Store the executed notebook ``nb`` (read from ``path``, outputs filled) in the cache at
    ``cache_dir``, as Jupyter Book's own execution does (``myst_nb.core.execute.cache``)."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(str(cache_dir))
    cache.cache_notebook_bundle(CacheBundleIn(nb, str(pathlib.Path(path).resolve()),
                                              data={"execution_seconds": float(seconds)}),
                                check_validity=False, overwrite=True)


def smoke_kernel_flags(stem: str, flags: str) -> str:
    """The ``XLA_FLAGS`` of notebook ``stem``'s kernel under ``make test`` (``conftest.py`` at the repository root),
    given the suite's ``flags``: for a notebook of :data:`RUN_BOUND_AT_SMOKE`, the optimisation level 0 raised to 1;
    otherwise ``flags`` unchanged.

    Examples:
      >>> smoke_kernel_flags("digits_cnn", "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false")
      '--xla_backend_optimization_level=1 --xla_cpu_use_fusion_emitters=false'
      >>> smoke_kernel_flags("resnet_mnist", "--xla_backend_optimization_level=0")
      '--xla_backend_optimization_level=0'
    """
    if stem not in RUN_BOUND_AT_SMOKE:
        return flags
    return " ".join("--xla_backend_optimization_level=1" if f == "--xla_backend_optimization_level=0" else f
                    for f in flags.split())


def kernel_env(stem: str, environ) -> dict:
    """The environment a notebook's kernel starts with: ``environ``, with :data:`FAST_COMPILE_FLAGS`
    added to ``XLA_FLAGS`` for a notebook of :data:`COMPILE_BOUND` (flags already set come last, so they win).

    Examples:
      >>> kernel_env("resnet_mnist", {"XLA_FLAGS": "--x=1"})["XLA_FLAGS"] == FAST_COMPILE_FLAGS + " --x=1"
      True
      >>> kernel_env("quintic_damping", {"HOME": "/root"})
      {'HOME': '/root'}
    """
    env = dict(environ)
    if stem in COMPILE_BOUND:
        env["XLA_FLAGS"] = " ".join(f for f in (FAST_COMPILE_FLAGS, env.get("XLA_FLAGS", "")) if f)
    return env


def _execute(path: str, timeout: int):
    """Run in a worker process: execute one notebook in its own folder, its kernel started with
    :func:`kernel_env`'s environment; (json, seconds, error)."""
    import nbformat
    from jupyter_cache.executors.utils import single_nb_execution

    saved = dict(os.environ)
    os.environ.clear()         # the kernel inherits this process's environment; restored afterwards
    os.environ.update(kernel_env(pathlib.Path(path).stem, saved))
    try:
        nb = _read(path)
        result = single_nb_execution(nb, cwd=str(pathlib.Path(path).parent), timeout=timeout, allow_errors=False,
                                     meta_override=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    error = None if result.err is None else f"{type(result.err).__name__}: {result.err}"[:2000]
    return nbformat.writes(nb), result.time, error


def core_share(worker: int, workers: int):
    """The CPU cores a worker keeps (``worker`` of ``workers``): the cores this process may use,
    dealt out in turn, or None where they cannot be read or set (not Linux) or are fewer than the
    workers. XLA sizes its thread pool to the whole machine; two notebooks that each run it on
    every core slow each other down far beyond sharing (measured at the book preset on 2 cores:
    a mean-field notebook alone on one core 170 s, against over 600 s beside another one with
    both on both cores), so each worker, and the kernels it starts, keeps to its own cores."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < workers:
        return None
    return set(cores[worker::workers])


def pin_to(cores) -> None:
    """Restrict this process (and the processes it starts later) to ``cores`` (None: leave it)."""
    if cores:
        os.sched_setaffinity(0, cores)


def _init_worker(shares):
    try:
        cores = shares.get(timeout=10)
    except Exception:   # a replacement worker finds the queue empty: it runs unpinned
        cores = None
    pin_to(cores)


def _check_times(times, path) -> dict:
    if not isinstance(times, dict):
        raise ValueError(f"{path} holds a JSON {type(times).__name__}, not a map from notebook name to seconds")
    for name, seconds in times.items():
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
                or seconds < 0:
            raise ValueError(f"{path} gives notebook {name!r} the time {seconds!r}, not a number of seconds >= 0")
    return times


def read_times(path) -> dict:
    """The seconds each notebook took in the previous run, as :func:`write_times` kept them in
    ``path`` (``{}`` when there is no such file yet).

    Raises:
      ValueError: ``path`` exists but is not such a file (unreadable, cut short, not JSON, not a
        map from notebook name to a number of seconds >= 0). The sentence names the file and the
        next step; the file is left as it is (:func:`execute_into_cache` never replaces it).
    """
    path = pathlib.Path(path)
    try:
        return _check_times(json.loads(path.read_bytes().decode("utf-8")), path)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:     # JSON's and UTF-8's errors are ValueErrors
        why = str(e) if str(e).startswith(str(path)) else f"{path} cannot be read as JSON text ({e})"
        raise ValueError(f"{why}; it is not the notebook timings file this command writes. It only orders "
                         f"the notebooks: delete it (or move it away) and run the command again.") from None


def write_times(path, times: dict, overwrite: bool = False) -> None:
    """Keep ``times`` (``{notebook stem: seconds}``) in ``path`` as JSON, atomically: written to a
    temporary file in the same folder, read back (:func:`read_times`) and compared byte for byte
    and value for value, then renamed over ``path`` (:func:`itlin_core._io.atomic_write`). A file
    at ``path`` that :func:`read_times` refuses (so not one this function wrote) is left as it is
    with its ValueError, unless ``overwrite=True``."""
    path = pathlib.Path(path)
    if not overwrite:
        read_times(path)
    blob = json.dumps(_check_times(dict(times), path), indent=1, sort_keys=True, allow_nan=False).encode("utf-8")

    def verify(tmp):
        if tmp.read_bytes() != blob or read_times(tmp) != times:
            raise OSError(f"{path}: the timings read back from the new file differ from those written "
                          "(a full disk?); the old file was kept.")

    atomic_write(path, lambda f: f.write(blob), "wb", verify=verify)


def _start_order(paths, times):
    """Longest first: a notebook with no measured time (new, or never run here) may be long, so
    those start first (in the order of ``SLOWEST_FIRST``), then the measured ones by time."""
    def key(p):
        if p.stem not in times:
            return (0, SLOWEST_FIRST.index(p.stem) if p.stem in SLOWEST_FIRST else len(SLOWEST_FIRST))
        return (1, -times[p.stem])
    return sorted(paths, key=key)


def execute_into_cache(root=".", cache_dir="_build/.jupyter_cache", jobs: int = 2, timeout: int = 600,
                       out=sys.stdout) -> dict:
    """Execute the notebooks of ``root``'s table of contents that the cache lacks, ``jobs`` at a
    time, and cache the ones that succeed. Returns ``{notebook stem: seconds}`` of those executed
    (failures are reported on ``out`` and left for the build to execute and report)."""
    import nbformat

    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer (the number of notebooks run at once); got {jobs!r}")
    cache_dir = pathlib.Path(cache_dir)
    times_path = cache_dir.parent / TIMES_FILE
    times = read_times(times_path)     # a damaged file stops the run here, before any notebook runs
    todo = [p for p in toc_notebooks(root) if not is_cached(cache_dir, p)]
    if not todo:
        print("every notebook is in the execution cache already", file=out, flush=True)
        return {}
    print(f"executing {len(todo)} notebooks, {jobs} at a time", file=out, flush=True)
    done, t0 = {}, time.perf_counter()
    # spawned, not forked: the caller may have JAX (multithreaded) loaded; the kernels are new processes anyway
    context = multiprocessing.get_context("spawn")
    shares = context.Queue()
    for k in range(jobs):
        shares.put(core_share(k, jobs))
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_init_worker,
                                                initargs=(shares,)) as pool:
        futures = {pool.submit(_execute, str(p), timeout): p for p in _start_order(todo, times)}
        for i, future in enumerate(concurrent.futures.as_completed(futures), 1):
            path = futures[future]
            text, seconds, error = future.result()
            if error is None:
                cache_executed(cache_dir, path, nbformat.reads(text, as_version=4), seconds)
                done[path.stem] = seconds
            status = "ok" if error is None else f"FAILED ({error.splitlines()[0][:200]}); the build will rerun it"
            print(f"[{i}/{len(todo)}] {path.name}: {seconds:.0f} s, {status} "
                  f"({time.perf_counter() - t0:.0f} s elapsed)", file=out, flush=True)
    times.update(done)
    write_times(times_path, times)
    return done


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=".", help="the book root, holding _toc.yml (default: .)")
    parser.add_argument("--cache", default="_build/.jupyter_cache", help="Jupyter Book's execution cache folder")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="notebooks executed at once")
    parser.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1; got {args.jobs}")
    execute_into_cache(args.root, args.cache, args.jobs, args.timeout)


if __name__ == "__main__":
    main()
