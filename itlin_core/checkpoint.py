r"""Checkpoint files: a training state, its position in the data order and its history.

Format (chosen for safety and portability, no pickle): one NumPy ``.npz`` archive (loaded with
``allow_pickle=False``) holding the flattened leaves of the state, ``str`` of its tree structure
(checked against a template on restore, with every leaf's shape and dtype), the PRNG key's raw
data, the history arrays and a JSON header (non-finite scalars written as ``{"__float__":
"nan"}``). Written to a temporary file in the same directory and moved into place with
:func:`os.replace`, so a crash mid-write leaves the previous checkpoint intact.
:func:`itlin_core.train` writes and resumes them (``checkpoint=ic.Checkpointing(path)``).
"""

from __future__ import annotations

import json
import numbers
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._io import FLOAT_WORDS, atomic_write, encode_float
from ._validate import check_key, check_whole

FORMAT_VERSION = 2   # 2: the header lists every array member (a damaged zip directory can hide one)


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


def key_data(key, name: str = "key"):
    """The raw ``uint32`` data of a PRNG key (typed, from :func:`jax.random.key`, or raw), or of
    an array of keys, as a NumPy array; ``None`` stays ``None``. Anything else (a seed, say)
    raises TypeError naming ``name``."""
    if key is None:
        return None
    check_key(key, name, batch=True)
    if hasattr(key, "dtype") and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.asarray(key)


def save_checkpoint(path, state, *, step: int, history: Mapping, key=None, meta: Mapping | None = None,
                    overwrite: bool = False) -> None:
    """Save ``state`` (any pytree of arrays, e.g. an :class:`itlin_core.ILState` with optax
    states inside), the PRNG ``key``, the position ``step`` and the metric ``history`` to one
    ``.npz`` file, atomically. ``meta`` (JSON-able) is stored and returned by
    :func:`load_checkpoint`.

    Refused with a ValueError before anything is written (an existing file is kept): a ``step``
    that is not a non-negative integer; a state leaf of strings or objects; history keys that are
    not strings, history values that are not numbers, booleans, ``None`` or numeric arrays (dicts,
    sets, strings, ragged or mixed lists such as ``[1, 'a']``); ``meta`` that is not a dict of
    JSON values (NaN, infinity, sets, objects; NumPy scalars become Python numbers); a ``path``
    that is a folder; and, unless ``overwrite=True``, a ``path`` that holds a file other than a
    checkpoint (one whose checkpoint header cannot be read): the writer replaces only its own files.
    Should the new file not read back intact, the previous one is kept. A ``key`` that is not a
    PRNG key or an array of them (a seed, say) raises TypeError, also before anything is written.

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
    path = _writable(Path(path))
    if not overwrite:
        _check_replaceable(path)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(state)
    arrays = {}
    for i, (where, leaf) in enumerate(leaves):
        arrays[f"leaf_{i}"] = a = np.asarray(leaf)
        if a.dtype.kind in "OUS":
            raise ValueError(f"state{jax.tree_util.keystr(where)} is {type(leaf).__name__} (dtype {a.dtype}); a "
                             "checkpoint holds numeric arrays only. Nothing was written.")
    scalars = {}
    if not isinstance(history, Mapping):
        raise ValueError(f"history must be a dict of metric name -> array, number or None, "
                         f"got {type(history).__name__}.")
    for k, v in history.items():
        if not isinstance(k, str):
            raise ValueError(f"history keys must be strings (metric names), got {k!r}. Nothing was written.")
        if _is_scalar(v):
            scalars[k] = _encode_scalar(v)  # diverged_at, seconds, loss_every
        else:
            arrays[f"hist_{k}"] = _history_array(k, v)
    kd = key_data(key)
    if kd is not None:
        arrays["key"] = kd
    header = {"format": FORMAT_VERSION, "treedef": str(treedef), "num_leaves": len(leaves), "step": int(step),
              "has_key": kd is not None, "history_scalars": scalars, "meta": _json_meta(meta),
              "arrays": sorted(arrays)}
    arrays["header"] = np.asarray(json.dumps(header, allow_nan=False))
    atomic_write(path, lambda f: np.savez(f, **arrays), "wb", verify=_read_back(path))   # CRCs and header


def _is_scalar(v) -> bool:
    return v is None or isinstance(v, (bool, np.bool_, numbers.Integral, float, np.floating))


def _history_array(k: str, v) -> np.ndarray:
    """``history[k]`` as a numeric array, or a ValueError naming ``k`` (dicts, sets, strings, ragged or mixed
    lists cannot be stored as one array and would not come back as written)."""
    allowed = "history values must be numbers, booleans, None or numeric arrays (or lists of numbers)"
    if isinstance(v, (Mapping, set, frozenset, str, bytes)):
        raise ValueError(f"history[{k!r}] is a {type(v).__name__}; {allowed}. Nothing was written.")
    try:
        a = np.asarray(v)
    except (ValueError, TypeError):
        raise ValueError(f"history[{k!r}] cannot be stored as one array; {allowed}, of one shape "
                         "(a ragged list is not). Nothing was written.") from None
    if a.dtype.kind not in "biufc":
        raise ValueError(f"history[{k!r}] holds {a.dtype} values ({str(v)[:80]}); {allowed}. Nothing was written.")
    return a


def _json_meta(meta) -> dict:
    """``meta`` as plain JSON values (NumPy scalars become Python numbers), or a ValueError that says what
    JSON cannot hold (NaN and infinity, sets, objects)."""
    if meta is not None and not isinstance(meta, Mapping):
        raise ValueError(f"meta must be a dict of JSON-able settings, got {type(meta).__name__}. "
                         "Nothing was written.")

    def plain(o):
        if isinstance(o, np.generic):
            return o.item()
        raise TypeError(f"a value of type {type(o).__name__}")
    try:
        return json.loads(json.dumps(dict(meta or {}), allow_nan=False, default=plain))
    except (TypeError, ValueError) as e:
        raise ValueError(f"meta must hold JSON-able settings (strings, finite numbers, booleans, None, lists and "
                         f"dicts with string keys); got {meta!r} ({e}). Nothing was written.") from None


def _writable(path: Path) -> Path:
    """``path`` unless it is a folder or lies below a file (ValueError)."""
    if path.is_dir():
        raise ValueError(f"checkpoint path {path} is a folder; pass the path of a checkpoint file in it, "
                         f"e.g. {path / 'run.npz'}.")
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ValueError(f"checkpoint path {path} lies below {parent}, which is a file, not a folder; "
                         "choose a path in a folder.")
    return path


def _check_replaceable(path: Path) -> None:
    """Nothing when ``path`` does not exist or holds a checkpoint (its header reads as one, of any format
    version); else a ValueError: the file is someone else's (data, notes, another program's archive)."""
    if not path.exists():
        return
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(str(z["header"]))
        if isinstance(header, dict) and "format" in header and "treedef" in header:
            return
    except Exception:  # noqa: BLE001 - whatever fails to read, the file is not recognisably a checkpoint
        pass
    raise ValueError(f"{path} exists and is not a checkpoint (no checkpoint header could be read); save_checkpoint "
                     "replaces only checkpoints. Nothing was written: choose another path, move the file away, "
                     "or pass overwrite=True to replace it.")


def _read_back(path: Path):
    """The check atomic_write runs on the new temporary file before it replaces ``path``."""
    def verify(tmp: Path):
        try:
            _contents(tmp)
        except _READ_ERRORS as e:
            why = str(e).replace(str(tmp), "the new file")
            raise ValueError(f"the new checkpoint {path} could not be written and read back ({type(e).__name__}: "
                             f"{why}); the previous file (if any) was kept unchanged.") from None
    return verify


_HEADER = {"format": int, "treedef": str, "num_leaves": int, "step": int, "has_key": bool,
           "history_scalars": dict, "meta": dict, "arrays": list}


# What zipfile, numpy's npz reader and json raise on a damaged file. A flipped byte in the zip
# directory can also announce a newer zip version (NotImplementedError), an encrypted member
# (RuntimeError) or sizes that do not unpack (struct.error, OverflowError, IndexError).
_READ_ERRORS = (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, zlib.error,
                NotImplementedError, RuntimeError, struct.error, OverflowError, IndexError)


def _contents(path: Path):
    """``(arrays, header)`` of a checkpoint file; raises one of ``_READ_ERRORS`` when it is damaged."""
    with np.load(path, allow_pickle=False) as z:
        files = {k: z[k] for k in z.files}
    header = json.loads(str(files.pop("header")))
    if isinstance(header, dict) and header.get("format") != FORMAT_VERSION:
        return files, header            # another format: load_checkpoint says so by name
    if not isinstance(header, dict) or any(not isinstance(header.get(k), t) for k, t in _HEADER.items()):
        raise ValueError("its header lacks fields or has fields of the wrong type")
    if any(isinstance(v, dict) and v.get("__float__") not in FLOAT_WORDS for v in header["history_scalars"].values()):
        raise ValueError("its header holds an unknown float word")
    # zipfile reads a directory whose length fields are damaged without complaint but can skip
    # members, so the arrays found must be exactly those the header lists
    listed = set(header["arrays"]) - {"header"}
    if set(files) != listed:
        raise ValueError(f"its arrays {sorted(files)} are not those its header lists {sorted(listed)}")
    if not all(f"leaf_{i}" in files for i in range(header["num_leaves"])) or header["has_key"] != ("key" in files):
        raise ValueError("its header's leaf count or key flag does not match its arrays")
    return files, header


def _read(path: Path):
    """``(arrays, header)`` of a checkpoint file. Refused with a ValueError: a missing file, a folder, and
    a damaged file (truncated, emptied or altered files fail the zip format, its CRC checks or the header's
    keys and types; the package never leaves such a file behind itself, as it writes atomically), whose
    message says to delete it."""
    if path.is_dir():
        raise ValueError(f"checkpoint path {path} is a folder, not a checkpoint file; pass the path of the "
                         f".npz file in it (e.g. {path / 'run.npz'}).")
    if not path.exists():
        raise ValueError(f"there is no checkpoint file at {path}; check the path (a run writes it with "
                         "itlin_core.train(..., checkpoint=path) or itlin_core.save_checkpoint).")
    try:
        return _contents(path)
    except _READ_ERRORS as e:
        raise ValueError(f"{path} is not a readable checkpoint ({type(e).__name__}: {e}); it is damaged or not "
                         "a checkpoint: delete it to start afresh.") from None


def load_checkpoint(path, template) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`. ``template`` is a pytree with the
    structure, shapes and dtypes of the saved state (e.g. the initial state); the file must
    match it exactly.

    Raises:
      ValueError: no file at ``path``, a folder there, a damaged file or not a checkpoint (the message
        says to delete it), or its state does not match ``template``.

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
        raise ValueError(f"{path} is a checkpoint of format {header.get('format')}, written by another version "
                         f"of itlin_core (this one reads format {FORMAT_VERSION}); delete it to start afresh.")
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
