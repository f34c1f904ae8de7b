"""The maintainers' tools: what records, builds and times the book, as opposed to what a chapter
runs (:mod:`itlin_core.book`) and the algorithms (:mod:`itlin_core`).

They import both layers and neither imports them (a test checks), so a reader following a
chapter's code never meets them:

* :mod:`~itlin_core.tools.record`, :mod:`~itlin_core.tools.queue`: recording the image chapters
  on real data (``python -m itlin_core.tools.record``, ``python -m itlin_core.tools.queue``);
* :mod:`~itlin_core.tools.execution`: the build's notebook executor (``make book``);
* :mod:`~itlin_core.tools.newest`: the Colab-like check (``make check-newest``);
* :mod:`~itlin_core.tools.bench`: timings to run by hand (``python -m itlin_core.tools.bench``);
* :mod:`~itlin_core.tools.costs`: what the recorded runs cost, read back for the GPU page.
"""
