"""What every chapter module shares: the presets, labels for K, counts of feature updates, and
the outputs of the models a sweep trains.

Each chapter reads its preset from the ``ITLIN_PRESET`` environment variable (if unset: ``colab``
where JAX finds a GPU, ``book`` otherwise) through :func:`get_preset`, and its settings from one
table per chapter (``{preset: config}``), so every choice the papers leave open is stated in one
place. ``smoke`` is for CI and nbval (seconds), ``book`` for the book build on a 2-core CPU (about
a minute or two per toy chapter), ``laptop`` for recording the image chapters on real data on a
CPU (about an hour per chapter; ``python -m itlin_core.tools.record``), ``colab``/``paper`` for
GPUs. The toy chapters are CPU
experiments whatever the preset: a table without a ``colab`` or ``paper`` entry uses its ``book``
entry.
"""

from __future__ import annotations

import math
import os
import re

import jax
import numpy as np

import itlin_core as ic

PRESETS = ("smoke", "book", "laptop", "colab", "paper")


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


def machine_line() -> str:
    """The machine a timing was taken on, in words: JAX's device, the processor, the number of CPU
    cores and JAX's version (timings in the book are reported with it).

    Examples:
      >>> line = machine_line()     # e.g. "cpu (cpu), x86_64, 2 CPU cores, jax 0.4.38": the machine's own
      >>> isinstance(line, str), f"jax {jax.__version__}" in line, "CPU cores" in line
      (True, True, True)
    """
    import platform
    return (f"{jax.devices()[0].device_kind} ({jax.default_backend()}), "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, jax {jax.__version__}")


def get_preset(preset: str | None = None) -> str:
    """The preset to use: ``preset`` if given, else :func:`default_preset` (``$ITLIN_PRESET``, else
    ``colab`` on a GPU and ``book`` without one).

    Raises ValueError for anything but ``smoke``, ``book``, ``laptop``, ``colab``, ``paper``.

    Examples:
      >>> get_preset(" Smoke"), get_preset() in PRESETS     # case and spaces ignored; no argument: the default
      ('smoke', True)
      >>> get_preset("fast")
      Traceback (most recent call last):
      ValueError: unknown preset 'fast': ITLIN_PRESET (or preset=) must be one of smoke, book, laptop, colab, paper.
    """
    name = preset if preset is not None else default_preset()
    name = str(name).strip().lower()
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}: ITLIN_PRESET (or preset=) must be one of "
                         f"{', '.join(PRESETS)}.")
    return name


def preset_line(preset: str) -> str:
    """The line each chapter prints first: the preset in use, why, and how to change it.

    Examples:
      >>> from unittest import mock
      >>> with mock.patch.dict(os.environ, ITLIN_PRESET="smoke"):
      ...     print(preset_line("smoke").split(";")[0], "|", preset_line("paper").split(";")[0])
      preset: smoke (from $ITLIN_PRESET | preset: paper (chosen in the cell above
    """
    env = os.environ.get("ITLIN_PRESET")
    if env is not None and get_preset(env) == preset:
        why = "from $ITLIN_PRESET"
    elif preset == default_preset():
        why = ("no $ITLIN_PRESET and JAX found a GPU" if preset == "colab" else
               "no $ITLIN_PRESET and no GPU; on a GPU the default is colab")
    else:
        why = "chosen in the cell above"
    return (f"preset: {preset} ({why}; to change it, run %env ITLIN_PRESET=<smoke|book|laptop|colab|paper> "
            "first, or write common.get_preset(\"<name>\") above)")


def per_preset(table: dict, preset: str | None = None):
    """The entry of ``table`` for the preset (:func:`get_preset`), or its ``book`` entry when the
    table has none for that preset."""
    return table.get(get_preset(preset), table["book"])


#: The relinearisation rules a run group's ``Ks`` may name besides a period: a text spec, so
#: that settings, records and legends stay plain JSON and readable.
RULE_SPEC = re.compile(r"^\s*(geometric|on_drift)\s*\((.*)\)\s*$")


def parse_rule(spec: str):
    """The rule a text spec names, ``"geometric(K0, ratio)"`` or ``"on_drift(tol)"``: the specs
    a run group's ``Ks`` may hold besides periods (:meth:`itlin_core.RelinRule.parse` reads them).

    >>> parse_rule("geometric(10, 1.5)").period
    Array(10, dtype=int32)

    Raises:
      ValueError: for anything else, or arguments the rule refuses (``K0 < 1``, ``ratio < 1``,
        ``tol < 0``, NaN).
    """
    m = RULE_SPEC.match(spec) if isinstance(spec, str) else None
    if m is None:
        raise ValueError(f"a relinearisation rule spec must read 'geometric(K0, ratio)' or 'on_drift(tol)', "
                         f"got {spec!r}.")
    return ic.RelinRule.parse(spec)


def rule_family(K) -> str:
    """``"fixed"`` for a period (a whole number, ``None`` or ``math.inf``), ``"geometric"`` or
    ``"drift"`` for a rule spec (:func:`parse_rule`)."""
    if isinstance(K, str):
        return "geometric" if RULE_SPEC.match(K).group(1) == "geometric" else "drift"
    return "fixed"


def k_label(K) -> str:
    """``"K=1"``, ``"K=1e3"``, ``"K=∞"`` for legends; a rule spec as written: the text
    :class:`itlin_core.RelinRule` prints.

    Examples:
      >>> [k_label(K) for K in (1, 1000, 5000, None, "geometric(10, 1.5)")]
      ['K=1', 'K=1e3', 'K=5000', 'K=∞', 'geometric(10, 1.5)']
    """
    return str(parse_rule(K) if isinstance(K, str) else ic.RelinRule.parse(K))


def k_text(K) -> str:
    """:func:`k_label` without the ``"K="`` of a period: ``"1e3"``, ``"∞"``, ``"geometric(10, 1.5)"``
    (for tables)."""
    label = k_label(K)
    return label if isinstance(K, str) else label[2:]


def settings(cfg) -> str:
    """A chapter's settings (a dataclass such as a preset's configuration) as a two-column table,
    one field per line, for a notebook to print instead of the dataclass's one-line repr, which
    runs off the page on a phone. A tuple of periods (a field named ``Ks`` or ending in ``_Ks``) is
    written with ``∞`` for ``None`` (K = infinity), as the chapters write it.

    Example:
      >>> import dataclasses
      >>> @dataclasses.dataclass(frozen=True)
      ... class Config:
      ...     steps: int = 600
      ...     Ks: tuple = (1, 100, None)
      >>> print(settings(Config()))
      steps  600
      Ks     1, 100, ∞
    """
    import dataclasses

    if not dataclasses.is_dataclass(cfg) or isinstance(cfg, type):
        raise TypeError(f"cfg must be a dataclass instance (a chapter's settings), got {type(cfg).__name__}.")
    fields = [(f.name, getattr(cfg, f.name)) for f in dataclasses.fields(cfg)]
    width = max(len(name) for name, _ in fields)
    def shown(name, value):
        if (name == "Ks" or name.endswith("_Ks")) and isinstance(value, tuple):
            return ", ".join("∞" if k is None else repr(k) for k in value)
        return repr(value)

    return "\n".join(f"{name:<{width}}  {shown(name, value)}" for name, value in fields)


def feature_updates(Ks, steps) -> np.ndarray:
    """Number of linearisations used up to each step, per K (a period or a rule spec), counted by
    :meth:`itlin_core.RelinRule.feature_updates`; shape ``(len(steps), len(Ks))``. A
    drift-triggered rule's count depends on the run, so an ``"on_drift(...)"`` spec raises
    ValueError.

    Examples:
      >>> feature_updates([1, 10, None], steps=[0, 10, 25]).tolist()    # K = 1, K = 10, K = inf
      [[1, 1, 1], [10, 1, 1], [25, 3, 1]]
    """
    t = np.asarray(steps, dtype=np.int64).reshape(-1)
    cols = [(parse_rule(k) if isinstance(k, str) else ic.RelinRule.parse(k)).feature_updates(t) for k in Ks]
    return np.stack(cols, axis=1) if cols else np.zeros((len(t), 0), np.int64)


def proxy_outputs(apply_fn, states, x):
    """The outputs on ``x`` of the model each run of a sweep is training, its linearised proxy
    ``f_lin(state.params)`` at ``state.anchor``: ``(runs, N, ...)`` for stacked IL states."""
    one = lambda s: ic.linearise(apply_fn, s.anchor)(s.params, x)
    return jax.jit(jax.vmap(one))(states)


def glue(name: str, value):
    """Store ``value`` under ``name`` for the chapter's prose without showing it (myst-nb's
    ``glue``): ``{glue:text}`name:.3f``` pastes a number, ``{glue:text}`name``` a label. Only
    values are glued: the sentences around them are written by hand in the Markdown cells, and
    a comparison they make is asserted by a check cell. So the rendered text always matches the
    run at the preset it was built with. Where myst-nb is not installed (Colab), the value is not
    stored anywhere and nothing happens. Returns ``value``.

    Examples:
      >>> glue("best_k", "K=10")      # stored for {glue:text}`best_k`; outside a notebook nothing is shown
      'K=10'
    """
    try:
        from myst_nb import glue as _glue
    except ImportError:
        return value
    if isinstance(value, np.generic):
        value = value.item()   # np.float64(0.5) would paste as its repr, which no format spec reads
    _glue(name, value, display=False)
    return value


def interleaved_seconds(calls: dict, rounds: int, per: int = 1) -> dict:
    """``{name: [seconds per unit, one per round]}`` for each ``calls[name]()`` (which must return
    the arrays it computes, so that the time covers the work: it is blocked on), timed in
    ``rounds`` rounds that each start with the next name, so that no place in the order is
    favoured and machine load affects all alike; ``per`` divides each time (e.g. steps per call).
    Compile (call once) before timing. The book's one timing loop.

    Examples:
      >>> import jax.numpy as jnp
      >>> from itlin_core.book.common import interleaved_seconds
      >>> t = interleaved_seconds({"add": lambda: jnp.ones(3) + 1, "mul": lambda: jnp.ones(3) * 2}, rounds=3)
      >>> sorted(t), [len(v) for v in t.values()], all(s > 0 for v in t.values() for s in v)
      (['add', 'mul'], [3, 3], True)
    """
    import time
    names, times = list(calls), {k: [] for k in calls}
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            jax.block_until_ready(calls[k]())
            times[k].append((time.perf_counter() - t0) / per)
    return times


__all__ = ["interleaved_seconds", "PRESETS", "default_preset", "get_preset", "preset_line", "per_preset", "RULE_SPEC", "parse_rule",
           "rule_family", "k_label", "k_text", "feature_updates", "proxy_outputs", "glue"]
