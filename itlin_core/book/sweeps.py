r"""Recorded sweeps: the slowest cells of the CPU chapters, read back instead of retrained.

A few cells of the CPU chapters (mean-field, digits, refresh rules) train dozens of networks for
thousands of steps each (minutes on one CPU core). So that the whole book builds within minutes on a 2-core machine,
such a cell calls its sweep through :func:`recorded`::

    res = sweeps.recorded(mean_field_scaling.run_sample_size, cfg)

which returns ``mean_field_scaling.run_sample_size(cfg)``. If ``book/results/sweeps/`` holds a
result of that function computed from the *same arguments*, it is read from there; otherwise the
function runs here. "The same arguments" is checked by a fingerprint (:func:`fingerprint`): the
function's name, every setting of a configuration (its ``repr``) and every array's shape, dtype
and values (rounded to 30 binary digits, about 9 decimal ones, so that the last bit of a matrix
product on another CPU does not count as other data). Change any setting, or the data, and the cell trains again.

The mode is the environment variable ``ITLIN_SWEEPS``:

* ``use`` (default): read a matching record, else compute (and say so);
* ``off``: always compute, never read (a reader who wants to see the training happen);
* ``record``: compute, and write the result to the function's file (atomically). The first write
  to a file in a process starts it anew, so a recording run leaves no stale entries behind; one
  function is called from one chapter, so one notebook owns each file (a function that serves
  several chapters, as ``image_chapters.run_chapter`` does, is filed per chapter with ``owner=``).

The recorded sweeps are made by executing the chapter at the ``book`` preset with
``ITLIN_SWEEPS=record`` (``python -m itlin_core.tools.sweeps CHAPTER ...``), and committed as
written. Results at another preset go to a folder of their own, ``sweeps/<preset>/``: the ``smoke``
ones let ``make test`` read back its slowest cells, recorded with ``--preset smoke`` under the test
suite's XLA flags on one core, as ``make test`` executes them. A cell whose check compares a result
bit for bit with one computed beside it (an image chapter's run groups at ``smoke``) asks for
``exact=True``: its fingerprint then also holds the :func:`environment` (jax and jaxlib, the
platform and CPU, the cores and the XLA flags), so that on another machine or with other flags the
function runs instead of being read. Each entry stores the function, the settings as text, the seconds it took, the machine,
the software versions and the date, next to the result (the JSON format of
:mod:`itlin_core.book.records`; a dictionary with non-string keys, such as ``{beta: run}``, is
stored as a list of ``[key, value]`` pairs).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from .._io import write_bytes_atomically
from .records import _decode, _encode, default_results_dir, device_description, software_versions

MODES = ("use", "off", "record")
_STARTED: set = set()        # files this process has begun anew in record mode


def mode() -> str:
    """The mode of :func:`recorded`: ``$ITLIN_SWEEPS`` (``use``, ``off`` or ``record``), default ``use``."""
    m = os.environ.get("ITLIN_SWEEPS", "use").strip().lower() or "use"
    if m not in MODES:
        raise ValueError(f"ITLIN_SWEEPS must be one of {', '.join(MODES)}, got {m!r}.")
    return m


def _token(value, where: str):
    """A text that identifies ``value`` for :func:`fingerprint` (arrays by a hash of their rounded values)."""
    if value is None or isinstance(value, (bool, str)):
        return repr(value)
    if isinstance(value, (int, np.integer)):
        return repr(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        a = np.asarray(value)
        if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_) or np.iscomplexobj(a):
            raise TypeError(f"{where}: only real numeric arrays can be fingerprinted, got dtype {a.dtype}.")
        v = a
        if np.issubdtype(a.dtype, np.floating):      # 30 binary digits of the mantissa (about 9 decimal)
            mant, expo = np.frexp(np.asarray(a, np.float64))
            v = np.ldexp(np.round(mant * 2.0**30), expo - 30)
        digest = hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()[:16]
        return f"array({a.dtype.name}, {a.shape}, {digest})"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_token(v, f'{where}[{k!r}]')}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_token(v, f"{where}[{i}]") for i, v in enumerate(value)) + "]"
    raise TypeError(f"{where}: a recorded sweep's arguments must be numbers, strings, None, arrays, dataclass "
                    f"configurations, lists and dicts of them; got a {type(value).__name__}.")


def fingerprint(fn, *args, **kwargs) -> tuple[str, str]:
    """``(key, settings)``: the hash under which :func:`recorded` files ``fn(*args, **kwargs)``, and the
    arguments as text (what the key hashes).

    Examples:
      >>> import numpy as np
      >>> key, text = fingerprint(np.add, 1.0, np.array([1.0, 2.0]))
      >>> text
      'numpy.add(1.0, array(float64, (2,), dc91ce9a50ddc828))'
      >>> fingerprint(np.add, 1.0, np.array([1.0, 2.0 + 1e-14]))[0] == key     # rounding noise: the same data
      True
      >>> fingerprint(np.add, 1.0, np.array([1.0, 2.001]))[0] == key
      False
    """
    if not callable(fn):
        raise TypeError(f"fn must be the sweep function to call, got a {type(fn).__name__}.")
    parts = [_token(a, f"argument {i + 1}") for i, a in enumerate(args)]
    parts += [f"{k}={_token(v, f'argument {k.strip()!r}')}" for k, v in sorted(kwargs.items())]
    text = f"{_name(fn)}({', '.join(parts)})"
    return hashlib.sha256(text.encode()).hexdigest()[:24], text


def _cpuinfo(field: str) -> str | None:
    """The value of the first ``field`` line of Linux's ``/proc/cpuinfo``, or None."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` knows."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def _name(fn) -> str:
    return f"{getattr(fn, '__module__', None) or '?'}.{getattr(fn, '__qualname__', getattr(fn, '__name__', '?'))}"


def sweep_path(fn, results_dir=None, *, owner: str | None = None, preset: str = "book") -> Path:
    """``<results_dir>/sweeps/<module>.<function>.json`` (default ``book/results``), e.g.
    ``sweeps/mean_field_scaling.run_silu.json``; ``owner`` (the chapter, where one function serves
    several) replaces the module's name, and a preset other than ``book`` adds its folder.

    Examples:
      >>> from itlin_core.book import image_chapters
      >>> sweep_path(image_chapters.run_chapter, "r", owner="resnet_mnist", preset="smoke").as_posix()
      'r/sweeps/smoke/resnet_mnist.run_chapter.json'
    """
    d = Path(results_dir) if results_dir is not None else default_results_dir()
    stem = f"{owner or _name(fn).rsplit('.', 2)[-2]}.{_name(fn).rsplit('.', 1)[-1]}"
    return d / "sweeps" / ("" if preset == "book" else preset) / f"{stem}.json"


def environment() -> str:
    """What a result computed bit for bit depends on beyond its arguments: the jax, jaxlib and
    optax versions, whether 64-bit floats are on, the platform, the CPU model and a hash of its
    instruction-set flags, the cores this process may use and ``$XLA_FLAGS`` (where a flag is given
    twice, XLA takes the last value, and so does this; sorted by name). The fingerprint of
    ``recorded(..., exact=True)`` holds it.

    Examples:
      >>> environment().startswith("jax ")
      True
    """
    import jax
    import jaxlib
    import optax
    flags = {}
    for f in os.environ.get("XLA_FLAGS", "").split():
        flags[f.split("=", 1)[0]] = f
    flags = " ".join(flags[k] for k in sorted(flags)) or "none"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, optax {optax.__version__}, "
            f"x64 {bool(jax.config.jax_enable_x64)}, {jax.default_backend()} on {_cpu_model()} "
            f"(flags {_cpu_flags()}), {cores} core(s), XLA_FLAGS {flags}")


def _cpu_flags() -> str:
    """A short hash of the CPU's instruction-set flags (``/proc/cpuinfo``), or "unknown"."""
    flags = _cpuinfo("flags")
    return "unknown" if flags is None else hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:12]


def _keyed(obj):          # dictionaries with non-string keys, as lists of pairs (and back: _unkeyed)
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: _keyed(v) for k, v in obj.items()}
        return {"__pairs__": [[k, _keyed(v)] for k, v in obj.items()]}
    return [_keyed(v) for v in obj] if isinstance(obj, (list, tuple)) else obj


def _unkeyed(obj):
    if isinstance(obj, dict):
        if set(obj) == {"__pairs__"}:
            return {k: _unkeyed(v) for k, v in obj["__pairs__"]}
        return {k: _unkeyed(v) for k, v in obj.items()}
    return [_unkeyed(v) for v in obj] if isinstance(obj, list) else obj


def _read_raw(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("entries"), dict):
            raise ValueError("it has no 'entries'")
        for k, e in doc["entries"].items():
            if not isinstance(e, dict) or not {"result", "seconds", "created"} <= set(e):
                raise ValueError(f"entry {k} lacks its result, seconds or date")
        return doc["entries"]
    except ValueError as err:
        raise ValueError(f"{path} is not a readable sweeps record ({err}); move it away, or record the chapter "
                         "again with ITLIN_SWEEPS=record.") from None


def read_entries(path) -> dict:
    """The entries of a sweeps file, ``{key: entry}`` with the result decoded (``{}`` if there is no file).
    A file that is not one raises a ValueError naming it, and is left as it is."""
    path = Path(path)
    out = {}
    for k, e in _read_raw(path).items():
        try:
            out[k] = dict(e, result=_unkeyed(_decode(e["result"], f"{path.name}[{k}]")))
        except (ValueError, TypeError) as err:
            raise ValueError(f"{path} is not a readable sweeps record ({err}); move it away, or record the "
                             "chapter again with ITLIN_SWEEPS=record.") from None
    return out


def recorded(fn, *args, keep=None, owner: str | None = None, depends=None, exact: bool = False,
             preset: str | None = None, **kwargs):
    """``fn(*args, **kwargs)``, read from ``book/results/sweeps/`` when recorded there from the same
    arguments (module docstring; the mode is ``$ITLIN_SWEEPS``, the folder follows ``$ITLIN_PRESET``).
    Prints one line saying which. With ``keep`` (a list of keys), only those entries of the returned
    dict, computed or read alike: for a function whose result also holds things a file cannot (a
    trained state, a model). ``owner``: the chapter that owns the file (:func:`sweep_path`);
    ``depends``: settings the result depends on that are not arguments (fingerprinted, not passed);
    ``exact``: the fingerprint also holds the :func:`environment`; ``preset``: the preset whose folder
    is used (default ``$ITLIN_PRESET``).

    Examples:
      >>> import numpy as np, tempfile
      >>> os.environ["ITLIN_RESULTS_DIR"] = d = tempfile.mkdtemp()
      >>> os.environ["ITLIN_SWEEPS"] = "record"
      >>> recorded(np.linspace, 0.0, 1.0, 3)                     # doctest: +ELLIPSIS
      numpy.linspace: computed in 0.0 s and recorded in .../numpy.linspace.json
      array([0. , 0.5, 1. ])
      >>> os.environ["ITLIN_SWEEPS"] = "use"
      >>> recorded(np.linspace, 0.0, 1.0, 3)                     # doctest: +ELLIPSIS
      numpy.linspace: read from .../numpy.linspace.json (recorded on ... in 0.0 s; ITLIN_SWEEPS=off trains it here)
      array([0. , 0.5, 1. ])
      >>> del os.environ["ITLIN_RESULTS_DIR"], os.environ["ITLIN_SWEEPS"]
    """
    from .common import get_preset
    m = mode()
    if keep is not None and (isinstance(keep, str) or not all(isinstance(k, str) for k in keep)):
        raise TypeError(f"keep must be a list of the result's keys (strings), got {keep!r}.")
    if not isinstance(exact, bool):
        raise TypeError(f"exact must be True or False, got {exact!r}.")
    if owner is not None and not (isinstance(owner, str) and owner.isidentifier()):
        raise TypeError(f"owner must be a chapter's name (a word such as 'resnet_mnist'), got {owner!r}.")
    extra = {" keep": None if keep is None else list(keep), " depends": depends,
             " environment": (env := environment() if exact else None)}
    key, text = fingerprint(fn, *args, **kwargs, **{k: v for k, v in extra.items() if v is not None})
    path, name = sweep_path(fn, owner=owner, preset=get_preset(preset)), _name(fn).replace("itlin_core.book.", "")
    shown = os.path.relpath(path)
    shown = str(path) if shown.startswith("../..") else shown
    if m == "use":
        entry = read_entries(path).get(key)
        if entry is not None:
            print(f"{name}: read from {shown} (recorded on {entry['created'][:10]} in {entry['seconds']:.1f} s; "
                  "ITLIN_SWEEPS=off trains it here)")
            return entry["result"]
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    seconds = time.perf_counter() - t0
    if keep is not None:
        missing = [k for k in keep if k not in result]
        if missing:
            raise ValueError(f"keep names {missing}, which {_name(fn)} did not return (it returned {sorted(result)}).")
        result = {k: result[k] for k in keep}
    if m != "record":
        print(f"{name}: computed here in {seconds:.1f} s" + (" (no recorded result with these settings)" if m == "use" else ""))
        return result
    entries = _read_raw(path) if str(path) in _STARTED else {}
    entries[key] = {"function": _name(fn), "settings": text, "seconds": round(seconds, 1),
                    "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "machine": {**device_description(), "processor": _cpu_model(), "cpus": os.cpu_count()},
                    "versions": software_versions(), "result": _encode(_keyed(result), name),
                    **({"environment": env} if exact else {})}
    blob = json.dumps({"format": 1, "entries": entries}, allow_nan=False, separators=(",", ":"))
    write_bytes_atomically(path, blob.encode("ascii"))
    _STARTED.add(str(path))
    print(f"{name}: computed in {seconds:.1f} s and recorded in {shown}")
    return result


__all__ = ["MODES", "mode", "fingerprint", "sweep_path", "environment", "read_entries", "recorded"]
