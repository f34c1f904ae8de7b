"""Atomic file writes, shared by checkpoints (:mod:`itlin_core.checkpoint`) and the book's
results files: a file the package writes is either the complete new version or the old one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


def atomic_write(path, write: Callable, mode: str) -> None:
    """Write ``path`` through ``write(file)`` into a temporary file in the same directory, then
    :func:`os.replace` it into place; on any exception the temporary file is removed and an
    existing ``path`` is left untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
