"""What a run group will cost, said before it trains: steps, runs, parameters, the memory of one
training step on a GPU, and the time a recorded run of the same group took on the same kind of
device (issue 44: a reader on Colab sees the bill before the cell starts, and a group that would
not fit the GPU is refused with the smaller preset to use instead of an out-of-memory crash).

The memory is XLA's own plan for one step (:func:`~itlin_core.book.image_runs.step_memory`),
measured only on an accelerator: it compiles the step once more, which costs seconds on a GPU
and, on a CPU, more than the tiny ``smoke`` groups take to train, while a CPU's memory is rarely
what limits these runs. The time is read from the records in ``book/results`` (their
``steps_per_second`` and ``compile_seconds``), never guessed: with no record of the group on
this kind of device the estimate says so.
"""

from __future__ import annotations

import jax

from itlin_core.datasets import IMAGE_SHAPES

from .image_records import config_matches
from .image_runs import ImageRunConfig, build_model, init_params, step_memory
from .records import RECORDED_PRESETS, group_origin, load_results

#: The memory of the GPU a free Colab session gets (an NVIDIA T4: 15 GiB), for the note on
#: whether a group fits it.
FREE_COLAB_GPU_BYTES = 15 * 2**30


def _device_kind() -> str:
    return str(jax.devices()[0].device_kind)


def _device_bytes() -> int | None:
    stats = jax.devices()[0].memory_stats() or {}
    return int(stats["bytes_limit"]) if "bytes_limit" in stats else None


#: The presets, the largest scale first.
SCALES = RECORDED_PRESETS + ("smoke",)


def chapter_records(chapter: str, results_dir=None) -> dict:
    """``{preset: record}`` of every recorded preset of ``chapter`` (loaded once per chapter)."""
    out = {p: load_results(chapter, (p,), results_dir=results_dir) for p in RECORDED_PRESETS}
    return {p: r for p, r in out.items() if r is not None}


def recorded_seconds(name: str, cfg: ImageRunConfig, preset: str, records: dict):
    """``(seconds, record preset)``: the time the group ``name`` should take for ``cfg.steps``
    steps, compiling included, from one of ``records`` (:func:`chapter_records`; ``preset``
    first, then the larger scales) that trained the same settings on this kind of device, or
    ``(None, None)``."""
    kind = _device_kind()
    for p in dict.fromkeys((preset,) + RECORDED_PRESETS):
        record = records.get(p)
        group = None if record is None else record["data"].get(name)
        if (group is None or (group_origin(record, name)["device"] or {}).get("device_kind") != kind
                or not group.get("steps_per_second")):
            continue
        if not isinstance(group.get("config"), dict) or not config_matches(group["config"], cfg):
            continue
        compile_s = float(group.get("compile_seconds") or 0.0)
        return compile_s + cfg.steps / float(group["steps_per_second"]), p
    return None, None


def group_estimate(name: str, cfg: ImageRunConfig, preset: str, records: dict) -> dict:
    """``{"steps", "runs", "parameters", "step_bytes", "device_bytes", "seconds", "from", "kind"}`` for a
    run group about to train: ``step_bytes`` is :func:`~itlin_core.book.image_runs.step_memory`'s
    total on an accelerator (``None`` on a CPU), ``device_bytes`` the device's memory where JAX
    reports it, ``seconds`` and ``from`` as :func:`recorded_seconds`."""
    model = build_model(cfg, IMAGE_SHAPES[cfg.dataset])
    params = jax.eval_shape(lambda: init_params(cfg, model))
    on_accelerator = jax.default_backend() != "cpu"
    seconds, source = recorded_seconds(name, cfg, preset, records)
    return {"steps": cfg.steps, "runs": len(cfg.runs), "parameters": sum(int(a.size) for a in jax.tree.leaves(params)),
            "step_bytes": step_memory(cfg)["total"] if on_accelerator else None,
            "device_bytes": _device_bytes() if on_accelerator else None, "seconds": seconds, "from": source,
            "kind": _device_kind()}


def estimate_line(name: str, est: dict) -> str:
    """The estimate as the line printed before the group trains."""
    text = f"{name}: {est['runs']} run(s) x {est['steps']:,} steps, {est['parameters']:,} parameters"
    if est["step_bytes"] is not None:
        text += f"; one step needs {est['step_bytes'] / 2**30:.2f} GiB"
        if est["device_bytes"]:
            text += f" of this GPU's {est['device_bytes'] / 2**30:.1f} GiB"
        text += (" (fits a free Colab GPU)" if est["step_bytes"] <= FREE_COLAB_GPU_BYTES
                 else " (more than a free Colab GPU's 15 GiB)")
    if est["seconds"] is not None:
        text += f"; about {est['seconds'] / 60:.1f} min here (the {est['from']} record, made on a {est['kind']} device)"
    else:
        text += "; no record of this group on this kind of device, so no time estimate"
    return text


def check_fits(label: str, est: dict, preset: str) -> None:
    """ValueError, before anything trains, when one training step of the group ``label`` needs
    more memory than the device has, naming the estimate and the smaller presets."""
    if est["step_bytes"] is None or not est["device_bytes"] or est["step_bytes"] <= est["device_bytes"]:
        return
    smaller = SCALES[SCALES.index(preset) + 1:] if preset in SCALES else ()
    raise ValueError(
        f"the run group {label} at the {preset} preset needs {est['step_bytes'] / 2**30:.1f} GiB for one training "
        f"step, more than this device's {est['device_bytes'] / 2**30:.1f} GiB; nothing was trained. "
        + (f"Use a smaller preset ({' or '.join(smaller)}, with ITLIN_PRESET) or a larger GPU." if smaller
           else "Use a larger GPU."))


__all__ = ["FREE_COLAB_GPU_BYTES", "SCALES", "chapter_records", "recorded_seconds", "group_estimate", "estimate_line",
           "check_fits"]
