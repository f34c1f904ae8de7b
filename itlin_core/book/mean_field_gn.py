"""Chapter "Gauss-Newton in the mean-field regime" (Arbel et al. 2023): the teacher-student
regression of their §5.1, students trained by Gauss-Newton and gradient descent over sweeps of
the initial scale ``tau0`` and the step size, with their metrics (§5.2) and the random-features
baseline. :mod:`itlin_core.book.mean_field_scaling` builds its sweeps on these runs."""

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
    """The teacher-student task of Arbel et al. 2023 (§5.1) at a chosen scale: ``n_train`` Gaussian
    inputs in ``d`` dimensions, targets
    from a teacher with ``m_star`` units (``data.teacher_student``), ``n_test`` test points; a
    mean-field student (``mean_field.mean_field_net``) of ``width`` units, hidden weights
    ``N(0, tau0^2)``, last layer 0. GN (damping ``max(floor, alpha sigma_min)``) and GD with
    constant step sizes, the convention of Arbel et al. 2023 (loss ``1/(2N) sum (f - y)^2``). A run stops
    when its training loss falls below ``stop_loss`` or after ``gn_iterations`` /
    ``gd_iterations`` steps; metrics are recorded at ``n_evals`` log-spaced iterations.
    ``tau0s`` and the step-size grids ``gn_lrs``/``gd_lrs`` are the sweeps of Arbel et al. 2023, Fig. 1 (every
    step size is run at every ``tau0``); the smallest ``tau0`` is Fig. 1 right's and Fig. 2's.
    ``n_trains`` are the training-set sizes of Fig. 5, run at ``scaling_tau0s`` with the step-size
    grids ``scaling_gn_lrs``/``scaling_gd_lrs``; ``betas`` the SiLU temperatures of Figs. 6-7
    (run at the smallest ``tau0`` with ``gn_lrs`` and ``silu_gd_lrs``, or ``gd_lrs`` if empty);
    ``compare_tau0`` the initial scale of Fig. 7's ReLU-against-SiLU(beta = 1) comparison;
    ``n_seeds`` the seeds of the chapter's repeat of its key curves (App. C.1 uses 5);
    ``widths`` the numbers of hidden units of Fig. 4 (left), run at ``width_tau0`` (the paper's
    ``tau0 = 1``) with the step-size grids ``scaling_gn_lrs``/``scaling_gd_lrs``."""

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
                                  n_evals=12, n_trains=(20, 40, 80), scaling_tau0s=(1e-3, 1.0),
                                  scaling_gn_lrs=(1.0,), scaling_gd_lrs=(100.0,), betas=(1.0, 1e6),
                                  widths=(20, 40, 100, 200),
                                  silu_gd_lrs=(10.0, 100.0)),
    "book": TeacherStudentConfig(n_train=100, width=1000, n_test=2000, gn_iterations=3000, gd_iterations=20000,
                                 tau0s=(1e-3, 1e-1, 10.0), gn_lrs=(1e-2, 1.0, 100.0),
                                 gd_lrs=(1.0, 10.0, 100.0, 1000.0),
                                 n_trains=(25, 50, 100, 200), scaling_tau0s=(1e-3, 1.0),
                                 scaling_gn_lrs=(1.0,), scaling_gd_lrs=(100.0, 1000.0), betas=(1.0, 1e6),
                                 widths=(50, 100, 200, 500, 1000),
                                 silu_gd_lrs=(100.0, 1000.0)),
    "paper": TeacherStudentConfig(n_train=500, width=5000, n_test=10000, gn_iterations=100_000,
                                  gd_iterations=1_000_000, n_evals=60,
                                  tau0s=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0),
                                  gn_lrs=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0),
                                  gd_lrs=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0),
                                  n_trains=(100, 200, 500, 1000, 1500), scaling_tau0s=(1e-3, 1.0),
                                  scaling_gn_lrs=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0),
                                  scaling_gd_lrs=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0), betas=(1.0, 1e6),
                                  widths=(250, 500, 1000, 2500, 5000, 10000)),
}


def teacher_student_config(preset: str | None = None) -> TeacherStudentConfig:
    return per_preset(TEACHER_STUDENT, preset)


def _require_x64(what: str):
    if not jax.config.jax_enable_x64:
        raise ValueError(
            f"{what} needs 64-bit JAX (with tau0 = 1e-3 the hidden features are about 1e-3 and float32 "
            "loses the digits of the least-squares re-fits): call "
            "jax.config.update('jax_enable_x64', True) at the start of the notebook.")


def teacher_student_problem(cfg: TeacherStudentConfig, n_train: int | None = None,
                            activation: str | None = None, beta: float | None = None) -> dict:
    """The data of one teacher-student problem. The teacher and the test set are the same for
    every ``n_train`` (they come from the same keys); the training inputs are drawn afresh."""
    _require_x64("the teacher-student experiments")
    n = cfg.n_train if n_train is None else n_train
    return ic.data.teacher_student(jax.random.key(cfg.seed), n, cfg.n_test, cfg.d, cfg.m_star,
                                 activation or cfg.activation, cfg.beta if beta is None else beta)


def teacher_student_metrics(params, data: dict, activation: str = "relu", beta: float = 1.0) -> dict:
    """The metrics of Arbel et al. 2023 (§5.2) for one student: train and test loss
    (:func:`itlin_core.mean_field_loss`), the
    test loss after re-fitting the last layer on the frozen hidden features by eq. (8)
    (Test-LRfit), the weighted cosine distance to the teacher (eq. (9); only when ``data``
    holds the teacher's hidden weights ``u_star``) and the smallest eigenvalue of the NTK matrix
    ``A_w = J J^T`` (Arbel et al. 2023, Fig. 4 right). Vector targets ``(N, C)`` work alike
    (App. C.4)."""
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
    """Iterations ``0 = i_0 < i_1 < ... = iterations`` at which metrics are recorded,
    roughly log-spaced (Arbel et al. 2023 plot Fig. 2 against log-iterations)."""
    pts = np.unique(np.round(np.logspace(0, np.log10(max(iterations, 1)), n_evals)).astype(int))
    return np.concatenate([[0], pts[pts <= iterations]])


def _shape_of(data: dict):
    """The input dimension of ``data`` and its number of outputs (``None`` for scalar targets)."""
    y = np.shape(data["y_train"])
    return int(np.shape(data["x_train"])[1]), (int(y[1]) if len(y) == 2 else None)


def method_step(cfg: TeacherStudentConfig, method: str, net, x, y, fast: bool = True):
    """The chapter's ``step(params, lr)`` for ``method``: Arbel et al.'s damped GN
    (:func:`itlin_core.make_gn_step` with ``cfg``'s ``alpha`` and ``floor``) or gradient descent
    (:func:`itlin_core.make_gd_step`), on the training data ``(x, y)``."""
    if method == "gn":
        return ic.make_gn_step(net, x, y, alpha=cfg.alpha, floor=cfg.floor, fast=fast)
    return ic.make_gd_step(net, x, y)


def run_teacher_student(cfg: TeacherStudentConfig, method: str, tau0s, lrs, *, data: dict | None = None,
                        activation: str | None = None, beta: float | None = None, iterations: int | None = None,
                        fast: bool = True, progress=None, seeds=None, diverge_above: float | None = None) -> dict:
    """Train one student per ``(tau0s[g], lrs[g])`` pair (equal-length sequences) with ``method``
    ``"gn"`` or ``"gd"``, all in one compiled program (``vmap`` over the pairs, a ``fori_loop``
    between evaluations). Every student starts from the same standard-normal draw scaled by
    its ``tau0`` (the paper uses one seed; so does this), unless ``seeds`` gives one seed per run:
    run ``g`` then has its own teacher, training and test data (drawn as
    :func:`teacher_student_problem` does with ``cfg.seed = seeds[g]``) and its own initial draw,
    as in Arbel et al. 2023, App. C.1 (``data`` must then be ``None``). A given ``data`` may
    hold inputs of any dimension and vector targets ``(N, C)`` (a teacher's class
    probabilities, App. C.4): the student then has ``C`` outputs. A student stops (its
    parameters freeze) once its training loss is below ``cfg.stop_loss`` or a step overflows
    (divergence); with ``diverge_above``, so does a training loss above ``diverge_above`` times
    its initial value (a run that has blown up without overflowing would spend its budget there).

    Returns a dict of numpy arrays: ``iters`` ``(E,)``; ``train_loss``, ``test_loss``,
    ``lrfit``, ``wcd`` (when the data has a teacher's weights), ``sigma_min`` of shape ``(E, G)``; ``stopped_at`` ``(G,)`` (the
    iteration at which the stopping rule fired, or the budget); ``diverged`` ``(G,)`` (a step
    produced non-finite parameters: the run stops at its last finite iterate, and its
    ``final_*`` metrics are NaN); and ``final_*`` (the last row) for each metric.
    """
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
    # lax.map (a loop), not vmap: batched float64 eigh inside this program hung XLA:CPU here
    # (jax 0.10, 2-core machine); evaluation is a small part of the cost.
    evaluate = jax.jit(metrics)
    sched = eval_schedule(budget, cfg.n_evals)
    g = tau0s.size
    diverged, stopped = np.zeros(g, bool), np.full(g, budget)
    active = np.arange(g)             # runs still training; finished ones are dropped from the batch
    limit = jnp.full(g, jnp.inf) if diverge_above is None else diverge_above * vloss(params, xy0)
    carry = (params, jnp.asarray(lrs), jnp.zeros(g, bool), jnp.zeros(g, bool), jnp.full(g, budget), xy0, limit, 0)
    of_active = lambda: None if stacked is None else jax.tree.map(lambda v: v[active], stacked)
    rows = [jax.device_get(evaluate(params, of_active()))]
    iters = [0]
    bar = progress_bar(budget, f"{method.upper()}, {g} runs", progress)
    for a, b in zip(sched[:-1], sched[1:]):
        carry = advance(carry[:7] + (jnp.asarray(a),), int(b - a))
        ev = jax.device_get(evaluate(carry[0], of_active()))
        row = {k: np.array(v) for k, v in rows[-1].items()}    # finished runs keep their last values
        for k in row:
            row[k][active] = ev[k]
        rows.append(row)
        iters.append(int(b))
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
    out = {"iters": np.asarray(iters), "tau0": tau0s, "lr": lrs, "method": method,
           "seeds": np.full(g, cfg.seed) if seeds is None else np.asarray(seeds)}
    for key in rows[0]:
        out[key] = np.stack([np.asarray(r[key]) for r in rows])
    out["stopped_at"], out["diverged"] = stopped, diverged
    for key in rows[0]:          # a diverged run has no final metrics: NaN, never a stale value
        out["final_" + key] = np.where(diverged, np.nan, out[key][-1])
    return out


def hidden_learning_at(run: dict, j: int, rf_level: float):
    """The chapter's test for hidden learning in run ``j`` of ``run`` (:func:`run_teacher_student`):
    the first recorded iteration at which its Test-LRfit is below half ``rf_level`` (the
    random-features test loss) while its test loss is still above 90% of its initial value;
    ``None`` if there is none (its Test-LRfit never gets there, or only once the loss has moved)."""
    below = np.flatnonzero(run["lrfit"][:, j] < 0.5 * rf_level)
    ok = below.size > 0 and run["test_loss"][below[0], j] > 0.9 * run["test_loss"][0, j]
    return int(run["iters"][below[0]]) if ok else None


def random_features_baseline(cfg: TeacherStudentConfig, tau0s, *, data: dict | None = None,
                             activation: str | None = None, beta: float | None = None) -> dict:
    """The RF baseline of Arbel et al. 2023 (eq. (8)): the minimum-norm least-squares last layer on the hidden
    features at initialisation, for each ``tau0``. Its test loss is Test-LRfit at iteration 0."""
    act = activation or cfg.activation
    beta = cfg.beta if beta is None else beta
    data = teacher_student_problem(cfg, activation=act, beta=beta) if data is None else data
    u = ic.mean_field_net(_shape_of(data)[0], cfg.width, 1.0, act, beta).init(jax.random.key(cfg.seed + 1))["u"]
    feats = lambda t, x: hidden_features(t * u, x, act, beta) / cfg.width
    res = [float(ic.refit_test_loss(feats(t, data["x_train"]), data["y_train"], feats(t, data["x_test"]), data["y_test"]))
           for t in np.asarray(tau0s, float)]
    return {"tau0": np.asarray(tau0s, float), "test_loss": np.asarray(res)}


def seed_interval(values, level: float = 0.95, log: bool = True):
    """The mean over seeds (the last axis) of ``values`` and its ``level`` confidence interval
    from Student's t distribution, ``(mean, low, high)``; with ``log`` computed on the base-10
    logarithm and returned in the values' units (for losses plotted on log axes, as in Arbel et
    al. 2023, App. C.1, which shades 95% intervals from 5 runs)."""
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
    r"""The loss's decay rate per unit time, :math:`-\log(L_{k+1}/L_k)/\gamma`, of one step of size
    ``lr`` (:math:`\gamma`) along a function-space direction that the step contracts at speed ``c``:
    the residual there is multiplied by :math:`1 - \gamma c / N`, so the rate is
    :math:`-(2/\gamma)\log|1 - \gamma c/N|`, which tends to :math:`2c/N` for small steps. For
    the linearised network every step's rate lies between those of the slowest and the fastest
    direction: for GN, whose function-space operator is :math:`A(A + \varepsilon I)^{-1}`,
    ``c`` runs over :math:`\lambda/(\lambda + \varepsilon)` for the NTK eigenvalues
    :math:`\lambda`; for GD, whose operator is :math:`A`, over the eigenvalues themselves."""
    return -2.0 * np.log(np.abs(1.0 - lr * np.asarray(c, float) / n)) / lr


def track_rates(cfg: TeacherStudentConfig, method: str, lr: float, tau0s, steps: int, *,
                data: dict | None = None) -> dict:
    r"""Train one student per ``tau0`` with ``method`` (``"gn"`` or ``"gd"``) at step size ``lr``
    for ``steps`` steps, recording at every step the training loss, the smallest and largest
    eigenvalue of the NTK matrix ``A = J J^T`` and (GN) the damping used. Returns arrays of
    shape ``(len(tau0s), steps + 1)``: ``loss``, ``sigma_min``, ``lam_max``, ``damping`` (0 for
    GD); ``rate`` ``(len(tau0s), steps)``, the measured decay rate per unit time
    :math:`-\log(L_{k+1}/L_k)/\gamma`; and ``low``, ``high``: the band of :func:`rate_band` for
    the step's slowest and fastest direction (the rate a linearised step would have)."""
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

    # one compiled program per method, called once per tau0 (a vmapped float64 eigh hung XLA:CPU,
    # see run_teacher_student)
    run = jax.jit(lambda tau: jax.lax.scan(body, {"u": tau * z, "v": jnp.zeros(cfg.width)}, None,
                                           length=steps + 1)[1])
    cols = [np.stack([np.asarray(v) for v in run(jnp.float64(t))]) for t in np.asarray(tau0s, float)]
    loss, smin, lmax, eps = np.stack(cols, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = -np.diff(np.log(loss), axis=1) / lr
    slow, fast = (smin, lmax) if method == "gd" else (smin / (smin + eps), lmax / (lmax + eps))
    return {"tau0": np.asarray(tau0s, float), "lr": lr, "method": method, "loss": loss, "sigma_min": smin,
            "lam_max": lmax, "damping": eps, "rate": rate, "low": rate_band(slow[:, :-1], lr, n),
            "high": rate_band(fast[:, :-1], lr, n), "n": n}


def step_seconds(cfg: TeacherStudentConfig, *, data: dict | None = None, steps: int = 20, rounds: int = 5) -> dict:
    """Seconds per iteration of one GN and one GD run at the chapter's size (``lax.fori_loop`` of
    ``steps`` iterations, compiled first), timed interleaved over ``rounds`` rounds in one run so
    that the machine's load affects both alike: ``{"gn": s, "gd": s, "ratio": median per-round
    GN / GD}``."""
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
           "hidden_learning_at", "seed_interval", "rate_band", "track_rates", "step_seconds"]
