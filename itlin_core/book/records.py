r"""Results files: the recorded runs that the image chapters plot at the ``book`` preset.

:func:`save_results` writes the curves of a finished run to ``book/results/<chapter>-<preset>.json``
together with the preset, the seed, the software versions, the device and the time;
:func:`load_results` reads the best recorded one back, so that at the ``book`` preset a GPU
chapter plots a recorded result instead of training. (Checkpoints of runs in progress are the
training loop's business: :func:`itlin_core.train` with ``checkpoint_path``.)

Format (chosen for safety and portability, no pickle): standard JSON (no bare ``NaN``). Arrays
are stored as ``{"__ndarray__": {"dtype", "shape", "data"}}`` with ``data`` the flat list of
values; non-finite floats, in arrays and as scalars, are written as the strings ``"nan"``,
``"inf"``, ``"-inf"`` (a scalar as ``{"__float__": "nan"}``), so they survive a round trip
exactly. Files are written atomically (a temporary file moved into place).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
from pathlib import Path
from typing import Mapping

import jax
import numpy as np

from .._io import FLOAT_WORDS, encode_float, float_token, write_bytes_atomically
from .common import PRESETS

FORMAT_VERSION = 1
#: The presets whose results the book records and plots, the larger scale first.
RECORDED_PRESETS = ("paper", "colab", "laptop")
_CHAPTER_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")


# ----------------------------------------------------------------------------------------------
# where files go

def _find_book_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` that holds ``_toc.yml`` and ``book/``."""
    for d in (start, *start.parents):
        if (d / "_toc.yml").is_file() and (d / "book").is_dir():
            return d
    return None


def default_results_dir() -> Path:
    """Where results files live: ``$ITLIN_RESULTS_DIR`` if set; else ``book/results`` of the
    book checkout that contains the working directory (a chapter runs in ``book/``, the tests
    in the repository root); else ``./book/results`` (e.g. ``/content/book/results`` on Colab)."""
    env = os.environ.get("ITLIN_RESULTS_DIR")
    if env:
        return Path(env)
    root = _find_book_root(Path.cwd().resolve())
    return (root if root is not None else Path.cwd()) / "book" / "results"


def default_checkpoint_dir() -> Path:
    """Where the image chapters' checkpoints live: ``$ITLIN_CHECKPOINT_DIR`` if set (on Colab, a
    folder on a mounted Google Drive, so that checkpoints outlive the runtime), else
    ``./checkpoints``."""
    return Path(os.environ.get("ITLIN_CHECKPOINT_DIR") or "checkpoints")


def _check_chapter(chapter) -> str:
    if not isinstance(chapter, str) or not _CHAPTER_RE.match(chapter):
        raise ValueError(f"chapter must be a name of lower-case letters, digits and underscores "
                         f"(the notebook's file name, e.g. 'cifar_few_updates'), got {chapter!r}.")
    return chapter


def _check_preset(preset) -> str:
    """The preset's name, spelt as :func:`itlin_core.book.common.get_preset` accepts it (case and
    surrounding spaces ignored), or ValueError."""
    name = preset.strip().lower() if isinstance(preset, str) else preset
    if name not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}: use one of {', '.join(PRESETS)}.")
    return name


def results_path(chapter: str, preset: str, results_dir=None) -> Path:
    """``<results_dir>/<chapter>-<preset>.json`` (names validated)."""
    d = Path(results_dir) if results_dir is not None else default_results_dir()
    if d.exists() and not d.is_dir():
        raise ValueError(f"results_dir must be a folder, but {d} is a file.")
    return d / f"{_check_chapter(chapter)}-{_check_preset(preset)}.json"


# ----------------------------------------------------------------------------------------------
# JSON encoding of curves

def _encode(obj, where="data"):
    """Turn ``obj`` into standard-JSON values (see the module docstring)."""
    if isinstance(obj, jax.Array) or isinstance(obj, np.ndarray):
        a = np.asarray(obj)
        if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
            raise ValueError(f"{where}: only numeric and boolean arrays can be recorded, got dtype {a.dtype}.")
        if np.iscomplexobj(a):
            raise ValueError(f"{where}: complex arrays cannot be recorded.")
        flat = a.ravel().tolist()
        if np.issubdtype(a.dtype, np.floating):
            flat = [float_token(v) for v in flat]
        return {"__ndarray__": {"dtype": a.dtype.name, "shape": list(a.shape), "data": flat}}
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return encode_float(obj)
    if obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: dictionary keys must be strings, got {k!r}.")
            if k in ("__ndarray__", "__float__"):
                raise ValueError(f"{where}: the key {k!r} is reserved for the file format.")
            out[k] = _encode(v, f"{where}[{k!r}]")
        return out
    if isinstance(obj, (list, tuple)):
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    raise ValueError(f"{where}: cannot record a value of type {type(obj).__name__}; use arrays, "
                     "numbers, strings, None, lists and dicts with string keys.")


def _decode(obj, where="data"):
    """The inverse of :func:`_encode`; a field that it could not have written raises ValueError
    naming where it is (a damaged or hand-edited file)."""
    if isinstance(obj, dict):
        if "__ndarray__" in obj:
            return _decode_array(obj, where)
        if "__float__" in obj:
            if set(obj) != {"__float__"} or not isinstance(obj["__float__"], str) or obj["__float__"] not in FLOAT_WORDS:
                raise ValueError(f"{where}: a non-finite float must be written {{\"__float__\": \"nan\"}} "
                                 f"(or \"inf\", \"-inf\"), got {obj!r}")
            return FLOAT_WORDS[obj["__float__"]]
        return {k: _decode(v, f"{where}[{k!r}]") for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    return obj


def _decode_array(obj, where):
    spec = obj["__ndarray__"]
    if set(obj) != {"__ndarray__"} or not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data"}:
        raise ValueError(f"{where}: an array must be written as {{\"__ndarray__\": {{\"dtype\", \"shape\", \"data\"}}}}")
    dtype, shape, data = spec["dtype"], spec["shape"], spec["data"]
    try:
        dt = np.dtype(dtype) if isinstance(dtype, str) else None
    except TypeError:
        dt = None
    if dt is None or not (np.issubdtype(dt, np.number) or dt == np.bool_) or np.issubdtype(dt, np.complexfloating):
        raise ValueError(f"{where}: unknown array dtype {dtype!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ValueError(f"{where}: the shape must be a list of sizes >= 0, got {shape!r}")
    if not isinstance(data, list) or len(data) != math.prod(shape):
        raise ValueError(f"{where}: shape {shape} needs {math.prod(shape)} values, got "
                         f"{len(data) if isinstance(data, list) else type(data).__name__}")
    if dt == np.bool_:
        ok = all(isinstance(v, bool) for v in data)
    elif np.issubdtype(dt, np.integer):
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in data)
    else:
        ok = all((isinstance(v, (int, float)) and not isinstance(v, bool)) or (isinstance(v, str) and v in FLOAT_WORDS) for v in data)
    if not ok:
        raise ValueError(f"{where}: the values do not fit dtype {dtype} (e.g. a fraction in an integer array)")
    values = [FLOAT_WORDS[v] if isinstance(v, str) else v for v in data]
    try:
        return np.asarray(values, dtype=dt).reshape(shape)
    except OverflowError:
        raise ValueError(f"{where}: a value is out of the range of dtype {dtype}") from None


def software_versions() -> dict:
    """Versions of Python, jax, jaxlib, optax, numpy and itlin_core."""
    import jaxlib
    import optax
    from .. import __version__
    return {"python": platform.python_version(), "jax": jax.__version__,
            "jaxlib": getattr(jaxlib, "__version__", "unknown"), "optax": optax.__version__,
            "numpy": np.__version__, "itlin_core": __version__}


def device_description() -> dict:
    """The JAX backend and devices the run used (e.g. ``{"platform": "gpu", "device_kind":
    "Tesla T4", "count": 1, ...}``)."""
    devs = jax.devices()
    return {"platform": jax.default_backend(), "device_kind": devs[0].device_kind, "count": len(devs),
            "devices": [str(d) for d in devs], "machine": platform.machine(),
            "matmul_precision": str(jax.config.jax_default_matmul_precision or "default")}


#: The fields of a record that say where and when it was computed. A run group merged into a
#: record from one computed elsewhere keeps its own copy of them under ``"origin"``
#: (:func:`group_origin`, :func:`keep_origin`), so a merged record relabels nothing.
ORIGIN_FIELDS = ("device", "versions", "created")


def group_origin(record: Mapping, name: str) -> dict:
    """Where and when run group ``name`` of ``record`` was computed: ``{"device", "versions",
    "created"}``, the group's own ``origin`` where it has one (merged in from a record made on
    another device or with other software), else the record's.

    Examples:
      >>> rec = {"device": {"device_kind": "NVIDIA H200"}, "versions": {}, "created": "2026-11-28",
      ...        "data": {"a": {}, "b": {"origin": {"device": {"device_kind": "NVIDIA H100"}}}}}
      >>> group_origin(rec, "a")["device"]["device_kind"], group_origin(rec, "b")["device"]["device_kind"]
      ('NVIDIA H200', 'NVIDIA H100')
    """
    own = record["data"][name].get("origin")
    return dict(own) if isinstance(own, Mapping) else {k: record.get(k) for k in ORIGIN_FIELDS}


def origins(record: Mapping) -> dict:
    """``{(device kind, date): [group names]}``: where and on which day the run groups of
    ``record`` were computed (:func:`group_origin`), in the record's order."""
    out = {}
    for name in record["data"]:
        o = group_origin(record, name)
        out.setdefault(((o["device"] or {}).get("device_kind", "unknown device"), str(o["created"] or "?")[:10]),
                       []).append(name)
    return out


def keep_origin(record: Mapping, names, device: Mapping, versions: Mapping) -> dict:
    """The run groups ``names`` of ``record``, ready to go into a record that will say it was
    computed on ``device`` with ``versions``: each group computed on another device or with
    other software carries its own :func:`group_origin` under ``"origin"``."""
    out = {}
    for name in names:
        origin, group = group_origin(record, name), dict(record["data"][name])
        if origin["device"] != device or origin["versions"] != versions:
            group["origin"] = origin
        out[name] = group
    return out


def save_results(chapter: str, preset: str, data: Mapping, *, seed: int, results_dir=None,
                 note: str | None = None, overwrite: bool = False, origin: Mapping | None = None) -> Path:
    """Record a finished run's curves as ``<results_dir>/<chapter>-<preset>.json``.

    Args:
      chapter: the chapter's name (lower-case letters, digits, underscores; its notebook name).
      preset: ``smoke``, ``book``, ``colab`` or ``paper``.
      data: a dict of run groups (name -> dict), each a dict of curves: arrays (NumPy or JAX),
        numbers, strings, ``None`` and nested lists/dicts with string keys. NaN and infinities
        are kept (module docstring).
      seed: the seed the run used (an integer).
      results_dir: default :func:`default_results_dir` (``book/results``).
      note: an optional free-text remark (e.g. "timing run on stand-in data").
      origin: where and when the data were computed (``{"device", "versions", "created"}``), for
        a record assembled from runs made elsewhere (:func:`itlin_core.tools.record.merge_records`);
        default this machine's device and software, and now.

    The file also records the software versions, the device and the UTC time. It is written
    atomically (temporary file + :func:`os.replace`): an existing record is replaced only by a
    complete new one. Returns the path written.

    Nothing recorded is discarded: a file at the record's path that :func:`load_results` cannot
    read (a damaged or hand-edited record, another chapter's, or not a record at all) is left as
    it is unless ``overwrite=True``; the new record is then written beside it, to
    ``<chapter>-<preset>.json.new-<UTC time>``, and a ValueError names both files.

    Raises:
      ValueError: a bad chapter or preset name, a non-integer seed, ``data`` that is not a dict
        of dicts, a value that cannot be recorded, a folder at the record's path; an unreadable
        file there (the new record saved beside it, above).
    """
    preset = _check_preset(preset)
    path = results_path(chapter, preset, results_dir)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer, got {seed!r}.")
    try:
        _check_groups(data)
    except ValueError as e:
        raise ValueError(f"{e}.") from None
    here = {"created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "versions": software_versions(), "device": device_description()}
    if origin is not None and (not isinstance(origin, Mapping) or set(origin) != set(ORIGIN_FIELDS)):
        raise ValueError(f"origin must be a dict with the keys {', '.join(ORIGIN_FIELDS)}, got {origin!r}.")
    record = {"format": FORMAT_VERSION, "chapter": chapter, "preset": preset, "seed": int(seed),
              **{k: (origin or here)[k] for k in ("created", "versions", "device")}, "note": note,
              "data": _encode(data)}
    text = json.dumps(record, allow_nan=False, indent=1)  # encode fully before touching the disk
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not a results record; move it away to record {chapter} at {preset}.")
    try:
        if path.exists() and not overwrite:
            load_results(chapter, (preset,), results_dir=path.parent)
    except ValueError as err:   # keep the file, and the new results beside it
        stem, i = f"{path.name}.new-{here['created'].replace(':', '')[:17]}", 0    # e.g. ...json.new-2026-11-27T042342
        while (beside := path.with_name(stem + (f"-{i}" if i else ""))).exists():
            i += 1
        write_bytes_atomically(beside, text.encode("ascii"))
        raise ValueError(f"{err} It was left as it is, and the new results were saved beside it in {beside}: inspect "
                         f"both, then move the one to keep to {path.name}.") from None
    write_bytes_atomically(path, text.encode("ascii"))   # read back byte for byte; json.dumps escapes to ASCII
    return path


def load_results(chapter: str, preferred=("paper", "colab"), results_dir=None) -> dict | None:
    """The recorded result of ``chapter`` for the first preset in ``preferred`` that has one, or
    ``None`` when none is recorded yet. The returned dict has the keys written by
    :func:`save_results` (``preset``, ``seed``, ``versions``, ``device``, ``created``, ``note``)
    and ``data`` with arrays as NumPy arrays.

    Raises:
      ValueError: a bad chapter or preset name, a folder at a record's path, or a file that is not a
        valid record: not JSON,
        fields the writer could not have written, a ``chapter`` or ``preset`` other than its file
        name's, a seed that is not an integer, ``data`` that is not a dict of run groups (dicts).

    Examples:
      >>> import tempfile
      >>> folder = tempfile.mkdtemp()
      >>> _ = save_results("demo", "smoke", {"fig2": {"acc": np.array([0.5, np.nan])}}, seed=0, results_dir=folder)
      >>> rec = load_results("demo", ("paper", "smoke"), results_dir=folder)     # the first preset recorded
      >>> rec["preset"], rec["seed"], rec["data"]["fig2"]["acc"]
      ('smoke', 0, array([0.5, nan]))
      >>> load_results("demo", ("paper", "colab"), results_dir=folder) is None
      True
    """
    if isinstance(preferred, str):
        preferred = (preferred,)
    for preset in preferred:
        path = results_path(chapter, preset, results_dir)
        if path.is_dir():
            raise ValueError(f"{path} is a folder, not a results record; move it away (a record is a JSON file).")
        if not path.is_file():
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path} is not valid JSON text ({e}); delete it or record the run again.") from None
        if not isinstance(record, dict) or record.get("format") != FORMAT_VERSION or "data" not in record:
            raise ValueError(f"{path} is not a results record of format {FORMAT_VERSION}; restore it (git checkout) "
                             "or record the run again.")
        try:
            _check_fields(record, chapter, _check_preset(preset))
            record["data"] = _decode(record["data"])
            _check_groups(record["data"])
        except ValueError as e:
            raise ValueError(f"{path} is damaged: {e}. Restore it (git checkout) or record the run again.") from None
        return record
    return None


def _check_groups(data, where="data") -> None:
    """ValueError unless ``data`` is a dict of run groups, each a dict (of curves)."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where} must be a dict of run groups (name -> dict of curves), got {type(data).__name__}")
    bad = [k for k, v in data.items() if not isinstance(v, Mapping)]
    if bad:
        raise ValueError(f"{where}[{bad[0]!r}] must be a dict of curves (one run group), "
                         f"got {type(data[bad[0]]).__name__}")


def _check_fields(record: dict, chapter: str, preset: str) -> None:
    """ValueError unless the record's ``chapter`` and ``preset`` are those of its file name, its seed is an
    integer (hand-edited or misnamed files)."""
    for field, want in (("chapter", chapter), ("preset", preset)):
        if record.get(field) != want:
            raise ValueError(f"it holds a record of {field} {record.get(field)!r}, but its file name says {want!r} "
                             "(copied or renamed from another record?)")
    seed = record.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"its seed must be an integer, got {seed!r}")


__all__ = ["RECORDED_PRESETS", "save_results", "load_results", "results_path", "default_results_dir", "default_checkpoint_dir",
           "software_versions", "device_description", "ORIGIN_FIELDS", "group_origin", "origins", "keep_origin"]
