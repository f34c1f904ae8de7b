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
from .claims import claims_markdown, pct, tolerance
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
    (Goldwaser and Ge, Fig. 4): ``scaling_sizes`` training-set sizes, ``scaling_Ks``, ``scaling_steps`` each.
    Solving each linearisation and damping it (Goldwaser and Ge, Figs. 8 and 9 bottom): Adam at
    learning rate ``adam_lr`` with K = 1 and with K = ``solve_K`` (long enough to solve each
    linearisation: its proxy reaches ``solved`` training accuracy before the next update), the
    latter at each proximal weight in ``dampings``, for ``steps`` steps."""

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
    adam_lr: float = 1e-3
    solve_K: int = 1000
    dampings: tuple = (0.0, 1e-3, 1e-2, 1e-1, 1.0)
    solved: float = 0.95
    seed: int = 0


DIGITS = {
    "smoke": DigitsConfig(steps=600, eval_every=100, Ks=(1, 100, None), scaling_sizes=(100, 400),
                          scaling_Ks=(1, None), scaling_steps=400, solve_K=200),
    "book": DigitsConfig(steps=4000, eval_every=100, Ks=(1, 10, 100, 1000, None),
                         scaling_sizes=(50, 100, 200, 400, 800, 1300), scaling_Ks=(1, 100, None),
                         scaling_steps=1000),
}


def digits_config(preset: str | None = None) -> DigitsConfig:
    """The preset's :class:`DigitsConfig` (:func:`~itlin_core.book.common.per_preset`).

    Examples:
      >>> cfg = digits_config("smoke")
      >>> cfg.steps, cfg.Ks, cfg.n_test, cfg.scaling_sizes
      (600, (1, 100, None), 497, (100, 400))
    """
    return per_preset(DIGITS, preset)


def digits_data(cfg: DigitsConfig) -> dict:
    """The preprocessed digits (NHWC float32, ``(N, 8, 8, 1)``) with integer labels:
    ``x_train, y_train`` (the training pool, in a fixed random order, so the first ``n`` are a
    random subset of size ``n``), ``x_test, y_test``, and the ``mean``/``std`` used.

    Examples:
      >>> data = digits_data(digits_config("smoke"))
      >>> data["x_train"].shape, data["x_test"].shape, data["y_test"].dtype
      ((1300, 8, 8, 1), (497, 8, 8, 1), dtype('int32'))
      >>> abs(float(data["x_train"].mean())) < 1e-3, round(data["mean"], 2)
      (True, 0.31)
    """
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


def run_digits_sweep(cfg: DigitsConfig, Ks: Sequence | None = None, progress=None, data: dict | None = None,
                     optimizer=None, dampings: Sequence | float = 0.0, probes: bool = True) -> dict:
    """IL on the digits for every K at once (:func:`itlin_core.make_il_sweep_step`), minibatch
    SGD, evaluated every ``eval_every`` steps. Returns the :func:`itlin_core.train` history
    (arrays ``(evals, runs)``) with ``{train,test}_accuracy_{network,proxy}``,
    ``probe{1,2}_test_accuracy`` (linear probes on the network's first/second block features),
    and ``Ks``, ``feature_updates``, ``n_params``, the final ``state`` (stacked over K), the
    initial ``params0``, the ``model`` and the ``data``. ``optimizer`` (default: the configuration's
    SGD) and ``dampings`` (one proximal weight, or one per K) as for
    :func:`itlin_core.make_il_sweep_step`; ``probes=False`` leaves the linear probes out.

    Examples:
      Two steps of a tiny CNN on random stand-in images (the chapter: ``run_digits_sweep(cfg)``):

      >>> x, y = jax.random.normal(jax.random.key(0), (16, 8, 8, 1)), jnp.arange(16) % 10
      >>> data = {"x_train": x, "y_train": y, "x_test": x[:8], "y_test": y[:8]}
      >>> cfg = dataclasses.replace(digits_config("smoke"), steps=2, eval_every=2, channels=(2, 2), dense=4,
      ...                           batch_size=8, probe_train=8)
      >>> h = run_digits_sweep(cfg, Ks=(1, None), progress="off", data=data)
      >>> h["test_accuracy_proxy"].shape, h["probe2_test_accuracy"].shape, h["feature_updates"].tolist()
      ((2, 2), (2, 2), [2, 1])
    """
    Ks = tuple(cfg.Ks if Ks is None else Ks)
    data = digits_data(cfg) if data is None else data
    model = ic.small_cnn(10, (8, 8, 1), cfg.channels, cfg.dense)
    params0 = model.init(jax.random.key(cfg.seed + 1))
    opt = _digits_optimizer(cfg) if optimizer is None else optimizer
    step, _ = ic.make_il_sweep_step(model.apply, ic.softmax_cross_entropy, opt, Ks, damping=dampings)
    xtr, ytr, xte, yte = data["x_train"], data["y_train"], data["x_test"], data["y_test"]
    il_eval = ic.make_il_eval(model.apply, {"train": (xtr, ytr), "test": (xte, yte)}, {"accuracy": ic.accuracy})
    xp, yp = xtr[:cfg.probe_train], ytr[:cfg.probe_train]

    def eval_fn(state):
        out = il_eval(state)
        for layer in (1, 2) if probes else ():
            probe = ic.linear_probe(model.features(state.params, xp, layer), yp,
                                  model.features(state.params, xte, layer), yte,
                                  ridge=cfg.probe_ridge, num_classes=10)
            out[f"probe{layer}_test_accuracy"] = probe["test_accuracy"]
        return out

    batches = ic.minibatches(jax.random.key(cfg.seed + 2), xtr, ytr, cfg.batch_size)
    states, hist = ic.train(step, ic.replicate(ic.init_il_state(params0, opt), len(Ks)), batches, cfg.steps,
                         evaluate=ic.Evaluation(jax.vmap(eval_fn), every=cfg.eval_every),
                         progress=ic.Progress(progress, f"digits: IL sweep over {len(Ks)} values of K"))
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
    ``final_train_accuracy``.

    Examples:
      One size, two steps, of a tiny CNN on random stand-in images (the chapter: ``run_digits_scaling(cfg)``):

      >>> x, y = jax.random.normal(jax.random.key(0), (16, 8, 8, 1)), jnp.arange(16) % 10
      >>> data = {"x_train": x, "y_train": y, "x_test": x[:8], "y_test": y[:8]}
      >>> cfg = dataclasses.replace(digits_config("smoke"), scaling_sizes=(16,), scaling_Ks=(1, None),
      ...                           scaling_steps=2, channels=(2, 2), dense=4, batch_size=8)
      >>> s = run_digits_scaling(cfg, progress="off", data=data)
      >>> s["sizes"].tolist(), s["Ks"], s["best_test_accuracy"].shape
      ([16], (1, None), (1, 2))
    """
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


def run_digits_damping(cfg: DigitsConfig, progress=None, data: dict | None = None) -> dict:
    """Goldwaser and Ge, Figs. 8 and 9 (bottom), on the digits: one vmapped program of Adam
    (learning rate ``cfg.adam_lr``) runs, K = 1 undamped and K = ``cfg.solve_K`` at every
    proximal weight of ``cfg.dampings`` (the first of which, 0, is Fig. 8's "solve each
    linearisation" run). Returns the :func:`run_digits_sweep` history with ``dampings`` (one per
    run) and ``solved``: for each run with K = ``solve_K``, the proxy's training accuracy at the
    last evaluation inside each linearisation (how far each was solved).

    Examples:
      Four steps of a tiny CNN on random stand-in images, ``solve_K = 2`` (the chapter:
      ``run_digits_damping(cfg)``):

      >>> x, y = jax.random.normal(jax.random.key(0), (16, 8, 8, 1)), jnp.arange(16) % 10
      >>> data = {"x_train": x, "y_train": y, "x_test": x[:8], "y_test": y[:8]}
      >>> cfg = dataclasses.replace(digits_config("smoke"), steps=4, eval_every=1, solve_K=2, dampings=(0.0, 1.0),
      ...                           channels=(2, 2), dense=4, batch_size=8)
      >>> h = run_digits_damping(cfg, progress="off", data=data)
      >>> h["Ks"], h["dampings"].tolist(), h["solved"].shape     # solved: (runs with K = solve_K, linearisations)
      ((1, 2, 2), [0.0, 0.0, 1.0], (2, 2))
    """
    Ks = (1,) + (cfg.solve_K,) * len(cfg.dampings)
    lams = (0.0,) + tuple(float(v) for v in cfg.dampings)
    # no linear probes: they are not needed here, and their batched solves over these six runs
    # stalled XLA:CPU on the 2-core build machine (jax 0.10)
    hist = run_digits_sweep(cfg, Ks, progress=progress, data=data, optimizer=optax.adam(cfg.adam_lr), dampings=lams,
                            probes=False)
    steps = np.asarray(hist["eval_step"])
    inside = (steps % cfg.solve_K != 0)
    ends = np.arange(cfg.solve_K, steps[-1] + cfg.solve_K, cfg.solve_K)
    last = [np.flatnonzero(inside & (steps < e) & (steps > e - cfg.solve_K)) for e in ends]
    acc = np.asarray(hist["train_accuracy_proxy"])
    hist["solved"] = np.array([[acc[idx[-1], r] for idx in last if len(idx)] for r in range(1, len(Ks))])
    hist["dampings"] = np.asarray(lams)
    return hist


def damping_claims(cfg: DigitsConfig, sgd: dict, damp: dict) -> tuple:
    """Goldwaser and Ge's Figs. 8 and 9 (bottom) judged on the digits, with the criteria the
    CIFAR10 chapter uses (:mod:`itlin_core.book.cifar_damping`): the network's final test accuracy
    (what the paper's Figs. 8 and 9 plot, over training); two accuracies are equal within a point or
    twice the binomial standard error on ``cfg.n_test`` images. ``sgd`` is :func:`run_digits_sweep`'s history (its K = 1 run),
    ``damp`` :func:`run_digits_damping`'s. Returns ``(markdown table, rows)``, rows as
    :func:`itlin_core.book.claims.judge` makes them.

    Examples:
      >>> sgd = {"Ks": (1, None), "test_accuracy_network": np.array([[0.5, 0.5], [0.9, 0.6]])}
      >>> damp = {"dampings": np.array([0.0, 0.0, 1.0]), "solved": np.array([[0.97, 1.0], [0.9, 0.95]]),
      ...         "test_accuracy_network": np.array([[0.5, 0.5, 0.5], [0.72, 0.7, 0.85]])}
      >>> table, rows = damping_claims(digits_config("smoke"), sgd, damp)
      >>> [r["verdict"] for r in rows]
      ['yes', 'yes', 'no', 'yes']
      >>> rows[3]["shows"]
      'λ=0: 70.0%, λ=1: 85.0% (tolerance 4.5 points)'
    """
    tol = tolerance({"n_eval": cfg.n_test})
    best = np.asarray(damp["test_accuracy_network"])[-1]           # final accuracies (named as before)
    sgd_best = float(np.asarray(sgd["test_accuracy_network"])[-1, list(sgd["Ks"]).index(1)])
    adam1, solve = float(best[0]), float(best[1])
    lams, b = damp["dampings"][1:], best[1:]
    order = np.argsort(lams, kind="stable")
    rises = b[order][-1] > b[order][0] + tol and bool(np.all(np.diff(b[order]) >= -tol))
    solved = damp["solved"][0]
    rows = [
        ("Each linearisation is solved (Fig. 8, the setting)", "the proxy reaches 100% training accuracy before "
         "every feature update", f"{pct(solved.min())} to {pct(solved.max())} (solved: at least {pct(cfg.solved)})",
         bool(solved.min() >= cfg.solved)),
        ("Solving each linearisation generalises worse than SGD (Fig. 8)", "Adam with K=2e5 ends at about 60%, SGD "
         "at about 69% (CIFAR10)", f"Adam, K={cfg.solve_K:,} {pct(solve)}, SGD, K=1 {pct(sgd_best)}",
         bool(solve < sgd_best - tol)),
        ("... and worse than Adam with K=1 (Fig. 8)", "Adam with K=1 reaches over 70% (CIFAR10)",
         f"Adam, K={cfg.solve_K:,} {pct(solve)}, Adam, K=1 {pct(adam1)}", bool(solve < adam1 - tol)),
        ("Damping brings generalisation back (Fig. 9 bottom)", "test accuracy rises with λ",
         ", ".join(f"λ={lams[i]:g}: {pct(b[i])}" for i in order) + f" (tolerance {100 * tol:.1f} points)", rises)]
    rows = [{"claim": c, "paper": p, "shows": sh, "verdict": "yes" if ok else "no"} for c, p, sh, ok in rows]
    return claims_markdown(rows), rows


__all__ = ["DigitsConfig", "DIGITS", "digits_config", "digits_data", "run_digits_sweep", "run_digits_scaling", "run_digits_damping", "damping_claims"]
