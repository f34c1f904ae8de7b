r"""Run records and checkpoints: results files for the GPU chapters and exact resume of long runs.

Two things a chapter that trains for hours needs (DESIGN.md §4):

* **Results files.** :func:`save_results` writes the curves of a finished run to
  ``book/results/<chapter>-<preset>.json`` together with the preset, the seed, the software
  versions, the device and the time; :func:`load_results` reads the best recorded one back, so
  that at the ``book`` preset a GPU chapter plots a recorded result instead of training.
* **Checkpoints.** :func:`train_with_checkpoints` runs :func:`itlin_core.train` and saves the
  training state, the PRNG key, the position in the data order and the metric history every
  ``checkpoint_every`` steps; run again with the same arguments it resumes from the last
  checkpoint. An interrupted-then-resumed run reproduces the uninterrupted run **bit for bit**:
  the data order is a function of the step index only (:func:`itlin_core.minibatches` draws
  epoch ``e``'s permutation from ``fold_in(key, e)``), the state is saved exactly, and the
  resumed run takes the same ``lax.scan`` chunks as the uninterrupted one.

Formats (chosen for safety and portability, no pickle anywhere):

* results: JSON (standard: no bare ``NaN``). Arrays are stored as
  ``{"__ndarray__": {"dtype", "shape", "data"}}`` with ``data`` the flat list of values;
  non-finite floats, in arrays and as scalars, are written as the strings ``"nan"``, ``"inf"``,
  ``"-inf"`` (a scalar as ``{"__float__": "nan"}``), so they survive a round trip exactly.
* checkpoints: one NumPy ``.npz`` archive (loaded with ``allow_pickle=False``) holding the
  flattened leaves of the state, ``str`` of its tree structure (checked against the template on
  restore, with every leaf's shape and dtype), the key's raw data, the history arrays and a JSON
  header. Written to a temporary file in the same directory and moved into place with
  :func:`os.replace`, so a crash mid-write leaves the previous checkpoint intact.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .experiments import PRESETS
from .iterative import train

FORMAT_VERSION = 1
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
    """Where checkpoints live: ``$ITLIN_CHECKPOINT_DIR`` if set (on Colab, a folder on a mounted
    Google Drive, so that checkpoints outlive the runtime), else ``./checkpoints``."""
    return Path(os.environ.get("ITLIN_CHECKPOINT_DIR") or "checkpoints")


def _check_chapter(chapter) -> str:
    if not isinstance(chapter, str) or not _CHAPTER_RE.match(chapter):
        raise ValueError(f"chapter must be a name of lower-case letters, digits and underscores "
                         f"(the notebook's file name, e.g. 'cifar_k_sweep'), got {chapter!r}.")
    return chapter


def _check_preset(preset) -> str:
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}: use one of {', '.join(PRESETS)}.")
    return preset


def results_path(chapter: str, preset: str, results_dir=None) -> Path:
    """``<results_dir>/<chapter>-<preset>.json`` (names validated)."""
    d = Path(results_dir) if results_dir is not None else default_results_dir()
    return d / f"{_check_chapter(chapter)}-{_check_preset(preset)}.json"


def _atomic_write(path: Path, write: Callable, mode: str) -> None:
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


# ----------------------------------------------------------------------------------------------
# JSON encoding of curves

def _float_token(v: float):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


_FLOAT_WORDS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


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
            flat = [_float_token(v) for v in flat]
        return {"__ndarray__": {"dtype": a.dtype.name, "shape": list(a.shape), "data": flat}}
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else {"__float__": _float_token(v)}
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


def _decode(obj):
    if isinstance(obj, dict):
        if set(obj) == {"__ndarray__"}:
            spec = obj["__ndarray__"]
            data = [_FLOAT_WORDS[v] if isinstance(v, str) else v for v in spec["data"]]
            return np.asarray(data, dtype=np.dtype(spec["dtype"])).reshape(spec["shape"])
        if set(obj) == {"__float__"}:
            return _FLOAT_WORDS[obj["__float__"]]
        return {k: _decode(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v) for v in obj]
    return obj


def software_versions() -> dict:
    """Versions of Python, jax, jaxlib, optax, numpy and itlin_core."""
    import jaxlib
    import optax
    from . import __version__
    return {"python": platform.python_version(), "jax": jax.__version__,
            "jaxlib": getattr(jaxlib, "__version__", "unknown"), "optax": optax.__version__,
            "numpy": np.__version__, "itlin_core": __version__}


def device_description() -> dict:
    """The JAX backend and devices the run used (e.g. ``{"platform": "gpu", "device_kind":
    "Tesla T4", "count": 1, ...}``)."""
    devs = jax.devices()
    return {"platform": jax.default_backend(), "device_kind": devs[0].device_kind, "count": len(devs),
            "devices": [str(d) for d in devs], "machine": platform.machine()}


def save_results(chapter: str, preset: str, data: Mapping, *, seed: int, results_dir=None,
                 note: str | None = None) -> Path:
    """Record a finished run's curves as ``<results_dir>/<chapter>-<preset>.json``.

    Args:
      chapter: the chapter's name (lower-case letters, digits, underscores; its notebook name).
      preset: ``smoke``, ``book``, ``colab`` or ``paper``.
      data: a dict of curves: arrays (NumPy or JAX), numbers, strings, ``None`` and nested
        lists/dicts with string keys. NaN and infinities are kept (module docstring).
      seed: the seed the run used (an integer).
      results_dir: default :func:`default_results_dir` (``book/results``).
      note: an optional free-text remark (e.g. "timing run on stand-in data").

    The file also records the software versions, the device and the UTC time. It is written
    atomically (temporary file + :func:`os.replace`): an existing record is replaced only by a
    complete new one. Returns the path written.

    Raises:
      ValueError: a bad chapter or preset name, a non-integer seed, or a value that cannot be
        recorded.
    """
    path = results_path(chapter, preset, results_dir)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer, got {seed!r}.")
    if not isinstance(data, Mapping):
        raise ValueError(f"data must be a dict of curves, got {type(data).__name__}.")
    record = {"format": FORMAT_VERSION, "chapter": chapter, "preset": preset, "seed": int(seed),
              "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "versions": software_versions(), "device": device_description(), "note": note,
              "data": _encode(data)}
    text = json.dumps(record, allow_nan=False, indent=1)  # encode fully before touching the disk
    _atomic_write(path, lambda f: f.write(text), "w")
    return path


def load_results(chapter: str, preferred=("paper", "colab"), results_dir=None) -> dict | None:
    """The recorded result of ``chapter`` for the first preset in ``preferred`` that has one, or
    ``None`` when none is recorded yet. The returned dict has the keys written by
    :func:`save_results` (``preset``, ``seed``, ``versions``, ``device``, ``created``, ``note``)
    and ``data`` with arrays as NumPy arrays.

    Raises:
      ValueError: a bad chapter or preset name, or a file that is not a valid record.
    """
    if isinstance(preferred, str):
        preferred = (preferred,)
    for preset in preferred:
        path = results_path(chapter, preset, results_dir)
        if not path.is_file():
            continue
        try:
            record = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON ({e}); delete it or record the run again.") from None
        if not isinstance(record, dict) or record.get("format") != FORMAT_VERSION or "data" not in record:
            raise ValueError(f"{path} is not a results record of format {FORMAT_VERSION}.")
        record["data"] = _decode(record["data"])
        return record
    return None


# ----------------------------------------------------------------------------------------------
# checkpoints

class Checkpoint(NamedTuple):
    """What :func:`load_checkpoint` returns.

    Attributes:
      state: the training state (a pytree with the template's structure, JAX arrays).
      key: the PRNG key recorded with it (raw ``uint32`` data) or ``None``.
      step: the index of the next step to take (the position in the data order).
      history: the accumulated history (``loss``, ``eval_step``, evaluation curves,
        ``diverged_at``, ``seconds``) up to ``step``.
      meta: the JSON-able settings recorded with it.
    """

    state: Any
    key: Any
    step: int
    history: dict
    meta: dict


def _key_data(key):
    if key is None:
        return None
    if hasattr(key, "dtype") and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)  # a typed key (jax.random.key): store its raw data
    return np.asarray(key)


def save_checkpoint(path, state, *, step: int, history: Mapping, key=None, meta: Mapping | None = None) -> None:
    """Save ``state`` (any pytree of arrays, e.g. an :class:`itlin_core.ILState` with optax
    states inside), the PRNG ``key``, the position ``step`` and the metric ``history`` to one
    ``.npz`` file, atomically. ``meta`` (JSON-able) is stored and returned by
    :func:`load_checkpoint`. History values must be arrays, numbers or ``None``."""
    leaves, treedef = jax.tree_util.tree_flatten(state)
    arrays = {f"leaf_{i}": np.asarray(leaf) for i, leaf in enumerate(leaves)}
    hist_scalars = {}
    for k, v in history.items():
        if v is None or isinstance(v, (bool, int, float, np.generic)):
            hist_scalars[k] = _encode(v)  # diverged_at, seconds
        else:
            arrays[f"hist_{k}"] = np.asarray(v)
    kd = _key_data(key)
    if kd is not None:
        arrays["key"] = kd
    header = {"format": FORMAT_VERSION, "treedef": str(treedef), "num_leaves": len(leaves), "step": int(step),
              "has_key": kd is not None, "history_scalars": hist_scalars, "meta": dict(meta or {})}
    arrays["header"] = np.asarray(json.dumps(header, allow_nan=False))
    _atomic_write(Path(path), lambda f: np.savez(f, **arrays), "wb")


def load_checkpoint(path, template) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`. ``template`` is a pytree with the
    structure, shapes and dtypes of the saved state (e.g. the initial state); the file must
    match it exactly.

    Raises:
      ValueError: the file is not a checkpoint, or its state does not match ``template``.
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            files = {k: z[k] for k in z.files}
        header = json.loads(str(files.pop("header")))
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"{path} is not a readable checkpoint ({e}); delete it to start afresh.") from None
    if header.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path} is a checkpoint of format {header.get('format')}, expected {FORMAT_VERSION}.")
    t_leaves, t_def = jax.tree_util.tree_flatten(template)
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
    history.update({k: _decode(v) for k, v in header["history_scalars"].items()})
    return Checkpoint(state=jax.tree_util.tree_unflatten(t_def, leaves),
                      key=files.get("key") if header["has_key"] else None,
                      step=int(header["step"]), history=history, meta=header["meta"])


def _merge_history(old: dict | None, new: dict) -> dict:
    """Append the recorded losses and evaluations of ``new`` to ``old``."""
    if old is None:
        return dict(new)
    out = dict(old)
    for k, v in new.items():
        if k in ("diverged_at",):
            out[k] = v if v is not None else old.get(k)
        elif k == "nonfinite_at" and old.get(k) is not None:
            out[k] = np.where(np.asarray(old[k]) >= 0, old[k], v)  # the first non-finite step stays
        elif k == "seconds":
            out[k] = float(old.get(k, 0.0)) + float(v)
        elif k in old and np.ndim(v) >= 1:
            out[k] = np.concatenate([np.asarray(old[k]), np.asarray(v)])
        else:
            out[k] = v
    return out


def train_with_checkpoints(step: Callable, state, batches, num_steps: int, *, checkpoint_path,
                           checkpoint_every: int, eval_fn: Callable | None = None,
                           eval_every: int | None = None, key=None, meta: Mapping | None = None,
                           stop_at: int | None = None, progress=None, desc: str = "training",
                           on_nonfinite: str = "raise", loss_every: int | None = None):
    """:func:`itlin_core.train` that saves a checkpoint every ``checkpoint_every`` steps and, when
    ``checkpoint_path`` exists, resumes from it instead of starting from ``state``.

    The batch function must depend on the step index only (as :func:`itlin_core.minibatches`
    does: epoch ``e`` uses the permutation drawn from ``fold_in(key, e)``); then the resumed run
    sees the same batches, takes the same ``lax.scan`` chunks (their ends are multiples of
    ``eval_every``) from a bit-identical state, and so reproduces the uninterrupted run bit for
    bit, history included. (On a GPU this also needs XLA's deterministic kernels:
    ``XLA_FLAGS=--xla_gpu_deterministic_ops=true``; without it some reductions may round
    differently from run to run, resumed or not.)

    Args:
      step, state, batches, num_steps, eval_fn, eval_every, progress, desc, on_nonfinite, loss_every: as for
        :func:`itlin_core.train`; ``state`` is the initial state (also the template that a
        checkpoint must match).
      checkpoint_path: the ``.npz`` file to save to and resume from (e.g. on a mounted Google
        Drive; see :func:`default_checkpoint_dir`).
      checkpoint_every: steps between checkpoints; a multiple of ``eval_every``. A checkpoint is
        also written at the end (and at ``stop_at``), so running the finished cell again returns
        at once.
      key: the PRNG key the run's data order (and any other randomness) derives from; it is
        saved, and resuming with a different key raises ValueError.
      meta: JSON-able settings that must match on resume (e.g. the preset and K values);
        ``num_steps``, ``eval_every`` and ``checkpoint_every`` are always checked.
      stop_at: stop (after checkpointing) once this many steps are done, e.g. to fit a session;
        the next call continues from there. A multiple of ``eval_every``.

    Returns:
      ``(state, history)`` as :func:`itlin_core.train` returns them for the whole run so far,
      plus ``history["resumed_from"]``: the step this call started from (0 for a fresh run).

    Raises:
      ValueError: bad arguments, or a checkpoint from a different run (structure, key or
        settings differ).
    """
    num_steps = int(num_steps)
    eval_every = num_steps if eval_every is None else int(eval_every)
    checkpoint_every = int(checkpoint_every)
    if num_steps < 0:
        raise ValueError(f"num_steps must be a non-negative integer, got {num_steps}.")
    if num_steps > 0 and eval_every < 1:
        raise ValueError(f"eval_every must be a positive integer, got {eval_every}.")
    if checkpoint_every < 1 or (num_steps > 0 and checkpoint_every % eval_every):
        raise ValueError(f"checkpoint_every must be a positive multiple of eval_every ({eval_every}), "
                         f"got {checkpoint_every}: checkpoints are taken between evaluation chunks.")
    if stop_at is not None and (int(stop_at) != stop_at or stop_at < 0 or (num_steps and stop_at % eval_every)):
        raise ValueError(f"stop_at must be a non-negative multiple of eval_every ({eval_every}), got {stop_at!r}: "
                         "a run stops only where the uninterrupted run evaluates.")
    end = num_steps if stop_at is None else min(int(stop_at), num_steps)
    path = Path(checkpoint_path)
    run_meta = {"num_steps": num_steps, "eval_every": eval_every, "checkpoint_every": checkpoint_every,
                "loss_every": 1 if loss_every is None else int(loss_every),
                "user": json.loads(json.dumps(dict(meta or {}), allow_nan=False))}
    kd = _key_data(key)

    start, history = 0, None
    if path.exists():
        ck = load_checkpoint(path, state)
        if ck.meta != run_meta:
            raise ValueError(f"{path} was written by a run with other settings ({ck.meta}) than this one "
                             f"({run_meta}); delete it or choose another checkpoint_path.")
        if (ck.key is None) != (kd is None) or (kd is not None and not np.array_equal(ck.key, kd)):
            raise ValueError(f"{path} was written by a run with another PRNG key (seed); resuming it would "
                             "not reproduce that run. Use the same seed, or delete the checkpoint.")
        state, start, history = ck.state, ck.step, ck.history
        if history.get("diverged_at") is not None or start >= end:
            history = dict(history, resumed_from=start)
            return state, history

    acc = {"hist": history, "at": start}
    block = 1 if loss_every is None else int(loss_every)

    def on_chunk(s, at, losses, values, nonfinite_at):
        part = {"loss": losses, "eval_step": np.asarray([at] if values is not None else [], dtype=np.int64),
                "loss_every": block}
        if nonfinite_at is not None:
            part["nonfinite_at"] = nonfinite_at
        if values is not None:
            part.update({k: np.asarray(v)[None] for k, v in values.items()})
        acc["hist"] = _merge_history(acc["hist"], part)
        acc["at"] = at
        if at % checkpoint_every == 0 or at == end:
            h = dict(acc["hist"], diverged_at=None,
                     seconds=float(acc["hist"].get("seconds", 0.0)) + time.perf_counter() - t0)
            save_checkpoint(path, s, step=at, history=h, key=kd, meta=run_meta)

    t0 = time.perf_counter()
    if start == 0 and eval_fn is not None:
        # train() evaluates at step 0 itself; seed the accumulated history with that evaluation
        jit_eval = jax.jit(eval_fn)
        values = {k: np.asarray(v) for k, v in jit_eval(state).items()}
        acc["hist"] = {"eval_step": np.asarray([0], dtype=np.int64), **{k: v[None] for k, v in values.items()}}
    state, seg = train(step, state, batches, end - start, eval_fn=eval_fn, eval_every=eval_every,
                       progress=progress, desc=desc, on_nonfinite=on_nonfinite, start_step=start,
                       eval_at_start=False, on_chunk=on_chunk, loss_every=loss_every)
    hist = acc["hist"] if acc["hist"] is not None else {"loss": seg["loss"], "eval_step": seg["eval_step"],
                                                        "loss_every": seg["loss_every"]}
    hist = dict(hist)
    hist["diverged_at"] = seg["diverged_at"]
    if seg["diverged_at"] is not None:
        save_checkpoint(path, state, step=acc["at"], key=kd, meta=run_meta,
                        history=dict(hist, seconds=float(hist.get("seconds", 0.0)) + seg["seconds"]))
    hist["seconds"] = float(hist.get("seconds", 0.0)) + seg["seconds"]
    hist["eval_step"] = np.asarray(hist["eval_step"])
    hist["resumed_from"] = start
    return state, hist


__all__ = ["save_results", "load_results", "results_path", "default_results_dir", "default_checkpoint_dir",
           "software_versions", "device_description", "Checkpoint", "save_checkpoint", "load_checkpoint",
           "train_with_checkpoints"]
