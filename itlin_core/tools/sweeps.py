"""Record the slowest sweeps of the CPU chapters (:mod:`itlin_core.book.sweeps`).

``python -m itlin_core.tools.sweeps CHAPTER ...`` executes each chapter notebook at the ``book``
preset with ``ITLIN_SWEEPS=record``, one after the other on this machine, which rewrites the
sweeps files its cells own (``book/results/sweeps/``). With ``--preset smoke`` it records the
files ``make test`` reads (``book/results/sweeps/smoke/``) and executes the notebooks as
``make test`` does: on one core, with the test suite's XLA flags
(:func:`itlin_core.tools.execution.smoke_kernel_flags`) and one BLAS thread, so that the image
chapters' run groups, which are read back only in the same environment
(``sweeps.recorded(..., exact=True)``), are read back by the suite. Commit the files as written.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from ..book.records import default_results_dir
from . import execution


def main(argv=None) -> int:
    import nbformat
    from nbclient import NotebookClient
    ap = argparse.ArgumentParser(prog="python -m itlin_core.tools.sweeps", description=__doc__.split("\n\n")[0])
    ap.add_argument("chapters", nargs="+", help="notebook names under book/, e.g. mean_field_scaling")
    ap.add_argument("--preset", choices=("book", "smoke"), default="book", help="the preset to record (default book)")
    a = ap.parse_args(argv)
    book = default_results_dir().parent
    missing = [ch for ch in a.chapters if not (book / f"{ch}.ipynb").is_file()]
    if missing:
        print(f"error: no notebook {', '.join(str(book / f'{ch}.ipynb') for ch in missing)}; CHAPTER is a notebook's "
              "name under book/, e.g. mean_field_scaling.", file=sys.stderr)
        return 2
    for ch in a.chapters:
        os.environ.update(ITLIN_SWEEPS="record", ITLIN_PRESET=a.preset, ITLIN_PROGRESS="off", ITLIN_SLIDERS="static")
        if a.preset == "smoke":
            os.environ.update(XLA_FLAGS=execution.smoke_kernel_flags(ch, execution.FAST_COMPILE_FLAGS),
                              OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", JAX_PLATFORMS="cpu")
            if hasattr(os, "sched_getaffinity"):
                execution.pin_to({min(os.sched_getaffinity(0))})
        t0 = time.time()
        nb = nbformat.read(book / f"{ch}.ipynb", as_version=4)
        NotebookClient(nb, timeout=7200, kernel_name="python3", resources={"metadata": {"path": str(book)}}).execute()
        print(f"{ch}: executed at the {a.preset} preset in {time.time() - t0:.0f} s; sweeps recorded.", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
