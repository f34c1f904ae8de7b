"""What every chapter module shares: the presets, labels for K, counts of feature updates, and
the outputs of the models a sweep trains.

Each chapter reads its preset from the ``ITLIN_PRESET`` environment variable (if unset: ``colab``
where JAX finds a GPU, ``book`` otherwise) through :func:`get_preset`, and its settings from one
table per chapter (``{preset: config}``), so every choice the papers leave open is stated in one
place. ``smoke`` is for CI and nbval (seconds), ``book`` for the book build on a 2-core CPU (about
a minute or two per toy chapter), ``colab``/``paper`` for GPUs. The toy chapters are CPU
experiments whatever the preset: a table without a ``colab`` or ``paper`` entry uses its ``book``
entry.
"""

from __future__ import annotations

import math
import os

import jax
import numpy as np

import itlin_core as ic

PRESETS = ("smoke", "book", "colab", "paper")


def _has_gpu() -> bool:
    try:
        return jax.default_backend() == "gpu"
    except RuntimeError:
        return False


def default_preset() -> str:
    """The preset when none is named: ``$ITLIN_PRESET`` if set; else ``colab`` where JAX finds a
    GPU (a Colab GPU runtime: "Run all" then trains the image chapters at their Colab scale), and
    ``book`` without one (the toy chapters train on the CPU, the image chapters plot recorded
    results)."""
    env = os.environ.get("ITLIN_PRESET")
    if env is not None:
        return env
    return "colab" if _has_gpu() else "book"


def get_preset(preset: str | None = None) -> str:
    """The preset to use: ``preset`` if given, else :func:`default_preset` (``$ITLIN_PRESET``, else
    ``colab`` on a GPU and ``book`` without one).

    Raises ValueError for anything but ``smoke``, ``book``, ``colab``, ``paper``.
    """
    name = preset if preset is not None else default_preset()
    name = str(name).strip().lower()
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}: ITLIN_PRESET (or preset=) must be one of "
                         f"{', '.join(PRESETS)}.")
    return name


def preset_line(preset: str) -> str:
    """The line each chapter prints first: the preset in use, why, and how to change it."""
    env = os.environ.get("ITLIN_PRESET")
    if env is not None and get_preset(env) == preset:
        why = "from $ITLIN_PRESET"
    elif preset == default_preset():
        why = ("no $ITLIN_PRESET and JAX found a GPU" if preset == "colab" else
               "no $ITLIN_PRESET and no GPU; on a GPU the default is colab")
    else:
        why = "chosen in the cell above"
    return (f"preset: {preset} ({why}; to change it, run %env ITLIN_PRESET=<smoke|book|colab|paper> "
            "first, or write common.get_preset(\"<name>\") above)")


def per_preset(table: dict, preset: str | None = None):
    """The entry of ``table`` for the preset (:func:`get_preset`), or its ``book`` entry when the
    table has none for that preset."""
    return table.get(get_preset(preset), table["book"])


def k_label(K) -> str:
    """``"K=1"``, ``"K=1e3"``, ``"K=∞"`` for legends."""
    if K is None or K == math.inf:
        return "K=∞"
    K = int(K)
    if K >= 1000 and 10 ** round(math.log10(K)) == K:
        return f"K=1e{int(round(math.log10(K)))}"
    return f"K={K}"


def feature_updates(Ks, steps) -> np.ndarray:
    """Number of linearisations used up to each step, the initial one included: ``ceil(t / K)``
    for finite ``K`` (at least 1; ``t`` for ``K = 1``), 1 for ``K = None`` or ``math.inf``.
    Shape ``(len(steps), len(Ks))``."""
    t = np.asarray(steps, dtype=np.int64).reshape(-1)
    cols = [np.ones(len(t), np.int64) if k is None or k == math.inf else np.maximum(1, -(-t // int(k)))
            for k in Ks]
    return np.stack(cols, axis=1) if cols else np.zeros((len(t), 0), np.int64)




def proxy_outputs(apply_fn, states, x):
    """The outputs on ``x`` of the model each run of a sweep is training, its linearised proxy
    ``f_lin(state.params)`` at ``state.anchor``: ``(runs, N, ...)`` for stacked IL states."""
    one = lambda s: ic.linearise(apply_fn, s.anchor)(s.params, x)
    return jax.jit(jax.vmap(one))(states)


def glue(name: str, value, *, markdown: bool = False):
    """Store ``value`` under ``name`` for the chapter's prose without showing it (myst-nb's
    ``glue``): ``{glue:text}`name:.3f``` pastes a number, ``{glue:md}`name``` a sentence glued with
    ``markdown=True`` (as ``text/markdown``, so it carries no quotes). So the rendered text always
    matches the run at the preset it was built with. Where myst-nb is not installed (Colab), the
    value is not stored anywhere and nothing happens. Returns ``value``."""
    try:
        from myst_nb import glue as _glue
    except ImportError:
        return value
    if isinstance(value, np.generic):
        value = value.item()   # np.float64(0.5) would paste as its repr, which no format spec reads
    if markdown:
        from IPython.display import Markdown
        _glue(name, Markdown(str(value)), display=False)
    else:
        _glue(name, value, display=False)
    return value


__all__ = ["PRESETS", "default_preset", "get_preset", "preset_line", "per_preset", "k_label", "feature_updates",
           "proxy_outputs", "glue"]
