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
from .iterative import _progress_bar
from .mean_field import hidden_features, make_gd_step, make_gn_step, mean_field_net, mean_field_ntk
from .metrics import feature_alignment, kernel_distance, refit_test_loss, weighted_cosine_distance
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


# ----------------------------------------------------------------------------------------------
# Chapters "Gauss-Newton in the mean-field regime" (paper 003): teacher-student regression

@dataclasses.dataclass(frozen=True)
class TeacherStudentConfig:
    """Paper 003 §5.1 at a chosen scale: ``n_train`` Gaussian inputs in ``d`` dimensions, targets
    from a teacher with ``m_star`` units (``data.teacher_student``), ``n_test`` test points; a
    mean-field student (``mean_field.mean_field_net``) of ``width`` units, hidden weights
    ``N(0, tau0^2)``, last layer 0. GN (damping ``max(floor, alpha sigma_min)``) and GD with
    constant step sizes, paper 003's convention (loss ``1/(2N) sum (f - y)^2``). A run stops
    when its training loss falls below ``stop_loss`` or after ``gn_iterations`` /
    ``gd_iterations`` steps; metrics are recorded at ``n_evals`` log-spaced iterations.
    ``tau0s`` and the step-size grids ``gn_lrs``/``gd_lrs`` are the sweeps of 003 Fig. 1 (every
    step size is run at every ``tau0``); the smallest ``tau0`` is Fig. 1 right's and Fig. 2's.
    ``n_trains`` are the training-set sizes of Fig. 5, run at ``scaling_tau0s`` with the step-size
    grids ``scaling_gn_lrs``/``scaling_gd_lrs``; ``betas`` the SiLU temperatures of Figs. 6-7
    (run at the smallest ``tau0`` with ``gn_lrs`` and ``silu_gd_lrs``, or ``gd_lrs`` if empty);
    ``compare_tau0`` the initial scale of Fig. 7's ReLU-against-SiLU(beta = 1) comparison."""

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
                                  silu_gd_lrs=(10.0, 100.0)),
    "book": TeacherStudentConfig(n_train=100, width=1000, n_test=2000, gn_iterations=3000, gd_iterations=20000,
                                 tau0s=(1e-3, 1e-1, 10.0), gn_lrs=(1e-2, 1.0, 100.0),
                                 gd_lrs=(1.0, 10.0, 100.0, 1000.0),
                                 n_trains=(25, 50, 100, 200), scaling_tau0s=(1e-3, 1.0),
                                 scaling_gn_lrs=(1.0,), scaling_gd_lrs=(100.0, 1000.0), betas=(1.0, 1e6),
                                 silu_gd_lrs=(100.0, 1000.0)),
    "paper": TeacherStudentConfig(n_train=500, width=5000, n_test=10000, gn_iterations=100_000,
                                  gd_iterations=1_000_000, n_evals=60,
                                  tau0s=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0),
                                  gn_lrs=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0),
                                  gd_lrs=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0),
                                  n_trains=(100, 200, 500, 1000, 1500), scaling_tau0s=(1e-3, 1.0),
                                  scaling_gn_lrs=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0),
                                  scaling_gd_lrs=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0), betas=(1.0, 1e6)),
}


def teacher_student_config(preset: str | None = None) -> TeacherStudentConfig:
    return _per_preset(TEACHER_STUDENT, preset)


def _require_x64(what: str):
    if not jax.config.jax_enable_x64:
        raise ValueError(
            f"{what} needs 64-bit JAX (DESIGN §3: with tau0 = 1e-3 the hidden features are ~1e-3 "
            "and float32 loses the digits of the least-squares re-fits): call "
            "jax.config.update('jax_enable_x64', True) at the start of the notebook.")


def teacher_student_problem(cfg: TeacherStudentConfig, n_train: int | None = None,
                            activation: str | None = None, beta: float | None = None) -> dict:
    """The data of one teacher-student problem. The teacher and the test set are the same for
    every ``n_train`` (they come from the same keys); the training inputs are drawn afresh."""
    _require_x64("the teacher-student experiments")
    n = cfg.n_train if n_train is None else n_train
    return _data.teacher_student(jax.random.PRNGKey(cfg.seed), n, cfg.n_test, cfg.d, cfg.m_star,
                                 activation or cfg.activation, cfg.beta if beta is None else beta)


def teacher_student_metrics(params, data: dict, activation: str = "relu", beta: float = 1.0) -> dict:
    """003 §5.2's metrics of one student: train and test loss (``1/(2N) sum (f - y)^2``), the
    test loss after re-fitting the last layer on the frozen hidden features by eq. (8)
    (Test-LRfit), the weighted cosine distance to the teacher (eq. (9)) and the smallest
    eigenvalue of the NTK matrix ``A_w = J J^T`` (003 Fig. 4 right)."""
    u, v = params["u"], params["v"]
    m = v.shape[0]
    phi = hidden_features(u, data["x_train"], activation, beta) / m
    phi_t = hidden_features(u, data["x_test"], activation, beta) / m
    half_mse = lambda f, y: 0.5 * jnp.mean((f - y) ** 2)
    ntk = mean_field_ntk(params, data["x_train"], activation=activation, beta=beta)
    return {"train_loss": half_mse(phi @ v, data["y_train"]), "test_loss": half_mse(phi_t @ v, data["y_test"]),
            "lrfit": refit_test_loss(phi, data["y_train"], phi_t, data["y_test"]),
            "wcd": weighted_cosine_distance(u, data["u_star"]),
            "sigma_min": jnp.linalg.eigvalsh(0.5 * (ntk + ntk.T))[0]}


def eval_schedule(iterations: int, n_evals: int) -> np.ndarray:
    """Iterations ``0 = i_0 < i_1 < ... = iterations`` at which metrics are recorded,
    roughly log-spaced (003 Fig. 2 plots against log-iterations)."""
    pts = np.unique(np.round(np.logspace(0, np.log10(max(iterations, 1)), n_evals)).astype(int))
    return np.concatenate([[0], pts[pts <= iterations]])


def run_teacher_student(cfg: TeacherStudentConfig, method: str, tau0s, lrs, *, data: dict | None = None,
                        activation: str | None = None, beta: float | None = None, iterations: int | None = None,
                        fast: bool = True, progress=None) -> dict:
    """Train one student per ``(tau0s[g], lrs[g])`` pair (equal-length sequences) with ``method``
    ``"gn"`` or ``"gd"``, all in one compiled program (``vmap`` over the pairs, a ``fori_loop``
    between evaluations). Every student starts from the same standard-normal draw scaled by
    its ``tau0`` (003 uses one seed; so does this). A student stops (its parameters freeze) once
    its training loss is below ``cfg.stop_loss`` or a step overflows (divergence).

    Returns a dict of numpy arrays: ``iters`` ``(E,)``; ``train_loss``, ``test_loss``,
    ``lrfit``, ``wcd``, ``sigma_min`` of shape ``(E, G)``; ``stopped_at`` ``(G,)`` (the
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
    act = activation or cfg.activation
    beta = cfg.beta if beta is None else beta
    data = teacher_student_problem(cfg, activation=act, beta=beta) if data is None else data
    x, y = data["x_train"], data["y_train"]
    net = mean_field_net(cfg.d, cfg.width, 1.0, act, beta)
    if method == "gn":
        step = make_gn_step(net, x, y, alpha=cfg.alpha, floor=cfg.floor, fast=fast, activation=act, beta=beta)
    else:
        step = make_gd_step(net, x, y)
    budget = iterations or (cfg.gn_iterations if method == "gn" else cfg.gd_iterations)
    z = net.init(jax.random.PRNGKey(cfg.seed + 1))
    params = {"u": jnp.asarray(tau0s)[:, None, None] * z["u"], "v": jnp.zeros((tau0s.size, cfg.width))}
    loss = lambda p: 0.5 * jnp.mean((net.apply(p, x) - y) ** 2)

    finite = lambda p: jnp.all(jnp.isfinite(p["u"])) & jnp.all(jnp.isfinite(p["v"]))

    def body(_, c):
        p, lr, done, diverged, stopped, it = c
        hit = jax.vmap(loss)(p) < cfg.stop_loss
        new = jax.vmap(step)(p, lr)
        bad = ~jax.vmap(finite)(new)          # a step that overflowed: keep the last finite iterate
        hit = (hit | bad) & ~done
        stopped = jnp.where(hit, it, stopped)
        diverged = diverged | (bad & ~done)
        done = done | hit
        keep = lambda a, b: jnp.where(done.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)
        return jax.tree_util.tree_map(keep, p, new), lr, done, diverged, stopped, it + 1

    advance = jax.jit(lambda c, n: jax.lax.fori_loop(0, n, body, c))
    # lax.map (a loop), not vmap: batched float64 eigh inside this program hung XLA:CPU here
    # (jax 0.10, 2-core machine); evaluation is a small part of the cost.
    evaluate = jax.jit(lambda ps: jax.lax.map(lambda p: teacher_student_metrics(p, data, act, beta), ps))
    sched = eval_schedule(budget, cfg.n_evals)
    g = tau0s.size
    diverged, stopped = np.zeros(g, bool), np.full(g, budget)
    active = np.arange(g)             # runs still training; finished ones are dropped from the batch
    carry = (params, jnp.asarray(lrs), jnp.zeros(g, bool), jnp.zeros(g, bool), jnp.full(g, budget), 0)
    rows = [jax.device_get(evaluate(params))]
    iters = [0]
    bar = _progress_bar(budget, f"{method.upper()}, {g} runs", progress)
    for a, b in zip(sched[:-1], sched[1:]):
        carry = advance(carry[:5] + (jnp.asarray(a),), int(b - a))
        ev = jax.device_get(evaluate(carry[0]))
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
            carry = jax.tree_util.tree_map(lambda x: x[keep], carry[:5]) + (carry[5],)
    if bar is not None:
        bar.close()
    out = {"iters": np.asarray(iters), "tau0": tau0s, "lr": lrs, "method": method}
    for key in rows[0]:
        out[key] = np.stack([np.asarray(r[key]) for r in rows])
    out["stopped_at"], out["diverged"] = stopped, diverged
    for key in rows[0]:          # a diverged run has no final metrics: NaN, never a stale value
        out["final_" + key] = np.where(diverged, np.nan, out[key][-1])
    return out


def random_features_baseline(cfg: TeacherStudentConfig, tau0s, *, data: dict | None = None,
                             activation: str | None = None, beta: float | None = None) -> dict:
    """003's RF baseline (eq. (8)): the minimum-norm least-squares last layer on the hidden
    features at initialisation, for each ``tau0``. Its test loss is Test-LRfit at iteration 0."""
    act = activation or cfg.activation
    beta = cfg.beta if beta is None else beta
    data = teacher_student_problem(cfg, activation=act, beta=beta) if data is None else data
    u = mean_field_net(cfg.d, cfg.width, 1.0, act, beta).init(jax.random.PRNGKey(cfg.seed + 1))["u"]
    feats = lambda t, x: hidden_features(t * u, x, act, beta) / cfg.width
    res = [float(refit_test_loss(feats(t, data["x_train"]), data["y_train"], feats(t, data["x_test"]), data["y_test"]))
           for t in np.asarray(tau0s, float)]
    return {"tau0": np.asarray(tau0s, float), "test_loss": np.asarray(res)}


def _best_final(run: dict, metric: str = "final_test_loss") -> dict:
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
    """003 Fig. 5 at ``cfg``'s scale: for every training-set size in ``cfg.n_trains``, GN and GD
    over ``scaling_tau0s x scaling_*_lrs`` and RF; for each method and ``tau0`` the final metrics
    at the step size with the best final test loss (as the paper reports). Returns
    ``{"n_trains", "tau0s", "gn", "gd"`` (arrays ``(len(tau0s), len(n_trains))`` per metric,
    plus ``lr``) and ``"rf"`` (test loss, same shape)}``."""
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
            per[method].append(_best_final(run))
    for method in ("gn", "gd"):
        keys = per[method][0][float(tau0s[0])].keys()
        res[method] = {k: np.array([[per[method][j][float(t)][k] for j in range(len(cfg.n_trains))] for t in tau0s])
                       for k in keys}
    res["rf"] = np.asarray(rf).T
    return res


def run_silu(cfg: TeacherStudentConfig, progress=None) -> dict:
    """003 Figs. 6-7 at ``cfg``'s scale: with a SiLU teacher and student of each temperature in
    ``cfg.betas``, GN over ``gn_lrs`` and GD over ``silu_gd_lrs`` (``gd_lrs`` if empty) at the
    smallest ``tau0``, and RF.
    Returns ``{beta: {"gn": run, "gd": run, "rf": rf_test_loss}}``."""
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
    """003 Fig. 7 at ``cfg``'s scale: the step-size sweeps (GN over ``gn_lrs``, GD over
    ``silu_gd_lrs`` or ``gd_lrs``) at ``tau0 = cfg.compare_tau0``, once with ReLU and once with
    SiLU at ``beta = 1`` (teacher and student alike). Returns ``{"relu": entry, "silu": entry}``
    with entries as in :func:`run_silu`."""
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


__all__ += ["TeacherStudentConfig", "teacher_student_config", "teacher_student_problem", "teacher_student_metrics",
            "eval_schedule", "run_teacher_student", "random_features_baseline", "run_sample_size", "run_silu",
            "run_relu_vs_silu"]


# ----------------------------------------------------------------------------------------------
# Chapter "A real-image stand-in: CNNs on 8x8 digits" (paper 000 Figs. 2-5 at CPU scale)

from .losses import accuracy as _accuracy, softmax_cross_entropy as _softmax_ce  # noqa: E402
from .metrics import linear_probe as _linear_probe  # noqa: E402
from .iterative import minibatches as _minibatches  # noqa: E402
from .models import small_cnn as _small_cnn  # noqa: E402
from .iterative import _progress_bar as _digits_progress_bar  # noqa: E402


@dataclasses.dataclass(frozen=True)
class DigitsConfig:
    """scikit-learn's bundled 8x8 handwritten digits (1797 images, 10 classes; shipped inside the
    package, no download), split once at random into ``n_test`` test images and a training pool
    of the rest; pixels (0-16) divided by 16, then standardised with the training pool's mean and
    standard deviation (two scalars). A ``small_cnn`` (two 3x3 conv blocks with ``channels``,
    dense ``dense``) trained by IL with minibatch SGD (``batch_size``, learning rate ``lr``,
    momentum ``momentum``) on the mean softmax cross-entropy for ``steps`` steps, one run per K in
    ``Ks`` (one vmapped program), evaluated every ``eval_every`` steps: network and proxy
    accuracy on train and test, and linear probes (ridge ``probe_ridge``, fitted on
    ``probe_train`` training images) on both conv blocks' features. Data-subset scaling
    (000 Fig. 4): ``scaling_sizes`` training-set sizes, ``scaling_Ks``, ``scaling_steps`` each."""

    steps: int
    eval_every: int
    Ks: tuple
    scaling_sizes: tuple
    scaling_Ks: tuple
    scaling_steps: int
    n_test: int = 497
    batch_size: int = 64
    lr: float = 0.02
    momentum: float = 0.0
    channels: tuple = (8, 16)
    dense: int = 32
    probe_train: int = 100
    probe_ridge: float = 1e-3
    seed: int = 0


DIGITS = {
    "smoke": DigitsConfig(steps=600, eval_every=100, Ks=(1, 100, None), scaling_sizes=(100, 400),
                          scaling_Ks=(1, None), scaling_steps=400),
    "book": DigitsConfig(steps=4000, eval_every=100, Ks=(1, 10, 100, 1000, None),
                         scaling_sizes=(50, 100, 200, 400, 800, 1300), scaling_Ks=(1, 100, None),
                         scaling_steps=2000),
}


def digits_config(preset: str | None = None) -> DigitsConfig:
    return _per_preset(DIGITS, preset)


def digits_data(cfg: DigitsConfig) -> dict:
    """The preprocessed digits (NHWC float32, ``(N, 8, 8, 1)``) with integer labels:
    ``x_train, y_train`` (the training pool, in a fixed random order, so the first ``n`` are a
    random subset of size ``n``), ``x_test, y_test``, and the ``mean``/``std`` used."""
    try:
        from sklearn.datasets import load_digits  # the images ship inside scikit-learn
    except ImportError:
        raise ImportError("the digits chapter needs scikit-learn (its 8x8 digits ship inside the "
                          "package): pip install scikit-learn") from None

    raw = load_digits()
    images = np.asarray(raw.images, np.float32) / 16.0
    labels = np.asarray(raw.target, np.int32)
    perm = np.asarray(jax.random.permutation(jax.random.PRNGKey(cfg.seed), len(labels)))
    test, pool = perm[:cfg.n_test], perm[cfg.n_test:]
    mean, std = float(images[pool].mean()), float(images[pool].std())
    prep = lambda idx: jnp.asarray(((images[idx] - mean) / std)[..., None])
    return {"x_train": prep(pool), "y_train": jnp.asarray(labels[pool]), "x_test": prep(test),
            "y_test": jnp.asarray(labels[test]), "mean": mean, "std": std}


def _digits_optimizer(cfg: DigitsConfig):
    return optax.sgd(cfg.lr, momentum=cfg.momentum or None)


def run_digits_sweep(cfg: DigitsConfig, Ks: Sequence | None = None, progress=None, data: dict | None = None) -> dict:
    """IL on the digits for every K at once (:func:`itlin_core.make_il_sweep_step`), minibatch
    SGD, evaluated every ``eval_every`` steps. Returns the :func:`itlin_core.train` history
    (arrays ``(evals, runs)``) with ``{train,test}_accuracy_{network,proxy}``,
    ``probe{1,2}_test_accuracy`` (linear probes on the network's first/second block features),
    and ``Ks``, ``feature_updates``, ``n_params``, the final ``state`` (stacked over K), the
    initial ``params0``, the ``model`` and the ``data``."""
    Ks = tuple(cfg.Ks if Ks is None else Ks)
    data = digits_data(cfg) if data is None else data
    model = _small_cnn(10, (8, 8, 1), cfg.channels, cfg.dense)
    params0 = model.init(jax.random.PRNGKey(cfg.seed + 1))
    opt = _digits_optimizer(cfg)
    step, _ = make_il_sweep_step(model.apply, _softmax_ce, opt, Ks)
    xtr, ytr, xte, yte = data["x_train"], data["y_train"], data["x_test"], data["y_test"]
    il_eval = make_il_eval(model.apply, {"train": (xtr, ytr), "test": (xte, yte)}, {"accuracy": _accuracy})
    xp, yp = xtr[:cfg.probe_train], ytr[:cfg.probe_train]

    def eval_fn(state):
        out = il_eval(state)
        for layer in (1, 2):
            probe = _linear_probe(model.features(state.params, xp, layer), yp,
                                  model.features(state.params, xte, layer), yte,
                                  ridge=cfg.probe_ridge, num_classes=10)
            out[f"probe{layer}_test_accuracy"] = probe["test_accuracy"]
        return out

    batches = _minibatches(jax.random.PRNGKey(cfg.seed + 2), xtr, ytr, cfg.batch_size)
    states, hist = train(step, replicate(init_il_state(params0, opt), len(Ks)), batches, cfg.steps,
                         eval_fn=jax.vmap(eval_fn), eval_every=cfg.eval_every, progress=progress,
                         desc=f"digits: IL sweep over {len(Ks)} values of K")
    hist.update(Ks=Ks, state=states, params0=params0, model=model, data=data)
    hist["feature_updates"] = np.array([1 if k is None or k == math.inf else -(-cfg.steps // int(k)) for k in Ks])
    hist["n_params"] = sum(int(a.size) for a in jax.tree_util.tree_leaves(params0))
    return hist


def run_digits_scaling(cfg: DigitsConfig, progress=None, data: dict | None = None) -> dict:
    """Data-subset scaling (000 Fig. 4): for each size ``n`` in ``scaling_sizes``, train on the
    first ``n`` images of the (shuffled) training pool with every K in ``scaling_Ks`` (one
    vmapped program per size) for ``scaling_steps`` steps. Returns ``sizes``, ``Ks`` and arrays
    ``(sizes, Ks)``: ``final_test_accuracy`` and ``best_test_accuracy`` (over the evaluations,
    the paper's "optimal early stopping") of the model being trained (the proxy), and
    ``final_train_accuracy``."""
    data = digits_data(cfg) if data is None else data
    Ks = tuple(cfg.scaling_Ks)
    rows = {"final_test_accuracy": [], "best_test_accuracy": [], "final_train_accuracy": []}
    bar = _digits_progress_bar(len(cfg.scaling_sizes), "digits: data-subset scaling", progress)
    try:
        for n in cfg.scaling_sizes:
            sub = dict(data, x_train=data["x_train"][:n], y_train=data["y_train"][:n])
            c = dataclasses.replace(cfg, steps=cfg.scaling_steps, eval_every=max(1, cfg.scaling_steps // 10),
                                    batch_size=min(cfg.batch_size, n), probe_train=min(cfg.probe_train, n))
            h = run_digits_sweep(c, Ks, progress="off", data=sub)
            rows["final_test_accuracy"].append(h["test_accuracy_proxy"][-1])
            rows["best_test_accuracy"].append(h["test_accuracy_proxy"].max(axis=0))
            rows["final_train_accuracy"].append(h["train_accuracy_proxy"][-1])
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return {"sizes": np.asarray(cfg.scaling_sizes), "Ks": Ks, **{k: np.stack(v) for k, v in rows.items()}}


__all__ += ["DigitsConfig", "digits_config", "digits_data", "run_digits_sweep", "run_digits_scaling"]
