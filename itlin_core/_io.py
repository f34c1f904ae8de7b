"""File helpers shared by checkpoints (:mod:`itlin_core.checkpoint`) and the book's results
files: atomic writes (a file the package writes is either the complete new version or the old
one) and the JSON spelling of non-finite floats (``"nan"``, ``"inf"``, ``"-inf"``; as a scalar,
``{"__float__": "nan"}``), so that they survive a round trip through standard JSON, and the
unpickler that rebuilds only NumPy arrays (CIFAR10's batches)."""

from __future__ import annotations

import codecs
import math
import os
import pickle
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np


#: The JSON words for non-finite floats, and the floats they stand for.
FLOAT_WORDS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def float_token(v: float):
    """``v`` itself when finite, else its word (``"nan"``, ``"inf"`` or ``"-inf"``)."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def encode_float(v) -> float | dict:
    """A float as standard JSON: itself when finite, else ``{"__float__": word}``."""
    v = float(v)
    return v if math.isfinite(v) else {"__float__": float_token(v)}


def atomic_write(path, write: Callable, mode: str, verify: Callable | None = None) -> None:
    """Write ``path`` through ``write(file)`` into a temporary file in the same directory, read it
    back with ``verify(temporary_path)`` (which raises if the file is not what was meant; ``None``:
    compare nothing), then :func:`os.replace` it into place. On any exception, a kill included, an
    existing ``path`` is left untouched (the temporary file is removed, except after a kill)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if verify is not None:
            verify(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_bytes_atomically(path, blob: bytes) -> None:
    """:func:`atomic_write` of ``blob``, read back and compared byte for byte before the rename."""
    def same(tmp: Path):
        if tmp.read_bytes() != blob:
            raise OSError(f"{path}: the bytes read back differ from those written; the old file was kept.")
    atomic_write(path, lambda f: f.write(blob), "wb", verify=same)


# ---------------------------------------------------------------- reading pickles safely

def _numpy_reconstruct():
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # NumPy 1.x
        from numpy.core.multiarray import _reconstruct
    return _reconstruct


def _numpy_frombuffer():
    try:
        from numpy._core.numeric import _frombuffer
    except ImportError:  # NumPy 1.x
        from numpy.core.numeric import _frombuffer
    return _frombuffer


class ArrayUnpickler(pickle.Unpickler):
    """Rebuilds only NumPy arrays, dtypes and plain containers (CIFAR10's pickled batches); any other
    global is refused, so a foreign file cannot run code."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"): _numpy_reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _numpy_reconstruct,
        ("numpy.core.numeric", "_frombuffer"): _numpy_frombuffer,
        ("numpy._core.numeric", "_frombuffer"): _numpy_frombuffer,
        ("numpy", "ndarray"): lambda: np.ndarray,
        ("numpy", "dtype"): lambda: np.dtype,
        ("_codecs", "encode"): lambda: codecs.encode,  # bytes in protocol-2 pickles from Python 3
    }

    def find_class(self, module, name):
        getter = self._ALLOWED.get((module, name))
        if getter is None:
            raise pickle.UnpicklingError(
                f"refusing to load {module}.{name}: a CIFAR10 batch holds only NumPy arrays and lists.")
        return getter()
