"""Chapter "Damping and smoothness on the quintic" (Goldwaser and Ge, Fig. 9 top and middle,
App. C.2.3): damped Gauss-Newton from many initialisations, for every damping, in one program."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import itlin_core as ic

from .common import per_preset


@dataclasses.dataclass(frozen=True)
class QuinticConfig:
    """The quintic regression of Goldwaser and Ge, App. C.2.3 (``data.quintic_data``: 20 training
    and 1000 test points, evenly spaced on [-3.5, 3.5], our choice of interval) fitted by a ReLU
    MLP with ``depth`` hidden layers of ``width`` (the paper: "5 layer MLP with 50 neurons per
    layer"; we read it as five hidden layers), He-normal weights and N(0, ``b_std``^2) biases
    (with small biases a 1-D ReLU net has all its kinks near 0 and cannot fit 20 points), trained
    by full-batch damped Gauss-Newton (Alg. 1 with lambda I, step 1) for ``iterations`` steps,
    from ``n_seeds`` initialisations, for every damping in ``dampings``. Runs whose final
    training RMSE exceeds ``max_train_rmse`` are removed, as in the paper."""

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
    """The preset's :class:`QuinticConfig` (:func:`~itlin_core.book.common.per_preset`).

    Examples:
      >>> cfg = quintic_config("smoke")
      >>> cfg.n_seeds, cfg.iterations, cfg.dampings, cfg.width, cfg.depth
      (8, 150, (0.001, 0.1, 10.0, 100.0), 32, 5)
    """
    return per_preset(QUINTIC, preset)


def run_quintic(cfg: QuinticConfig) -> dict:
    """Damped GN on the quintic for every (seed, damping) pair in one compiled program (vmap over
    seeds and dampings, ``lax.scan`` over iterations: :func:`itlin_core.gn_iterate`). Returns
    ``train_rmse`` and ``test_rmse`` of shape (seeds, dampings), the learnt functions on the test
    grid ``f_test`` (seeds, dampings, 1000), the ``kept`` mask (train RMSE <= ``max_train_rmse``)
    and the data.

    Examples:
      Two seeds, two dampings, two iterations of a tiny network (the chapter: ``run_quintic(cfg)``):

      >>> cfg = dataclasses.replace(quintic_config("smoke"), n_seeds=2, iterations=2, dampings=(1.0, 10.0), width=8,
      ...                           depth=1)
      >>> r = run_quintic(cfg)
      >>> r["train_rmse"].shape, r["f_test"].shape, r["kept"].dtype
      ((2, 2), (2, 2, 1000), dtype('bool'))
    """

    data = ic.data.quintic_data()
    x, y, xt, yt = data["x_train"], data["y_train"], data["x_test"], data["y_test"]
    model = ic.mlp([1] + [cfg.width] * cfg.depth + [1], "relu", b_std=cfg.b_std)
    params0 = jax.vmap(model.init)(jax.random.split(jax.random.key(cfg.seed), cfg.n_seeds))

    def one(p, lam):
        p = ic.gn_iterate(model.apply, p, x, y, cfg.iterations, damping=lam)
        return ic.rmse(model.apply(p, x), y), model.apply(p, xt)[:, 0]

    lams = jnp.asarray(cfg.dampings)
    # seeds split over the devices (one device: jit(vmap)), dampings vmapped on each
    train_rmse, f_test = ic.sharded_vmap(lambda p: jax.vmap(one, in_axes=(None, 0))(p, lams))(params0)
    f_test = np.asarray(f_test)
    train_rmse = np.asarray(train_rmse)
    test_rmse = np.sqrt(np.mean((f_test - np.asarray(yt)[:, 0]) ** 2, axis=-1))
    # a run that blew up has non-finite outputs: it counts as not kept, like a high train RMSE
    kept = np.isfinite(train_rmse) & (train_rmse <= cfg.max_train_rmse) & np.isfinite(test_rmse)
    return {"dampings": np.asarray(cfg.dampings), "train_rmse": train_rmse, "test_rmse": test_rmse,
            "f_test": f_test, "kept": kept, "data": data}


__all__ = ["QuinticConfig", "QUINTIC", "quintic_config", "run_quintic"]
