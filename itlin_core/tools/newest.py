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

With ``--pinned requirements.txt`` (``make check-newest`` passes it), when the newest jax, jaxlib,
optax, numpy and matplotlib are exactly the pinned versions, the chapters have just been executed
with those very versions by ``make test``; the check then executes only the book's first and last
notebooks (the install from the repository and, in the closing chapter, every recorded result read
from outside the checkout) and records the others as not re-run, with that reason. CI spends its
minutes on the check only when a release differs from the pins (measured on the 2-core machine:
the 16 chapters took 703 kernel-seconds, 6 minutes at two at a time, on 2026-11-27).
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

#: The packages whose newest versions are compared with their pins (``--pinned``).
COMPARED = ("jax", "jaxlib", "optax", "numpy", "matplotlib")
#: Why a chapter was not re-run when the versions equal the pins (the status and the page say it).
SAME_AS_PINS = "not re-run: the same versions as requirements.txt, with which `make test` executes it"

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


def pins(requirements) -> dict:
    """``{name: version}`` for every ``name==version`` line of the requirements file ``requirements``.

    Examples:
      >>> import tempfile, pathlib
      >>> p = pathlib.Path(tempfile.mkdtemp()) / "requirements.txt"
      >>> _ = p.write_text("# numerics\\njax==0.10.2\\noptax>=0.2\\nnumpy==2.4.6  # arrays\\n")
      >>> pins(p)
      {'jax': '0.10.2', 'numpy': '2.4.6'}
    """
    out = {}
    for line in Path(requirements).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = (t.strip() for t in line.split("==", 1))
            out[name.lower()] = version
    return out


def to_execute(notebooks: list, got: dict, pinned=None) -> tuple[list, bool]:
    """``(the notebooks to execute, whether the versions ``got`` are the pins)``: all of
    ``notebooks``, or only the first and the last where every package of :data:`COMPARED` has in
    ``got`` the version the requirements file ``pinned`` pins (``None``: never).

    Examples:
      >>> import tempfile, pathlib
      >>> p = pathlib.Path(tempfile.mkdtemp()) / "requirements.txt"
      >>> got = dict(jax="0.10.2", jaxlib="0.10.2", optax="0.2.8", numpy="2.4.6", matplotlib="3.11.2")
      >>> _ = p.write_text("".join(f"{k}=={v}\\n" for k, v in got.items()))
      >>> to_execute(["a", "b", "c"], got, p), to_execute(["a", "b", "c"], got)
      ((['a', 'c'], True), (['a', 'b', 'c'], False))
      >>> to_execute(["a", "b", "c"], dict(got, jax="0.11.0"), p)
      (['a', 'b', 'c'], False)
    """
    same = pinned is not None and all(pins(pinned).get(k) == got.get(k) for k in COMPARED)
    return (list(notebooks) if not same or len(notebooks) <= 2 else [notebooks[0], notebooks[-1]]), same


def check(book_root, out, *, timeout: float = 900.0, jobs: int = 1, log=print, pinned=None) -> dict:
    """Copy every notebook that ``book_root/_toc.yml`` lists into an empty temporary folder,
    execute them there ``jobs`` at a time with :data:`NOTEBOOK_ENV` set (:func:`run_notebook`),
    and write the status to ``out`` (JSON, atomically; chapters in the book's order). Returns the
    status. ``itlin_core`` must be imported from an installed copy, not from the checkout at
    ``book_root`` (a ``ValueError`` otherwise), so that the check tests the install it reports.
    With ``pinned`` (a requirements file) and every package of :data:`COMPARED` at its pinned
    version, only the first and the last notebook are executed; the others are recorded with
    ``"passed": None`` and the reason :data:`SAME_AS_PINS`."""
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

    got = versions()
    run, same = to_execute(notebooks, got, pinned)
    if same:
        log(f"jax, jaxlib, optax, numpy and matplotlib are the versions pinned in {pinned}: executing "
            f"{len(run)} of {len(notebooks)} chapters (the others ran with these versions in `make test`).")
    saved = {k: os.environ.get(k) for k in NOTEBOOK_ENV}
    os.environ.update(NOTEBOOK_ENV)              # the kernels inherit it
    try:
        with tempfile.TemporaryDirectory(prefix="itlin-newest-") as tmp:
            copies = [Path(shutil.copy(path, Path(tmp) / path.name)) for path in run]
            with ThreadPoolExecutor(jobs) as pool:
                done = {r["chapter"]: r for r in pool.map(one, copies)}
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    rows = [done.get(path.stem) or {"chapter": path.stem, "passed": None, "seconds": None, "error": SAME_AS_PINS}
            for path in notebooks]
    status = {"format": 1, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "preset": "smoke", "versions": got, "chapters": rows}
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
    ran = sum(r["passed"] is True for r in rows)
    skipped = sum(r["passed"] is None for r in rows)
    head = (f"On {status['created'][:10]}, {ran} of {len(rows)} chapters ran at `{status['preset']}` outside the "
            f"repository with jax {v['jax']}, jaxlib {v['jaxlib']}, optax {v['optax']}, numpy {v['numpy']} and "
            f"matplotlib {v['matplotlib']} (Python {v['python']}), `itlin_core` installed with pip from the repository.")
    if skipped:
        head += (f" These were the versions pinned in `requirements.txt`, with which `make test` executes every "
                 f"chapter, so the other {skipped} were not re-run.")

    def ran_text(r):
        if r["passed"] is None:
            return "not re-run (pinned versions)"
        return "yes" if r["passed"] else "no: " + (r["error"] or "").replace("|", "/")

    table = ["| chapter | ran | seconds |", "| --- | --- | --- |"]
    table += [f"| {{doc}}`{r['chapter']}` | {ran_text(r)} | "
              f"{'' if r['seconds'] is None else format(r['seconds'], '.0f')} |" for r in rows]
    return head + "\n\n" + "\n".join(table)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m itlin_core.tools.newest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--book", required=True, help="the repository's root folder (holds _toc.yml and book/)")
    parser.add_argument("--out", required=True, help="the status file to write (JSON)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one cell may run (default 900)")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks executed at once (default 1)")
    parser.add_argument("--pinned", default=None,
                        help="a requirements file: where the newest versions are its pins, execute only the "
                             "first and last chapters (make test has just executed all of them with those versions)")
    args = parser.parse_args(argv)
    if args.pinned is not None and not Path(args.pinned).is_file():
        print(f"error: --pinned {args.pinned!r} is not a file; pass the repository's requirements.txt.", file=sys.stderr)
        return 2
    try:
        status = check(args.book, args.out, timeout=args.timeout, jobs=args.jobs, pinned=args.pinned)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    failed = [r["chapter"] for r in status["chapters"] if r["passed"] is False]
    ran = sum(r["passed"] is True for r in status["chapters"])
    print(f"{ran} of {len(status['chapters'])} chapters ran, {len(failed)} failed; status in {args.out}")
    return 1 if failed else 0


__all__ = ["NOTEBOOK_ENV", "COMPARED", "SAME_AS_PINS", "versions", "pins", "to_execute", "run_notebook", "check", "status_markdown", "main"]

if __name__ == "__main__":
    sys.exit(main())
