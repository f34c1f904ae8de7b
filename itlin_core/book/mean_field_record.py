"""Mean-field runs at the size of Arbel et al. 2023, recorded for the two mean-field chapters.

``python -m itlin_core.book.mean_field_record [--names GROUP ...]`` trains the run groups of
:data:`GROUPS` at the paper's size (``M = 5000`` hidden units, 10,000 test points, ``N = 500``
training points where a group does not sweep ``N``; float64) and writes
``book/results/mean_field-paper.json`` (:func:`itlin_core.book.records.save_results`,
atomically) after every *unit*: one student, i.e. one method, activation, ``N``, ``tau0``, step
size and seed (:func:`itlin_core.book.mean_field_gn.run_teacher_student`). Interrupted, the same
command skips the units already in the record and goes on with the next, so a group is recorded
over several sittings; a unit recorded with other settings is trained again. ``--list`` prints
each group's units and how many are recorded. Recorders of different groups can run at once,
one per core (``--names``): each reads the record again before every unit and adds its unit
under a lock.

A group is a step-size sweep on seed 0 at every ``(N, tau0)`` of the paper's figure, then the
other seeds at the step size of the sweep with the lowest final test loss (:func:`chosen_lr`).
Seed ``k`` has its own teacher, training and test data and initial draw (App. C.1 of the paper:
seed value ``1000 k``, as in the chapters), so seeds 1 to 4 take no part in the choice.

Where a 2-core CPU cannot follow the paper, the choice is stated here and in the chapters:

* Step sizes. The paper sweeps 1e-3 ... 1e3 (mean-loss convention) and trains every run to a
  training loss of 1e-6. Measured here at ``N = 500``, ``tau0 = 1e-3`` (ReLU): GN reached 1e-6
  in about 30 iterations at step 100, 300 at step 10 and would need about 3,000 at step 1 (0.3 s
  each); GD at step 1000 was at 9e-6 after 5,000 iterations (45 ms each). Steps ten times smaller
  take about ten times longer. So GN sweeps 10, 100 and 1000 within 1,000 iterations, and GD runs
  at the grid's largest step, 1000, within 30,000 iterations: the paper finds that GD's features
  improve as its step grows (its Fig. 1, right), so its best step is the largest one it can take.
* A run that has not reached 1e-6 within its budget is kept and marked ``fitted = False``; the
  step size is chosen among fitted runs (among all finite ones where none fitted).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time

import numpy as np

from .mean_field_gn import random_features_baseline, run_teacher_student, seed_interval, teacher_student_config, \
    teacher_student_problem
from .records import load_results, results_path, save_results

CHAPTER, PRESET = "mean_field", "paper"
SEED_STRIDE = 1000                           # seed k is 1000 k, the chapters' convention


@dataclasses.dataclass(frozen=True)
class Scale:
    """The size of the recorded runs: the task's :class:`~itlin_core.book.mean_field_gn.TeacherStudentConfig`
    (its ``width``, ``n_test``, ``d``, ``m_star``, ``stop_loss``, ``floor``, ``alpha``), each
    method's step sizes and iteration budget, the number of evaluations per run, and the factor on
    the initial training loss above which a run counts as diverged (``diverge_above`` of
    :func:`~itlin_core.book.mean_field_gn.run_teacher_student`: GN at step 1000 from ``tau0 = 1``
    took its loss to 1e300 without overflowing, and would have spent its whole budget there)."""
    cfg: object
    lrs: dict
    budget: dict
    n_evals: int = 40
    diverge_above: float = 1e4


#: The recorded scale: the paper's task (``M = 5000``, 10,000 test points) and the step sizes and
#: budgets this CPU affords (module docstring).
PAPER = Scale(teacher_student_config("paper"), {"gn": (10.0, 100.0, 1000.0), "gd": (1000.0,)},
              {"gn": 1000, "gd": 30_000})


@dataclasses.dataclass(frozen=True)
class Group:
    """The runs behind one figure of Arbel et al. 2023: ``activation`` (SiLU at temperature
    ``beta``, or ReLU) for teacher and student, every ``(N, tau0)`` of ``n_trains x tau0s``, each
    method's step-size sweep on seed 0 and ``n_seeds - 1`` further seeds at the chosen step."""
    figure: str
    activation: str
    tau0s: tuple
    n_trains: tuple
    n_seeds: int
    beta: float = 1.0


SAMPLE_SIZES = (100, 200, 500, 1000, 1500)
GROUPS = {
    "fig3_right": Group("App. C.1, Fig. 3 (right)", "silu", (1.0,), SAMPLE_SIZES, 5),
    "fig5_right": Group("App. C.2, Fig. 5 (right)", "silu", (1e-3, 1.0), SAMPLE_SIZES, 1),
    "fig3_left": Group("App. C.1, Fig. 3 (left)", "silu", (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0), (500,), 5),
}


def unit_key(group: Group, s: dict) -> str:
    """The record's name of the unit of settings ``s`` (:func:`settings`), e.g.
    ``"silu1 gn N=500 tau0=1 lr=100 seed=0"``."""
    act = f"silu{group.beta:g}" if group.activation == "silu" else group.activation
    return f"{act} {s['method']} N={s['n_train']} tau0={s['tau0']:g} lr={s['lr']:g} seed={s['seed']}"


def settings(group: Group, method: str, n: int, tau0: float, lr: float, seed: int, scale: Scale = PAPER) -> dict:
    """Everything a unit's result depends on; a recorded unit with other settings is run again."""
    c = scale.cfg
    return {"activation": group.activation, "beta": float(group.beta), "method": method, "n_train": int(n),
            "tau0": float(tau0), "lr": float(lr), "seed": int(seed), "width": c.width, "n_test": c.n_test,
            "d": c.d, "m_star": c.m_star, "iterations": int(scale.budget[method]), "n_evals": int(scale.n_evals),
            "stop_loss": c.stop_loss, "floor": c.floor, "alpha": c.alpha, "diverge_above": float(scale.diverge_above)}


def unit_config(s: dict):
    """The :class:`~itlin_core.book.mean_field_gn.TeacherStudentConfig` of the unit of settings ``s``."""
    fields = {k: s[k] for k in ("n_train", "seed", "n_evals", "activation", "beta", "width", "n_test", "d",
                                "m_star", "stop_loss", "floor", "alpha")}
    return dataclasses.replace(teacher_student_config(PRESET), **fields)


def train_unit(s: dict, progress=None) -> dict:
    """Train the unit of settings ``s`` (:func:`settings`): its curves (``iters``, ``train_loss``,
    ``test_loss``, ``lrfit``, ``wcd``, ``sigma_min``) and their ``final_*`` values,
    ``stopped_at``, ``diverged``, ``fitted`` (training loss below ``stop_loss``), the
    random-features test loss of its data at its ``tau0`` and its wall ``seconds``."""
    cfg = unit_config(s)
    t0 = time.perf_counter()
    run = run_teacher_student(cfg, s["method"], [s["tau0"]], [s["lr"]], iterations=s["iterations"],
                              progress=progress, diverge_above=s["diverge_above"])
    rf = float(random_features_baseline(cfg, [s["tau0"]], data=teacher_student_problem(cfg))["test_loss"][0])
    out = {"settings": s, "iters": run["iters"], "rf_test_loss": rf, "stopped_at": int(run["stopped_at"][0]),
           "diverged": bool(run["diverged"][0])}
    out["fitted"] = bool(not out["diverged"] and run["train_loss"][-1, 0] < s["stop_loss"])
    for k in ("train_loss", "test_loss", "lrfit", "wcd", "sigma_min"):
        out[k] = run[k][:, 0]
        out["final_" + k] = float(run["final_" + k][0])
    out["seconds"] = time.perf_counter() - t0
    return out


def chosen_lr(units: dict, group: Group, method: str, n: int, tau0: float, scale: Scale = PAPER) -> float | None:
    """The step size of ``method``'s seed-0 sweep at ``(n, tau0)`` with the lowest final test
    loss among the fitted runs (among the finite ones if none fitted; the paper's rule, which
    chooses on the test loss); ``None`` until the whole sweep is recorded (or if every run diverged)."""
    runs = [recorded_unit(units, group, settings(group, method, n, tau0, lr, 0, scale)) for lr in scale.lrs[method]]
    if any(r is None for r in runs):
        return None
    pool = [r for r in runs if r["fitted"]] or [r for r in runs if np.isfinite(r["final_test_loss"])]
    return None if not pool else float(min(pool, key=lambda r: r["final_test_loss"])["settings"]["lr"])


def group_units(group: Group, units: dict, scale: Scale = PAPER) -> list:
    """The unit settings of ``group`` in recording order: every seed-0 sweep first (each
    ``(N, tau0)`` and method over its step sizes), then the other seeds at the chosen step
    sizes, seed by seed, as far as ``units`` (the record so far) settles the choice."""
    out = [settings(group, m, n, t, lr, 0, scale) for n in group.n_trains for t in group.tau0s
           for m in ("gn", "gd") for lr in scale.lrs[m]]
    for k in range(1, group.n_seeds):
        for n in group.n_trains:
            for t in group.tau0s:
                for m in ("gn", "gd"):
                    lr = chosen_lr(units, group, m, n, t, scale)
                    if lr is not None:
                        out.append(settings(group, m, n, t, lr, SEED_STRIDE * k, scale))
    return out


def recorded_units(results_dir=None) -> dict:
    """The units in the record so far (an empty dict before the first).

    Examples:
      >>> import tempfile
      >>> with tempfile.TemporaryDirectory() as tmp:       # a record of one unit, in a folder of its own
      ...     empty = recorded_units(tmp)
      ...     _ = save_results(CHAPTER, PRESET, {"silu1 gd N=500 tau0=1 lr=1000 seed=0": {"fitted": True}}, seed=0,
      ...                      results_dir=tmp)
      ...     units = recorded_units(tmp)
      >>> empty, units
      ({}, {'silu1 gd N=500 tau0=1 lr=1000 seed=0': {'fitted': True}})
    """
    rec = load_results(CHAPTER, (PRESET,), results_dir=results_dir)
    return {} if rec is None else dict(rec["data"])


def recorded_unit(units: dict, group: Group, s: dict) -> dict | None:
    """The unit of settings ``s`` in ``units`` if it was recorded with exactly these settings, else ``None``."""
    got = units.get(unit_key(group, s))
    same = got is not None and set(got["settings"]) == set(s) and all(
        np.isclose(got["settings"][k], v) if isinstance(v, float) else got["settings"][k] == v for k, v in s.items())
    return got if same else None


def is_recorded(units: dict, group: Group, s: dict) -> bool:
    """Whether ``units`` hold the unit of settings ``s`` with exactly these settings."""
    return recorded_unit(units, group, s) is not None


def group_table(name: str, units: dict, scale: Scale = PAPER) -> dict:
    """The final metrics of group ``name`` as arrays for plotting, from ``units`` (the record so
    far): ``n_trains``, ``tau0s``, ``seeds``; for ``"gn"`` and ``"gd"`` the ``lr`` chosen at each
    ``(tau0, N)`` (NaN until chosen, shape ``(T, Nn)``) and ``test_loss``, ``lrfit``, ``wcd``,
    ``train_loss`` and ``fitted`` of each seed at that step size (shape ``(T, Nn, S)``, NaN or
    False where not recorded); ``rf`` the random-features test loss of each seed's data
    ``(T, Nn, S)``; ``recorded`` and ``total`` (units of the group known so far).

    Examples:
      One recorded unit: seed 0 of GD's one-step sweep at ``N = 500``, ``tau0 = 1e-3``, which chooses its step size
      (the record itself grows while it is being recorded, so the example builds its own):

      >>> g = GROUPS["fig3_left"]; s = settings(g, "gd", 500, 1e-3, 1000.0, 0)
      >>> unit = {"settings": s, "fitted": True, "rf_test_loss": 0.3, "final_test_loss": 0.1, "final_lrfit": 0.2,
      ...         "final_wcd": 0.5, "final_train_loss": 1e-7}
      >>> t = group_table("fig3_left", {unit_key(g, s): unit})
      >>> float(t["gd"]["lr"][0, 0]), t["gd"]["test_loss"][0, 0], t["gd"]["test_loss"].shape, t["recorded"], t["total"]
      (1000.0, array([0.1, nan, nan, nan, nan]), (6, 1, 5), 1, 28)
    """
    if name not in GROUPS:
        raise ValueError(f"unknown group {name!r}; the groups are {', '.join(GROUPS)}.")
    g = GROUPS[name]
    shape = (len(g.tau0s), len(g.n_trains), g.n_seeds)
    seeds = [SEED_STRIDE * k for k in range(g.n_seeds)]
    out = {"n_trains": np.asarray(g.n_trains), "tau0s": np.asarray(g.tau0s), "seeds": np.asarray(seeds),
           "rf": np.full(shape, np.nan)}
    for m in ("gn", "gd"):
        out[m] = {k: np.full(shape, np.nan) for k in ("test_loss", "lrfit", "wcd", "train_loss")}
        out[m]["fitted"], out[m]["lr"] = np.zeros(shape, bool), np.full(shape[:2], np.nan)
        for i, t in enumerate(g.tau0s):
            for j, n in enumerate(g.n_trains):
                lr = chosen_lr(units, g, m, n, t, scale)
                if lr is None:
                    continue
                out[m]["lr"][i, j] = lr
                for k, seed in enumerate(seeds):
                    u = recorded_unit(units, g, settings(g, m, n, t, lr, seed, scale))
                    if u is not None:
                        for f in ("test_loss", "lrfit", "wcd", "train_loss"):
                            out[m][f][i, j, k] = u["final_" + f]
                        out[m]["fitted"][i, j, k] = u["fitted"]
                        out["rf"][i, j, k] = u["rf_test_loss"]
    todo = group_units(g, units, scale)
    out["recorded"], out["total"] = sum(is_recorded(units, g, s) for s in todo), len(todo)
    return out


def draw_seeds(ax, x, values, fitted, colour: str, marker: str, label: str):
    """Draw one method's final values over seeds against ``x`` on ``ax``: every recorded seed
    (``values`` of shape ``(len(x), S)``, NaN where not recorded) as a light marker, hollow where
    ``fitted`` is False, and where at least two seeds are recorded the mean of the logarithm with
    its 95% Student-t interval shaded (:func:`~itlin_core.book.mean_field_gn.seed_interval`, as
    App. C.1 of the paper shades its five runs).

    Examples:
      >>> from matplotlib.figure import Figure
      >>> ax = Figure().subplots()
      >>> values = np.array([[1e-2, 2e-2], [1e-3, np.nan]])     # two N, two seeds; the second seed at N = 200 missing
      >>> draw_seeds(ax, [100, 200], values, values < 0.015, "C0", "o", "GN")
      >>> len(ax.collections), ax.get_legend_handles_labels()[1]      # an interval where both seeds are recorded
      (1, ['GN'])
    """
    x, values, fitted = np.asarray(x), np.asarray(values, float), np.asarray(fitted, bool)
    for k in range(values.shape[-1]):
        ok = np.isfinite(values[:, k])
        for fit in (True, False):
            sel = ok & (fitted[:, k] == fit)
            ax.plot(x[sel], values[sel, k], marker, color=colour, alpha=0.6, ms=6, ls="none",
                    mfc=colour if fit else "white")
    full = np.sum(np.isfinite(values), axis=-1) >= 2
    if full.any():
        mean, low, high = np.array([seed_interval(v[np.isfinite(v)]) for v in values[full]]).T
        ax.fill_between(x[full], low, high, color=colour, alpha=0.2, lw=0)
        ax.plot(x[full], mean, "-", marker="_", ms=14, mew=2, color=colour)   # a dash: visible at a lone x too
    ax.plot([], [], marker + "-", color=colour, label=label)      # the legend shows the seeds' marker and the mean


def record(names, *, scale: Scale = PAPER, results_dir=None, progress=None, log=print,
           max_units: int | None = None) -> dict:
    """Record the groups ``names`` unit by unit (module docstring), saving the record after each
    unit; stop after ``max_units`` new units (all when ``None``). Returns the units."""
    import jax
    bad = [n for n in names if n not in GROUPS]
    if bad:
        raise ValueError(f"unknown group {bad[0]!r}; the groups are {', '.join(GROUPS)}.")
    if max_units is not None and (isinstance(max_units, bool) or not isinstance(max_units, int) or max_units < 1):
        raise ValueError(f"max_units must be a positive integer or None, got {max_units!r}.")
    jax.config.update("jax_enable_x64", True)           # the mean-field runs need float64
    done = 0
    for name in names:
        group = GROUPS[name]
        while max_units is None or done < max_units:
            units = recorded_units(results_dir)        # read again: a recorder of other groups may have saved
            todo = [s for s in group_units(group, units, scale) if not is_recorded(units, group, s)]
            if not todo:
                break
            key = unit_key(group, todo[0])
            log(f"{name}: {key} ({len(todo)} unit(s) left, as far as the chosen step sizes are known)")
            r = train_unit(todo[0], progress)
            log(f"  {r['seconds']:.0f} s, stopped at {r['stopped_at']}, fitted {r['fitted']}, "
                f"final test loss {r['final_test_loss']:.3e}")
            with _record_lock(results_dir):            # read, add and write as one step
                save_results(CHAPTER, PRESET, {**recorded_units(results_dir), key: r}, seed=0,
                             results_dir=results_dir,
                             note="The teacher-student task of Arbel et al. 2023 at its size, float64 on a CPU; one "
                                  "unit per student (itlin_core.book.mean_field_record).")
            done += 1
    return recorded_units(results_dir)


@contextlib.contextmanager
def _record_lock(results_dir=None):
    """An exclusive lock on the record's file (``fcntl.flock`` on a lock file in the temporary
    folder), so that recorders of different groups, one per core, add their units without
    overwriting each other's."""
    import fcntl
    import hashlib
    import tempfile
    from pathlib import Path
    path = str(results_path(CHAPTER, PRESET, results_dir).resolve())
    lock = Path(tempfile.gettempdir()) / f"itlin-{hashlib.sha256(path.encode()).hexdigest()[:16]}.lock"
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m itlin_core.book.mean_field_record",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--names", nargs="+", default=list(GROUPS),
                        help=f"groups to record, in this order (default: {' '.join(GROUPS)})")
    parser.add_argument("--list", action="store_true", help="print how many of each group's units are recorded")
    parser.add_argument("--max-units", type=int, default=None, help="stop after this many new units")
    args = parser.parse_args(argv)
    try:
        if args.list:
            units = recorded_units()
            for name in args.names:
                if name not in GROUPS:
                    raise ValueError(f"unknown group {name!r}; the groups are {', '.join(GROUPS)}.")
                todo = group_units(GROUPS[name], units)
                print(f"{name} ({GROUPS[name].figure}): {sum(is_recorded(units, GROUPS[name], s) for s in todo)} "
                      f"of {len(todo)} units recorded (seeds beyond 0 are listed once their step size is chosen)")
            return 0
        record(args.names, max_units=args.max_units)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
