"""Chapter "When should the features be refreshed?" (beyond Goldwaser and Ge, who name adaptive
periods as future work in §6.1): IL on the digits CNN with a fixed period, geometric periods and
drift-triggered refreshes (:mod:`itlin_core.relinearise`), all in one vmapped sweep, compared at
equal numbers of feature updates; the kernel's movement along training; the verdict computed.
The same comparison on two full-batch regressions of earlier chapters: XOR and the
teacher-student net."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

import itlin_core as ic

from .common import per_preset
from .rules import compare_at_equal_updates, never_refreshed, refresh_shares, verdict_counts  # noqa: F401
from .digits_cnn import _digits_optimizer, digits_config, digits_data
from .mean_field_gn import TeacherStudentConfig, teacher_student_config
from .xor_features import XORConfig, xor_config, xor_setup


@dataclasses.dataclass(frozen=True)
class RefreshConfig:
    """The digits problem of the digits chapter at the same preset (data, CNN, SGD learning rate,
    batch size: :class:`~itlin_core.book.digits_cnn.DigitsConfig`), trained for ``steps`` steps and
    evaluated every ``eval_every`` steps, with one run per rule: ``every(K)`` for ``K`` in ``fixed``,
    ``geometric(K0, ratio)`` for ``K0`` in ``geometric``, ``on_drift(tol)`` for ``tol`` in ``tols``
    (drift measured at every ``drift_every``-th step on the step's minibatch). At every evaluation:
    the proxy's and the network's test accuracy, the linearisations used so far, the drift on the
    first ``drift_examples`` training images, and the empirical NTK (trace over the 10 logits) on
    the first ``kernel_examples`` test images. Two runs count as tied when their test accuracies
    differ by less than ``tie_images`` test images."""

    steps: int
    eval_every: int
    fixed: tuple
    geometric: tuple
    ratio: float
    tols: tuple
    drift_every: int = 5
    drift_examples: int = 256
    kernel_examples: int = 64
    tie_images: int = 3


REFRESH = {
    "smoke": RefreshConfig(steps=600, eval_every=100, fixed=(1, 100, None), geometric=(10,), ratio=2.0,
                           tols=(0.2,)),
    "book": RefreshConfig(steps=2000, eval_every=100, fixed=(1, 10, 30, 100, 300, 1000, None), geometric=(3, 30),
                          ratio=1.5, tols=(0.1, 0.2, 0.4)),
}


def refresh_config(preset: str | None = None) -> RefreshConfig:
    """The preset's :class:`RefreshConfig` (:func:`~itlin_core.book.common.per_preset`).

    Examples:
      >>> cfg = refresh_config("smoke")
      >>> cfg.steps, cfg.fixed, cfg.geometric, cfg.tols
      (600, (1, 100, None), (10,), (0.2,))
    """
    return per_preset(REFRESH, preset)


@dataclasses.dataclass(frozen=True)
class SmallRefreshConfig:
    """The rules on two full-batch regressions of earlier chapters, at the same preset.

    * XOR: the data, network, small initialisation, learning rate and number of steps of the XOR
      chapter (:class:`~itlin_core.book.xor_features.XORConfig`); measured by the test RMSE.
    * Teacher-student: the data, teacher, test set, width and initial draw of the mean-field
      chapter (:class:`~itlin_core.book.mean_field_gn.TeacherStudentConfig`), at the initial scale
      ``ts_tau0`` in 32-bit arithmetic (the 64-bit arithmetic of that chapter is needed only for
      its tiny scales), trained by gradient descent with step size ``ts_lr`` on
      ``1/(2N) sum (f - y)^2`` for ``ts_steps`` steps; measured by the test loss.

    One run per rule: ``every(K)`` for ``K`` in ``fixed``, ``geometric(K0, ratio)`` for ``K0`` in
    ``geometric``, ``on_drift(tol)`` for ``tol`` in ``tols``, the drift measured on the whole
    training set (a full-batch step's batch) at every ``drift_every``-th step; ``n_evals``
    evaluations. Two runs count as tied when their test errors differ by less than the fraction
    ``tie_relative`` of the fixed period's."""

    ts_steps: int
    fixed: tuple = (1, 10, 30, 100, 300, 1000, 3000, None)
    geometric: tuple = (3, 30)
    ratio: float = 1.5
    tols: tuple = (0.05, 0.1, 0.2, 0.4)
    ts_lr: float = 10.0
    ts_tau0: float = 1.0
    drift_every: int = 5
    n_evals: int = 20
    tie_relative: float = 0.02


SMALL = {
    "smoke": SmallRefreshConfig(ts_steps=4000),
    "book": SmallRefreshConfig(ts_steps=4000),
}


def small_refresh_config(preset: str | None = None) -> SmallRefreshConfig:
    """The preset's :class:`SmallRefreshConfig` (:func:`~itlin_core.book.common.per_preset`).

    Examples:
      >>> cfg = small_refresh_config("smoke")
      >>> cfg.ts_steps, cfg.fixed[:3], cfg.tols
      (4000, (1, 10, 30), (0.05, 0.1, 0.2, 0.4))
    """
    return per_preset(SMALL, preset)


def xor_refresh_problem(xcfg: XORConfig | None = None) -> dict:
    """The XOR problem of the XOR chapter (default: its config at ``$ITLIN_PRESET``) as a
    problem for :func:`run_small_problem`.

    Examples:
      >>> p = xor_refresh_problem(dataclasses.replace(xor_config("smoke"), n_train=8, n_test=8, width=8))
      >>> p["name"], p["steps"], p["error_name"], p["train"][0].shape
      ('XOR', 8000, 'test RMSE', (8, 2))
    """
    xcfg = xor_config() if xcfg is None else xcfg
    x, y, xt, yt, model, params0, lam_max = xor_setup(xcfg)
    return {"name": "XOR", "apply": model.apply, "loss": ic.squared_error, "params0": params0,
            "optimizer": optax.sgd(xcfg.lr_factor / lam_max), "train": (x, y), "test": (xt, yt),
            "steps": xcfg.steps, "error": ic.rmse, "error_name": "test RMSE"}


def teacher_student_refresh_problem(cfg: SmallRefreshConfig, tcfg: TeacherStudentConfig | None = None) -> dict:
    """The teacher-student problem of the mean-field chapter (default: its config at
    ``$ITLIN_PRESET``) at the scale and step size of ``cfg``, as a problem for
    :func:`run_small_problem`. The hidden weights start at ``cfg.ts_tau0`` times the standard
    normal draw of that chapter and the output weights at 0, as there.

    Examples:
      >>> p = teacher_student_refresh_problem(small_refresh_config("smoke"), teacher_student_config("smoke"))
      >>> p["name"], p["steps"], p["error_name"], p["train"][0].shape, p["test"][0].shape
      ('teacher-student', 4000, 'test loss', (40, 10), (500, 10))
    """
    tcfg = teacher_student_config() if tcfg is None else tcfg
    data = ic.data.teacher_student(jax.random.key(tcfg.seed), tcfg.n_train, tcfg.n_test, tcfg.d, tcfg.m_star,
                                   tcfg.activation, tcfg.beta)
    net = ic.mean_field_net(tcfg.d, tcfg.width, cfg.ts_tau0, tcfg.activation, tcfg.beta)
    half_mse = lambda f, y: 0.5 * jnp.mean(jnp.square(f - y))
    return {"name": "teacher-student", "apply": net.apply, "loss": half_mse,
            "params0": net.init(jax.random.key(tcfg.seed + 1)), "optimizer": optax.sgd(cfg.ts_lr),
            "train": (data["x_train"], data["y_train"]), "test": (data["x_test"], data["y_test"]),
            "steps": cfg.ts_steps, "error": half_mse, "error_name": "test loss"}


def run_small_problem(problem: dict, cfg: SmallRefreshConfig, progress=None) -> dict:
    """Train every rule of :func:`rules_of` ``(cfg)`` on ``problem`` (:func:`xor_refresh_problem`,
    :func:`teacher_student_refresh_problem`) with full-batch steps, all runs in one compiled sweep.

    Returns the :func:`itlin_core.train` history (arrays ``(evals, runs)``): ``test_error_proxy``
    and ``train_error_proxy`` (the proxy being trained), ``test_error_network``, ``updates``
    (linearisations used so far) and ``drift`` (on the training set), plus ``labels``,
    ``families``, ``rules``, ``name``, ``error_name`` and the final ``state``. A run that
    diverges is kept, with NaN errors.

    Examples:
      A tiny XOR problem, 4 steps, four rules (the chapter: ``run_small_problem(xor_refresh_problem(), cfg)``):

      >>> xcfg = dataclasses.replace(xor_config("smoke"), n_train=8, n_test=8, width=8, steps=4)
      >>> cfg = dataclasses.replace(small_refresh_config("smoke"), fixed=(1, None), geometric=(2,), tols=(0.1,),
      ...                           n_evals=2)
      >>> h = run_small_problem(xor_refresh_problem(xcfg), cfg, progress="off")
      >>> h["labels"], h["test_error_proxy"].shape, h["updates"][-1, :3].tolist()
      (['K=1', 'K=∞', 'geometric(2, 1.5)', 'on_drift(0.1)'], (3, 4), [4, 1, 2])
    """
    families = rules_of(cfg)
    runs = [(fam, label, rule) for fam, rs in families.items() for label, rule in rs]
    apply_fn, opt = problem["apply"], problem["optimizer"]
    step, rules = ic.make_il_sweep_step(apply_fn, problem["loss"], opt, [r for _, _, r in runs],
                                        drift_every=cfg.drift_every)
    (x, y), steps = problem["train"], problem["steps"]
    il_eval = ic.make_il_eval(apply_fn, {"test": problem["test"], "train": problem["train"]},
                              {"error": problem["error"]})

    def eval_fn(state):
        out = il_eval(state)
        out["updates"] = state.updates
        out["drift"] = drift_on(apply_fn, state.params, state.anchor, x)
        return out

    states, hist = ic.train(step, ic.replicate(ic.init_il_state(problem["params0"], opt), len(runs)),
                            ic.full_batch(x, y), steps,
                            evaluate=ic.Evaluation(jax.vmap(eval_fn), every=max(1, steps // cfg.n_evals)),
                            on_nonfinite="ignore",
                            progress=ic.Progress(progress, f"{problem['name']}: {len(runs)} relinearisation rules"))
    hist.update(labels=[label for _, label, _ in runs], families=[fam for fam, _, _ in runs], rules=rules,
                state=states, name=problem["name"], error_name=problem["error_name"])
    return hist


def rules_of(cfg: RefreshConfig) -> dict:
    """``{family: [(label, rule), ...]}`` for the families ``fixed``, ``geometric``, ``drift``.

    Examples:
      >>> cfg = dataclasses.replace(refresh_config("smoke"), fixed=(1, None), geometric=(10,), ratio=2.0, tols=(0.1,))
      >>> {family: [label for label, _ in rules] for family, rules in rules_of(cfg).items()}
      {'fixed': ['K=1', 'K=∞'], 'geometric': ['geometric(10, 2)'], 'drift': ['on_drift(0.1)']}
    """
    fixed = [("K=∞" if K is None else f"K={K}", ic.every(K)) for K in cfg.fixed]
    geo = [(f"geometric({K0}, {cfg.ratio:g})", ic.geometric(K0, cfg.ratio)) for K0 in cfg.geometric]
    drift = [(f"on_drift({tol:g})", ic.on_drift(tol)) for tol in cfg.tols]
    return {"fixed": fixed, "geometric": geo, "drift": drift}


def drift_on(apply_fn, params, anchor, x) -> jax.Array:
    """The drift ``d = ||f(params) - f_lin(params)|| / ||f(params) - f(anchor)||`` of
    :mod:`itlin_core.relinearise` on the inputs ``x`` (0 when ``params`` is the anchor)."""
    f = apply_fn(params, x)
    f_lin = ic.linearise(apply_fn, anchor)(params, x)
    sq = lambda a, b: jnp.sum(jnp.square(a - b))
    return ic.relinearise.drift_ratio(sq(f, f_lin), sq(f, apply_fn(anchor, x)), jnp.sum(jnp.square(f)))


def run_refresh(cfg: RefreshConfig, progress=None, data: dict | None = None, digits=None) -> dict:
    """Train every rule of :func:`rules_of` at once (:func:`itlin_core.make_il_sweep_step`) on the
    digits problem ``digits`` (default: the digits chapter's config at ``$ITLIN_PRESET``).

    Returns the :func:`itlin_core.train` history (arrays ``(evals, runs)``): ``test_accuracy_proxy``
    (the model being trained), ``test_accuracy_network``, ``updates`` (linearisations used by the
    steps before the evaluation), ``drift``, ``kernel_from_init`` and ``kernel_per_interval`` (how far
    each run's empirical NTK on ``kernel_examples`` test images moved: :func:`kernel_movement` of its
    kernels, which are not kept), plus ``labels``, ``families`` (one per run), ``rules``, the final
    ``state`` and ``n_params``.

    Examples:
      Two rules, 2 steps of a tiny CNN on random stand-in images (the chapter: ``run_refresh(cfg)``):

      >>> x, y = jax.random.normal(jax.random.key(0), (16, 8, 8, 1)), jnp.arange(16) % 10
      >>> data = {"x_train": x, "y_train": y, "x_test": x[:8], "y_test": y[:8]}
      >>> digits = dataclasses.replace(digits_config("smoke"), channels=(2, 2), dense=4, batch_size=8)
      >>> cfg = dataclasses.replace(refresh_config("smoke"), steps=2, eval_every=2, fixed=(1,), geometric=(),
      ...                           tols=(0.1,), kernel_examples=4)
      >>> h = run_refresh(cfg, progress="off", data=data, digits=digits)
      >>> h["labels"], h["kernel_from_init"].shape, int(h["updates"][-1, 0]), h["n_test"]
      (['K=1', 'on_drift(0.1)'], (2, 2), 2, 8)
    """
    dcfg = digits_config() if digits is None else digits
    data = digits_data(dcfg) if data is None else data
    model = ic.small_cnn(10, (8, 8, 1), dcfg.channels, dcfg.dense)
    params0 = model.init(jax.random.key(dcfg.seed + 1))
    opt = _digits_optimizer(dcfg)
    families = rules_of(cfg)
    runs = [(fam, label, rule) for fam, rs in families.items() for label, rule in rs]
    step, rules = ic.make_il_sweep_step(model.apply, ic.softmax_cross_entropy, opt, [r for _, _, r in runs],
                                        drift_every=cfg.drift_every)
    xte, yte = data["x_test"], data["y_test"]
    il_eval = ic.make_il_eval(model.apply, {"test": (xte, yte)}, {"accuracy": ic.accuracy})
    xd, xk = data["x_train"][:cfg.drift_examples], xte[:cfg.kernel_examples]

    def eval_fn(state):
        out = il_eval(state)
        out["updates"] = state.updates
        out["drift"] = drift_on(model.apply, state.params, state.anchor, xd)
        out["ntk"] = ic.empirical_ntk(model.apply, state.params, xk)
        return out

    batches = ic.minibatches(jax.random.key(dcfg.seed + 2), data["x_train"], data["y_train"], dcfg.batch_size)
    states, hist = ic.train(step, ic.replicate(ic.init_il_state(params0, opt), len(runs)), batches, cfg.steps,
                            evaluate=ic.Evaluation(jax.vmap(eval_fn), every=cfg.eval_every),
                            progress=ic.Progress(progress, f"digits: {len(runs)} relinearisation rules"))
    moves = [kernel_movement(k) for k in np.moveaxis(np.asarray(hist.pop("ntk")), 1, 0)]   # run by run
    hist.update({f"kernel_{k}": np.stack([m[k] for m in moves], axis=1) for k in ("from_init", "per_interval")})
    hist.update(labels=[label for _, label, _ in runs], families=[fam for fam, _, _ in runs], rules=rules,
                state=states, n_params=ic.count_params(params0), n_test=int(len(yte)))
    return hist


def kernel_movement(ntk: np.ndarray) -> dict:
    """From kernels ``(evals, n, n)`` of one run: ``from_init`` (kernel distance to the first) and
    ``per_interval`` (distance between consecutive evaluations; its first entry is NaN).

    Examples:
      >>> m = kernel_movement(np.stack([np.eye(2), 2 * np.eye(2), np.ones((2, 2))]))   # 2 I: the same shape
      >>> np.abs(m["from_init"]).round(2).tolist(), np.abs(m["per_interval"]).round(2).tolist()
      ([0.0, 0.0, 0.29], [nan, 0.0, 0.29])
    """
    ntk = np.asarray(ntk)
    d0 = np.array([float(ic.kernel_distance(ntk[0], k)) for k in ntk])
    step = np.array([np.nan] + [float(ic.kernel_distance(a, b)) for a, b in zip(ntk[:-1], ntk[1:])])
    return {"from_init": d0, "per_interval": step}


def fixed_below_inf(hist: dict) -> list:
    """The labels of the finite fixed periods whose final test accuracy is below that of
    ``K = inf`` (the dips of the reference curve).

    Examples:
      >>> hist = {"families": ["fixed", "fixed", "fixed", "drift"], "labels": ["K=1", "K=10", "K=∞", "on_drift(0.1)"],
      ...         "test_accuracy_proxy": np.array([[0.9, 0.7, 0.8, 0.6]])}
      >>> fixed_below_inf(hist)
      ['K=10']
    """
    acc, fam, labels = hist["test_accuracy_proxy"][-1], np.asarray(hist["families"]), hist["labels"]
    i_inf = labels.index("K=∞")
    return [labels[i] for i in np.where(fam == "fixed")[0] if i != i_inf and acc[i] < acc[i_inf]]


__all__ = ["RefreshConfig", "REFRESH", "refresh_config", "rules_of", "drift_on", "run_refresh", "kernel_movement",
           "fixed_below_inf", "SmallRefreshConfig", "SMALL", "small_refresh_config", "xor_refresh_problem",
           "teacher_student_refresh_problem", "run_small_problem"]
