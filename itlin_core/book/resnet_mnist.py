"""Chapter "ResNets, BatchNorm and MNIST": Goldwaser and Ge's Fig. 10 (ResNet-18 with and without
BatchNorm) and Fig. 1 of their workshop paper (K sweeps on MNIST and CIFAR10 at two learning
rates). The run groups per preset, and the figures from a record."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from . import plotting
from .image_chapters import SMOKE, group, scaled
from .image_records import best_accuracy

#: The run groups of the workshop paper's Fig. 1.
FIG1 = ("mnist_lr1e-4", "cifar_lr1e-4", "cifar_lr1e-5")


def runs(preset: str) -> dict:
    """The run groups at ``preset`` (``smoke``, ``colab`` or ``paper``)."""
    if preset == "smoke":
        base = dict(steps=20, eval_every=10, **dict(SMOKE, width=4))
        return {"fig10_plain": group(model="resnet18", Ks=(1, 10), lr=1e-3, **base),
                "fig10_bn": group(model="resnet18_bn", Ks=(1, 10), lr=1e-2, augment=True, **base),
                "mnist_lr1e-4": group(dataset="mnist", Ks=(1, 5, None), lr=0.02, steps=40, eval_every=10, **SMOKE),
                "cifar_lr1e-4": group(Ks=(1, 5), lr=0.02, steps=40, eval_every=10, **SMOKE),
                "cifar_lr1e-5": group(Ks=(1, 20), lr=0.002, steps=40, eval_every=10, **SMOKE)}
    # Workshop Fig. 1: the workshop paper gives the rates and K values, not the batch size or the
    # number of steps: we use the main paper's batch of 256 and a mean cross-entropy.
    paper = {"fig10_plain": group(model="resnet18", steps=5_000_000, eval_every=50_000, Ks=(1, 1_000_000), lr=7e-7),
             "fig10_bn": group(model="resnet18_bn", steps=1_000_000, eval_every=10_000, Ks=(1, 100_000), lr=1e-5,
                               augment=True),
             "mnist_lr1e-4": group(dataset="mnist", steps=1_000_000, eval_every=10_000,
                                   Ks=(1, 10, 100, 1000, None), lr=1e-4),
             "cifar_lr1e-4": group(steps=1_000_000, eval_every=10_000, Ks=(1, 2, 5, 10), lr=1e-4),
             "cifar_lr1e-5": group(steps=2_000_000, eval_every=20_000, Ks=(1, 100, 1000, 20_000), lr=1e-5)}
    if preset == "paper":
        return paper
    # colab: ResNet-18 at a quarter of the width on 10,000 images, lr x 1000 (x 100 with BatchNorm).
    # The workshop runs: MNIST with c = 10 and CIFAR10 at 1e-5 with c = 100 (lr * c, K and steps / c;
    # K values that coincide after the division are kept once); CIFAR10 at 1e-4 cannot be rescaled
    # (K / 10 < 1 for the paper's K = 2, 5) and keeps the paper's rate and K, which is where the
    # workshop paper saw divergence, trained for a twentieth of the paper-preset steps.
    return {"fig10_plain": group(model="resnet18", width=16, steps=10_000, eval_every=250, Ks=(1, 1000),
                                 lr=7e-4, n_train=10_000, n_eval=2000),
            "fig10_bn": group(model="resnet18_bn", width=16, steps=10_000, eval_every=250, Ks=(1, 1000), lr=1e-3,
                              augment=True, n_train=10_000, n_eval=2000),
            "mnist_lr1e-4": group(dataset="mnist", n_eval=2000,
                                  **scaled(10, lr=1e-4, Ks=(1, 10, 100, 1000, None), steps=1_000_000,
                                           eval_every=10_000)),
            "cifar_lr1e-4": group(n_eval=2000, lr=1e-4, Ks=(1, 2, 5, 10), steps=50_000, eval_every=500),
            "cifar_lr1e-5": group(n_eval=2000, **scaled(100, lr=1e-5, Ks=(1, 100, 1000, 20_000),
                                                        steps=2_000_000, eval_every=20_000))}


def diverged_runs(results) -> list:
    """``(group, run label, step)`` for every run whose training loss became non-finite."""
    return [(name, label, d) for name, rec in results.items() for label, d in zip(rec["labels"], rec["diverged_at"])
            if d is not None]


def figure_10(results, source):
    """Fig. 10: K = 1 against a large K for ResNet-18 without and with BatchNorm, network and
    proxy; prints the accuracies behind it."""
    if results is None:
        print("Fig. 10 not shown: no recorded result.")
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, name, title in zip(axes, ("fig10_plain", "fig10_bn"),
                               ("without BatchNorm", "with BatchNorm and augmentation")):
        rec = results[name]
        plotting.plot_record_curves(ax, rec, "test_accuracy_proxy", label_suffix=": proxy (trained)")
        big = [i for i, K in enumerate(rec["Ks"]) if K != 1]
        plotting.plot_record_curves(ax, rec, "test_accuracy_network", label_suffix=": network", linestyle="--", runs=big)
        plotting.mark_feature_updates(ax, rec, runs=big)
        ax.set(title=f"ResNet-18 {title}, lr {rec['config']['lr']:g}")
        ax.legend(loc="lower right")
    axes[1].set_ylabel("")
    fig.suptitle(f"Like the paper's Fig. 10: ResNet-18 on CIFAR10, K=1 against a large K\n{source}")
    fig.tight_layout()
    plt.show()
    for name in ("fig10_plain", "fig10_bn"):
        rec = results[name]
        best = best_accuracy(rec)
        for i, label in enumerate(rec["labels"]):
            m = rec["metrics"]
            print(f"{name:12s} {label:>6}: {int(np.asarray(rec['feature_updates'])[-1, i]):>7,} linearisations; "
                  f"best test accuracy {100 * best[i]:.1f} %, final: proxy {100 * m['test_accuracy_proxy'][-1, i]:.1f} %, "
                  f"network {100 * m['test_accuracy_network'][-1, i]:.1f} %"
                  + ("" if rec["diverged_at"][i] is None else f"; diverged at step {rec['diverged_at'][i]:,}"))


def figure_1(results, source):
    """The workshop paper's Fig. 1: test accuracy per K for each of its three settings (a cross
    marks a run that diverged); prints the best accuracies."""
    if results is None:
        print("Fig. 1 (workshop paper) not shown: no recorded result.")
        return
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.7))
    for ax, name in zip(axes, FIG1):
        rec = results[name]
        plotting.plot_record_curves(ax, rec, "test_accuracy_proxy")
        cfg = rec["config"]
        ax.set(title=f"{cfg['dataset'].upper()}, lr {cfg['lr']:g} (group {name})")
        ax.legend(loc="lower right")
    fig.suptitle(f"Like the workshop paper's Fig. 1 (LeNet-50): test accuracy per K; x = diverged\n{source}")
    fig.tight_layout()
    plt.show()
    for name in FIG1:
        rec = results[name]
        best = best_accuracy(rec)
        print(f"{name}: " + "; ".join(
            f"{label} best {100 * b:.1f} %" + ("" if d is None else f" (diverged at step {d:,})")
            for label, b, d in zip(rec["labels"], best, rec["diverged_at"])))


__all__ = ["FIG1", "runs", "diverged_runs", "figure_10", "figure_1"]
