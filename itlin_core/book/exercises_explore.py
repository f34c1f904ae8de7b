"""Checkers of the book's predict-then-measure exercises: the reader runs a small experiment,
then passes the numbers it printed, with the setting it used. Each checker runs the same
experiment again with the package's own code, says whether the numbers are right, and where
they are not names the likely slip (never the expected value). The prediction is the reader's
to explain; a checker confirms the measurement it rests on.

As in :mod:`itlin_core.book.exercises`, each ``check_*`` prints a verdict and returns ``True``
or ``False``. A checker takes the chapter's function that ran the experiment as an argument, so
that this module imports no chapter. A checker reruns the reader's experiment, so it costs what the experiment cost; the
hints rerun a variant only once the answer is already known to be wrong. Numbers compare within
``rtol`` (the runs are deterministic, so a rerun on the same machine agrees to rounding);
accuracies within one test image.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from .exercises import _number, _report


def _close(value, want, rtol) -> bool:
    return value is not None and abs(value - want) <= rtol * max(abs(want), 1e-12)


def _pairs(answer, keys, width: int, what: str):
    """``answer`` (a dict) as ``{key: tuple of width floats}`` for ``keys``, or ``(None, report)``."""
    if not isinstance(answer, dict):
        return None, _report(False, f"{what} must be a dict, got {type(answer).__name__}")
    missing = [k for k in keys if k not in answer]
    if missing:
        return None, _report(False, f"{what} lacks the key {missing[0]!r}", f"it needs the keys {list(keys)}")
    out = {}
    for k in keys:
        v = answer[k]
        vals = [_number(x) for x in (v if isinstance(v, (list, tuple, np.ndarray)) else [v])]
        if len(vals) != width or any(x is None for x in vals):
            return None, _report(False, f"{what}[{k!r}] must be {width} finite number(s), got {v!r}")
        out[k] = tuple(vals)
    return out, None


def check_probe_rescaling(accuracies, f_train, y_train, f_test, y_test, *, ridge: float = 1e-3) -> bool:
    """Check the probe test accuracies of exercise ``ex-cifar-feat-probe-scale``: ``accuracies``
    maps a factor ``s`` to the test accuracy of :func:`itlin_core.linear_probe` fitted on
    ``s * f_train`` and tested on ``s * f_test``, each within one test image. Hints for a
    percentage, the training accuracy, and features scaled in the training set only.

    Examples:
      >>> import numpy as np
      >>> rng = np.random.default_rng(0)
      >>> f, y = rng.normal(size=(80, 6)), np.arange(80) % 3
      >>> f[np.arange(80), y] += 2.0                          # separable-ish features
      >>> from itlin_core import linear_probe
      >>> acc = lambda s: float(linear_probe(s * f[:40], y[:40], s * f[40:], y[40:])["test_accuracy"])
      >>> check_probe_rescaling({s: acc(s) for s in (1e-3, 1.0)}, f[:40], y[:40], f[40:], y[40:])
      ✔ the probe accuracies for the factors 0.001, 1 are right (on 40 test images)
      True
    """
    from ..metrics import linear_probe
    f_train, f_test = np.asarray(f_train, np.float64), np.asarray(f_test, np.float64)
    got, bad = _pairs(accuracies, list(accuracies) if isinstance(accuracies, dict) else [], 1, "accuracies")
    if bad is not None:
        return bad
    if not got:
        return _report(False, "accuracies is empty: give one accuracy per factor, e.g. {1e-3: ..., 1.0: ...}")
    slack = 1.0 / len(y_test) + 1e-9

    def probe(s_train, s_test, key="test_accuracy"):
        return float(linear_probe(s_train * f_train, y_train, s_test * f_test, y_test, ridge=ridge)[key])

    for s, (value,) in got.items():
        if not isinstance(s, (int, float)) or not s > 0:
            return _report(False, f"the key {s!r} must be a positive factor")
        if abs(value - probe(s, s)) <= slack:
            continue
        if abs(value - 100 * probe(s, s)) <= 100 * slack:
            hint = "that looks like a percentage: give the fraction, between 0 and 1"
        elif abs(value - probe(s, s, "train_accuracy")) <= slack:
            hint = "that is the probe's training accuracy: report its test accuracy"
        elif abs(value - probe(s, 1.0)) <= slack:
            hint = "multiply the test features by the same factor as the training features"
        else:
            hint = f"fit ic.linear_probe(s * f_train, y_train, s * f_test, y_test, ridge={ridge:g})"
        return _report(False, f"the accuracy {value:.3g} for the factor {s:g} is not right", "hint: " + hint)
    return _report(True, f"the probe accuracies for the factors {', '.join(f'{s:g}' for s in got)} are right "
                         f"(on {len(y_test)} test images)")


def check_lazy_gap(lazy_test, sweep: Callable, cfg, *, rtol: float = 1e-5) -> bool:
    """Check exercise ``ex-il-lazy``: ``lazy_test`` maps an output scale to the final test RMSE
    of the proxy for ``(K = 1, K = inf)``, trained by ``sweep(config, (1, None), progress="off")``
    (the chapter's ``il_sweep``) on ``cfg`` with that ``out_scale`` and ``centre_output=True``.
    Hints for an uncentred model, the two values in the wrong order, and the network's RMSE in
    place of the proxy's.

    Examples:
      >>> from itlin_core.book.iterative_linearisation import il_toy_config
      >>> def sweep(cfg, Ks, progress=None):      # a stand-in for the chapter's il_sweep
      ...     e = 0.1 * cfg.out_scale
      ...     return {"test_rmse_proxy": np.array([[e, 2 * e]]), "test_rmse_network": np.array([[e, 3 * e]])}
      >>> check_lazy_gap({0.5: (0.05, 0.1)}, sweep, il_toy_config("smoke"))
      ✔ the test RMSEs at the output scales 0.5 are right
      True
      >>> check_lazy_gap({0.5: (0.1, 0.05)}, sweep, il_toy_config("smoke"))
      ✘ the test RMSEs at output scale 0.5 are not right
        hint: the two values are in the wrong order: give (K = 1, K = inf)
      False
    """
    got, bad = _pairs(lazy_test, list(lazy_test) if isinstance(lazy_test, dict) else [], 2, "lazy_test")
    if bad is not None:
        return bad
    for scale, value in got.items():
        def run(centre=True):
            hist = sweep(dataclasses.replace(cfg, out_scale=scale, centre_output=centre), (1, None), progress="off")
            return {k: np.asarray(hist[k], np.float64)[-1] for k in ("test_rmse_proxy", "test_rmse_network")}
        hist = run()
        want = hist["test_rmse_proxy"]
        if all(_close(v, w, rtol) for v, w in zip(value, want)):
            continue
        if all(_close(v, w, rtol) for v, w in zip(value, want[::-1])):
            hint = "the two values are in the wrong order: give (K = 1, K = inf)"
        elif all(_close(v, w, rtol) for v, w in zip(value, hist["test_rmse_network"])):
            hint = "those are the network's errors: report the proxy's (the model being trained), test_rmse_proxy"
        elif all(_close(v, w, rtol) for v, w in zip(value, run(centre=False)["test_rmse_proxy"])):
            hint = "centre the model (centre_output=True), so that both scales start from the zero function"
        else:
            hint = "read hist['test_rmse_proxy'][-1] of il_sweep on the config with this out_scale"
        return _report(False, f"the test RMSEs at output scale {scale:g} are not right", "hint: " + hint)
    return _report(True, f"the test RMSEs at the output scales {', '.join(f'{s:g}' for s in got)} are right")


def check_width_runs(width_runs, run_kernel_evolution: Callable, cfg, *, rtol: float = 1e-5) -> bool:
    """Check exercise ``ex-lin-width``: ``width_runs`` maps ``(parameterisation, width)`` to the
    final ``[kernel distance, relative parameter change, training RMSE]`` of
    ``run_kernel_evolution`` (the chapter's
    :func:`itlin_core.book.linearisation.run_kernel_evolution`) on ``cfg`` with that width and
    parameterisation, ``alphas=(1.0,)``, and ``b_std=1.0`` in the NTK parameterisation. Hints for
    the NTK parameterisation without biases, and values read before the last evaluation."""
    keys = list(width_runs) if isinstance(width_runs, dict) else []
    got, bad = _pairs(width_runs, keys, 3, "width_runs")
    if bad is not None:
        return bad
    names = ("kernel_distance", "relative_param_change", "train_rmse")
    for (param, width), value in got.items():
        if param not in ("standard", "ntk"):
            return _report(False, f"the key {(param, width)!r} must start with 'standard' or 'ntk'")

        def run(b_std=1.0 if param == "ntk" else cfg.b_std):     # every evaluation, (evaluations, 3)
            small = dataclasses.replace(cfg, width=width, alphas=(1.0,), parameterisation=param, b_std=b_std)
            r = run_kernel_evolution(small, progress="off")
            return np.stack([np.asarray(r[k], np.float64)[0] for k in names], axis=-1)
        curves = run()
        want = curves[-1]
        wrong = [n for n, v, w in zip(names, value, want) if not _close(v, w, rtol)]
        if not wrong:
            continue
        if param == "ntk" and all(_close(v, w, rtol) for v, w in zip(value, run(b_std=0.0)[-1])):
            hint = "in the NTK parameterisation pass b_std=1.0, or the biases are removed"
        elif any(all(_close(v, w, rtol) for v, w in zip(value, row)) for row in curves[:-1]):
            hint = "those are values from before the end of training: read the last evaluation, r[name][0, -1]"
        else:
            hint = f"{wrong[0]} is off: read r['{wrong[0]}'][0, -1] of run_kernel_evolution on the modified config"
        return _report(False, f"the numbers for {param}, width {width} are not right", "hint: " + hint)
    return _report(True, f"the {len(got)} runs' kernel distances, parameter changes and training RMSEs are right")


def check_rf_widths(rf_by_width, widths, random_features_baseline: Callable, cfg, data, *,
                    rtol: float = 1e-6) -> bool:
    """Check exercise ``ex-mf-rf``: ``rf_by_width[i]`` is the test loss of the random-features
    baseline ``random_features_baseline`` (the chapter's
    :func:`itlin_core.book.mean_field_gn.random_features_baseline`) at ``tau0 = 1`` on
    ``cfg`` with width ``widths[i]``, on the chapter's ``data``. Hints for a different ``tau0``
    and for a new draw of the data.

    Examples:
      >>> import jax
      >>> from itlin_core.book import mean_field_gn
      >>> cfg = dataclasses.replace(mean_field_gn.teacher_student_config("smoke"), n_train=10, n_test=50)
      >>> with jax.enable_x64(True):
      ...     data = mean_field_gn.teacher_student_problem(cfg)
      ...     losses = [mean_field_gn.random_features_baseline(dataclasses.replace(cfg, width=m), [1.0], data=data)
      ...               ["test_loss"][0] for m in (5, 20)]
      ...     ok = check_rf_widths(losses, [5, 20], mean_field_gn.random_features_baseline, cfg, data)
      ✔ the RF test losses at the widths 5, 20 are right
    """
    widths = [int(m) for m in widths]
    values = [_number(v) for v in np.ravel(np.asarray(rf_by_width, dtype=object))]
    if len(values) != len(widths) or any(v is None for v in values):
        return _report(False, f"give one finite test loss per width ({len(widths)}), got {rf_by_width!r}")
    for m, value in zip(widths, values):
        def rf(tau0=1.0, fresh=False):
            return float(random_features_baseline(dataclasses.replace(cfg, width=m), [tau0],
                                                  data=None if fresh else data)["test_loss"][0])
        if _close(value, rf(), rtol):
            continue
        if _close(value, rf(fresh=True), rtol) and not _close(rf(fresh=True), rf(), rtol):
            hint = "pass the chapter's data (data=data), so that every width is tested on the same task"
        elif _close(value, rf(tau0=float(cfg.tau0s[0])), rtol):
            hint = "use tau0 = 1: the baseline's features are the network's at initial scale 1"
        else:
            hint = "call random_features_baseline(dataclasses.replace(cfg, width=m), [1.0], data=data)"
        return _report(False, f"the RF test loss at width M = {m} is not right", "hint: " + hint)
    return _report(True, f"the RF test losses at the widths {', '.join(map(str, widths))} are right")


def check_started_refresh(hist, run_small_problem: Callable, problem, original, cfg, *, rtol: float = 1e-4) -> bool:
    """Check exercise ``ex-refresh-start``: ``problem`` must be ``original`` with only the output
    weights ``v`` changed (and no longer zero), ``cfg`` must train only ``K = 1``, ``K = inf`` and
    the drift rules (``fixed=(1, None)``, ``geometric=()``), and ``hist`` must be
    ``run_small_problem`` (the chapter's :func:`itlin_core.book.refresh_rules.run_small_problem`)
    on them: the same feature updates and final test losses."""
    p0, o0 = problem.get("params0", {}), original["params0"]
    if set(p0) != set(o0) or any(not np.array_equal(np.asarray(p0[k]), np.asarray(o0[k])) for k in o0 if k != "v"):
        return _report(False, "change only the output weights v of params0", "hint: {**params0, 'v': v0}")
    if not np.any(np.asarray(p0["v"])):
        return _report(False, "the output weights v are still zero", "hint: start them at 0.5 times a normal draw")
    if tuple(cfg.fixed) != (1, None) or tuple(cfg.geometric) != ():
        return _report(False, "train K = 1, K = inf and the drift rules only",
                       "hint: dataclasses.replace(small_cfg, fixed=(1, None), geometric=())")
    want = run_small_problem(problem, cfg, progress="off")
    if list(hist.get("labels", [])) != list(want["labels"]):
        return _report(False, "hist is not run_small_problem's history on this problem and config",
                       f"hint: its labels should be {list(want['labels'])}")
    upd, loss = np.asarray(hist["updates"])[-1], np.asarray(hist["test_error_proxy"], np.float64)[-1]
    if not np.array_equal(upd, np.asarray(want["updates"])[-1]):
        return _report(False, "the feature-update counts are not right",
                       "hint: rerun run_small_problem(started, start_cfg) after changing v")
    if not np.allclose(loss, np.asarray(want["test_error_proxy"], np.float64)[-1], rtol=rtol, equal_nan=True):
        return _report(False, "the final test losses are not right", "hint: read hist['test_error_proxy'][-1]")
    return _report(True, f"the {len(upd)} runs' feature updates and test losses are right")


__all__ = ["check_probe_rescaling", "check_lazy_gap", "check_width_runs", "check_rf_widths",
           "check_started_refresh"]
