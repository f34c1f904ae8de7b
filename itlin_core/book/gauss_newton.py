"""Chapter "From iterative linearisation to Gauss-Newton": the regimes of Goldwaser and Ge's
Fig. 1 (IL for every K, undamped and damped Gauss-Newton, all trained to convergence) and one
linearisation against the closed-form gradient flow (their Lemma 3.2.1)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax

import itlin_core as ic

from .common import per_preset, proxy_outputs


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
    """The preset's :class:`RegimesConfig` (:func:`~itlin_core.book.common.per_preset`).

    Examples:
      >>> cfg = regimes_config("smoke")
      >>> cfg.d, cfg.n_train, cfg.Ks, cfg.damping_factors
      (5, 8, (1, 3, 3000, None), (0.001, 1.0, 10.0))
    """
    return per_preset(REGIMES, preset)


def regimes_problem(cfg: RegimesConfig):
    """``(model, params0, data, lambda_max)`` for :class:`RegimesConfig`.

    Examples:
      >>> cfg = dataclasses.replace(regimes_config("smoke"), n_test=10, width=8)
      >>> model, params0, data, lam_max = regimes_problem(cfg)
      >>> data["x_train"].shape, data["x_test"].shape, model.apply(params0, data["x_train"]).shape, lam_max > 0
      ((8, 5), (10, 5), (8, 1), True)
    """
    data = ic.data.single_index(jax.random.key(cfg.seed), cfg.n_train, cfg.n_test, cfg.d, "tanh3")
    model = ic.mlp([cfg.d, cfg.width, cfg.width, 1], "tanh")
    params0 = model.init(jax.random.key(cfg.seed + 1))
    return model, params0, data, ic.max_ntk_eigenvalue(model.apply, params0, data["x_train"])


def run_regimes(cfg: RegimesConfig, progress=None) -> dict:
    """Train to convergence with IL for every K (one vmapped program), with undamped GN and with
    damped GN for every damping; return the functions each method converged to on the test
    inputs (``f_il (nK, M)``, ``f_gn (M,)``, ``f_damped (nL, M)``), training RMSEs to confirm
    convergence, and the root-mean-square distances of each converged function to those of
    gradient descent (IL with K = 1) and of Gauss-Newton.

    Examples:
      A tiny network, 20 IL steps and 2 GN iterations (the chapter: ``run_regimes(cfg)``):

      >>> cfg = dataclasses.replace(regimes_config("smoke"), n_test=10, width=8, steps=20, Ks=(1, None),
      ...                           damping_factors=(1.0,), gn_iterations=2)
      >>> r = run_regimes(cfg, progress="off")
      >>> r["f_il"].shape, r["f_gn"].shape, r["f_damped"].shape, float(r["il_to_gd"][0])   # K = 1 is GD
      ((2, 10), (10,), (1, 10), 0.0)
    """

    model, params0, data, lam_max = regimes_problem(cfg)
    x, y, xt = data["x_train"], data["y_train"], data["x_test"]
    Ks = tuple(cfg.Ks)
    lr = cfg.lr_factor / lam_max
    opt = optax.sgd(lr)
    step, _ = ic.make_il_sweep_step(model.apply, ic.squared_error, opt, Ks)
    states, _ = ic.train(step, ic.replicate(ic.init_il_state(params0, opt), len(Ks)), ic.full_batch(x, y), cfg.steps,
                         evaluate=ic.Evaluation(every=max(1, cfg.steps // 20)),
                         progress=ic.Progress(progress, "IL to convergence, all K"))
    errors = jax.vmap(ic.rmse, in_axes=(0, None))
    f_il, train_il = proxy_outputs(model.apply, states, xt)[..., 0], errors(proxy_outputs(model.apply, states, x), y)
    lams = np.asarray(cfg.damping_factors) * lam_max
    gn = ic.sharded_vmap(lambda lam: ic.gn_iterate(model.apply, params0, x, y, cfg.gn_iterations, damping=lam))
    p_all = gn(jnp.asarray(np.concatenate([[0.0], lams])))
    outs = jax.vmap(model.apply, in_axes=(0, None))
    f_all, train_all = outs(p_all, xt)[..., 0], errors(outs(p_all, x), y)
    f_gd, f_gn = f_il[Ks.index(1)], f_all[0]
    dist = lambda f, g: np.sqrt(np.mean((np.asarray(f) - np.asarray(g)) ** 2, axis=-1))
    return {"Ks": Ks, "lr": lr, "lam_max": lam_max, "dampings": lams, "data": data, "model": model,
            "params0": params0, "f_il": np.asarray(f_il), "f_gn": np.asarray(f_gn), "f_damped": np.asarray(f_all[1:]),
            "train_rmse_il": np.asarray(train_il), "train_rmse_gn": float(train_all[0]),
            "train_rmse_damped": np.asarray(train_all[1:]),
            "il_to_gd": dist(f_il, f_gd), "il_to_gn": dist(f_il, f_gn),
            "damped_to_gd": dist(f_all[1:], f_gd), "damped_to_gn": dist(f_all[1:], f_gn)}


def run_first_block(cfg: RegimesConfig, Ks: Sequence[int], precision: str = "float32") -> dict:
    """One linearisation (Goldwaser and Ge, Lemma 3.2.1): the IL iterate after ``K`` steps from
    the initialisation (before its first refresh) against the undamped Gauss-Newton step, for
    each ``K`` in ``Ks`` (increasing). Returns the measured relative distances
    ``|theta_K - theta_GN| / |theta_GN - theta_0|`` and the same quantity predicted by the
    closed-form gradient flow at ``t = lr * K``.

    ``precision="float64"`` runs the same problem (the same data and initialisation, made in
    float32 as usual and then cast) in float64 arithmetic, inside ``jax.enable_x64``: in float32
    the measured distance cannot fall below the rounding errors of the iterate and of the
    Gauss-Newton step (whose kernel solve amplifies them by the kernel's condition number).

    Examples:
      On a tiny network the measured distances follow the flow's, down from 1 at K = 0:

      >>> b = run_first_block(dataclasses.replace(regimes_config("smoke"), n_test=10, width=8), [1, 10])
      >>> b["Ks"].tolist(), bool(np.all(b["measured"] < 1)), bool(np.all(abs(b["measured"] - b["flow"]) < 0.05))
      ([1, 10], True, True)

      Only float32 and float64 are offered:

      >>> run_first_block(regimes_config("smoke"), [1], precision="half")
      Traceback (most recent call last):
      ...
      ValueError: precision must be 'float32' or 'float64', got 'half'.
    """

    if precision not in ("float32", "float64"):
        raise ValueError(f"precision must be 'float32' or 'float64', got {precision!r}.")
    model, params0, data, lam_max = regimes_problem(cfg)
    if precision == "float64":
        with jax.enable_x64(True):
            cast = lambda t: jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), t)
            return _first_block(model, cast(params0), cast(data["x_train"]), cast(data["y_train"]),
                                cfg.lr_factor / lam_max, Ks)
    return _first_block(model, params0, data["x_train"], data["y_train"], cfg.lr_factor / lam_max, Ks)


def _first_block(model, params0, x, y, lr, Ks):
    flat = lambda p: jax.flatten_util.ravel_pytree(p)[0]
    target = flat(ic.gn_step(model.apply, params0, x, y))
    scale = float(jnp.linalg.norm(target - flat(params0)))
    opt = optax.sgd(lr)
    step = ic.make_il_step(model.apply, ic.squared_error, opt, K=None)
    state, done, measured, predicted = ic.init_il_state(params0, opt), 0, [], []
    for K in Ks:
        state, _ = ic.train(step, state, ic.full_batch(x, y), int(K) - done, progress="off")
        done = int(K)
        measured.append(float(jnp.linalg.norm(flat(state.params) - target)) / scale)
        theta_t = ic.gradient_flow_params(model.apply, params0, x, y, lr * K)
        predicted.append(float(jnp.linalg.norm(flat(theta_t) - target)) / scale)
    return {"Ks": np.asarray(Ks), "lr": lr, "measured": np.asarray(measured), "flow": np.asarray(predicted)}


__all__ = ["RegimesConfig", "REGIMES", "regimes_config", "regimes_problem", "run_regimes", "run_first_block"]
