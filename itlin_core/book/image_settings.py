"""The settings the image chapters share: the smoke and laptop scales, our reading of the
paper's CIFAR10 learning rate, the paper's own rescaling rule (:func:`scaled`) and :func:`group`, the
:class:`~itlin_core.book.image_runs.ImageRunConfig` of a LeNet-50 on CIFAR10 unless told
otherwise. Each image chapter module builds its table of run groups from these; every number the
papers give is used at the ``paper`` preset, and where a setting is not in our copy of the papers
the chapter module's comments say what we chose.
"""

from __future__ import annotations

from .image_runs import ImageRunConfig

#: Settings of every smoke group: tiny models and evaluations on stand-in data. The smoke preset
#: checks mechanics, so its evaluations are as small as still exercise them: one chunk of 64
#: test images, minibatches of 16 (a smoke step is dominated by its batch on a CPU: measured on
#: this 2-core machine, a 40-step LeNet-50 group took 7.1 s at 16 against 12.0 s at 32), and 3
#: power iterations where a group measures the curvature (the tests of
#: :func:`itlin_core.max_curvature` check its accuracy).
SMOKE = dict(n_eval=64, eval_batch=64, batch_size=16, width=6, probe_train=64, curvature_iterations=3)
#: Our reading of the CIFAR10 learning rate for finite K: Fig. 4's (the other captions are not in our copy).
CIFAR_PAPER_LR = 1e-5
#: The SGD rate of cifar_features' colab groups: 5x below the 1e-2 at which its first H100 record's
#: K = 100 and K = 5,000 diverged (2 / lr = 1,000 against 200), the rate at which
#: cifar_few_updates' laptop groups kept lambda_max below 2 / lr (peak 719). At the paper's width
#: the second H100 record measured more: K = 50 diverged on 4,000 and 16,000 images at this rate,
#: so cifar_few_updates' colab groups use half of it on 2,000 images (see their comment).
COLAB_STABLE_LR = 2e-3
#: The laptop scale of the LeNet-50 groups of every image chapter: 8 channels instead of 50,
#: minibatches of 64, a 10,000-image training subset and 1,000 evaluated images; with a few
#: thousand steps per group, a chapter records in well under an hour on a 2-core CPU (each
#: chapter prints the measured time).
LAPTOP = dict(width=8, batch_size=64, n_train=10_000, n_eval=1000, eval_batch=500)
#: The laptop learning rate of the SGD groups: half colab's. A first recording of
#: cifar_few_updates at colab's 0.01 (3,000 steps) diverged for K = 10 and K = 100 (training loss non-finite) and collapsed late
#: for K = 300 and both drift rules; 0.005 and 0.003 kept the training loss falling for
#: K = 10, 100, 300 and on_drift(0.2) over 3,000 steps. Chosen on the training loss alone,
#: never on test accuracy.
LAPTOP_LR = 5e-3
#: Full-batch steps accumulate the gradient over chunks of this many images: the same step, in
#: memory that grows with the chunk instead of the batch, so that the colab and paper Fig. 11
#: groups fit a Colab GPU (tests/test_image_runs.py checks XLA's memory plan of both).
FULL_BATCH_CHUNK = 500


def scaled(c: float, *, lr, Ks, steps, eval_every) -> dict:
    """Goldwaser and Ge's own rescaling (their Fig. 11): lr * c, K / c, steps / c (K values that
    coincide after the division are kept once); used where a smaller preset keeps a paper group's
    training time at a rate whose stability was checked."""
    Ks = tuple(dict.fromkeys(None if k is None else max(1, int(round(k / c))) for k in Ks))
    return dict(lr=lr * c, Ks=Ks, steps=int(steps / c), eval_every=max(1, int(eval_every / c)))


def group(**kw) -> ImageRunConfig:
    """An :class:`ImageRunConfig` with LeNet-50 on CIFAR10 unless ``model``/``dataset`` say otherwise."""
    return ImageRunConfig(dataset=kw.pop("dataset", "cifar10"), model=kw.pop("model", "lenet50"), **kw)


__all__ = ["SMOKE", "CIFAR_PAPER_LR", "COLAB_STABLE_LR", "LAPTOP", "LAPTOP_LR", "FULL_BATCH_CHUNK", "scaled", "group"]
