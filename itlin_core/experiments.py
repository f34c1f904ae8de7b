"""The experiments the chapters run, with their presets (DESIGN.md §4).

Each chapter reads its preset from the ``ITLIN_PRESET`` environment variable (default
``book``) through :func:`get_preset` and its settings from one table here, so every choice
the papers leave open (widths, input ranges, learning rates) is stated in one place.

``smoke`` is for CI and nbval (seconds), ``book`` for the book build on a 2-core CPU
(about a minute per toy chapter), ``colab``/``paper`` for GPUs. The toy chapters are CPU
experiments whatever the preset: their ``colab`` and ``paper`` settings equal ``book``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Sequence

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax

from . import data as _data
from .iterative import init_il_state, make_il_eval, make_il_step, make_il_sweep_step, replicate, train
from .flow import gradient_flow_params
from .gauss_newton import gn_step
from .linearise import empirical_ntk, linearise
from .losses import rmse, squared_error
from .metrics import feature_alignment, kernel_distance
from .models import Model, centred, mlp

PRESETS = ("smoke", "book", "colab", "paper")


def get_preset(preset: str | None = None) -> str:
    """The preset to use: ``preset`` if given, else ``$ITLIN_PRESET``, else ``"book"``.

    Raises ValueError for anything but ``smoke``, ``book``, ``colab``, ``paper``.
    """
    name = preset if preset is not None else os.environ.get("ITLIN_PRESET", "book")
    name = str(name).strip().lower()
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}: ITLIN_PRESET (or preset=) must be one of "
                         f"{', '.join(PRESETS)}.")
    return name


def _per_preset(table: dict, preset: str | None):
    name = get_preset(preset)
    return table.get(name, table["book"])


# ----------------------------------------------------------------------------------------------
# Chapter "Linearisation and the empirical NTK": how far does the kernel move in training?

@dataclasses.dataclass(frozen=True)
class KernelEvolutionConfig:
    """A 1-D regression (``data.regression_1d`` on [-3, 3]) fitted by a centred, scaled ReLU
    MLP ``alpha * (f(theta, x) - f(theta_0, x))`` for several ``alpha``; full-batch GD with
    learning rate ``lr_factor / lambda_max(NTK at init)`` (the same speed in function space for
    every alpha); the kernel distance to the initial NTK is recorded every ``eval_every`` steps."""

    width: int
    n_train: int
    steps: int
    eval_every: int
    alphas: tuple
    lr_factor: float = 0.5
    depth: int = 2
    seed: int = 0


KERNEL_EVOLUTION = {
    "smoke": KernelEvolutionConfig(width=64, n_train=16, steps=400, eval_every=100, alphas=(0.03, 1.0, 10.0)),
    "book": KernelEvolutionConfig(width=256, n_train=32, steps=4000, eval_every=100,
                                  alphas=(0.03, 0.1, 0.3, 1.0, 3.0, 10.0)),
}


def kernel_evolution_config(preset: str | None = None) -> KernelEvolutionConfig:
    return _per_preset(KERNEL_EVOLUTION, preset)


def run_kernel_evolution(cfg: KernelEvolutionConfig, progress=None) -> dict:
    """Train one network per ``alpha`` (K = 1, plain GD) and record, at each evaluation step,
    the training loss and the kernel distance between the current and the initial NTK on the
    training inputs. Returns ``{"alphas", "eval_step", "kernel_distance" (A, T),
    "train_rmse" (A, T), "relative_param_change" (A, T), "data"}``."""
    data = _data.regression_1d(jax.random.PRNGKey(cfg.seed), cfg.n_train, 200)
    x, y = data["x_train"], data["y_train"]
    base = mlp([1] + [cfg.width] * cfg.depth + [1], "relu")
    params0 = base.init(jax.random.PRNGKey(cfg.seed + 1))
    norm0 = jnp.sqrt(sum(jnp.vdot(a, a) for a in jax.tree_util.tree_leaves(params0)))
    out = {"alphas": np.asarray(cfg.alphas), "data": data}
    rows = {"kernel_distance": [], "train_rmse": [], "relative_param_change": []}
    for alpha in cfg.alphas:
        apply = centred(base.apply, params0, alpha)
        k0 = empirical_ntk(apply, params0, x)
        lr = cfg.lr_factor / float(jnp.linalg.eigvalsh(k0)[-1])
        opt = optax.sgd(lr)

        def eval_fn(state, apply=apply, k0=k0):
            delta = jax.tree_util.tree_map(jnp.subtract, state.params, params0)
            change = jnp.sqrt(sum(jnp.vdot(a, a) for a in jax.tree_util.tree_leaves(delta))) / norm0
            return {"kernel_distance": kernel_distance(empirical_ntk(apply, state.params, x), k0),
                    "train_rmse": rmse(apply(state.params, x), y), "relative_param_change": change}

        step = make_il_step(apply, squared_error, opt, K=1)
        _, hist = train(step, init_il_state(params0, opt), (x, y), cfg.steps, eval_fn=eval_fn,
                        eval_every=cfg.eval_every, progress=progress, desc=f"alpha={alpha:g}")
        for k in rows:
            rows[k].append(hist[k])
        out["eval_step"] = hist["eval_step"]
    out.update({k: np.stack(v) for k, v in rows.items()})
    return out


# ----------------------------------------------------------------------------------------------
# Chapter "Iterative linearisation": a sweep over K on a task where features matter

@dataclasses.dataclass(frozen=True)
class ILToyConfig:
    """Single-index regression (``data.single_index`` with ``|z|`` link) in ``d`` dimensions,
    learnt by a ReLU MLP with two hidden layers whose output is multiplied by ``out_scale``
    (0.1: a small output scale puts standard-width networks in the feature-learning regime);
    full-batch IL with SGD at ``lr = lr_factor / lambda_max(NTK at init)`` and the squared
    error ``1/2 ||f - y||^2``; one run per K, all in one vmapped program. With
    ``centre_output`` the model is ``out_scale * (f(theta, x) - f(theta_0, x))``
    (:func:`itlin_core.models.centred`), which starts from the zero function whatever the scale."""

    d: int
    n_train: int
    n_test: int
    width: int
    steps: int
    eval_every: int
    Ks: tuple
    out_scale: float = 0.1
    lr_factor: float = 0.3
    centre_output: bool = False
    seed: int = 0


IL_TOY = {
    "smoke": ILToyConfig(d=16, n_train=128, n_test=1000, width=64, steps=2000, eval_every=500,
                         Ks=(1, 100, None)),
    "book": ILToyConfig(d=16, n_train=256, n_test=2000, width=128, steps=8000, eval_every=200,
                        Ks=(1, 10, 100, 1000, 4000, None)),
}


def il_toy_config(preset: str | None = None) -> ILToyConfig:
    return _per_preset(IL_TOY, preset)


def il_toy_problem(cfg: ILToyConfig):
    """``(model, params0, data, lr)`` for :class:`ILToyConfig`."""
    data = _data.single_index(jax.random.PRNGKey(cfg.seed), cfg.n_train, cfg.n_test, cfg.d, "abs")
    if cfg.centre_output:
        base = mlp([cfg.d, cfg.width, cfg.width, 1], "relu")
        params0 = base.init(jax.random.PRNGKey(cfg.seed + 1))
        model = Model(base.init, centred(base.apply, params0, cfg.out_scale))
    else:
        model = mlp([cfg.d, cfg.width, cfg.width, 1], "relu", out_scale=cfg.out_scale)
        params0 = model.init(jax.random.PRNGKey(cfg.seed + 1))
    lam_max = float(jnp.linalg.eigvalsh(empirical_ntk(model.apply, params0, data["x_train"]))[-1])
    return model, params0, data, cfg.lr_factor / lam_max


def run_il_sweep(cfg: ILToyConfig, Ks: Sequence | None = None, progress=None) -> dict:
    """Train one IL run per K (vmapped: one compiled program) and evaluate the network and
    its linearised proxy on train and test data every ``eval_every`` steps. Returns the
    :func:`itlin_core.train` history (arrays with a trailing run axis over K) plus ``"Ks"``,
    ``"lr"`` and ``"feature_updates"`` (relinearisations per run)."""
    Ks = tuple(cfg.Ks if Ks is None else Ks)
    model, params0, data, lr = il_toy_problem(cfg)
    opt = optax.sgd(lr)
    step, periods = make_il_sweep_step(model.apply, squared_error, opt, Ks)
    states = replicate(init_il_state(params0, opt), len(Ks))
    eval_fn = jax.vmap(make_il_eval(model.apply,
                                    {"train": (data["x_train"], data["y_train"]),
                                     "test": (data["x_test"], data["y_test"])},
                                    {"rmse": rmse}))
    _, hist = train(step, states, (data["x_train"], data["y_train"]), cfg.steps, eval_fn=eval_fn,
                    eval_every=cfg.eval_every, progress=progress, desc=f"IL sweep over {len(Ks)} values of K")
    hist["Ks"] = Ks
    hist["lr"] = lr
    hist["feature_updates"] = np.array([cfg.steps if k == 1 else
                                        (1 if k is None or k == math.inf else -(-cfg.steps // int(k)))
                                        for k in Ks])
    return hist


def k_label(K) -> str:
    """``"K=1"``, ``"K=1e3"``, ``"K=∞"`` for legends."""
    if K is None or K == math.inf:
        return "K=∞"
    K = int(K)
    return f"K={K}" if K < 1000 else f"K=1e{int(round(math.log10(K)))}" if 10 ** round(math.log10(K)) == K else f"K={K}"


__all__ = ["PRESETS", "get_preset", "KernelEvolutionConfig", "kernel_evolution_config", "run_kernel_evolution",
           "ILToyConfig", "il_toy_config", "il_toy_problem", "run_il_sweep", "k_label"]


# ----------------------------------------------------------------------------------------------
# Chapter "From iterative linearisation to Gauss-Newton": the regimes of paper 000 Fig. 1

@dataclasses.dataclass(frozen=True)
class RegimesConfig:
    """A small, well-conditioned over-parameterised regression: ``n_train`` Gaussian inputs in
    ``d`` dimensions with the single-index target ``tanh(3 <w*, x>)`` (``data.single_index``),
    a tanh MLP with two hidden layers of ``width``; full-batch IL with SGD at
    ``lr = lr_factor / lambda_max(NTK at init)`` for ``steps`` steps (enough for every K to fit
    the training data); Gauss-Newton and damped GN iterated ``gn_iterations`` times with
    damping ``lambda = f * lambda_max`` for each ``f`` in ``damping_factors``."""

    d: int
    n_train: int
    n_test: int
    width: int
    steps: int
    Ks: tuple
    damping_factors: tuple
    gn_iterations: int
    lr_factor: float = 0.2
    seed: int = 0


REGIMES = {
    "smoke": RegimesConfig(d=5, n_train=8, n_test=200, width=32, steps=20000, Ks=(1, 3, 3000, None),
                           damping_factors=(1e-3, 1.0, 10.0), gn_iterations=1500),
    "book": RegimesConfig(d=5, n_train=8, n_test=500, width=64, steps=60000,
                          Ks=(1, 3, 10, 30, 100, 300, 1000, 3000, 10000, None),
                          damping_factors=(1e-3, 1e-2, 1e-1, 0.3, 1.0, 3.0, 10.0), gn_iterations=6000),
}


def regimes_config(preset: str | None = None) -> RegimesConfig:
    return _per_preset(REGIMES, preset)


def regimes_problem(cfg: RegimesConfig):
    """``(model, params0, data, lambda_max)`` for :class:`RegimesConfig`."""
    data = _data.single_index(jax.random.PRNGKey(cfg.seed), cfg.n_train, cfg.n_test, cfg.d, "tanh3")
    model = mlp([cfg.d, cfg.width, cfg.width, 1], "tanh")
    params0 = model.init(jax.random.PRNGKey(cfg.seed + 1))
    lam_max = float(jnp.linalg.eigvalsh(empirical_ntk(model.apply, params0, data["x_train"]))[-1])
    return model, params0, data, lam_max


def iterate_gn(apply_fn, params0, x, y, dampings, n_iter: int, ntk_method: str = "implicit"):
    """Run ``n_iter`` (damped) Gauss-Newton steps from ``params0`` for each damping value at once
    (``vmap`` over ``dampings``, ``lax.scan`` over iterations); returns the stacked parameters.
    ``ntk_method="jacobian"`` forms the NTK from explicit Jacobians, faster for tiny models."""

    def run(lam):
        return jax.lax.scan(lambda p, _: (gn_step(apply_fn, p, x, y, damping=lam, ntk_method=ntk_method), None),
                            params0, None, length=n_iter)[0]

    return jax.jit(jax.vmap(run))(jnp.asarray(dampings))


def run_regimes(cfg: RegimesConfig, progress=None) -> dict:
    """Train to convergence with IL for every K (one vmapped program), with undamped GN and with
    damped GN for every damping; return the functions each method converged to on the test
    inputs (``f_il (nK, M)``, ``f_gn (M,)``, ``f_damped (nL, M)``), training RMSEs to confirm
    convergence, and the root-mean-square distances of each converged function to those of
    gradient descent (IL with K = 1) and of Gauss-Newton."""

    model, params0, data, lam_max = regimes_problem(cfg)
    x, y, xt = data["x_train"], data["y_train"], data["x_test"]
    Ks = tuple(cfg.Ks)
    lr = cfg.lr_factor / lam_max
    opt = optax.sgd(lr)
    step, _ = make_il_sweep_step(model.apply, squared_error, opt, Ks)
    states, hist = train(step, replicate(init_il_state(params0, opt), len(Ks)), (x, y), cfg.steps,
                         eval_every=max(1, cfg.steps // 20), progress=progress, desc="IL to convergence, all K")
    proxy = jax.jit(jax.vmap(lambda s, xx: linearise(model.apply, s.anchor)(s.params, xx), in_axes=(0, None)))
    f_il, train_il = proxy(states, xt)[..., 0], jax.vmap(rmse, in_axes=(0, None))(proxy(states, x), y)
    lams = np.asarray(cfg.damping_factors) * lam_max
    p_all = iterate_gn(model.apply, params0, x, y, np.concatenate([[0.0], lams]), cfg.gn_iterations)
    outs = jax.vmap(model.apply, in_axes=(0, None))
    f_all, train_all = outs(p_all, xt)[..., 0], jax.vmap(rmse, in_axes=(0, None))(outs(p_all, x), y)
    f_gd, f_gn = f_il[Ks.index(1)], f_all[0]
    dist = lambda f, g: np.sqrt(np.mean((np.asarray(f) - np.asarray(g)) ** 2, axis=-1))
    return {"Ks": Ks, "lr": lr, "lam_max": lam_max, "dampings": lams, "data": data, "model": model,
            "params0": params0, "f_il": np.asarray(f_il), "f_gn": np.asarray(f_gn), "f_damped": np.asarray(f_all[1:]),
            "train_rmse_il": np.asarray(train_il), "train_rmse_gn": float(train_all[0]),
            "train_rmse_damped": np.asarray(train_all[1:]),
            "il_to_gd": dist(f_il, f_gd), "il_to_gn": dist(f_il, f_gn),
            "damped_to_gd": dist(f_all[1:], f_gd), "damped_to_gn": dist(f_all[1:], f_gn)}


__all__ += ["RegimesConfig", "regimes_config", "regimes_problem", "iterate_gn", "run_regimes"]


def run_first_block(cfg: RegimesConfig, Ks: Sequence[int]) -> dict:
    """One linearisation (paper 000 Lemma 3.2.1): the IL iterate after ``K`` steps from the
    initialisation (before its first refresh) against the undamped Gauss-Newton step, for each
    ``K`` in ``Ks`` (increasing). Returns the measured relative distances
    ``|theta_K - theta_GN| / |theta_GN - theta_0|`` and the same quantity predicted by the
    closed-form gradient flow at ``t = lr * K``."""

    model, params0, data, lam_max = regimes_problem(cfg)
    x, y = data["x_train"], data["y_train"]
    lr = cfg.lr_factor / lam_max
    flat = lambda p: jax.flatten_util.ravel_pytree(p)[0]
    target = flat(gn_step(model.apply, params0, x, y))
    scale = float(jnp.linalg.norm(target - flat(params0)))
    opt = optax.sgd(lr)
    step = make_il_step(model.apply, squared_error, opt, K=None)
    state, done, measured, predicted = init_il_state(params0, opt), 0, [], []
    for K in Ks:
        state, _ = train(step, state, (x, y), int(K) - done, progress="off")
        done = int(K)
        measured.append(float(jnp.linalg.norm(flat(state.params) - target)) / scale)
        theta_t = gradient_flow_params(model.apply, params0, x, y, lr * K)
        predicted.append(float(jnp.linalg.norm(flat(theta_t) - target)) / scale)
    return {"Ks": np.asarray(Ks), "lr": lr, "measured": np.asarray(measured), "flow": np.asarray(predicted)}


__all__ += ["run_first_block"]


# ----------------------------------------------------------------------------------------------
# Chapter "Damping and smoothness on the quintic" (paper 000 Fig. 9 top and middle, App. C.2.3)

@dataclasses.dataclass(frozen=True)
class QuinticConfig:
    """The quintic regression of 000 App. C.2.3 (``data.quintic_data``: 20 training and 1000 test
    points, evenly spaced on [-3.5, 3.5], our choice of interval) fitted by a ReLU MLP with
    ``depth`` hidden layers of ``width`` (000: "5 layer MLP with 50 neurons per layer"; we read it
    as five hidden layers), He-normal weights and N(0, ``b_std``^2) biases (with small biases a
    1-D ReLU net has all its kinks near 0 and cannot fit 20 points), trained by full-batch damped
    Gauss-Newton (000 Alg. 1 with lambda I, step 1) for ``iterations`` steps, from ``n_seeds``
    initialisations, for every damping in ``dampings``. Runs whose final training RMSE exceeds
    ``max_train_rmse`` are removed, as in the paper."""

    n_seeds: int
    iterations: int
    dampings: tuple
    width: int = 50
    depth: int = 5
    b_std: float = 1.0
    max_train_rmse: float = 2.5
    seed: int = 0


QUINTIC = {
    "smoke": QuinticConfig(n_seeds=8, iterations=150, dampings=(1e-3, 1e-1, 10.0, 100.0), width=32),
    "book": QuinticConfig(n_seeds=32, iterations=300, dampings=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)),
}


def quintic_config(preset: str | None = None) -> QuinticConfig:
    return _per_preset(QUINTIC, preset)


def run_quintic(cfg: QuinticConfig) -> dict:
    """Damped GN on the quintic for every (seed, damping) pair in one compiled program (vmap over
    seeds and dampings, ``lax.scan`` over iterations). Returns ``train_rmse`` and ``test_rmse``
    of shape (seeds, dampings), the learnt functions on the test grid ``f_test`` (seeds,
    dampings, 1000), the ``kept`` mask (train RMSE <= ``max_train_rmse``) and the data."""

    data = _data.quintic_data()
    x, y, xt, yt = data["x_train"], data["y_train"], data["x_test"], data["y_test"]
    model = mlp([1] + [cfg.width] * cfg.depth + [1], "relu", b_std=cfg.b_std)
    params0 = jax.vmap(model.init)(jax.random.split(jax.random.PRNGKey(cfg.seed), cfg.n_seeds))

    def one(p, lam):
        p = jax.lax.scan(lambda q, _: (gn_step(model.apply, q, x, y, damping=lam), None),
                         p, None, length=cfg.iterations)[0]
        return rmse(model.apply(p, x), y), model.apply(p, xt)[:, 0]

    train_rmse, f_test = jax.jit(jax.vmap(jax.vmap(one, in_axes=(None, 0)), in_axes=(0, None)))(
        params0, jnp.asarray(cfg.dampings))
    f_test = np.asarray(f_test)
    train_rmse = np.asarray(train_rmse)
    test_rmse = np.sqrt(np.mean((f_test - np.asarray(yt)[:, 0]) ** 2, axis=-1))
    # a run that blew up has non-finite outputs: it counts as not kept, like a high train RMSE
    kept = np.isfinite(train_rmse) & (train_rmse <= cfg.max_train_rmse) & np.isfinite(test_rmse)
    return {"dampings": np.asarray(cfg.dampings), "train_rmse": train_rmse, "test_rmse": test_rmse,
            "f_test": f_test, "kept": kept, "data": data}


__all__ += ["QuinticConfig", "quintic_config", "run_quintic"]


# ----------------------------------------------------------------------------------------------
# Chapter "Feature learning on XOR" (paper 000 Fig. 7, eq. 11)

@dataclasses.dataclass(frozen=True)
class XORConfig:
    """XOR regression (``data.xor``: ``n_train`` noisy corner points, ``y = x1 x2``) with a
    one-hidden-layer ReLU network ``w2^T relu(W1 x + b)`` of ``width`` units, all weights drawn
    with the small scale ``w_std / sqrt(fan_in)`` and zero biases (a small initialisation, so
    that training must move the first-layer features far from where they start). IL with SGD at
    ``lr = lr_factor / lambda_max(NTK at init)`` for ``steps`` steps, one run per K; damped GN
    with ``lambda = f * lambda_max`` for each ``f`` in ``damping_factors``, ``gn_iterations``
    iterations. A run counts as converged when its training RMSE is below ``converged_rmse``."""

    n_train: int
    width: int
    steps: int
    Ks: tuple
    damping_factors: tuple
    gn_iterations: int
    n_test: int = 1000
    w_std: float = 0.2
    lr_factor: float = 0.1
    converged_rmse: float = 0.05
    seed: int = 0


XOR = {
    "smoke": XORConfig(n_train=100, width=64, steps=8000, Ks=(1, 1000, None), damping_factors=(1e-4, 0.3),
                       gn_iterations=300),
    "book": XORConfig(n_train=200, width=100, steps=30000, Ks=(1, 30, 300, 3000, None),
                      damping_factors=(1e-4, 1e-3, 1e-2, 1e-1, 0.3), gn_iterations=500),
}


def xor_config(preset: str | None = None) -> XORConfig:
    return _per_preset(XOR, preset)


def run_xor(cfg: XORConfig, progress=None) -> dict:
    """Train on XOR with IL for every K (vmapped) and with damped GN for every damping (vmapped);
    return for every run the first-layer features ``W1`` (rows, shape (runs, width, 2)), the
    output weights ``w2`` (runs, width), the feature alignment of 000 eq. (11), training and test
    RMSE, and the same for the initialisation."""

    x, y = _data.xor(jax.random.PRNGKey(cfg.seed), cfg.n_train)
    xt, yt = _data.xor(jax.random.PRNGKey(cfg.seed + 1), cfg.n_test)
    model = mlp([2, cfg.width, 1], "relu", w_std=cfg.w_std)
    params0 = model.init(jax.random.PRNGKey(cfg.seed + 2))
    lam_max = float(jnp.linalg.eigvalsh(empirical_ntk(model.apply, params0, x))[-1])
    opt = optax.sgd(cfg.lr_factor / lam_max)
    Ks = tuple(cfg.Ks)
    step, _ = make_il_sweep_step(model.apply, squared_error, opt, Ks)
    # a large-K run may diverge after a refresh; it is recorded (NaN) and reported as not converged
    states, _ = train(step, replicate(init_il_state(params0, opt), len(Ks)), (x, y), cfg.steps,
                      eval_every=max(1, cfg.steps // 20), progress=progress, on_nonfinite="ignore",
                      desc="IL on XOR, all K")
    proxy = jax.jit(jax.vmap(lambda s, xx: linearise(model.apply, s.anchor)(s.params, xx), in_axes=(0, None)))
    # P = 4 * width + 1 parameters and N = n_train points: explicit Jacobians are cheapest (measured
    # about 5x faster than the implicit NTK here)
    gn_params = iterate_gn(model.apply, params0, x, y, np.asarray(cfg.damping_factors) * lam_max,
                           cfg.gn_iterations, ntk_method="jacobian")
    outs = jax.vmap(model.apply, in_axes=(0, None))
    errs = jax.vmap(rmse, in_axes=(0, None))

    def summary(params, f_train, f_test):
        w1 = np.asarray(params[0]["w"]).swapaxes(-1, -2)  # (runs, width, 2): one row per feature
        return {"w1": w1, "w2": np.asarray(params[1]["w"])[..., 0],
                "alignment": np.asarray(jax.vmap(feature_alignment, in_axes=(0, None))(w1, _data.XOR_CENTRES)),
                "train_rmse": np.asarray(errs(f_train, y)), "test_rmse": np.asarray(errs(f_test, yt))}

    il = summary(states.params, proxy(states, x), proxy(states, xt))
    gn = summary(gn_params, outs(gn_params, x), outs(gn_params, xt))
    for d in (il, gn):
        d["converged"] = np.isfinite(d["train_rmse"]) & (d["train_rmse"] < cfg.converged_rmse)
    init = summary(replicate(params0, 1), outs(replicate(params0, 1), x), outs(replicate(params0, 1), xt))
    return {"Ks": Ks, "dampings": np.asarray(cfg.damping_factors), "lam_max": lam_max, "il": il, "gn": gn,
            "init": init, "x_train": np.asarray(x), "y_train": np.asarray(y)}


__all__ += ["XORConfig", "xor_config", "run_xor"]
