"""Chapter "A teacher on real images" (Arbel et al. 2023, App. C.4, Fig. 8): the mean-field
student of :mod:`itlin_core.book.mean_field_gn`, now with ten outputs, fitted by Gauss-Newton and
gradient descent to the class probabilities of a small network trained on real digit images.

The book build uses the 8x8 digits that ship with scikit-learn (no download); the ``colab`` and
``paper`` presets use MNIST through :func:`itlin_core.datasets.mnist`, as the paper does."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

import itlin_core as ic

from .claims import claims_markdown
from .common import per_preset
from .mean_field_gn import (TeacherStudentConfig, _require_x64, hidden_learning_at, random_features_baseline,
                            run_teacher_student)

SOURCES = ("digits", "mnist")


@dataclasses.dataclass(frozen=True)
class ImageTeacherConfig:
    """The image teacher-student task of Arbel et al. 2023, App. C.4, at a chosen scale.

    ``source``: ``"digits"`` (scikit-learn's 1797 8x8 images, ``d = 64``) or ``"mnist"``
    (``d = 784``); pixels are scaled to ``[0, 1]`` and flattened (the paper does not say how it
    scales MNIST; this is the book's choice). The student trains on ``n_train`` images, the same
    number from each class (the paper's balanced subset of 3000 MNIST training images), and is
    tested on ``n_test`` others (for MNIST, the first ``n_test`` of its test set; the paper uses
    all 10000; for the digits, a random ``n_test`` of the 1797 images, the training images being
    drawn from the rest). The teacher, a ReLU network with one hidden layer of
    ``teacher_hidden`` units (standard parameterisation, with biases), is trained on the union
    of the student's training and test images with softmax cross-entropy (full batch, Adam at
    ``teacher_lr`` for ``teacher_steps`` steps: the paper does not give its optimiser); its
    softmax outputs are the student's targets. The student is the mean-field network with ten
    outputs, ``width`` hidden units, hidden weights ``N(0, tau0^2)`` (the paper's
    ``tau0 = 1e-3``) and a zero last layer, trained with the loss ``1/(2N) sum ||f - y||^2`` by
    GN over ``gn_lrs`` and GD over ``gd_lrs`` (the paper sweeps ``[1e-3, 1e3]``) for at most
    ``gn_iterations``/``gd_iterations`` steps, or until the training loss is below
    ``stop_loss``; the GN damping is ``max(floor, alpha sigma_min)`` as in the previous
    chapters."""

    source: str
    n_train: int
    n_test: int
    width: int
    gn_iterations: int
    gd_iterations: int
    gn_lrs: tuple
    gd_lrs: tuple
    tau0: float = 1e-3
    teacher_hidden: int = 50
    teacher_steps: int = 1000
    teacher_lr: float = 1e-2
    n_evals: int = 20
    stop_loss: float = 1e-6
    floor: float = 1e-7
    alpha: float = 1.0
    seed: int = 0

    def student(self) -> TeacherStudentConfig:
        """The settings of :func:`itlin_core.book.mean_field_gn.run_teacher_student` for this task
        (its data come from :func:`image_teacher_problem`, not from ``d``/``m_star``)."""
        return TeacherStudentConfig(n_train=self.n_train, width=self.width, n_test=self.n_test,
                                    gn_iterations=self.gn_iterations, gd_iterations=self.gd_iterations,
                                    tau0s=(self.tau0,), gn_lrs=self.gn_lrs, gd_lrs=self.gd_lrs,
                                    n_evals=self.n_evals, stop_loss=self.stop_loss, floor=self.floor,
                                    alpha=self.alpha, seed=self.seed)


IMAGE_TEACHER = {
    "smoke": ImageTeacherConfig("digits", n_train=20, n_test=300, width=200, gn_iterations=600,
                                gd_iterations=3000, gn_lrs=(0.01, 0.1, 1.0, 20.0), gd_lrs=(1.0, 10.0, 100.0),
                                teacher_steps=500, n_evals=10),
    "book": ImageTeacherConfig("digits", n_train=40, n_test=500, width=500, gn_iterations=1500,
                               gd_iterations=20000, gn_lrs=(0.01, 0.1, 1.0, 10.0, 40.0),
                               gd_lrs=(1.0, 10.0, 100.0, 1000.0)),
    "colab": ImageTeacherConfig("mnist", n_train=200, n_test=10000, width=2000, gn_iterations=5000,
                                gd_iterations=100_000, gn_lrs=(1e-2, 0.1, 1.0, 10.0, 100.0),
                                gd_lrs=(1e-2, 0.1, 1.0, 10.0, 100.0)),
    "paper": ImageTeacherConfig("mnist", n_train=3000, n_test=10000, width=5000, gn_iterations=100_000,
                                gd_iterations=100_000, n_evals=40,
                                gn_lrs=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0),
                                gd_lrs=(1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)),
}


def image_teacher_config(preset: str | None = None) -> ImageTeacherConfig:
    """The preset's :class:`ImageTeacherConfig` (:func:`~itlin_core.book.common.per_preset`: the ``book`` entry for a
    preset without one).

    Examples:
      >>> cfg = image_teacher_config("smoke")
      >>> cfg.source, cfg.n_train, cfg.width, cfg.student().tau0s, image_teacher_config("paper").source
      ('digits', 20, 200, (0.001,), 'mnist')
    """
    return per_preset(IMAGE_TEACHER, preset)


def _images(cfg: ImageTeacherConfig, data_dir=None, verify: bool = True):
    """``(pool_x, pool_y, test_x, test_y)``: flattened images in ``[0, 1]`` and their labels."""
    if cfg.source == "digits":
        try:
            from sklearn.datasets import load_digits  # the images ship inside scikit-learn
        except ImportError:
            raise ImportError("the digits teacher needs scikit-learn (its 8x8 digits ship inside the "
                              "package): pip install scikit-learn") from None
        raw = load_digits()
        x, y = np.asarray(raw.data, np.float64) / 16.0, np.asarray(raw.target, np.int32)
        perm = np.asarray(jax.random.permutation(jax.random.key(cfg.seed), len(y)))
        test, pool = perm[:cfg.n_test], perm[cfg.n_test:]
        return x[pool], y[pool], x[test], y[test]
    raw = ic.datasets.mnist(data_dir, verify)
    flat = lambda a: a.reshape(len(a), -1).astype(np.float64) / 255.0
    if cfg.n_test > len(raw["y_test"]):
        raise ValueError(f"n_test must be at most the {len(raw['y_test'])} MNIST test images, got {cfg.n_test}.")
    return flat(raw["x_train"]), raw["y_train"], flat(raw["x_test"][:cfg.n_test]), raw["y_test"][:cfg.n_test]


def balanced_indices(labels, n: int, seed: int, classes: int = 10) -> np.ndarray:
    """``n`` indices into ``labels``, ``n / classes`` of each class, drawn at random without
    replacement (Arbel et al.'s balanced subset), in class order."""
    labels = np.asarray(labels)
    if n % classes:
        raise ValueError(f"n_train must be a multiple of the {classes} classes (a balanced subset), got {n}.")
    rng = np.random.default_rng(seed)
    picks = []
    for c in range(classes):
        where = np.flatnonzero(labels == c)
        if where.size < n // classes:
            raise ValueError(f"class {c} has {where.size} images, fewer than the {n // classes} a balanced "
                             f"subset of {n} needs.")
        picks.append(rng.choice(where, n // classes, replace=False))
    return np.concatenate(picks)


def train_teacher(cfg: ImageTeacherConfig, x, labels):
    """The teacher: ``ic.mlp([d, teacher_hidden, 10])`` trained on ``(x, labels)`` with softmax
    cross-entropy, full batch, Adam (one ``lax.scan``). Returns ``(apply, params, accuracy)``
    with its accuracy on the images it was trained on."""
    net = ic.mlp([x.shape[1], cfg.teacher_hidden, 10])
    params = net.init(jax.random.key(cfg.seed + 7))
    opt = optax.adam(cfg.teacher_lr)
    x, labels = jnp.asarray(x), jnp.asarray(labels)
    grad = jax.grad(lambda p: ic.softmax_cross_entropy(net.apply(p, x), labels))

    def body(carry, _):
        p, s = carry
        upd, s = opt.update(grad(p), s, p)
        return (optax.apply_updates(p, upd), s), None

    params = jax.jit(lambda p: jax.lax.scan(body, (p, opt.init(p)), None, length=cfg.teacher_steps)[0][0])(params)
    return net.apply, params, float(ic.accuracy(net.apply(params, x), labels))


def image_teacher_problem(cfg: ImageTeacherConfig, data_dir=None, verify: bool = True) -> dict:
    """The data of App. C.4: ``x_train`` ``(n_train, d)`` (balanced over the classes), ``x_test``,
    their targets ``y_train``, ``y_test`` ``(n, 10)`` (the teacher's softmax probabilities),
    the true labels ``labels_train``, ``labels_test``, and ``teacher_accuracy`` (on the images
    it was trained on, the union of both sets). Needs 64-bit JAX (as the previous chapters).
    ``data_dir`` and ``verify`` go to :func:`itlin_core.datasets.mnist` (MNIST only).

    Examples:
      >>> cfg = dataclasses.replace(image_teacher_config("smoke"), n_train=10, n_test=10, teacher_steps=5)
      >>> with jax.enable_x64(True): problem = image_teacher_problem(cfg)      # scikit-learn's 8x8 digits
      >>> problem["x_train"].shape, problem["y_test"].shape, problem["labels_train"].tolist()   # one image per class
      ((10, 64), (10, 10), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    """
    if cfg.source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {cfg.source!r}.")
    _require_x64("the image teacher")
    pool_x, pool_y, x_test, labels_test = _images(cfg, data_dir, verify)
    pick = balanced_indices(pool_y, cfg.n_train, cfg.seed)
    x_train, labels_train = pool_x[pick], pool_y[pick]
    apply, params, acc = train_teacher(cfg, np.concatenate([x_train, x_test]),
                                       np.concatenate([labels_train, labels_test]))
    probs = lambda x: jax.nn.softmax(apply(params, jnp.asarray(x)), axis=-1)
    return {"x_train": jnp.asarray(x_train), "y_train": probs(x_train), "x_test": jnp.asarray(x_test),
            "y_test": probs(x_test), "labels_train": np.asarray(labels_train),
            "labels_test": np.asarray(labels_test), "teacher_accuracy": acc}


def run_image_teacher(cfg: ImageTeacherConfig, problem: dict | None = None, progress=None) -> dict:
    """Arbel et al. 2023, Fig. 8 at ``cfg``'s scale: GN over ``gn_lrs`` and GD over ``gd_lrs``
    from one initial draw at ``tau0`` (each method's step sizes as one compiled program,
    :func:`itlin_core.book.mean_field_gn.run_teacher_student`), and the random-features
    baseline. Returns ``{"gn", "gd"`` (the runs), ``"rf"`` (RF's test loss), ``"problem"}``.

    Examples:
      >>> cfg = dataclasses.replace(image_teacher_config("smoke"), n_train=10, n_test=10, width=20, teacher_steps=5,
      ...                           gn_lrs=(1.0,), gd_lrs=(10.0,), gn_iterations=2, gd_iterations=2)
      >>> with jax.enable_x64(True): res = run_image_teacher(cfg, progress="off")   # one step size per method
      >>> sorted(res), res["gn"]["train_loss"].shape, res["gd"]["lr"], res["rf"] > 0
      (['gd', 'gn', 'problem', 'rf'], (3, 1), array([10.]), True)
    """
    problem = image_teacher_problem(cfg) if problem is None else problem
    data = {k: problem[k] for k in ("x_train", "y_train", "x_test", "y_test")}
    s = cfg.student()
    out = {m: run_teacher_student(s, m, [cfg.tau0] * len(lrs), lrs, data=data, progress=progress)
           for m, lrs in (("gn", cfg.gn_lrs), ("gd", cfg.gd_lrs))}
    out["rf"] = float(random_features_baseline(s, [cfg.tau0], data=data)["test_loss"][0])
    out["problem"] = problem
    return out


#: Two final test losses differ when one exceeds the other by more than this factor (one seed;
#: fixed before the runs).
LOSS_FACTOR = 1.05


def failed(run: dict) -> np.ndarray:
    """Runs of :func:`itlin_core.book.mean_field_gn.run_teacher_student` that were unstable: a step
    overflowed (``diverged``), or the final training loss is not below the initial one (a step
    so large that it silenced every ReLU unit leaves the network at zero, finite but dead).

    Examples:
      >>> run = {"diverged": np.array([False, True, False]), "train_loss": np.ones((2, 3)),
      ...        "final_train_loss": np.array([0.1, np.nan, 1.0])}
      >>> failed(run)                  # fine; overflowed; finite but no lower than at the start
      array([False,  True,  True])
    """
    return run["diverged"] | ~(run["final_train_loss"] < run["train_loss"][0])


def _trend(values) -> str:
    first, last = float(values[0]), float(values[-1])
    return "rises" if last > LOSS_FACTOR * first else "falls" if first > LOSS_FACTOR * last else "stays level"


def image_claims(res: dict) -> tuple:
    """Arbel et al. 2023's three statements on Fig. 8 judged on :func:`run_image_teacher`'s runs,
    with criteria fixed in code before the runs. Hidden learning: the chapter's test
    (:func:`itlin_core.book.mean_field_gn.hidden_learning_at`) at GN's smallest step size. GN's
    generalisation degrades with the step: its final Test-LRfit at the largest step size exceeds
    that at the smallest by more than :data:`LOSS_FACTOR`. GD's improves until it is unstable:
    among GD's stable step sizes (not :func:`failed`) the final test loss at the largest is
    below that at the smallest by more than :data:`LOSS_FACTOR`, and a larger step size
    failed. Returns ``(markdown table, rows)``, rows as :func:`itlin_core.book.claims.judge`
    makes them.

    Examples:
      >>> gn = {"lr": np.array([0.01, 1.0]), "iters": np.array([0, 10, 100]), "final_lrfit": np.array([0.1, 0.8]),
      ...       "lrfit": np.array([[1.0, 1.0], [0.2, 0.9], [0.1, 0.8]]),
      ...       "test_loss": np.array([[1.0, 1.0], [0.95, 0.5], [0.5, 0.4]])}
      >>> gd = {"lr": np.array([1.0, 10.0, 100.0]), "diverged": np.array([False, False, True]),
      ...       "train_loss": np.ones((1, 3)), "final_train_loss": np.array([0.1, 0.1, np.nan]),
      ...       "final_test_loss": np.array([0.5, 0.2, np.nan])}        # GD: better at 10 than at 1, diverged at 100
      >>> table, rows = image_claims({"gn": gn, "gd": gd, "rf": 1.0})
      >>> [r["verdict"] for r in rows]
      ['yes', 'yes', 'yes']
      >>> print(rows[0]["shows"])
      step 0.01: Test-LRfit below half RF's 1 from iteration 10, the test loss above 0.9 of its start
    """
    gn, gd, rf = res["gn"], res["gd"], res["rf"]
    small = int(np.argmin(gn["lr"]))
    at = hidden_learning_at(gn, small, rf)
    best = float(np.min(gn["lrfit"][:, small]))
    hidden = f"step {gn['lr'][small]:g}: " + (
        f"Test-LRfit below half RF's {rf:.3g} from iteration {at:,}, the test loss above 0.9 of its start"
        if at is not None else f"Test-LRfit below half RF's {rf:.3g} only once the test loss had moved"
        if best < 0.5 * rf else f"Test-LRfit never below half RF's {rf:.3g} (lowest {best:.3g})")
    order = np.argsort(gn["lr"])
    fit = gn["final_lrfit"][order]
    gn_shows = ", ".join(f"{gn['lr'][i]:g}: {gn['final_lrfit'][i]:.3g}" for i in order) + f" ({_trend(fit)})"
    bad = failed(gd)
    stable = np.flatnonzero(~bad)
    stable = stable[np.argsort(gd["lr"][stable])]
    loss = gd["final_test_loss"][stable]
    fails_above = stable.size > 0 and bool(np.any(bad & (gd["lr"] > gd["lr"][stable[-1]])))
    gd_shows = (", ".join(f"{gd['lr'][i]:g}: {gd['final_test_loss'][i]:.3g}" for i in stable)
                + f" ({_trend(loss) if stable.size else 'none stable'}); unstable at "
                + (", ".join(f"{v:g}" for v in np.sort(gd["lr"][bad])) if bad.any() else "no step size"))
    rows = [
        ("GN learns hidden features at small step sizes", "Test-LRfit falls well below RF while the test loss "
         "has hardly moved", hidden, at is not None),
        ("GN generalises worse as its step size grows", "final test loss and Test-LRfit rise with the step size",
         "final Test-LRfit by step size " + gn_shows, _trend(fit) == "rises"),
        ("GD generalises better as its step size grows, until it is unstable", "final test loss falls with "
         "the step size up to 10; larger steps diverge", "final test loss by stable step size " + gd_shows,
         stable.size >= 2 and _trend(loss) == "falls" and fails_above)]
    rows = [{"claim": c, "paper": p, "shows": sh, "verdict": "yes" if ok else "no"} for c, p, sh, ok in rows]
    return claims_markdown(rows), rows


__all__ = ["SOURCES", "ImageTeacherConfig", "IMAGE_TEACHER", "image_teacher_config", "balanced_indices",
           "train_teacher", "image_teacher_problem", "run_image_teacher", "LOSS_FACTOR", "failed", "image_claims"]
