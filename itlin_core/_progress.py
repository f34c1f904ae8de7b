"""The one progress-bar helper: training loops, sweeps and downloads all use it.

The mode is ``"auto"`` (a notebook widget or a terminal bar, tqdm's choice), ``"text"`` (plain
text on stderr, redrawn at most every two seconds: what the book build uses, and what its
rendered pages drop) or ``"off"``; ``None`` reads the ``ITLIN_PROGRESS`` environment variable.
"""

from __future__ import annotations

import os
import sys

MODES = ("auto", "text", "off")


def progress_mode(mode) -> str:
    """``mode`` (``True``, ``"1"``, ``"true"``, ``"on"`` mean ``"auto"``; ``False``, ``"0"``,
    ``"false"``, ``"none"`` mean ``"off"``), else ``$ITLIN_PROGRESS``, else ``"auto"``; raises
    ValueError for anything else."""
    if mode is True:
        return "auto"
    if mode is False:
        return "off"
    name = str(mode or os.environ.get("ITLIN_PROGRESS", "auto")).strip().lower()
    name = {"0": "off", "false": "off", "no": "off", "none": "off",
            "1": "auto", "true": "auto", "yes": "auto", "on": "auto"}.get(name, name)
    if name not in MODES:
        raise ValueError(f"progress (or the environment variable ITLIN_PROGRESS) must be one of "
                         f"{', '.join(MODES)}, got {mode or name!r}.")
    return name


def progress_bar(total, desc: str, mode=None, *, unit_bytes: bool = False):
    """A tqdm bar of ``total`` steps (or bytes, with ``unit_bytes``), or ``None`` when the mode
    is ``"off"``. The caller updates and closes it."""
    mode = progress_mode(mode)
    if mode == "off":
        return None
    kwargs = dict(total=total, desc=desc)
    if unit_bytes:
        kwargs.update(unit="B", unit_scale=True, unit_divisor=1024)
    if mode == "text":
        from tqdm.std import tqdm
        return tqdm(file=sys.stderr, mininterval=2.0, **kwargs)
    from tqdm.auto import tqdm
    return tqdm(**kwargs)
