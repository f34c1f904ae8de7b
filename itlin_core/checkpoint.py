r"""Checkpoint files: a training state, its position in the data order and its history.

Format (chosen for safety and portability, no pickle): one NumPy ``.npz`` archive (loaded with
``allow_pickle=False``) holding the flattened leaves of the state, ``str`` of its tree structure
(checked against a template on restore, with every leaf's shape and dtype), the PRNG key's raw
data, the history arrays and a JSON header (non-finite scalars written as ``{"__float__":
"nan"}``). Written to a temporary file in the same directory and moved into place with
:func:`os.replace`, so a crash mid-write leaves the previous checkpoint intact.
:func:`itlin_core.train` writes and resumes them (``checkpoint_path=``).
"""

from __future__ import annotations

import json
import zipfile
import zlib
from pathlib import Path
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._io import FLOAT_WORDS, atomic_write, encode_float
from ._validate import check_whole

FORMAT_VERSION = 1


class Checkpoint(NamedTuple):
    """What :func:`load_checkpoint` returns.

    Attributes:
      state: the training state (a pytree with the template's structure, JAX arrays).
      key: the PRNG key recorded with it (raw ``uint32`` data) or ``None``.
      step: the index of the next step to take (the position in the data order).
      history: the accumulated history (``loss``, ``eval_step``, evaluation curves,
        ``diverged_at``, ``seconds``) up to ``step``.
      meta: the JSON-able settings recorded with it.

    Examples:
      A state saved at step 5 comes back with its history and settings (no key was saved):

      >>> import pathlib, tempfile
      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> with tempfile.TemporaryDirectory() as d:
      ...     path = pathlib.Path(d) / "run.npz"
      ...     ic.save_checkpoint(path, {"w": jnp.arange(3.0)}, step=5, history={"loss": jnp.ones(5)},
      ...                        meta={"lr": 0.1})
      ...     ck = ic.load_checkpoint(path, {"w": jnp.zeros(3)})
      >>> print(ck.state["w"].tolist(), ck.key, ck.step, ck.history["loss"].shape, ck.meta)
      [0.0, 1.0, 2.0] None 5 (5,) {'lr': 0.1}
    """

    state: Any
    key: Any
    step: int
    history: dict
    meta: dict


def _encode_scalar(v):
    if v is None or isinstance(v, (bool, np.bool_)):
        return None if v is None else bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    return encode_float(v)


def _decode_scalar(v):
    return FLOAT_WORDS[v["__float__"]] if isinstance(v, dict) else v


def key_data(key):
    """The raw ``uint32`` data of a PRNG key (typed, from :func:`jax.random.key`, or raw), as a
    NumPy array; ``None`` stays ``None``."""
    if key is None:
        return None
    if hasattr(key, "dtype") and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.asarray(key)


def save_checkpoint(path, state, *, step: int, history: Mapping, key=None, meta: Mapping | None = None) -> None:
    """Save ``state`` (any pytree of arrays, e.g. an :class:`itlin_core.ILState` with optax
    states inside), the PRNG ``key``, the position ``step`` and the metric ``history`` to one
    ``.npz`` file, atomically. ``meta`` (JSON-able) is stored and returned by
    :func:`load_checkpoint`. History values must be arrays, numbers or ``None``.

    Examples:
      The state, the step, a ``None`` in the history and the PRNG key (as its raw data)
      round-trip exactly:

      >>> import pathlib, tempfile
      >>> import jax, jax.numpy as jnp
      >>> import itlin_core as ic
      >>> key = jax.random.key(7)
      >>> with tempfile.TemporaryDirectory() as d:
      ...     path = pathlib.Path(d) / "ck.npz"
      ...     ic.save_checkpoint(path, jnp.ones(2), step=3, history={"diverged_at": None}, key=key)
      ...     ck = ic.load_checkpoint(path, jnp.zeros(2))
      >>> print(ck.state.tolist(), ck.step, ck.history, ck.key.tolist() == jax.random.key_data(key).tolist())
      [1.0, 1.0] 3 {'diverged_at': None} True
    """
    step = check_whole("step", step, 0)
    leaves, treedef = jax.tree.flatten(state)
    arrays = {f"leaf_{i}": np.asarray(leaf) for i, leaf in enumerate(leaves)}
    scalars = {}
    for k, v in history.items():
        if v is None or isinstance(v, (bool, int, float, np.generic)):
            scalars[k] = _encode_scalar(v)  # diverged_at, seconds, loss_every
        else:
            arrays[f"hist_{k}"] = np.asarray(v)
    kd = key_data(key)
    if kd is not None:
        arrays["key"] = kd
    header = {"format": FORMAT_VERSION, "treedef": str(treedef), "num_leaves": len(leaves), "step": int(step),
              "has_key": kd is not None, "history_scalars": scalars, "meta": dict(meta or {})}
    arrays["header"] = np.asarray(json.dumps(header, allow_nan=False))
    atomic_write(Path(path), lambda f: np.savez(f, **arrays), "wb", verify=_read)   # read back: CRCs, header


_HEADER = {"format": int, "treedef": str, "num_leaves": int, "step": int, "has_key": bool,
           "history_scalars": dict, "meta": dict}


def _read(path: Path):
    """``(arrays, header)`` of a checkpoint file, or a ValueError that says to delete a damaged
    one (truncated, emptied or altered files fail the zip format, its CRC checks or the header's
    keys and types; the package never leaves such a file behind itself, as it writes atomically)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            files = {k: z[k] for k in z.files}
        header = json.loads(str(files.pop("header")))
        if not isinstance(header, dict) or any(not isinstance(header.get(k), t) for k, t in _HEADER.items()):
            raise ValueError("its header lacks fields or has fields of the wrong type")
        if any(isinstance(v, dict) and v.get("__float__") not in FLOAT_WORDS for v in header["history_scalars"].values()):
            raise ValueError("its header holds an unknown float word")
        missing = [f"leaf_{i}" for i in range(header["num_leaves"]) if f"leaf_{i}" not in files]
        if missing or (header["has_key"] and "key" not in files):
            raise ValueError(f"arrays are missing: {', '.join(missing) or 'key'}")
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise ValueError(f"{path} is not a readable checkpoint ({type(e).__name__}: {e}); it is damaged or not "
                         "a checkpoint: delete it to start afresh.") from None
    return files, header


def load_checkpoint(path, template) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`. ``template`` is a pytree with the
    structure, shapes and dtypes of the saved state (e.g. the initial state); the file must
    match it exactly.

    Raises:
      ValueError: the file is not a checkpoint, or its state does not match ``template``.

    Examples:
      A template of another shape is refused, with the leaf that differs:

      >>> import pathlib, tempfile
      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> with tempfile.TemporaryDirectory() as d:
      ...     path = pathlib.Path(d) / "ck.npz"
      ...     ic.save_checkpoint(path, jnp.zeros(3, jnp.float32), step=0, history={})
      ...     try:
      ...         ic.load_checkpoint(path, jnp.zeros(4, jnp.float32))
      ...     except ValueError as e:
      ...         print(str(e).split("npz: ")[1])
      leaf 0 has shape (3,) and dtype float32, but this run's state has (4,) and float32.
    """
    path = Path(path)
    files, header = _read(path)
    if header.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path} is a checkpoint of format {header.get('format')}, expected {FORMAT_VERSION}.")
    t_leaves, t_def = jax.tree.flatten(template)
    if header["treedef"] != str(t_def) or header["num_leaves"] != len(t_leaves):
        raise ValueError(f"{path} holds a state of a different structure than this run's "
                         f"(saved {header['treedef']}, expected {t_def}); it belongs to another "
                         "model or optimiser: delete it or point to another checkpoint file.")
    leaves = []
    for i, t in enumerate(t_leaves):
        a = files[f"leaf_{i}"]
        if a.shape != np.shape(t) or a.dtype != np.asarray(t).dtype:
            raise ValueError(f"{path}: leaf {i} has shape {a.shape} and dtype {a.dtype}, but this run's "
                             f"state has {np.shape(t)} and {np.asarray(t).dtype}.")
        leaves.append(jnp.asarray(a))
    history = {k[len("hist_"):]: v for k, v in files.items() if k.startswith("hist_")}
    history.update({k: _decode_scalar(v) for k, v in header["history_scalars"].items()})
    return Checkpoint(state=jax.tree.unflatten(t_def, leaves),
                      key=files.get("key") if header["has_key"] else None,
                      step=int(header["step"]), history=history, meta=header["meta"])


__all__ = ["Checkpoint", "save_checkpoint", "load_checkpoint", "key_data"]
