"""Chapter "A real-image stand-in: CNNs on 8x8 digits" (Goldwaser and Ge, Figs. 2-5 at CPU scale):
an IL sweep over K with network, proxy and linear-probe accuracies, and data-subset scaling."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

import itlin_core as ic

from .._progress import progress_bar
from .common import feature_updates, per_preset


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
    (Goldwaser and Ge, Fig. 4): ``scaling_sizes`` training-set sizes, ``scaling_Ks``, ``scaling_steps`` each."""

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
    return per_preset(DIGITS, preset)


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
    perm = np.asarray(jax.random.permutation(jax.random.key(cfg.seed), len(labels)))
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
    model = ic.small_cnn(10, (8, 8, 1), cfg.channels, cfg.dense)
    params0 = model.init(jax.random.key(cfg.seed + 1))
    opt = _digits_optimizer(cfg)
    step, _ = ic.make_il_sweep_step(model.apply, ic.softmax_cross_entropy, opt, Ks)
    xtr, ytr, xte, yte = data["x_train"], data["y_train"], data["x_test"], data["y_test"]
    il_eval = ic.make_il_eval(model.apply, {"train": (xtr, ytr), "test": (xte, yte)}, {"accuracy": ic.accuracy})
    xp, yp = xtr[:cfg.probe_train], ytr[:cfg.probe_train]

    def eval_fn(state):
        out = il_eval(state)
        for layer in (1, 2):
            probe = ic.linear_probe(model.features(state.params, xp, layer), yp,
                                  model.features(state.params, xte, layer), yte,
                                  ridge=cfg.probe_ridge, num_classes=10)
            out[f"probe{layer}_test_accuracy"] = probe["test_accuracy"]
        return out

    batches = ic.minibatches(jax.random.key(cfg.seed + 2), xtr, ytr, cfg.batch_size)
    states, hist = ic.train(step, ic.replicate(ic.init_il_state(params0, opt), len(Ks)), batches, cfg.steps,
                         eval_fn=jax.vmap(eval_fn), eval_every=cfg.eval_every, progress=progress,
                         desc=f"digits: IL sweep over {len(Ks)} values of K")
    hist.update(Ks=Ks, state=states, params0=params0, model=model, data=data)
    hist["feature_updates"] = feature_updates(Ks, [cfg.steps])[0]
    hist["n_params"] = ic.count_params(params0)
    return hist


def run_digits_scaling(cfg: DigitsConfig, progress=None, data: dict | None = None) -> dict:
    """Data-subset scaling (Goldwaser and Ge, Fig. 4): for each size ``n`` in ``scaling_sizes``, train on the
    first ``n`` images of the (shuffled) training pool with every K in ``scaling_Ks`` (one
    vmapped program per size) for ``scaling_steps`` steps. Returns ``sizes``, ``Ks`` and arrays
    ``(sizes, Ks)``: ``final_test_accuracy`` and ``best_test_accuracy`` (over the evaluations,
    the paper's "optimal early stopping") of the model being trained (the proxy), and
    ``final_train_accuracy``."""
    data = digits_data(cfg) if data is None else data
    Ks = tuple(cfg.scaling_Ks)
    rows = {"final_test_accuracy": [], "best_test_accuracy": [], "final_train_accuracy": []}
    bar = progress_bar(len(cfg.scaling_sizes), "digits: data-subset scaling", progress)
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


__all__ = ["DigitsConfig", "DIGITS", "digits_config", "digits_data", "run_digits_sweep", "run_digits_scaling"]
