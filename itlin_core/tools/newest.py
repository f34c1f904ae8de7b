"""The Colab-like check: every chapter executed at ``smoke`` outside the repository, in an
environment with the newest published jax, jaxlib, optax, numpy and matplotlib that install on
the machine's Python (not the pinned ``requirements.txt``; jax releases drop old Pythons, so the
status records the Python and every version it got) and ``itlin_core`` installed with pip from
the repository, the way a chapter's first cell installs it on Colab.

``make check-newest`` builds that environment in ``_build/newest/venv`` and runs, inside it,
``python -m itlin_core.tools.newest --book <repository> --out book/results/newest.json``: the notebooks
that ``_toc.yml`` lists are copied into an empty temporary folder (so nothing of the checkout is
on their path) and executed there at ``smoke`` with nbclient, ``--jobs`` at a time; the status (when,
which package versions, and per chapter whether it ran, how long it took, and the last line of
its error) is written atomically as JSON. The page "Execution statistics" renders it
(:func:`status_markdown`). The command exits with status 1 when a chapter failed, so CI fails
when a dependency release breaks a chapter, before a reader meets it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .._io import atomic_write

#: The environment of every executed notebook: the test preset, static sliders, no progress bars.
NOTEBOOK_ENV = {"ITLIN_PRESET": "smoke", "ITLIN_SLIDERS": "static", "ITLIN_PROGRESS": "off", "JAX_PLATFORMS": "cpu"}


def versions() -> dict:
    """The versions of Python, jax, jaxlib, optax, numpy, matplotlib and itlin_core
    (:func:`~itlin_core.book.records.software_versions`, plus matplotlib)."""
    import matplotlib

    from ..book.records import software_versions

    return dict(software_versions(), matplotlib=matplotlib.__version__)


def run_notebook(path, workdir, timeout: float = 900.0) -> dict:
    """Execute the notebook ``path`` with ``workdir`` as its working directory (nbclient, a
    ``python3`` kernel started with this process's environment). Returns ``{"chapter", "passed",
    "seconds", "error"}`` with the error's type and last line, or ``None``."""
    import nbclient
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    start, error = time.perf_counter(), None
    try:
        nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(workdir)}}).execute()
    except Exception as err:                    # a failing cell, a timeout or a dead kernel
        lines = str(err).strip().splitlines()
        error = f"{type(err).__name__}: {lines[-1] if lines else ''}"[:300]
    return {"chapter": Path(path).stem, "passed": error is None,
            "seconds": round(time.perf_counter() - start, 1), "error": error}


def check(book_root, out, *, timeout: float = 900.0, jobs: int = 1, log=print) -> dict:
    """Copy every notebook that ``book_root/_toc.yml`` lists into an empty temporary folder,
    execute them there ``jobs`` at a time with :data:`NOTEBOOK_ENV` set (:func:`run_notebook`),
    and write the status to ``out`` (JSON, atomically; chapters in the book's order). Returns the
    status. ``itlin_core`` must be imported from an installed copy, not from the checkout at
    ``book_root`` (a ``ValueError`` otherwise), so that the check tests the install it reports."""
    from concurrent.futures import ThreadPoolExecutor

    import itlin_core

    from .execution import toc_notebooks

    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive whole number of notebooks run at once, got {jobs!r}.")
    notebooks = toc_notebooks(book_root) if (Path(book_root) / "_toc.yml").is_file() else []
    if not notebooks:
        raise ValueError(f"book_root {str(book_root)!r} has no _toc.yml listing notebooks; pass the "
                         "repository's root folder.")
    if Path(itlin_core.__file__).resolve().parent == (Path(book_root) / "itlin_core").resolve():
        raise ValueError("itlin_core is imported from the checkout at book_root, not from a copy installed with "
                         "pip, so the check would not test the install; run it through `make check-newest`.")

    def one(path):
        r = run_notebook(path, path.parent, timeout)
        log(f"{r['chapter']}: {'passed' if r['passed'] else 'FAILED'} in {r['seconds']:.0f} s"
            + (f" ({r['error']})" if r["error"] else ""))
        return r

    saved = {k: os.environ.get(k) for k in NOTEBOOK_ENV}
    os.environ.update(NOTEBOOK_ENV)              # the kernels inherit it
    try:
        with tempfile.TemporaryDirectory(prefix="itlin-newest-") as tmp:
            copies = [Path(shutil.copy(path, Path(tmp) / path.name)) for path in notebooks]
            with ThreadPoolExecutor(jobs) as pool:
                rows = list(pool.map(one, copies))
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    status = {"format": 1, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "preset": "smoke", "versions": versions(), "chapters": rows}
    atomic_write(out, lambda f: f.write(json.dumps(status, indent=1) + "\n"), "w")
    return status


def status_markdown(path) -> str:
    """The status file ``path`` (written by :func:`check`) as a sentence and a Markdown table, or
    a sentence saying that none has been written.

    Examples:
      >>> import tempfile, pathlib
      >>> p = pathlib.Path(tempfile.mkdtemp()) / "newest.json"
      >>> print(status_markdown(p))
      No Colab-like check has been recorded yet (`make check-newest` writes one).
      >>> _ = p.write_text(json.dumps({"format": 1, "created": "2026-11-27T18:00:00+00:00",
      ...     "preset": "smoke", "versions": {"python": "3.12.1", "jax": "0.12.0", "jaxlib": "0.12.0",
      ...     "optax": "0.2.8", "numpy": "2.5.5", "matplotlib": "3.11.2", "itlin_core": "0.1.0"},
      ...     "chapters": [{"chapter": "gradient_flow", "passed": True, "seconds": 12.0, "error": None}]}))
      >>> print(status_markdown(p).splitlines()[0])
      On 2026-11-27, 1 of 1 chapters ran at `smoke` outside the repository with jax 0.12.0, jaxlib 0.12.0, optax 0.2.8, numpy 2.5.5 and matplotlib 3.11.2 (Python 3.12.1), `itlin_core` installed with pip from the repository.
    """
    path = Path(path)
    if not path.exists():
        return "No Colab-like check has been recorded yet (`make check-newest` writes one)."
    try:
        status = json.loads(path.read_text())
        v, rows = status["versions"], status["chapters"]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"the status file {str(path)!r} is damaged ({err}); run `make check-newest` again.") from None
    ran = sum(r["passed"] for r in rows)
    head = (f"On {status['created'][:10]}, {ran} of {len(rows)} chapters ran at `{status['preset']}` outside the "
            f"repository with jax {v['jax']}, jaxlib {v['jaxlib']}, optax {v['optax']}, numpy {v['numpy']} and "
            f"matplotlib {v['matplotlib']} (Python {v['python']}), `itlin_core` installed with pip from the repository.")
    table = ["| chapter | ran | seconds |", "| --- | --- | --- |"]
    table += [f"| {{doc}}`{r['chapter']}` | {'yes' if r['passed'] else 'no: ' + (r['error'] or '').replace('|', '/')} "
              f"| {r['seconds']:.0f} |" for r in rows]
    return head + "\n\n" + "\n".join(table)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m itlin_core.tools.newest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--book", required=True, help="the repository's root folder (holds _toc.yml and book/)")
    parser.add_argument("--out", required=True, help="the status file to write (JSON)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one cell may run (default 900)")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks executed at once (default 1)")
    args = parser.parse_args(argv)
    try:
        status = check(args.book, args.out, timeout=args.timeout, jobs=args.jobs)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    failed = [r["chapter"] for r in status["chapters"] if not r["passed"]]
    print(f"{len(status['chapters']) - len(failed)} of {len(status['chapters'])} chapters ran; status in {args.out}")
    return 1 if failed else 0


__all__ = ["NOTEBOOK_ENV", "versions", "run_notebook", "check", "status_markdown", "main"]

if __name__ == "__main__":
    sys.exit(main())
