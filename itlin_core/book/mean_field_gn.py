"""Chapter "Gauss-Newton in the mean-field regime" (Arbel et al. 2023): the teacher-student regression (§5.1), students
trained by Gauss-Newton and gradient descent over sweeps of the initial scale ``tau0`` and the step size, their metrics
(§5.2) and the random-features baseline; :mod:`itlin_core.book.mean_field_scaling` builds its sweeps on these runs."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import itlin_core as ic
from .._progress import progress_bar
from ..mean_field import hidden_features
from .common import interleaved_seconds, per_preset


@dataclasses.dataclass(frozen=True)
class TeacherStudentConfig:
    """The teacher-student task of Arbel et al. 2023 (§5.1) at a chosen scale: ``n_train`` Gaussian inputs in ``d``
    dimensions, targets from a teacher of ``m_star`` units (``data.teacher_student``), ``n_test`` test points; a
    mean-field student (``mean_field.mean_field_net``) of ``width`` units, hidden weights ``N(0, tau0^2)``, last layer
    0, trained by GN (damping ``max(floor, alpha sigma_min)``) and GD at constant step sizes on the loss
    ``1/(2N) sum (f - y)^2`` until it is below ``stop_loss`` or for ``gn_iterations``/``gd_iterations`` steps, metrics
    at ``n_evals`` log-spaced iterations. Sweeps: Fig. 1, each step size of ``gn_lrs``/``gd_lrs`` at each of ``tau0s``
    (the smallest: Fig. 1 right, Fig. 2); Fig. 5, the training-set sizes ``n_trains`` at ``scaling_tau0s``, steps
    ``scaling_gn_lrs``/``scaling_gd_lrs``; Figs. 6-7, the SiLU temperatures ``betas`` at the smallest ``tau0``, steps
    ``gn_lrs`` and ``silu_gd_lrs`` (``gd_lrs`` if empty); Fig. 7, ReLU against SiLU (beta = 1) at ``compare_tau0``;
    Fig. 4 (left), the numbers of hidden units ``widths`` at ``width_tau0`` (the paper's 1), steps
    ``scaling_gn_lrs``/``scaling_gd_lrs``; ``n_seeds``, the chapter's repeats (App. C.1 uses 5 seeds)."""
    n_train: int
    width: int
    n_test: int
    gn_iterations: int
    gd_iterations: int
    tau0s: tuple
    gn_lrs: tuple
    gd_lrs: tuple
    n_evals: int = 30
    n_trains: tuple = ()
    scaling_tau0s: tuple = ()
    scaling_gn_lrs: tuple = ()
    scaling_gd_lrs: tuple = ()
    betas: tuple = ()
    silu_gd_lrs: tuple = ()
    compare_tau0: float = 1.0
    widths: tuple = ()
    width_tau0: float = 1.0
    n_seeds: int = 5
    d: int = 10
    m_star: int = 5
    stop_loss: float = 1e-6
    floor: float = 1e-7
    alpha: float = 1.0
    activation: str = "relu"
    beta: float = 1.0
    seed: int = 0


TEACHER_STUDENT = {
    "smoke": TeacherStudentConfig(n_train=40, width=200, n_test=500, gn_iterations=1500, gd_iterations=4000,
                                  tau0s=(1e-3, 10.0), gn_lrs=(1e-2, 1.0, 40.0), gd_lrs=(0.1, 10.0, 100.0),
                                  n_evals=12, n_trains=(20, 40, 80), scaling_tau0s=(1e-3, 1.0), scaling_gn_lrs=(1.0,),
                                  scaling_gd_lrs=(100.0,), betas=(1.0, 1e6), widths=(20, 40, 100, 200),
                                  silu_gd_lrs=(10.0, 100.0)),
    "book": TeacherStudentConfig(n_train=100, width=500, n_test=2000, gn_iterations=3000, gd_iterations=20000,
                                 tau0s=(1e-3, 1e-1, 10.0), gn_lrs=(1e-2, 1.0, 100.0), gd_lrs=(1.0, 10.0, 100.0, 1000.0),
                                 n_trains=(25, 50, 100), scaling_tau0s=(1e-3, 1.0), scaling_gn_lrs=(1.0,),
                                 scaling_gd_lrs=(100.0, 1000.0), betas=(1.0, 1e6), widths=(50, 100, 200, 500, 1000),
                                 silu_gd_lrs=(100.0, 1000.0)),
    "paper": TeacherStudentConfig(n_train=500, width=5000, n_test=10000, gn_iterations=100_000,
                                  gd_iterations=1_000_000, n_evals=60, tau0s=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0),
                                  gn_lrs=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0),
                                  gd_lrs=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0),
                                  n_trains=(100, 200, 500, 1000, 1500), scaling_tau0s=(1e-3, 1.0),
                                  scaling_gn_lrs=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0),
                                  scaling_gd_lrs=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0), betas=(1.0, 1e6),
                                  widths=(250, 500, 1000, 2500, 5000, 10000)),
}


def teacher_student_config(preset: str | None = None) -> TeacherStudentConfig:
    """The preset's :class:`TeacherStudentConfig` (:func:`~itlin_core.book.common.per_preset`).

    Examples:
      >>> teacher_student_config("smoke").tau0s, teacher_student_config("book").width
      ((0.001, 10.0), 500)"""
    return per_preset(TEACHER_STUDENT, preset)


def _require_x64(what: str):
    if not jax.config.jax_enable_x64:
        raise ValueError(f"{what} needs 64-bit JAX (with tau0 = 1e-3 the hidden features are about 1e-3 and float32 "
                         "loses the digits of the least-squares re-fits): call jax.config.update('jax_enable_x64', "
                         "True) at the start of the notebook.")


def teacher_student_problem(cfg: TeacherStudentConfig, n_train: int | None = None,
                            activation: str | None = None, beta: float | None = None) -> dict:
    """One teacher-student problem's data (64-bit JAX): teacher and test set alike for every ``n_train`` (same keys).

    Examples:
      >>> with jax.enable_x64(True): print(jax.tree.map(np.shape, teacher_student_problem(TEACHER_STUDENT["smoke"], 8)))
      {'u_star': (5, 10), 'v_star': (5,), 'x_test': (500, 10), 'x_train': (8, 10), 'y_test': (500,), 'y_train': (8,)}"""
    _require_x64("the teacher-student experiments")
    n = cfg.n_train if n_train is None else n_train
    return ic.data.teacher_student(jax.random.key(cfg.seed), n, cfg.n_test, cfg.d, cfg.m_star,
                                 activation or cfg.activation, cfg.beta if beta is None else beta)


def teacher_student_metrics(params, data: dict, activation: str = "relu", beta: float = 1.0) -> dict:
    """One student's metrics (§5.2): train and test loss (:func:`itlin_core.mean_field_loss`), Test-LRfit (test loss of
    the last layer re-fitted on the frozen hidden features, eq. (8)), the weighted cosine distance to the teacher
    (eq. (9), given ``u_star``), the NTK ``A_w = J J^T``'s least eigenvalue (Fig. 4 right). Targets may be ``(N, C)``.

    Examples:
      >>> x, y = jnp.eye(4, 10), jnp.ones(4); p = ic.mean_field_net(10, 20).init(jax.random.key(1))   # v = 0: f = 0
      >>> float(jax.jit(teacher_student_metrics)(p, dict(x_train=x, y_train=y, x_test=x, y_test=y))["train_loss"])
      0.5"""
    u, v = params["u"], params["v"]
    m = v.shape[0]
    phi = hidden_features(u, data["x_train"], activation, beta) / m
    phi_t = hidden_features(u, data["x_test"], activation, beta) / m
    ntk = ic.mean_field_ntk(params, data["x_train"], activation=activation, beta=beta)
    out = {"train_loss": ic.mean_field_loss(phi @ v, data["y_train"]),
           "test_loss": ic.mean_field_loss(phi_t @ v, data["y_test"]),
           "lrfit": ic.refit_test_loss(phi, data["y_train"], phi_t, data["y_test"]),
           "sigma_min": jnp.linalg.eigvalsh(0.5 * (ntk + ntk.T))[0]}
    if "u_star" in data:
        out["wcd"] = ic.weighted_cosine_distance(u, data["u_star"])
    return out


def eval_schedule(iterations: int, n_evals: int) -> np.ndarray:
    """The iterations ``0 = i_0 < ... = iterations`` of the recorded metrics, roughly log-spaced (Fig. 2's axis)."""
    pts = np.unique(np.round(np.logspace(0, np.log10(max(iterations, 1)), n_evals)).astype(int))
    return np.concatenate([[0], pts[pts <= iterations]])


def _shape_of(data: dict):
    """The input dimension of ``data`` and its number of outputs (``None`` for scalar targets)."""
    y = np.shape(data["y_train"])
    return int(np.shape(data["x_train"])[1]), (int(y[1]) if len(y) == 2 else None)


def method_step(cfg: TeacherStudentConfig, method: str, net, x, y, fast: bool = True):
    """The chapter's ``step(params, lr)`` for ``method`` on the training data ``(x, y)``: Arbel et al.'s damped GN
    (:func:`itlin_core.make_gn_step`, ``cfg``'s ``alpha`` and ``floor``) or GD (:func:`itlin_core.make_gd_step`)."""
    if method == "gn":
        return ic.make_gn_step(net, x, y, alpha=cfg.alpha, floor=cfg.floor, fast=fast)
    return ic.make_gd_step(net, x, y)


def run_teacher_student(cfg: TeacherStudentConfig, method: str, tau0s, lrs, *, data: dict | None = None,
                        activation: str | None = None, beta: float | None = None, iterations: int | None = None,
                        fast: bool = True, progress=None, seeds=None, diverge_above: float | None = None) -> dict:
    """Train one student per ``(tau0s[g], lrs[g])`` pair (equal-length sequences) with ``method`` ``"gn"`` or ``"gd"``,
    in one compiled program (``vmap`` over the pairs, a ``fori_loop`` between evaluations). Every student starts from
    the same standard-normal draw scaled by its ``tau0`` (the paper uses one seed), unless ``seeds`` gives one seed per
    run: run ``g`` then has its own teacher, data (as :func:`teacher_student_problem` draws them with
    ``cfg.seed = seeds[g]``) and initial draw, as in App. C.1 (``data`` must be ``None``). A given ``data`` may hold
    inputs of any dimension and targets ``(N, C)`` (a teacher's class probabilities, App. C.4): the student then has
    ``C`` outputs. A student stops (its parameters freeze) once its training loss is below ``cfg.stop_loss`` or a step
    overflows (divergence); with ``diverge_above``, also at a training loss above ``diverge_above`` times its initial
    one (a run blown up without overflowing would spend its budget there). Returns numpy arrays: ``iters`` ``(E,)``;
    ``train_loss``, ``test_loss``, ``lrfit``, ``wcd`` (if the data has a teacher's weights), ``sigma_min`` ``(E, G)``;
    ``stopped_at`` ``(G,)`` (when the stopping rule fired, or the budget); ``diverged`` ``(G,)`` (a step gave non-finite
    parameters: the run stops at its last finite iterate, its ``final_*`` metrics NaN); ``final_*``, the last rows.

    Examples:
      >>> with jax.enable_x64(True):          # two GN students, tau0 = 1e-3 and 1, five steps of size 1
      ...     run = run_teacher_student(TEACHER_STUDENT["smoke"], "gn", [1e-3, 1], [1, 1], iterations=5, progress="off")
      >>> run["iters"], run["test_loss"].shape, bool(np.all(run["final_train_loss"] < run["train_loss"][0]))
      (array([0, 1, 2, 3, 4, 5]), (6, 2), True)"""
    if method not in ("gn", "gd"):
        raise ValueError(f"method must be 'gn' or 'gd', got {method!r}.")
    tau0s, lrs = np.asarray(tau0s, float), np.asarray(lrs, float)
    if tau0s.shape != lrs.shape or tau0s.ndim != 1:
        raise ValueError(f"tau0s and lrs must be 1-D and of equal length, got shapes {tau0s.shape} and {lrs.shape}.")
    if (tau0s <= 0).any() or (lrs <= 0).any():
        raise ValueError("every tau0 and step size must be > 0.")
    if diverge_above is not None and not (np.isfinite(diverge_above) and diverge_above > 1):
        raise ValueError(f"diverge_above must be a finite number > 1 (a factor on the initial training loss) or "
                         f"None, got {diverge_above!r}.")
    act = activation or cfg.activation
    beta = cfg.beta if beta is None else beta
    d, outputs = (cfg.d, None) if data is None else _shape_of(data)
    net = ic.mean_field_net(d, cfg.width, 1.0, act, beta, outputs)
    make_step = lambda x, y: method_step(cfg, method, net, x, y, fast)
    loss_of = lambda p, x, y: ic.mean_field_loss(net.apply(p, x), y)
    budget = iterations or (cfg.gn_iterations if method == "gn" else cfg.gd_iterations)
    if seeds is None:     # one data set, one initial draw, closed over by the compiled program
        data = teacher_student_problem(cfg, activation=act, beta=beta) if data is None else data
        x, y = data["x_train"], data["y_train"]
        step = make_step(x, y)
        vstep = lambda p, lr, xy: jax.vmap(step)(p, lr)
        vloss = lambda p, xy: jax.vmap(lambda q: loss_of(q, x, y))(p)
        u0 = jnp.asarray(tau0s)[:, None, None] * net.init(jax.random.key(cfg.seed + 1))["u"]
        xy0, stacked = (), None
        metrics = lambda ps, d: jax.lax.map(lambda p: teacher_student_metrics(p, data, act, beta), ps)
    else:                 # one data set and initial draw per run, carried by the program
        seeds = [int(v) for v in np.atleast_1d(seeds)]
        if data is not None or len(seeds) != tau0s.size:
            raise ValueError(f"seeds must give one integer per run ({tau0s.size}), with data=None (each seed draws "
                             f"its own data); got {len(seeds)} seeds and data={'given' if data is not None else None}.")
        probs = [teacher_student_problem(dataclasses.replace(cfg, seed=s), activation=act, beta=beta) for s in seeds]
        stacked = {k: jnp.stack([d[k] for d in probs]) for k in probs[0]}
        xy0 = (stacked["x_train"], stacked["y_train"])
        vstep = jax.vmap(lambda p, lr, xy: make_step(*xy)(p, lr))
        vloss = jax.vmap(lambda p, xy: loss_of(p, *xy))
        u0 = jnp.stack([t * net.init(jax.random.key(s + 1))["u"] for t, s in zip(tau0s, seeds)])
        metrics = lambda ps, d: jax.lax.map(lambda pd: teacher_student_metrics(pd[0], pd[1], act, beta), (ps, d))
    params = {"u": u0, "v": jnp.zeros((tau0s.size,) + net.init(jax.random.key(0))["v"].shape)}
    finite = lambda p: jnp.all(jnp.isfinite(p["u"])) & jnp.all(jnp.isfinite(p["v"]))

    def body(_, c):
        p, lr, done, diverged, stopped, xy, limit, it = c
        loss = vloss(p, xy)
        hit = loss < cfg.stop_loss
        new = vstep(p, lr, xy)
        bad = ~jax.vmap(finite)(new) | (loss > limit)      # overflowed or blown up: keep the last iterate
        hit = (hit | bad) & ~done
        stopped = jnp.where(hit, it, stopped)
        diverged = diverged | (bad & ~done)
        done = done | hit
        keep = lambda a, b: jnp.where(done.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)
        return jax.tree.map(keep, p, new), lr, done, diverged, stopped, xy, limit, it + 1
    advance = jax.jit(lambda c, n: jax.lax.fori_loop(0, n, body, c))
    evaluate = jax.jit(metrics)    # lax.map, not vmap: a batched float64 eigh hung XLA:CPU (jax 0.10, 2 cores)
    sched = eval_schedule(budget, cfg.n_evals)
    g = tau0s.size
    diverged, stopped = np.zeros(g, bool), np.full(g, budget)
    active = np.arange(g)             # runs still training; finished ones are dropped from the batch
    limit = jnp.full(g, jnp.inf) if diverge_above is None else diverge_above * vloss(params, xy0)
    carry = (params, jnp.asarray(lrs), jnp.zeros(g, bool), jnp.zeros(g, bool), jnp.full(g, budget), xy0, limit, 0)
    of_active = lambda: None if stacked is None else jax.tree.map(lambda v: v[active], stacked)
    rows = [jax.device_get(evaluate(params, of_active()))]
    bar = progress_bar(budget, f"{method.upper()}, {g} runs", progress)
    for a, b in zip(sched[:-1], sched[1:]):
        carry = advance(carry[:7] + (jnp.asarray(a),), int(b - a))
        ev = jax.device_get(evaluate(carry[0], of_active()))
        row = {k: np.array(v) for k, v in rows[-1].items()}    # finished runs keep their last values
        for k in row:
            row[k][active] = ev[k]
        rows.append(row)
        done = np.asarray(carry[2])
        diverged[active], stopped[active] = np.asarray(carry[3]), np.asarray(carry[4])
        if bar is not None:
            bar.update(int(b - a))
        if done.all():
            break
        if done.any():                # shrink the batch (one recompilation per distinct size)
            keep = np.flatnonzero(~done)
            active = active[keep]
            carry = jax.tree.map(lambda v: v[keep], carry[:7]) + (carry[7],)
    if bar is not None:
        bar.close()
    out = {"iters": np.asarray([0] + [int(b) for b in sched[1:len(rows)]]), "tau0": tau0s, "lr": lrs, "method": method,
           "seeds": np.full(g, cfg.seed) if seeds is None else np.asarray(seeds)}
    out["stopped_at"], out["diverged"] = stopped, diverged
    for key in rows[0]:          # a diverged run has no final metrics: NaN, never a stale value
        out[key] = np.stack([np.asarray(r[key]) for r in rows])
        out["final_" + key] = np.where(diverged, np.nan, out[key][-1])
    return out


HIDDEN_FIT, HIDDEN_TEST = 0.5, 0.9     #: :func:`hidden_learning_at`'s two fractions (the chapters glue them)


def hidden_learning_at(run: dict, j: int, rf_level: float):
    """The chapter's test for hidden learning in run ``j`` of ``run`` (:func:`run_teacher_student`): the first recorded
    iteration at which its Test-LRfit is below ``HIDDEN_FIT`` times ``rf_level`` (the random-features test loss) while
    its test loss is above ``HIDDEN_TEST`` times its initial value; ``None`` if none (never, or once the loss moved).

    Examples:
      >>> run = {"iters": np.array([0, 10, 100]), "lrfit": np.c_[[1.0, 0.2, 0.1]], "test_loss": np.c_[[1.0, 0.95, 0.5]]}
      >>> hidden_learning_at(run, 0, rf_level=1.0), hidden_learning_at(run, 0, rf_level=0.3)
      (10, None)"""
    below = np.flatnonzero(run["lrfit"][:, j] < HIDDEN_FIT * rf_level)
    ok = below.size > 0 and run["test_loss"][below[0], j] > HIDDEN_TEST * run["test_loss"][0, j]
    return int(run["iters"][below[0]]) if ok else None


def random_features_baseline(cfg: TeacherStudentConfig, tau0s, *, data: dict | None = None,
                             activation: str | None = None, beta: float | None = None) -> dict:
    """The RF baseline of Arbel et al. 2023 (eq. (8)): the minimum-norm least-squares last layer on the hidden features
    at initialisation, for each ``tau0``. Its test loss is Test-LRfit at iteration 0.

    Examples:
      >>> with jax.enable_x64(True): rf = random_features_baseline(TEACHER_STUDENT["smoke"], [1e-3, 1.0])
      >>> rf["tau0"], rf["test_loss"].round(4)        # ReLU features scale with tau0: the same re-fit
      (array([0.001, 1.   ]), array([0.1115, 0.1115]))"""
    act = activation or cfg.activation
    beta = cfg.beta if beta is None else beta
    data = teacher_student_problem(cfg, activation=act, beta=beta) if data is None else data
    u = ic.mean_field_net(_shape_of(data)[0], cfg.width, 1.0, act, beta).init(jax.random.key(cfg.seed + 1))["u"]
    feats = lambda t, x: hidden_features(t * u, x, act, beta) / cfg.width
    res = [float(ic.refit_test_loss(feats(t, data["x_train"]), data["y_train"], feats(t, data["x_test"]), data["y_test"]))
           for t in np.asarray(tau0s, float)]
    return {"tau0": np.asarray(tau0s, float), "test_loss": np.asarray(res)}


def seed_interval(values, level: float = 0.95, log: bool = True):
    """The mean over seeds (last axis) of ``values`` and its ``level`` Student-t interval, ``(mean, low, high)``; with
    ``log``, of log10 values, in the values' units (App. C.1 shades 95% intervals of 5 runs on log axes).

    Examples:
      >>> [round(float(v), 2) for v in seed_interval([1.0, 2.0, 3.0], log=False)]   # log=True: on log10 values
      [2.0, -0.48, 4.48]"""
    from scipy import stats
    v = np.asarray(values, float)
    if v.shape[-1] < 2:
        raise ValueError(f"an interval over seeds needs at least 2 seeds, got {v.shape[-1]}.")
    v = np.log10(v) if log else v
    m, se = v.mean(axis=-1), v.std(axis=-1, ddof=1) / np.sqrt(v.shape[-1])
    h = stats.t.ppf(0.5 + level / 2, v.shape[-1] - 1) * se
    out = (m, m - h, m + h)
    return tuple(10 ** o for o in out) if log else out


def rate_band(c, lr: float, n: int):
    r"""The loss's decay rate per unit time, :math:`-\log(L_{k+1}/L_k)/\gamma`, of a step of size ``lr``
    (:math:`\gamma`) along a function-space direction it contracts at speed ``c``: the residual there is multiplied by
    :math:`1 - \gamma c / N`, so the rate is :math:`-(2/\gamma)\log|1 - \gamma c/N|` (:math:`2c/N` for small steps). A
    linearised step's rate lies between its slowest and fastest direction's: ``c`` runs over the NTK eigenvalues
    :math:`\lambda` for GD (operator :math:`A`), over :math:`\lambda/(\lambda + \varepsilon)` for GN (operator
    :math:`A(A + \varepsilon I)^{-1}`).

    Examples:
      >>> rate_band([0.5, 1.0], lr=1e-3, n=10).round(3), round(float(rate_band(1.0, lr=5.0, n=10)), 3)
      (array([0.1, 0.2]), 0.277)"""
    return -2.0 * np.log(np.abs(1.0 - lr * np.asarray(c, float) / n)) / lr


def track_rates(cfg: TeacherStudentConfig, method: str, lr: float, tau0s, steps: int, *,
                data: dict | None = None) -> dict:
    r"""Train one student per ``tau0`` by ``method`` (``"gn"`` or ``"gd"``) at step size ``lr`` for ``steps`` steps,
    recording at each step the training loss, the extreme eigenvalues of the NTK ``A = J J^T`` and (GN) the damping.
    Returns ``(len(tau0s), steps + 1)`` arrays ``loss``, ``sigma_min``, ``lam_max``, ``damping`` (0 for GD);
    ``(len(tau0s), steps)`` arrays ``rate`` (the measured decay rate per unit time) and ``low``, ``high`` (the
    :func:`rate_band` of the step's slowest and fastest direction: a linearised step's rate).

    Examples:
      >>> with jax.enable_x64(True): r = track_rates(TEACHER_STUDENT["smoke"], "gn", 1.0, [1e-3, 1.0], steps=3)
      >>> r["loss"].shape, r["rate"].shape, bool(np.all(r["low"] <= r["high"]))
      ((2, 4), (2, 3), True)"""
    if method not in ("gn", "gd"):
        raise ValueError(f"method must be 'gn' or 'gd', got {method!r}.")
    data = teacher_student_problem(cfg) if data is None else data
    x, y = data["x_train"], data["y_train"]
    n = x.shape[0]
    net = ic.mean_field_net(cfg.d, cfg.width, 1.0, cfg.activation, cfg.beta)
    step = method_step(cfg, method, net, x, y)
    z = net.init(jax.random.key(cfg.seed + 1))["u"]

    def body(p, _):
        ntk = ic.mean_field_ntk(p, x, activation=cfg.activation, beta=cfg.beta)
        ev = jnp.linalg.eigvalsh(0.5 * (ntk + ntk.T))
        eps = jnp.maximum(cfg.floor, cfg.alpha * ev[0]) if method == "gn" else 0.0
        loss = ic.mean_field_loss(net.apply(p, x), y)
        return step(p, lr), (loss, ev[0], ev[-1], eps)
    # one compiled program per method, called once per tau0 (a vmapped float64 eigh hung XLA:CPU: run_teacher_student)
    run = jax.jit(lambda tau: jax.lax.scan(body, {"u": tau * z, "v": jnp.zeros(cfg.width)}, None, length=steps + 1)[1])
    cols = [np.stack([np.asarray(v) for v in run(jnp.float64(t))]) for t in np.asarray(tau0s, float)]
    loss, smin, lmax, eps = np.stack(cols, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = -np.diff(np.log(loss), axis=1) / lr
    slow, fast = (smin, lmax) if method == "gd" else (smin / (smin + eps), lmax / (lmax + eps))
    return {"tau0": np.asarray(tau0s, float), "lr": lr, "method": method, "loss": loss, "sigma_min": smin,
            "lam_max": lmax, "damping": eps, "rate": rate, "low": rate_band(slow[:, :-1], lr, n),
            "high": rate_band(fast[:, :-1], lr, n), "n": n}


def step_seconds(cfg: TeacherStudentConfig, *, data: dict | None = None, steps: int = 20, rounds: int = 5) -> dict:
    """Seconds per iteration of GN and GD at the chapter's size (a compiled ``lax.fori_loop`` of ``steps`` steps), timed
    interleaved over ``rounds`` rounds (alike under load): ``{"gn": s, "gd": s, "ratio": median per-round GN / GD}``.

    Examples:
      >>> with jax.enable_x64(True): print(sorted(step_seconds(TEACHER_STUDENT["smoke"], steps=2, rounds=2)))
      ['gd', 'gn', 'ratio']"""
    import statistics
    data = teacher_student_problem(cfg) if data is None else data
    x, y = data["x_train"], data["y_train"]
    net = ic.mean_field_net(cfg.d, cfg.width, 1.0, cfg.activation, cfg.beta)
    u = min(cfg.tau0s) * net.init(jax.random.key(cfg.seed + 1))["u"]
    p0 = {"u": u, "v": jax.random.normal(jax.random.key(cfg.seed + 2), (cfg.width,))}
    runs = {}
    for name, lr in (("gn", min(cfg.gn_lrs)), ("gd", min(cfg.gd_lrs))):
        step = method_step(cfg, name, net, x, y)
        runs[name] = jax.jit(lambda p, step=step, lr=lr: jax.lax.fori_loop(0, steps, lambda i, q: step(q, lr), p))
        jax.block_until_ready(runs[name](p0))                  # compile
    times = interleaved_seconds({k: (lambda k=k: runs[k](p0)) for k in ("gn", "gd")}, rounds, per=steps)
    return {"gn": statistics.median(times["gn"]), "gd": statistics.median(times["gd"]),
            "ratio": statistics.median(a / b for a, b in zip(times["gn"], times["gd"]))}


__all__ = ["TeacherStudentConfig", "TEACHER_STUDENT", "teacher_student_config", "teacher_student_problem",
           "teacher_student_metrics", "eval_schedule", "method_step", "run_teacher_student", "random_features_baseline",
           "hidden_learning_at", "HIDDEN_FIT", "HIDDEN_TEST", "seed_interval", "rate_band", "track_rates", "step_seconds"]
