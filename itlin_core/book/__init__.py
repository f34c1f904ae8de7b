"""The book layer: everything that exists to run, record and show the book's chapters.

It builds on the algorithms of :mod:`itlin_core` (imported as ``ic``) and is never imported by
them. One module per chapter, named after its notebook, holds that chapter's settings per preset
and its runs (and, for the image chapters, its figures); the rest is shared:

* :mod:`~itlin_core.book.common`: presets (``ITLIN_PRESET``), labels for K, feature-update counts;
* :mod:`~itlin_core.book.records`: the results files in ``book/results/``;
* :mod:`~itlin_core.book.image_runs`, :mod:`~itlin_core.book.image_records`,
  :mod:`~itlin_core.book.image_chapters`: the CIFAR10/MNIST run groups, their records, and the
  table of the four image chapters;
* :mod:`~itlin_core.book.plotting`, :mod:`~itlin_core.book.widgets`,
  :mod:`~itlin_core.book.exercises`: figure style, sliders, exercise checkers;

The maintainers' tools (recording runs, the build's executor, benchmarks) are in
:mod:`itlin_core.tools`, which imports this layer; nothing here imports them.
"""
