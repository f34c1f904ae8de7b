r"""The four image chapters as one table: their run groups per preset, running and recording a chapter, and what every
image chapter notebook shows (the scale table, the source of its curves, the round-trip check).

Each chapter module (``cifar_few_updates``, ``cifar_features``, ``cifar_damping``, ``resnet_mnist``) has
``runs(preset) -> {group name: ImageRunConfig}``, built from the shared settings of
:mod:`itlin_core.book.image_settings` (this module imports the chapter modules; they never import it). Every number
the papers give is used at the ``paper`` preset; where a setting is not in our copy of the papers, the chapter
module's comments say what we chose, and the smaller presets' learning rates are chosen from curvature measurements
(the chapters explain how). The ``smoke`` preset runs the same code on tiny models and in-format stand-in data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import tempfile
from pathlib import Path
from typing import Sequence

import jax

from . import cifar_damping, cifar_features, cifar_few_updates, estimates, resnet_mnist, sweeps
from .common import get_preset
from .image_records import format_setting, records_equal, summarise
from .image_runs import ImageRunConfig, image_data, run_images
from .records import RECORDED_PRESETS, default_checkpoint_dir, load_results, origins, results_path, save_results

#: The image chapters, by notebook name, and their modules (each builds its run groups from
#: :mod:`itlin_core.book.image_settings` and never imports this module back).
MODULES = {"cifar_few_updates": cifar_few_updates, "cifar_features": cifar_features,
           "cifar_damping": cifar_damping, "resnet_mnist": resnet_mnist}
CHAPTERS = tuple(MODULES)


def shown_preset(chapter: str, preset: str | None = None) -> str:
    """The preset whose settings a chapter shows: ``preset`` itself, except at ``book`` (which
    trains nothing), where it is the preset of the recorded result the chapter plots
    (:data:`RECORDED_PRESETS`, the larger scale first), or ``colab`` when none is recorded.

    Examples:
      >>> import os
      >>> from unittest import mock
      >>> with mock.patch.dict(os.environ, ITLIN_RESULTS_DIR=tempfile.mkdtemp()):   # no record there
      ...     shown_preset("cifar_few_updates", "smoke"), shown_preset("cifar_few_updates", "book")
      ('smoke', 'colab')
    """
    preset = get_preset(preset)
    if preset != "book":
        return preset
    return next((p for p in RECORDED_PRESETS if results_path(chapter, p).exists()), "colab")


def run_groups(chapter: str, preset: str | None = None) -> dict:
    """The run groups of an image chapter at a preset (``book`` trains none: the chapter plots a
    recorded result instead, so this returns the settings of :func:`shown_preset`).

    Raises:
      ValueError: an unknown chapter, or ``laptop`` for a chapter without laptop-scale groups.

    Examples:
      >>> groups = run_groups("cifar_few_updates", "smoke")
      >>> list(groups), groups["fig2"].Ks
      (['fig2', 'fig3', 'fig3_inf', 'fig3_tgn', 'fig11_full', 'fig11_mini', 'fig3_rules'], (1, 20))
    """
    if chapter not in CHAPTERS:
        raise ValueError(f"unknown chapter {chapter!r}; the image chapters are {', '.join(CHAPTERS)}.")
    preset = shown_preset(chapter, preset)
    module = MODULES[chapter]
    if preset == "laptop" and not getattr(module, "HAS_LAPTOP", False):
        raise ValueError(f"the chapter {chapter!r} has no laptop-scale run groups yet; use smoke, colab or paper.")
    return module.runs(preset)


def missing_groups(chapter: str, record) -> list:
    """The run groups of ``record``'s preset that ``record`` (a loaded results file) lacks: groups
    added to the chapter's settings after it was recorded, which a later ``--names`` recording
    adds. Empty for ``None`` (no record)."""
    if record is None:
        return []
    return [g for g in run_groups(chapter, record["preset"]) if g not in record["data"]]


def _settings(cfg: ImageRunConfig) -> dict:
    """Every setting of ``cfg``, as :meth:`~ImageRunConfig.as_dict` writes them, defaults included."""
    return {**dataclasses.asdict(cfg), **cfg.as_dict()}


def scale_table(chapter: str, preset: str = "colab") -> list:
    """Rows ``(run, setting, <preset>, paper)`` for every setting that differs between ``preset``
    (``colab`` or ``laptop``) and the ``paper`` preset of ``chapter``: the chapter's note on
    scale."""
    colab, paper = run_groups(chapter, preset), run_groups(chapter, "paper")
    rows = []
    for name in paper:
        if name not in colab:
            rows.append((name, "(run)", f"not run at {preset}", "run"))
            continue
        a, b = _settings(colab[name]), _settings(paper[name])
        rows += [(name, field, a[field], b[field]) for field in a if a[field] != b[field]]
    rows += [(name, "(run)", "run", "not in the paper") for name in colab if name not in paper]
    return rows


def scale_table_markdown(chapter: str, preset: str = "colab") -> str:
    """:func:`scale_table` as a Markdown table (``display(Markdown(...))`` in a notebook).

    Examples:
      >>> for line in scale_table_markdown("cifar_few_updates").splitlines()[:3]: print(line)
      | run group | setting | colab | paper |
      | --- | --- | --- | --- |
      | `fig2` | steps | 20,000 | 60,000,000 |
    """
    lines = [f"| run group | setting | {preset} | paper |", "| --- | --- | --- | --- |"]
    lines += [f"| `{run}` | {field} | {format_setting(field, a)} | {format_setting(field, b)} |"
              for run, field, a, b in scale_table(chapter, preset)]
    return "\n".join(lines)


def follows_rule(colab: ImageRunConfig, paper: ImageRunConfig) -> bool:
    """Whether ``colab`` is ``paper`` with lr x f, K / f and steps / f for one factor f (K = 1 and
    K = inf kept): the rescaling of Goldwaser and Ge's Fig. 11 that keeps lr * K and lr * steps."""
    f = colab.lr / paper.lr
    ok = math.isclose(paper.steps / colab.steps, f, rel_tol=1e-6) and len(colab.runs) == len(paper.runs)
    for (kc, _), (kp, _) in zip(colab.runs, paper.runs):
        if kp is None or kp == 1:
            ok = ok and kc == kp
        else:
            ok = ok and kc is not None and math.isclose(kp / kc, f, rel_tol=1e-6)
    return ok


def rule_table(chapter: str, preset: str = "colab") -> str:
    """For each run group of ``chapter``, how its colab settings relate to the paper's: whether
    they follow the rule of :func:`scaled`, the ratios of learning rates, steps and largest finite
    K, the training time ``lr * steps`` and ``lr * K`` of every run (``inf`` for K = inf).

    Examples:
      >>> [line.split()[:2] for line in rule_table("cifar_few_updates").splitlines()[:2]]   # header, fig2
      [['run', 'group'], ['fig2', 'no']]
    """
    colab, paper = run_groups(chapter, preset), run_groups(chapter, "paper")
    big = lambda cfg: max((k for k in cfg.Ks if k is not None and not isinstance(k, str)), default=None)
    lrk = lambda cfg: ", ".join("inf" if k is None else k if isinstance(k, str) else f"{cfg.lr * k:.3g}"
                                for k, _ in cfg.runs)
    q = preset
    lines = [f"{'run group':16s} {'rule?':>5s} {f'lr {q}/paper':>14s} {f'steps paper/{q}':>17s} "
             f"{f'largest K paper/{q}':>21s} {f'lr*steps {q} | paper':>23s}   lr*K per run, {q} | paper"]
    for name, c in colab.items():
        p = paper.get(name)
        if p is None:
            lines.append(f"{name:16s} ({preset} only)")
            continue
        k_ratio = f"{big(p) / big(c):g}" if big(c) and big(c) > 1 and big(p) else "-"
        lines.append(f"{name:16s} {'yes' if follows_rule(c, p) else 'no':>5s} {c.lr / p.lr:>14g} "
                     f"{p.steps / c.steps:>17g} {k_ratio:>21s} {c.lr * c.steps:>11g} | {p.lr * p.steps:<9g}   "
                     f"{lrk(c)} | {lrk(p)}")
    return "\n".join(lines)


def run_chapter(chapter: str, preset: str | None = None, *, data: dict | None = None, names: Sequence | None = None,
                checkpoint_dir=None, progress=None, data_dir=None, verify: bool = True, mesh="auto") -> dict:
    """Train the run groups of an image chapter (``names``, default all) and return their
    :func:`~itlin_core.book.image_records.summarise` records, ``{name: record}``. At
    ``colab``/``paper`` every group checkpoints to ``checkpoint_dir`` (default
    :func:`~itlin_core.book.records.default_checkpoint_dir`) and resumes from it; at ``smoke``
    nothing is written. ``data``: ``{dataset: image_data(...)}`` to reuse loaded data; missing
    data sets are loaded with :func:`~itlin_core.book.image_runs.image_data` from ``data_dir``
    (checked against the published checksums unless ``verify=False``, e.g. for a re-encoded copy).
    Each group's runs are split over the devices of ``mesh`` (:func:`~itlin_core.book.image_runs.run_images`).

    Raises:
      ValueError: at the ``book`` preset (which plots recorded results and never trains), or an
        unknown chapter or run name.
    """
    preset = get_preset(preset)
    if preset == "book":
        raise ValueError("the book preset does not train image chapters; it plots a recorded colab/paper "
                         "result (load_results). Use ITLIN_PRESET=smoke, colab or paper to train.")
    groups = run_groups(chapter, preset)
    names = list(groups) if names is None else list(names)
    unknown = [n for n in names if n not in groups]
    if unknown:
        raise ValueError(f"unknown run(s) {unknown} for chapter {chapter!r}; it has {list(groups)}.")
    data = dict(data or {})
    if checkpoint_dir is None and preset != "smoke":
        checkpoint_dir = default_checkpoint_dir()
    out, records = {}, estimates.chapter_records(chapter)
    for name in names:
        cfg = groups[name]
        est = estimates.group_estimate(name, cfg, preset, records)   # said, and checked, before training
        print(estimates.estimate_line(f"{chapter}/{name}", est))
        estimates.check_fits(f"{chapter}/{name}", est, preset)
        if cfg.dataset not in data:
            data[cfg.dataset] = image_data(cfg.dataset, preset, data_dir=data_dir, verify=verify)
        tag = "-stand-in" if data[cfg.dataset].get("stand_in") else ""  # never resumed as a real-data run
        ck = None if checkpoint_dir is None else Path(checkpoint_dir) / f"{chapter}-{name}-{preset}{tag}.npz"
        with measured_costs() as costs:
            hist = run_images(cfg, data[cfg.dataset], checkpoint_path=ck, progress=progress,
                              desc=f"{chapter}/{name}: {len(cfg.runs)} run(s)", mesh=mesh)
        out[name] = {**summarise(hist), **costs}
    return out


#: The compile-time events of :mod:`jax.monitoring` that :func:`measured_costs` adds up: tracing
#: to a jaxpr, lowering it to MLIR and XLA's own compilation.
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")


def peak_device_bytes() -> int | None:
    """The largest ``peak_bytes_in_use`` of the local devices' allocators since the process
    started, or ``None`` where the backend keeps no statistics (the CPU). It cannot be reset, so
    it is one run group's own peak only when the group is the first thing the process runs (the
    record command run with one group per ``--names``)."""
    stats = [d.memory_stats() for d in jax.local_devices()]
    peaks = [int(s["peak_bytes_in_use"]) for s in stats if s and "peak_bytes_in_use" in s]
    return max(peaks) if peaks else None


@contextlib.contextmanager
def measured_costs():
    """Measure a block of JAX work: yields a dict that, when the block ends, holds
    ``compile_seconds`` (the time JAX spent tracing, lowering and compiling in the block, summed
    from :mod:`jax.monitoring`'s events :data:`COMPILE_EVENTS`; compilations found in a cache cost
    nothing) and ``peak_device_bytes`` (:func:`peak_device_bytes`)."""
    costs, total = {}, [0.0]

    def listen(event, duration, **_):
        if event in COMPILE_EVENTS:
            total[0] += float(duration)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield costs
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
        costs.update(compile_seconds=total[0], peak_device_bytes=peak_device_bytes())


def cost_line(rec: dict) -> str:
    """One run group's costs as a short phrase: wall time, steps per second without the compile
    time, compile time and peak device memory (the last two only in records that measured them)."""
    steps = int(rec["eval_step"][-1]) if len(rec["eval_step"]) else 0
    seconds, compile_s = float(rec["seconds"]), rec.get("compile_seconds")
    text = f"{seconds:.0f} s"
    if compile_s is not None and seconds > compile_s and steps:
        text += f" ({steps / (seconds - compile_s):.1f} steps/s after {compile_s:.1f} s of compiling)"
    elif rec.get("steps_per_second"):
        text += f" ({rec['steps_per_second']:.1f} steps/s)"
    if rec.get("peak_device_bytes") is not None:
        text += f", peak device memory {rec['peak_device_bytes'] / 2**30:.2f} GiB"
    return text


def provenance(record_or_results, preset: str | None = None) -> str:
    """One line saying where the plotted numbers come from: a recorded colab/paper run (with its
    device and date), or a smoke run on stand-in data that is *not* CIFAR10 or MNIST.

    Examples:
      >>> provenance({"fig2": {"stand_in": True}}, "smoke")
      'smoke run on in-format stand-in data: not CIFAR10/MNIST results'
      >>> provenance({"preset": "colab", "data": {}, "device": {"device_kind": "NVIDIA H100"}, "created": "2025-05-01"})
      'recorded colab run on NVIDIA H100, 2025-05-01'

      Groups merged in from another machine are named with theirs (:func:`~.records.origins`):

      >>> provenance({"preset": "colab", "device": {"device_kind": "H200"}, "versions": {}, "created": "2026-11-28",
      ...             "data": {"a": {}, "b": {"origin": {"device": {"device_kind": "H100"}, "versions": {},
      ...                                                "created": "2026-11-24T20:05"}}}})
      'recorded colab run on H200 (a), 2026-11-28, and H100 (b), 2026-11-24'
    """
    if isinstance(record_or_results, dict) and "data" in record_or_results and "preset" in record_or_results:
        r = record_or_results
        groups = r["data"].values() if isinstance(r["data"], dict) else []
        stand_in = any(isinstance(g, dict) and g.get("stand_in") for g in groups)
        where = origins(r) if isinstance(r["data"], dict) and groups else {}
        text = (f"{r.get('device', {}).get('device_kind', 'unknown device')}, {r.get('created', '?')}"
                if len(where) < 2 else ", and ".join(f"{d} ({', '.join(n)}), {day}" for (d, day), n in where.items()))
        return (f"recorded {r['preset']} run on {text}"
                + (", on stand-in data: not CIFAR10/MNIST results" if stand_in else "")
                + (f"; {r['note']}" if r.get("note") else ""))
    first = next(iter(record_or_results.values()))
    if first.get("stand_in"):
        return f"{preset or 'smoke'} run on in-format stand-in data: not CIFAR10/MNIST results"
    return f"{preset} run, just computed"


def chapter_results(chapter: str, preset: str | None = None):
    """``(results, source)`` for a chapter notebook: at ``book`` the recorded colab/paper result (``(None, None)``
    when none is recorded); otherwise the chapter trained now (:func:`run_chapter`), and at ``colab``/``paper`` on real data also recorded
    (:func:`~itlin_core.book.records.save_results`). At ``smoke`` it trains through :func:`~itlin_core.book.sweeps.recorded`.

    Examples:
      >>> import os
      >>> from unittest import mock
      >>> with mock.patch.dict(os.environ, ITLIN_RESULTS_DIR=tempfile.mkdtemp()):
      ...     _ = save_results("cifar_few_updates", "colab", {"fig2": {"seconds": 60.0}}, seed=0)
      ...     results, source = chapter_results("cifar_few_updates", "book")
      >>> list(results), source.startswith("recorded colab run on ")
      (['fig2'], True)
    """
    preset = get_preset(preset)
    if preset == "book":
        record = load_results(chapter, RECORDED_PRESETS)
        return (None, None) if record is None else (record["data"], provenance(record))
    if preset == "smoke":   # read back only where it would be the same bit for bit (exact)
        groups = run_groups(chapter, preset)
        data = {d: image_data(d, preset) for d in sorted({g.dataset for g in groups.values()})}
        results = sweeps.recorded(run_chapter, chapter, preset, data=data, owner=chapter, depends=groups,
                                  exact=True, preset=preset)
    else:
        results = run_chapter(chapter, preset)
    if preset in RECORDED_PRESETS and not any(r["stand_in"] for r in results.values()):
        save_results(chapter, preset, results, seed=0)
    return results, provenance(results, preset)


def computed_on(chapter: str, preset: str | None = None) -> str:
    """The JAX platform (``"cpu"``, ``"gpu"``, ...) that computed the results a chapter shows at ``preset``: at
    ``book`` the recorded run's device, otherwise the one training now. Check cells pass ``exact=computed_on(...) ==
    "cpu"`` to :func:`~itlin_core.book.image_records.check_record`.

    Examples:
      >>> computed_on("cifar_few_updates", "smoke") == jax.default_backend()    # trained here and now
      True
    """
    preset = get_preset(preset)
    if preset == "book":
        record = load_results(chapter, RECORDED_PRESETS)
        if record is not None:
            return str(record.get("device", {}).get("platform", "cpu"))
    return jax.default_backend()


def results_summary(chapter: str, results, source) -> str:
    """What a chapter prints about its curves: their source and each group's size and cost, or
    how to produce a record when there is none.

    Examples:
      >>> rec = {"labels": ["K=1", "K=20"], "diverged_at": [None, None], "n_params": 1234, "n_train": 512,
      ...        "n_eval": 64, "seconds": 12.0, "eval_step": [0, 40], "steps_per_second": 3.3}
      >>> for line in results_summary("cifar_few_updates", {"fig2": rec}, "smoke run").splitlines()[:2]: print(line)
      source: smoke run
      fig2             2 run(s), 1,234 parameters, 512 training images, 64 evaluated; 12 s (3.3 steps/s)
      >>> results_summary("cifar_few_updates", None, None).startswith("No laptop, colab or paper result")
      True
    """
    if results is None:
        return (f"No laptop, colab or paper result of '{chapter}' has been recorded yet, so the figures below are "
                "not shown.\nTo produce one, run this notebook on a GPU with ITLIN_PRESET=colab, or record it "
                f"with 'python -m itlin_core.tools.record {chapter} --preset <laptop|colab|paper> --data DIR' (see "
                f"the page 'Running the chapters on a GPU'); it saves book/results/{chapter}-<preset>.json, and "
                "the book then plots it.")
    lines = [f"source: {source}"]
    for name, rec in results.items():
        gone = [f"{lab} at step {d:,}" for lab, d in zip(rec["labels"], rec["diverged_at"]) if d is not None]
        diverged = f"; diverged: {', '.join(gone)}" if gone else ""
        lines.append(f"{name:16s} {len(rec['labels'])} run(s), {rec['n_params']:,} parameters, "
                     f"{rec['n_train']:,} training images, {rec['n_eval']:,} evaluated; {cost_line(rec)}" + diverged)
    missing = [g for g in run_groups(chapter) if g not in results]
    if missing:
        lines.append(f"not in this record (not recorded yet, or recorded with settings since changed): {', '.join(missing)}")
    return "\n".join(lines)


def recorded_numbers(results) -> dict:
    """The numbers a chapter's note on scale glues (``results`` from :func:`chapter_results`):
    ``groups`` (run groups shown; 0 when nothing is recorded), ``minutes`` (their training time
    in all) and ``stand_in`` (how many of them trained on stand-in images, as at ``smoke``).

    Examples:
      >>> rec = {"seconds": 90.0, "stand_in": True}
      >>> recorded_numbers({"fig2": rec, "fig3": dict(rec, stand_in=False)}), recorded_numbers(None)
      ({'groups': 2, 'minutes': 3.0, 'stand_in': 1}, {'groups': 0, 'minutes': 0.0, 'stand_in': 0})
    """
    results = results or {}
    return {"groups": len(results),
            "minutes": sum(float(r["seconds"]) for r in results.values()) / 60,
            "stand_in": sum(bool(r["stand_in"]) for r in results.values())}


def survives_round_trip(chapter: str, results) -> bool:
    """Whether ``results`` come back unchanged from a save/load round trip through a results file
    (in a temporary directory).

    Examples:
      >>> import numpy as np
      >>> survives_round_trip("cifar_few_updates", {"fig2": {"acc": np.array([0.5, np.nan]), "Ks": [1, None]}})
      True
    """
    with tempfile.TemporaryDirectory() as tmp:
        save_results(chapter, "smoke", results, seed=0, results_dir=tmp)
        back = load_results(chapter, preferred=("smoke",), results_dir=tmp)["data"]
    return records_equal(results, back)


__all__ = ["MODULES", "CHAPTERS", "RECORDED_PRESETS", "shown_preset", "run_groups", "missing_groups",
           "scale_table", "scale_table_markdown", "follows_rule", "rule_table", "run_chapter", "provenance",
           "chapter_results", "computed_on", "results_summary", "COMPILE_EVENTS", "peak_device_bytes", "measured_costs", "cost_line", "recorded_numbers", "survives_round_trip"]
