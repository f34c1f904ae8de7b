"""Chapter "Mean-field Gauss-Newton: more data, smoother activations" (Arbel et al. 2023,
Figs. 5-7): the sweeps of :mod:`itlin_core.book.mean_field_gn` over the training-set size, the
SiLU temperature, and ReLU against SiLU."""

from __future__ import annotations

import dataclasses

import numpy as np

from .mean_field_gn import TeacherStudentConfig, random_features_baseline, run_teacher_student, teacher_student_problem


def best_final(run: dict, metric: str = "final_test_loss") -> dict:
    """For each ``tau0`` of ``run``, the final metrics of the step size with the lowest ``metric``
    (diverged runs excluded; NaN if every step size diverged)."""
    out = {}
    for t in np.unique(run["tau0"]):
        idx = np.flatnonzero(np.isclose(run["tau0"], t))
        vals = run[metric][idx]
        i = idx[np.nanargmin(vals)] if np.isfinite(vals).any() else None
        out[float(t)] = {k[6:]: (float(run[k][i]) if i is not None else float("nan"))
                         for k in run if k.startswith("final_")}
        out[float(t)]["lr"] = float(run["lr"][i]) if i is not None else float("nan")
    return out


def run_sample_size(cfg: TeacherStudentConfig, progress=None) -> dict:
    """Arbel et al. 2023, Fig. 5, at ``cfg``'s scale: for every training-set size in
    ``cfg.n_trains``, GN and GD
    over ``scaling_tau0s x scaling_*_lrs`` and RF; for each method and ``tau0`` the final metrics
    at the step size with the best final test loss (as the paper reports). Returns
    ``{"n_trains", "tau0s", "gn", "gd"`` (arrays ``(len(tau0s), len(n_trains))`` per metric,
    plus ``lr``) and ``"rf"`` (test loss, same shape)}``.

    Examples:
      One training-set size, one ``tau0``, one step size per method, three steps (the smoke preset, shrunk):

      >>> import jax
      >>> from itlin_core.book.mean_field_gn import teacher_student_config
      >>> cfg = dataclasses.replace(teacher_student_config("smoke"), n_trains=(40,), scaling_tau0s=(1.0,),
      ...                           scaling_gn_lrs=(1.0,), scaling_gd_lrs=(10.0,), gn_iterations=3, gd_iterations=3)
      >>> with jax.enable_x64(True): res = run_sample_size(cfg, progress="off")
      >>> res["n_trains"], res["gn"]["test_loss"].shape, res["gd"]["lr"], res["rf"].shape
      (array([40]), (1, 1), array([[10.]]), (1, 1))
    """
    if not cfg.n_trains:
        raise ValueError("this preset has no n_trains (training-set sizes) to sweep.")
    tau0s = tuple(cfg.scaling_tau0s)
    res = {"n_trains": np.asarray(cfg.n_trains), "tau0s": np.asarray(tau0s)}
    per = {"gn": [], "gd": []}
    rf = []
    for n in cfg.n_trains:
        data = teacher_student_problem(cfg, n_train=n)
        rf.append(random_features_baseline(cfg, tau0s, data=data)["test_loss"])
        for method, lrs in [("gn", cfg.scaling_gn_lrs), ("gd", cfg.scaling_gd_lrs)]:
            T, L = np.meshgrid(tau0s, lrs, indexing="ij")
            run = run_teacher_student(cfg, method, T.ravel(), L.ravel(), data=data, progress=progress)
            per[method].append(best_final(run))
    for method in ("gn", "gd"):
        keys = per[method][0][float(tau0s[0])].keys()
        res[method] = {k: np.array([[per[method][j][float(t)][k] for j in range(len(cfg.n_trains))] for t in tau0s])
                       for k in keys}
    res["rf"] = np.asarray(rf).T
    return res


def run_width(cfg: TeacherStudentConfig, progress=None) -> dict:
    """Arbel et al. 2023, Fig. 4 (left), at ``cfg``'s scale: for every number of hidden units in
    ``cfg.widths``, GN and GD at ``tau0 = cfg.width_tau0`` over the step sizes
    ``scaling_gn_lrs``/``scaling_gd_lrs``, and RF, on one data set; for each method the final
    metrics at the step size with the best final test loss. The initial draw of each width is
    its own (the first ``M`` rows are not shared). Returns ``{"widths", "gn", "gd"}`` (arrays
    ``(len(widths),)`` per final metric, plus ``lr``) and ``"rf"`` (test loss per width).

    Examples:
      One width, one step size per method, three steps (the smoke preset, shrunk):

      >>> import jax
      >>> from itlin_core.book.mean_field_gn import teacher_student_config
      >>> cfg = dataclasses.replace(teacher_student_config("smoke"), widths=(200,), scaling_gn_lrs=(1.0,),
      ...                           scaling_gd_lrs=(10.0,), gn_iterations=3, gd_iterations=3)
      >>> with jax.enable_x64(True): res = run_width(cfg, progress="off")
      >>> res["widths"], res["gn"]["test_loss"].shape, res["rf"].shape
      (array([200]), (1,), (1,))
    """
    if not cfg.widths:
        raise ValueError("this preset has no widths (numbers of hidden units) to sweep.")
    data = teacher_student_problem(cfg)
    res = {"widths": np.asarray(cfg.widths), "gn": [], "gd": [], "rf": []}
    for m in cfg.widths:
        c = dataclasses.replace(cfg, width=int(m))
        res["rf"].append(float(random_features_baseline(c, [cfg.width_tau0], data=data)["test_loss"][0]))
        for method, lrs in [("gn", cfg.scaling_gn_lrs), ("gd", cfg.scaling_gd_lrs)]:
            run = run_teacher_student(c, method, [cfg.width_tau0] * len(lrs), lrs, data=data, progress=progress)
            res[method].append(best_final(run)[float(cfg.width_tau0)])
    for method in ("gn", "gd"):
        res[method] = {k: np.array([row[k] for row in res[method]]) for k in res[method][0]}
    res["rf"] = np.asarray(res["rf"])
    return res


def run_silu(cfg: TeacherStudentConfig, progress=None) -> dict:
    """Arbel et al. 2023, Figs. 6-7, at ``cfg``'s scale: with a SiLU teacher and student of each
    temperature in
    ``cfg.betas``, GN over ``gn_lrs`` and GD over ``silu_gd_lrs`` (``gd_lrs`` if empty) at the
    smallest ``tau0``, and RF.
    Returns ``{beta: {"gn": run, "gd": run, "rf": rf_test_loss}}``.

    Examples:
      >>> import jax
      >>> from itlin_core.book.mean_field_gn import teacher_student_config
      >>> cfg = dataclasses.replace(teacher_student_config("smoke"), betas=(1.0,), gn_lrs=(1.0,), silu_gd_lrs=(10.0,),
      ...                           gn_iterations=3, gd_iterations=3)
      >>> with jax.enable_x64(True): res = run_silu(cfg, progress="off")
      >>> list(res), sorted(res[1.0]), res[1.0]["gn"]["tau0"], res[1.0]["gd"]["lr"]
      ([1.0], ['gd', 'gn', 'rf'], array([0.001]), array([10.]))
    """
    tau = min(cfg.tau0s)
    out = {}
    for beta in cfg.betas:
        data = teacher_student_problem(cfg, activation="silu", beta=beta)
        entry = {"rf": float(random_features_baseline(cfg, [tau], data=data, activation="silu", beta=beta)["test_loss"][0])}
        for method, lrs in [("gn", cfg.gn_lrs), ("gd", cfg.silu_gd_lrs or cfg.gd_lrs)]:
            entry[method] = run_teacher_student(cfg, method, [tau] * len(lrs), lrs, data=data, activation="silu",
                                                beta=beta, progress=progress)
        out[float(beta)] = entry
    return out


def run_relu_vs_silu(cfg: TeacherStudentConfig, progress=None) -> dict:
    """Arbel et al. 2023, Fig. 7, at ``cfg``'s scale: the step-size sweeps (GN over ``gn_lrs``, GD over
    ``silu_gd_lrs`` or ``gd_lrs``) at ``tau0 = cfg.compare_tau0``, once with ReLU and once with
    SiLU at ``beta = 1`` (teacher and student alike). Returns ``{"relu": entry, "silu": entry}``
    with entries as in :func:`run_silu`.

    Examples:
      >>> import jax
      >>> from itlin_core.book.mean_field_gn import teacher_student_config
      >>> cfg = dataclasses.replace(teacher_student_config("smoke"), gn_lrs=(1.0,), silu_gd_lrs=(10.0,),
      ...                           gn_iterations=3, gd_iterations=3)
      >>> with jax.enable_x64(True): res = run_relu_vs_silu(cfg, progress="off")
      >>> list(res), sorted(res["silu"]), res["relu"]["gn"]["tau0"], res["silu"]["gd"]["lr"]
      (['relu', 'silu'], ['gd', 'gn', 'rf'], array([1.]), array([10.]))
    """
    out = {}
    for name, act in [("relu", "relu"), ("silu", "silu")]:
        data = teacher_student_problem(cfg, activation=act, beta=1.0)
        entry = {"rf": float(random_features_baseline(cfg, [cfg.compare_tau0], data=data, activation=act,
                                                      beta=1.0)["test_loss"][0])}
        for method, lrs in [("gn", cfg.gn_lrs), ("gd", cfg.silu_gd_lrs or cfg.gd_lrs)]:
            entry[method] = run_teacher_student(cfg, method, [cfg.compare_tau0] * len(lrs), lrs, data=data,
                                                activation=act, beta=1.0, progress=progress)
        out[name] = entry
    return out


__all__ = ["best_final", "run_sample_size", "run_width", "run_silu", "run_relu_vs_silu"]
