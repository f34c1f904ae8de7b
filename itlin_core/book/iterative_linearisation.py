"""Chapter "Iterative linearisation": a sweep over K on a task where features matter.

The chapter's experiment cell builds the sweep itself from the core calls
(:func:`itlin_core.make_il_sweep_step`, :func:`itlin_core.make_il_eval`,
:func:`itlin_core.train`); this module holds its settings and its problem.
"""

from __future__ import annotations

import dataclasses

import jax

import itlin_core as ic

from ..models import Model, centred
from .common import per_preset


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
    """The preset's :class:`ILToyConfig` (:func:`~itlin_core.book.common.per_preset`).

    Examples:
      >>> cfg = il_toy_config("smoke")
      >>> cfg.d, cfg.n_train, cfg.steps, cfg.Ks
      (16, 128, 2000, (1, 100, None))
    """
    return per_preset(IL_TOY, preset)


def il_toy_problem(cfg: ILToyConfig):
    """``(model, params0, data, lr)`` for :class:`ILToyConfig`.

    Examples:
      A small centred network starts from the zero function:

      >>> import dataclasses
      >>> cfg = dataclasses.replace(il_toy_config("smoke"), n_train=8, n_test=10, width=8, centre_output=True)
      >>> model, params0, data, lr = il_toy_problem(cfg)
      >>> data["x_train"].shape, lr > 0, float(abs(model.apply(params0, data["x_test"])).max())
      ((8, 16), True, 0.0)
    """
    data = ic.data.single_index(jax.random.key(cfg.seed), cfg.n_train, cfg.n_test, cfg.d, "abs")
    if cfg.centre_output:
        base = ic.mlp([cfg.d, cfg.width, cfg.width, 1], "relu")
        params0 = base.init(jax.random.key(cfg.seed + 1))
        model = Model(base.init, centred(base.apply, params0, cfg.out_scale))
    else:
        model = ic.mlp([cfg.d, cfg.width, cfg.width, 1], "relu", out_scale=cfg.out_scale)
        params0 = model.init(jax.random.key(cfg.seed + 1))
    return model, params0, data, cfg.lr_factor / ic.max_ntk_eigenvalue(model.apply, params0, data["x_train"])


__all__ = ["ILToyConfig", "IL_TOY", "il_toy_config", "il_toy_problem"]
