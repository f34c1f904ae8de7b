"""Chapter "Linearisation and the empirical NTK": how far does the kernel move in training?

A 1-D regression fitted by a centred, scaled ReLU MLP ``alpha * (f(theta, x) - f(theta_0, x))``
(the lazy-training scaling of Chizat et al. 2019) for several ``alpha``; the kernel distance to
the initial NTK shows the lazy regime appear as ``alpha`` grows.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import optax

import itlin_core as ic

from ..models import centred
from .common import per_preset


@dataclasses.dataclass(frozen=True)
class KernelEvolutionConfig:
    """A 1-D regression (``data.regression_1d`` on [-3, 3]) fitted by a centred, scaled ReLU
    MLP ``alpha * (f(theta, x) - f(theta_0, x))`` for several ``alpha``; full-batch GD with
    learning rate ``lr_factor / lambda_max(NTK at init)`` (the same speed in function space for
    every alpha); the kernel distance to the initial NTK is recorded every ``eval_every`` steps.
    ``parameterisation`` (``"standard"`` or ``"ntk"``) and ``b_std`` are passed to ``ic.mlp``;
    in the NTK parameterisation ``b_std`` multiplies the biases in the forward pass, so its
    default 0 removes them."""

    width: int
    n_train: int
    steps: int
    eval_every: int
    alphas: tuple
    lr_factor: float = 0.5
    depth: int = 2
    seed: int = 0
    parameterisation: str = "standard"
    b_std: float = 0.0


KERNEL_EVOLUTION = {
    "smoke": KernelEvolutionConfig(width=64, n_train=16, steps=400, eval_every=100, alphas=(0.03, 1.0, 10.0)),
    "book": KernelEvolutionConfig(width=256, n_train=32, steps=4000, eval_every=100,
                                  alphas=(0.03, 0.1, 0.3, 1.0, 3.0, 10.0)),
}


def kernel_evolution_config(preset: str | None = None) -> KernelEvolutionConfig:
    """The preset's :class:`KernelEvolutionConfig` (:func:`~itlin_core.book.common.per_preset`).

    Examples:
      >>> cfg = kernel_evolution_config("smoke")
      >>> cfg.width, cfg.steps, cfg.alphas
      (64, 400, (0.03, 1.0, 10.0))
    """
    return per_preset(KERNEL_EVOLUTION, preset)


def run_kernel_evolution(cfg: KernelEvolutionConfig, progress=None) -> dict:
    """Train one network per ``alpha`` (K = 1, plain GD) and record, at each evaluation step,
    the training loss and the kernel distance between the current and the initial NTK on the
    training inputs. Returns ``{"alphas", "eval_step", "kernel_distance" (A, T),
    "train_rmse" (A, T), "relative_param_change" (A, T), "data"}``.

    Examples:
      One ``alpha``, 2 steps of a tiny network (the chapter: ``run_kernel_evolution(cfg)``):

      >>> cfg = dataclasses.replace(kernel_evolution_config("smoke"), width=8, n_train=4, steps=2, eval_every=1,
      ...                           alphas=(10.0,))
      >>> r = run_kernel_evolution(cfg, progress="off")
      >>> r["eval_step"].tolist(), r["kernel_distance"].shape, r["train_rmse"].shape
      ([0, 1, 2], (1, 3), (1, 3))
    """
    data = ic.data.regression_1d(jax.random.key(cfg.seed), cfg.n_train, 200)
    x, y = data["x_train"], data["y_train"]
    base = ic.mlp([1] + [cfg.width] * cfg.depth + [1], "relu", parameterisation=cfg.parameterisation,
                  b_std=cfg.b_std)
    params0 = base.init(jax.random.key(cfg.seed + 1))
    norm0 = optax.tree_utils.tree_norm(params0)
    out = {"alphas": np.asarray(cfg.alphas), "data": data}
    rows = {"kernel_distance": [], "train_rmse": [], "relative_param_change": []}
    for alpha in cfg.alphas:
        apply = centred(base.apply, params0, alpha)
        k0 = ic.empirical_ntk(apply, params0, x)
        opt = optax.sgd(cfg.lr_factor / ic.max_ntk_eigenvalue(apply, params0, x))

        def eval_fn(state, apply=apply, k0=k0):
            change = optax.tree_utils.tree_norm(ic.tree_sub(state.params, params0)) / norm0
            return {"kernel_distance": ic.kernel_distance(ic.empirical_ntk(apply, state.params, x), k0),
                    "train_rmse": ic.rmse(apply(state.params, x), y), "relative_param_change": change}

        step = ic.make_il_step(apply, ic.squared_error, opt, K=1)
        _, hist = ic.train(step, ic.init_il_state(params0, opt), ic.full_batch(x, y), cfg.steps,
                           evaluate=ic.Evaluation(eval_fn, every=cfg.eval_every),
                           progress=ic.Progress(progress, f"alpha={alpha:g}"))
        for k in rows:
            rows[k].append(hist[k])
        out["eval_step"] = hist["eval_step"]
    out.update({k: np.stack(v) for k, v in rows.items()})
    return out


__all__ = ["KernelEvolutionConfig", "KERNEL_EVOLUTION", "kernel_evolution_config", "run_kernel_evolution"]
