"""Chapter "Feature learning on XOR" (Goldwaser and Ge, Fig. 7 and eq. (11)): the first-layer
features that IL (for every K) and damped Gauss-Newton (for every damping) end with."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import optax

import itlin_core as ic

from .common import per_preset, proxy_outputs


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
    """The preset's :class:`XORConfig` (:func:`~itlin_core.book.common.per_preset`).

    Examples:
      >>> cfg = xor_config("smoke")
      >>> cfg.n_train, cfg.width, cfg.steps, cfg.Ks, cfg.damping_factors
      (100, 64, 8000, (1, 1000, None), (0.0001, 0.3))
    """
    return per_preset(XOR, preset)


def xor_setup(cfg: XORConfig) -> tuple:
    """``(x, y, x_test, y_test, model, params0, lam_max)``: the data, the network and its
    initialisation, and the largest eigenvalue of the NTK at initialisation on the training
    inputs (the learning rate is ``cfg.lr_factor / lam_max``)."""
    x, y = ic.data.xor(jax.random.key(cfg.seed), cfg.n_train)
    xt, yt = ic.data.xor(jax.random.key(cfg.seed + 1), cfg.n_test)
    model = ic.mlp([2, cfg.width, 1], "relu", w_std=cfg.w_std)
    params0 = model.init(jax.random.key(cfg.seed + 2))
    return x, y, xt, yt, model, params0, ic.max_ntk_eigenvalue(model.apply, params0, x)


def run_xor(cfg: XORConfig, progress=None) -> dict:
    """Train on XOR with IL for every K (vmapped) and with damped GN for every damping (vmapped);
    return for every run the first-layer features ``W1`` (rows, shape (runs, width, 2)), the
    output weights ``w2`` (runs, width), the feature alignment of Goldwaser and Ge's eq. (11),
    training and test RMSE, and the same for the initialisation.

    Examples:
      A tiny network, 4 IL steps and 2 GN iterations (the chapter: ``run_xor(cfg)``):

      >>> cfg = dataclasses.replace(xor_config("smoke"), n_train=8, n_test=8, width=8, steps=4, Ks=(1, None),
      ...                           damping_factors=(0.3,), gn_iterations=2)
      >>> r = run_xor(cfg, progress="off")
      >>> r["il"]["w1"].shape, r["gn"]["w1"].shape, r["init"]["w1"].shape, r["il"]["converged"].shape
      ((2, 8, 2), (1, 8, 2), (1, 8, 2), (2,))
    """

    x, y, xt, yt, model, params0, lam_max = xor_setup(cfg)
    opt = optax.sgd(cfg.lr_factor / lam_max)
    Ks = tuple(cfg.Ks)
    step, _ = ic.make_il_sweep_step(model.apply, ic.squared_error, opt, Ks)
    # a large-K run may diverge after a refresh; it is recorded (NaN) and reported as not converged
    states, _ = ic.train(step, ic.replicate(ic.init_il_state(params0, opt), len(Ks)), ic.full_batch(x, y),
                         cfg.steps, evaluate=ic.Evaluation(every=max(1, cfg.steps // 20)), on_nonfinite="ignore",
                         progress=ic.Progress(progress, "IL on XOR, all K"))
    # the default kernel method ("auto": per-example Jacobians, contracted) is the fastest here
    iterate = ic.sharded_vmap(lambda lam: ic.gn_iterate(model.apply, params0, x, y, cfg.gn_iterations, damping=lam))
    gn_params = iterate(np.asarray(cfg.damping_factors) * lam_max)
    outs = jax.vmap(model.apply, in_axes=(0, None))
    errs = jax.vmap(ic.rmse, in_axes=(0, None))

    def summary(params, f_train, f_test):
        w1 = np.asarray(params[0]["w"]).swapaxes(-1, -2)  # (runs, width, 2): one row per feature
        return {"w1": w1, "w2": np.asarray(params[1]["w"])[..., 0],
                "alignment": np.asarray(jax.vmap(ic.feature_alignment, in_axes=(0, None))(w1, ic.data.XOR_CENTRES)),
                "train_rmse": np.asarray(errs(f_train, y)), "test_rmse": np.asarray(errs(f_test, yt))}

    il = summary(states.params, proxy_outputs(model.apply, states, x), proxy_outputs(model.apply, states, xt))
    gn = summary(gn_params, outs(gn_params, x), outs(gn_params, xt))
    for d in (il, gn):
        d["converged"] = np.isfinite(d["train_rmse"]) & (d["train_rmse"] < cfg.converged_rmse)
    init = ic.replicate(params0, 1)
    return {"Ks": Ks, "dampings": np.asarray(cfg.damping_factors), "lam_max": lam_max, "il": il, "gn": gn,
            "init": summary(init, outs(init, x), outs(init, xt)), "x_train": np.asarray(x), "y_train": np.asarray(y)}


__all__ = ["XORConfig", "XOR", "xor_config", "xor_setup", "run_xor"]
