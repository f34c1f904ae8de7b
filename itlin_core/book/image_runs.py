r"""Image-classification run groups on CIFAR10 and MNIST (Goldwaser and Ge, and their workshop paper).

One :class:`ImageRunConfig` describes a group of runs that share data, model, optimiser and step count and differ
only in the relinearisation period ``K`` (and optionally the proximal damping ``lambda``, their Fig. 9 bottom);
:func:`run_images` trains the whole group as **one compiled program** (:func:`itlin_core.make_il_sweep_step`, a
``vmap`` over runs inside ``lax.scan``), evaluates the network and its linearised proxy (their Fig. 2 plots both),
optional linear probes (Fig. 5), first-layer filters (Fig. 6) and the curvature of each linearisation, and
checkpoints and resumes bit for bit (:func:`itlin_core.train`).

Losses are the mean softmax cross-entropy over the batch (softmax outside the linearisation), evaluated on ``n_eval``
test images and as many (un-augmented) training images, in chunks of ``eval_batch``. At the ``smoke`` preset the same
code runs on in-format stand-in data (:func:`itlin_core.datasets.write_stand_in`): never a CIFAR10 or MNIST result.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

import itlin_core as ic

from .._validate import check_damping, check_microbatch, check_period
from .common import get_preset, k_label, parse_rule

DATASETS = ("cifar10", "mnist")
MODELS = ("lenet50", "resnet18", "resnet18_bn")
OPTIMIZERS = ("sgd", "adam")
SMOKE_SIZES = (512, 256)  # stand-in training and test images written at the smoke preset


@dataclasses.dataclass(frozen=True)
class ImageRunConfig:
    """A group of IL runs trained together (one per entry of ``Ks``).

    Attributes:
      dataset: ``"cifar10"`` or ``"mnist"``.
      model: ``"lenet50"`` (Goldwaser and Ge, App. C.2.1), ``"resnet18"`` or ``"resnet18_bn"`` (Fig. 10).
      steps, eval_every: training steps, and steps between evaluations.
      lr: the learning rate of ``optimizer`` (``"sgd"``: plain SGD; ``"adam"``: optax's Adam).
      Ks: one run per relinearisation period (``None``: never, K = inf) or rule, a text spec ``"geometric(K0, ratio)"``
        or ``"on_drift(tol)"`` (:func:`~itlin_core.book.common.parse_rule`; the refresh-rule chapter's rules at scale).
      drift_every: drift rules measure the drift every ``drift_every``-th step (:func:`itlin_core.make_il_sweep_step`).
      dampings: the proximal weight ``lambda`` (``lambda/2 ||theta - theta_s||^2`` added to the linearised
        loss); one value for all runs, or one per entry of ``Ks`` (then ``Ks`` may be one value, repeated).
      batch_size: minibatch size; ``None`` is full-batch gradient descent.
      microbatch: accumulate each step's gradient over chunks of this many images, the same step in less
        memory (:func:`itlin_core.linearised_value_and_grad`); ``None``: the batch at once. Not with
        ``resnet18_bn`` (its batch statistics would become per chunk).
      augment: random crops (4-pixel padding) and horizontal flips, drawn per step.
      n_train: train on the first ``n_train`` images of a fixed random order (``None``: all).
      n_eval, eval_batch: images evaluated per split, and the chunk size of evaluation.
      width: LeNet's channels (paper: 50) or ResNet's base width (paper: 64); ``None`` = paper.
      probes: fit linear probes on LeNet's two blocks at every evaluation (Goldwaser and Ge 2024, Fig. 5), on
        ``probe_train`` training images with relative ridge ``probe_ridge``.
      n_filters: record the change of LeNet's first ``n_filters`` first-layer filters from initialisation
        at every evaluation (Goldwaser and Ge 2024, Fig. 6).
      reset_optimizer: restart the optimiser's state at every relinearisation (:func:`itlin_core.make_il_step`);
        the papers do not say whether they do.
      curvature_batch: at every evaluation, the largest curvature of each run's linearised training loss at its
        anchor (:func:`itlin_core.max_curvature`, ``curvature_iterations`` power iterations) on the first
        ``curvature_batch`` training images, recorded as the metric ``curvature`` (``0``: none). SGD is stable on
        a linearisation while ``lr * curvature / 2 < 1``.
      seed: initialisation, data order, augmentation and subset all derive from it.

    Examples:
      >>> ImageRunConfig("cifar10", "lenet50", steps=40, eval_every=10, Ks=(1, 20, None), lr=0.02).labels
      ['K=1', 'K=20', 'K=∞']
    """

    dataset: str
    model: str
    steps: int
    eval_every: int
    Ks: tuple
    lr: float
    optimizer: str = "sgd"
    dampings: tuple = (0.0,)
    batch_size: int | None = 256
    microbatch: int | None = None
    augment: bool = False
    n_train: int | None = None
    n_eval: int = 10000
    eval_batch: int = 500
    width: int | None = None
    probes: bool = False
    probe_train: int = 5000
    probe_ridge: float = 1e-3
    n_filters: int = 0
    drift_every: int = 1
    reset_optimizer: bool = False
    curvature_batch: int = 0
    curvature_iterations: int = 10
    seed: int = 0

    def __post_init__(self):
        for name, allowed in (("dataset", DATASETS), ("model", MODELS), ("optimizer", OPTIMIZERS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}.")
        for name, low in (("steps", 1), ("eval_every", 1), ("n_eval", 1), ("eval_batch", 1), ("drift_every", 1),
                          ("curvature_batch", 0), ("curvature_iterations", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}.")
        for name in ("batch_size", "n_train", "width"):   # None: full batch, all images, the paper's width
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or int(v) != v or v < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {v!r}.")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a positive number, got {self.lr!r}.")
        if not isinstance(self.reset_optimizer, bool):
            raise ValueError(f"reset_optimizer must be True or False, got {self.reset_optimizer!r}.")
        if not len(self.Ks):
            raise ValueError("Ks must hold at least one relinearisation period.")
        for k in self.Ks:
            parse_rule(k) if isinstance(k, str) else check_period(k)
        for lam in self.dampings:
            check_damping(lam)
        if not len(self.dampings) or (len(self.dampings) > 1 and len(self.Ks) > 1
                                      and len(self.dampings) != len(self.Ks)):
            raise ValueError(f"dampings must hold one value, or one per K; got {len(self.dampings)} "
                             f"dampings for {len(self.Ks)} values of K.")
        check_microbatch(self.microbatch)
        if self.microbatch is not None and self.model == "resnet18_bn":
            raise ValueError("microbatch would normalise each chunk by its own BatchNorm statistics, "
                             "which is another model than resnet18_bn on the whole batch; use None.")
        if self.microbatch is not None and self.batch_size is not None and self.batch_size % self.microbatch:
            raise ValueError(f"microbatch ({self.microbatch}) must divide batch_size ({self.batch_size}).")
        if (self.probes or self.n_filters) and self.model != "lenet50":
            raise ValueError("probes and n_filters are implemented for model='lenet50' only "
                             "(the network of Goldwaser and Ge 2024, Figs. 5 and 6).")

    @property
    def runs(self) -> list:
        """The ``(K, damping)`` pair of each run."""
        n = max(len(self.Ks), len(self.dampings))
        Ks = list(self.Ks) * n if len(self.Ks) == 1 else list(self.Ks)
        lams = list(self.dampings) * n if len(self.dampings) == 1 else list(self.dampings)
        return list(zip(Ks, lams))

    @property
    def labels(self) -> list:
        """A legend label per run: ``K=...`` and, when dampings differ, ``lambda=...``."""
        varied = len(set(self.dampings)) > 1
        return [k_label(k) + (f", λ={lam:g}" if varied else "") for k, lam in self.runs]

    def as_dict(self) -> dict:
        """The settings as plain JSON values (``None`` for K = inf), as records and checkpoints store them.
        Fields added after the first records (``reset_optimizer``, ``curvature_*``) appear only when they
        differ from their defaults, so older records still match."""
        d = {k: v for k, v in dataclasses.asdict(self).items()
             if not (k in ("reset_optimizer", "curvature_batch", "curvature_iterations")
                     and v == ImageRunConfig.__dataclass_fields__[k].default)}
        d["Ks"] = [k if isinstance(k, str) else None if k is None or k == math.inf else int(k) for k in self.Ks]
        d["dampings"] = [float(v) for v in self.dampings]
        return d


# ---------------------------------------------- data ----------------------------------------------
def image_data(dataset: str, preset: str | None = None, *, data_dir=None, stand_in: bool | None = None,
               stand_in_sizes=SMOKE_SIZES, progress=None, verify: bool = True) -> dict:
    """The images for a chapter: the real data set, or in-format stand-in data at ``smoke``.

    ``stand_in`` defaults to ``preset == "smoke"`` or ``ITLIN_STAND_IN=1`` (GPU timing runs without the data).
    Stand-in images are written once per size into ``<tmp>/itlin-stand-in`` in the upstream format and read back
    by the real loaders (``verify=False``). Real data come from ``data_dir``, checked against the published
    checksums unless ``verify=False`` (a re-encoded copy, whose records must say so). Returns the loader's dict
    (uint8 NHWC images, int labels) plus ``stand_in`` and ``mean``/``std``, the training images' channel statistics.

    Examples:
      >>> data = image_data("mnist", "smoke", stand_in_sizes=(64, 32))    # tiny stand-in: 64 training images
      >>> data["x_train"].shape, data["x_test"].dtype, data["stand_in"]
      ((64, 28, 28, 1), dtype('uint8'), True)
    """
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {DATASETS}, got {dataset!r}.")
    preset = get_preset(preset)
    if stand_in is None:
        stand_in = preset == "smoke" or os.environ.get("ITLIN_STAND_IN", "") not in ("", "0")
    loader = ic.datasets.cifar10 if dataset == "cifar10" else ic.datasets.mnist
    if stand_in:
        n_train, n_test = (int(v) for v in stand_in_sizes)
        root = Path(tempfile.gettempdir()) / "itlin-stand-in" / f"{dataset}-{n_train}-{n_test}"
        if not (root / "complete").exists():
            _write_stand_in_once(dataset, root, n_train, n_test)
        data = loader(root, verify=False)
    else:
        data = loader(data_dir, verify=verify, progress=progress)
    mean, std = ic.channel_stats(data["x_train"])
    return dict(data, stand_in=bool(stand_in), mean=mean, std=std)


def _write_stand_in_once(dataset: str, root: Path, n_train: int, n_test: int) -> None:
    """Write the stand-in files into a private folder and rename it to ``root`` in one step, so that chapters run side
    by side (pytest workers, a book build) never read a half-written file; whoever renames second discards its copy."""
    root.parent.mkdir(parents=True, exist_ok=True)
    if root.exists() and not (root / "complete").exists():   # left by an interrupted older writer
        shutil.rmtree(root, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    try:
        ic.datasets.write_stand_in(dataset, tmp, n_train, n_test)
        (tmp / "complete").touch()
        os.rename(tmp, root)
    except OSError:                                           # another process got there first
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def training_subset(cfg: ImageRunConfig, data: dict):
    """``(x, y)``, NumPy arrays: the first ``cfg.n_train`` training images of a fixed random order (all for ``None``).

    Examples:
      >>> cfg = ImageRunConfig("mnist", "lenet50", steps=1, eval_every=1, Ks=(1,), lr=0.1, n_train=10)
      >>> [a.shape for a in training_subset(cfg, {"x_train": np.zeros((64, 28, 28, 1)), "y_train": np.arange(64)})]
      [(10, 28, 28, 1), (10,)]
    """
    n = len(data["y_train"]) if cfg.n_train is None else min(int(cfg.n_train), len(data["y_train"]))
    order = np.asarray(jax.random.permutation(jax.random.key(cfg.seed + 17), len(data["y_train"])))[:n]
    return np.asarray(data["x_train"])[order], np.asarray(data["y_train"])[order]


# ---------------------------------------- model and training ----------------------------------------
def build_model(cfg: ImageRunConfig, input_shape):
    """The model of ``cfg`` for images of ``input_shape`` (H, W, C): an ``(init, apply)`` pair."""
    if cfg.model == "lenet50":
        return ic.lenet50(10, tuple(input_shape), channels=cfg.width or 50)
    return ic.resnet18(10, batch_norm=cfg.model == "resnet18_bn", in_channels=input_shape[-1], width=cfg.width or 64)


def init_params(cfg: ImageRunConfig, model):
    """The initial parameters of ``cfg``'s runs, in float32 (the images' precision, also when
    x64 is enabled elsewhere): ``model.init(jax.random.key(cfg.seed))``."""
    return jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), model.init(jax.random.key(cfg.seed)))


def optimizer(cfg: ImageRunConfig):
    """``optax.sgd(lr)`` or ``optax.adam(lr)``, as ``cfg.optimizer`` says."""
    return optax.sgd(cfg.lr) if cfg.optimizer == "sgd" else optax.adam(cfg.lr)


def _eval_chunks(x, y, n, chunk):
    """The first ``n`` examples (rounded down to whole chunks) as chunks of ``chunk``."""
    n = min(int(n), len(y))
    chunk = min(int(chunk), n)
    n = (n // chunk) * chunk
    return (*ic.split_microbatches((x[:n], y[:n]), chunk), n)


def make_image_eval(apply_fn, cfg: ImageRunConfig):
    """``eval_fn(state, data) -> dict`` for one run (vmap it over states, not data), ``data = {"splits": {name:
    (x_chunks, y_chunks)}, "params0", "probe": (x_fit, y_fit, x_test, y_test) or None, "curvature": (x, y) or None}``
    (an argument, not captured: ``ic.Evaluation(data=)``): per split, the mean cross-entropy and accuracy of the
    network and its proxy (at ``state.anchor``), chunk by chunk (``lax.map``); ``probe{1,2}_test_accuracy``
    (``cfg.probes``), ``filters`` (the first ``cfg.n_filters`` first-layer filters minus their initial values),
    ``curvature`` (``cfg.curvature_batch``: :func:`itlin_core.max_curvature` at the anchor), ``updates``."""

    def eval_fn(state, data):
        proxy = ic.linearise(apply_fn, state.anchor)

        def chunk_stats(batch):
            xb, yb = batch
            out = []
            for f in (apply_fn(state.params, xb), proxy(state.params, xb)):
                out += [ic.softmax_cross_entropy(f, yb), ic.accuracy(f, yb)]
            return jnp.stack(out)

        res = {"updates": state.updates}     # linearisations used so far (a rule's count)
        for name, (xc, yc) in data["splits"].items():
            m = jnp.mean(jax.lax.map(chunk_stats, (xc, yc)), axis=0)
            for i, (what, model) in enumerate([("loss", "network"), ("accuracy", "network"),
                                               ("loss", "proxy"), ("accuracy", "proxy")]):
                res[f"{name}_{what}_{model}"] = m[i]
        if cfg.probes:
            xf, yf, xt, yt = data["probe"]
            for layer in (1, 2):
                p = ic.linear_probe(ic.lenet50_features(state.params, xf, layer), yf,
                                    ic.lenet50_features(state.params, xt, layer), yt,
                                    ridge=cfg.probe_ridge, num_classes=10)
                res[f"probe{layer}_test_accuracy"] = p["test_accuracy"]
        if cfg.curvature_batch:
            xk, yk = data["curvature"]
            res["curvature"] = ic.max_curvature(apply_fn, ic.softmax_cross_entropy, state.anchor, xk, yk,
                                                iterations=cfg.curvature_iterations)
        if cfg.n_filters:
            w = state.params["conv1"]["w"] - data["params0"]["conv1"]["w"]
            res["filters"] = w[..., :cfg.n_filters]
        return res

    return eval_fn


def group_step(cfg: ImageRunConfig, model, opt):
    """The vmapped IL step of a run group (one run per ``cfg.runs`` entry)."""
    lams = [lam for _, lam in cfg.runs]
    # one damping for all runs stays a Python number (the undamped step then skips the term)
    Ks = [parse_rule(k) if isinstance(k, str) else k for k, _ in cfg.runs]
    step, _ = ic.make_il_sweep_step(model.apply, ic.softmax_cross_entropy, opt, Ks,
                                    damping=lams[0] if len(set(lams)) == 1 else lams, microbatch=cfg.microbatch,
                                    drift_every=cfg.drift_every, reset_optimizer=cfg.reset_optimizer)
    return step


def step_memory(cfg: ImageRunConfig) -> dict:
    """XLA's memory plan for one training step of a whole run group, on the default backend: ``{"arguments",
    "outputs", "temporaries", "total"}`` in bytes. It compiles the step (for the group's batch: ``batch_size``
    images, or all ``n_train`` for full batch) without running it, so it answers "will this group fit on this
    GPU?" before a long run. Evaluation runs separately, in chunks of ``eval_batch``; the data set is not counted."""
    shape = ic.datasets.IMAGE_SHAPES[cfg.dataset]
    model = build_model(cfg, shape)
    opt = optimizer(cfg)
    states = ic.replicate(ic.init_il_state(init_params(cfg, model), opt), len(cfg.runs))
    n = cfg.n_train or ic.datasets.TRAIN_SIZES[cfg.dataset]
    bs = n if cfg.batch_size is None else min(cfg.batch_size, n)
    batch = (jax.ShapeDtypeStruct((bs,) + shape, jnp.float32), jax.ShapeDtypeStruct((bs,), jnp.int32))
    m = jax.jit(group_step(cfg, model, opt)).lower(states, batch).compile().memory_analysis()
    out = {"arguments": int(m.argument_size_in_bytes), "outputs": int(m.output_size_in_bytes),
           "temporaries": int(m.temp_size_in_bytes)}
    return dict(out, total=sum(out.values()))


def run_images(cfg: ImageRunConfig, data: dict, *, checkpoint_path=None, checkpoint_every: int | None = None,
               stop_at: int | None = None, progress=None, desc: str | None = None, mesh="auto") -> dict:
    """Train every run of ``cfg`` at once on ``data`` (from :func:`image_data`).

    All runs start from the same initialisation and see the same batches; run ``i`` uses ``cfg.runs[i]``. A run whose
    loss becomes non-finite keeps going as NaN inside the batch (the others are unaffected);
    :func:`~itlin_core.book.image_records.summarise` reports the step where it diverged and masks its later evaluations.
    With ``checkpoint_path`` the group checkpoints every ``checkpoint_every`` steps (default: every 10 evaluations) and
    resumes from the file, on any number of devices (``stop_at`` stops early, to fit a session); the runs are split over
    the devices of ``mesh`` (:func:`itlin_core.train`, :mod:`itlin_core.sharding`). The training loss is kept as its
    mean over each evaluation interval (``loss_every = eval_every``): that is all a record keeps, and per-step losses of
    the paper's 6e7 steps would take hundreds of MB in every checkpoint. The step where a run diverged stays exact.
    Returns the :func:`itlin_core.train` history (``loss`` ``(intervals, runs)``, ``nonfinite_at`` ``(runs,)``,
    evaluations ``(evals, runs, ...)``) plus ``config``, the final ``state`` (stacked over runs), ``params0``,
    ``apply_fn``, ``n_params``, ``n_train``, ``n_eval`` and ``stand_in``.

    Examples:
      >>> cfg = ImageRunConfig("mnist", "lenet50", steps=2, eval_every=1, Ks=(1,), lr=0.01, microbatch=8, n_train=12)
      >>> run_images(cfg, image_data("mnist", "smoke", stand_in_sizes=(64, 32)))    # refused before compiling
      Traceback (most recent call last):
      ValueError: microbatch (8) must divide the batch of 12 images.
    """
    runs = cfg.runs
    x_tr, y_tr = training_subset(cfg, data)
    shape = x_tr.shape[1:]
    model = build_model(cfg, shape)
    params0 = init_params(cfg, model)
    opt = optimizer(cfg)
    step = group_step(cfg, model, opt)
    mean, std = data["mean"], data["std"]
    norm = lambda x: ic.normalise(x, mean, std)
    x_te, y_te = norm(np.asarray(data["x_test"])), jnp.asarray(data["y_test"])
    key = jax.random.key(cfg.seed + 1)
    bs = len(y_tr) if cfg.batch_size is None else min(int(cfg.batch_size), len(y_tr))
    if cfg.microbatch is not None and bs % cfg.microbatch:
        raise ValueError(f"microbatch ({cfg.microbatch}) must divide the batch of {bs} images.")
    if cfg.batch_size is None and not cfg.augment:
        batches = ic.full_batch(norm(x_tr), jnp.asarray(y_tr))
    else:
        batches = ic.augmented_minibatches(key, jnp.asarray(x_tr), jnp.asarray(y_tr), bs,
                                           padding=4 if cfg.augment else 0, flip=cfg.augment, mean=mean, std=std)
    xtc, ytc, n_eval = _eval_chunks(x_te, y_te, cfg.n_eval, cfg.eval_batch)
    xrc, yrc, _ = _eval_chunks(norm(x_tr[:n_eval]), jnp.asarray(y_tr[:n_eval]), n_eval, cfg.eval_batch)
    probe_data = None
    if cfg.probes:
        n_fit = min(cfg.probe_train, len(y_tr))
        probe_data = (norm(x_tr[:n_fit]), jnp.asarray(y_tr[:n_fit]), x_te[:n_eval], y_te[:n_eval])
    curvature_data = None
    if cfg.curvature_batch:
        n_k = min(cfg.curvature_batch, len(y_tr))
        curvature_data = (norm(x_tr[:n_k]), jnp.asarray(y_tr[:n_k]))
    eval_fn = jax.vmap(make_image_eval(model.apply, cfg), in_axes=(0, None))
    eval_data = {"splits": {"test": (xtc, ytc), "train": (xrc, yrc)}, "params0": params0,
                 "probe": probe_data, "curvature": curvature_data}
    states = ic.replicate(ic.init_il_state(params0, opt), len(runs))
    desc = desc or f"{cfg.model} on {cfg.dataset}: {len(runs)} run(s)"
    checkpoint = None if checkpoint_path is None else ic.Checkpointing(
        checkpoint_path, every=checkpoint_every or 10 * cfg.eval_every, key=key, stop_at=stop_at,
        meta={"config": cfg.as_dict(), "stand_in": bool(data.get("stand_in"))})
    states, hist = ic.train(ic.on_devices(step, mesh), states, batches, cfg.steps,
                            evaluate=ic.Evaluation(eval_fn, every=cfg.eval_every, loss_every=cfg.eval_every,
                                                           data=eval_data),
                            checkpoint=checkpoint, on_nonfinite="ignore", progress=ic.Progress(progress, desc))
    hist.update(config=cfg, state=states, params0=params0, apply_fn=model.apply, n_params=ic.count_params(params0),
                n_train=len(y_tr), n_eval=n_eval, stand_in=bool(data.get("stand_in", False)))
    return hist


__all__ = ["DATASETS", "MODELS", "OPTIMIZERS", "SMOKE_SIZES", "ImageRunConfig", "image_data", "training_subset",
           "build_model", "init_params", "optimizer", "make_image_eval", "group_step", "step_memory", "run_images"]
