"""Chapter "Solving and damping each linearisation (CIFAR10)": Goldwaser and Ge's Fig. 8 (each
linearisation solved by Adam, against SGD) and Fig. 9 bottom (a proximal damping of every
linearisation). The run groups per preset, and the figures from a record."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np

from . import plotting
from .image_chapters import CIFAR_PAPER_LR, SMOKE, group
from .image_records import best_accuracy

#: The proximal weights of Fig. 9 bottom: our choice, the papers do not list their lambdas.
DAMPINGS = (0.0, 1e-3, 1e-2, 1e-1, 1.0)


def runs(preset: str) -> dict:
    """The run groups at ``preset`` (``smoke``, ``colab`` or ``paper``)."""
    if preset == "smoke":
        base = dict(steps=40, eval_every=10, **SMOKE)
        return {"fig8_sgd": group(Ks=(1,), lr=0.02, **base),
                "fig8_adam": group(Ks=(1, 20), lr=1e-3, optimizer="adam", **base),
                "fig9": group(Ks=(20,), dampings=(0.0, 0.1, 1.0), lr=1e-3, optimizer="adam", **base)}
    if preset == "paper":
        return {"fig8_sgd": group(steps=60_000_000, eval_every=500_000, Ks=(1,), lr=CIFAR_PAPER_LR),
                "fig8_adam": group(steps=2_000_000, eval_every=10_000, Ks=(1, 200_000), lr=1e-4, optimizer="adam"),
                "fig9": group(steps=2_000_000, eval_every=10_000, Ks=(200_000,), dampings=DAMPINGS, lr=1e-4,
                              optimizer="adam")}
    # colab: not the lr*c rule. Fig. 8's point is that every linearisation is solved (training
    # accuracy near 100%) before the next one; on a 10,000-image subset 2000 Adam steps at 1e-3
    # (51 epochs) per linearisation, 10 linearisations as in the paper (2e6 / 2e5). SGD K=1 as
    # the colab Fig. 3 group (lr 1e-2 on the same subset).
    return {"fig8_sgd": group(steps=40_000, eval_every=1000, Ks=(1,), lr=1e-2, n_train=10_000, n_eval=2000),
            "fig8_adam": group(steps=20_000, eval_every=500, Ks=(1, 2000), lr=1e-3, optimizer="adam",
                               n_train=10_000, n_eval=2000),
            "fig9": group(steps=20_000, eval_every=500, Ks=(2000,), dampings=DAMPINGS, lr=1e-3, optimizer="adam",
                          n_train=10_000, n_eval=2000)}


def figure_8(results, source):
    """Fig. 8: SGD against Adam with K = 1 and with each linearisation solved (large K); prints
    the table behind it."""
    if results is None:
        print("Fig. 8 not shown: no recorded result.")
        return
    sgd, adam = results["fig8_sgd"], results["fig8_adam"]
    big = max(range(len(adam["Ks"])), key=lambda i: adam["Ks"][i] or math.inf)
    small = [i for i, K in enumerate(adam["Ks"]) if K == 1]
    red = ["tab:red"] * len(adam["Ks"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    plotting.plot_record_curves(axes[0], sgd, "test_accuracy_proxy", colours=["tab:blue"], label_suffix=" (SGD)")
    plotting.plot_record_curves(axes[0], adam, "test_accuracy_proxy", colours=["tab:orange"] * len(adam["Ks"]),
                                label_suffix=" (Adam)", linestyle=":", runs=small)
    plotting.plot_record_curves(axes[0], adam, "test_accuracy_proxy", colours=red,
                                label_suffix=" (Adam, each linearisation solved)", runs=[big])
    axes[0].set(title="Test accuracy")
    axes[0].legend(loc="lower right")
    plotting.plot_record_curves(axes[1], adam, "train_accuracy_proxy", colours=red, label_suffix=": proxy (trained)",
                                runs=[big])
    plotting.plot_record_curves(axes[1], adam, "train_accuracy_network", colours=red, label_suffix=": network",
                                linestyle="--", runs=[big])
    plotting.mark_feature_updates(axes[1], adam, runs=[big])
    axes[1].set(title="Training accuracy, large K (dotted: feature updates)")
    axes[1].legend(loc="lower right")
    fig.suptitle(f"Like the paper's Fig. 8 (LeNet-50): solving each linearisation with Adam\n{source}")
    fig.tight_layout()
    plt.show()
    print(f"{'run':>28} {'linearisations':>15} {'best test acc. (%)':>19} {'final test acc. (%)':>20} "
          f"{'final train acc. (%)':>21}")
    for rec, opt in ((sgd, "SGD"), (adam, "Adam")):
        best = best_accuracy(rec)
        for i, label in enumerate(rec["labels"]):
            m = rec["metrics"]
            print(f"{opt + ', ' + label:>28} {int(np.asarray(rec['feature_updates'])[-1, i]):>15,} {100 * best[i]:>19.1f} "
                  f"{100 * m['test_accuracy_proxy'][-1, i]:>20.1f} {100 * m['train_accuracy_proxy'][-1, i]:>21.1f}")


def figure_9(results, source):
    """Fig. 9 bottom: test and training accuracy for every damping at one K, and the test
    accuracy against the damping; prints the table behind it."""
    if results is None:
        print("Fig. 9 (bottom) not shown: no recorded result.")
        return
    rec = results["fig9"]
    lams = np.asarray(rec["dampings"], dtype=float)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.7))
    plotting.plot_record_curves(axes[0], rec, "test_accuracy_proxy")
    axes[0].set(title="Test accuracy")
    plotting.plot_record_curves(axes[1], rec, "train_accuracy_proxy")
    axes[1].set(title="Training accuracy (of the proxy)")
    axes[0].legend(loc="lower right")
    positive = lams[lams > 0]
    x0 = positive.min() / 10 if len(positive) else 1.0
    xs = np.where(lams > 0, lams, x0)
    best, final = best_accuracy(rec), np.asarray(rec["metrics"]["test_accuracy_proxy"])[-1]
    axes[2].plot(xs, 100 * best, "o-", color="tab:purple", label="best (early stopping)")
    axes[2].plot(xs, 100 * final, "s--", color="tab:grey", label="final")
    axes[2].set_xscale("log")
    axes[2].set_xticks(xs, ["0" if v == 0 else f"{v:g}" for v in lams])
    axes[2].minorticks_off()
    axes[2].set(xlabel="damping λ (proximal weight)", ylabel="test accuracy (%)", title="Test accuracy against λ")
    axes[2].legend(loc="lower right")
    fig.suptitle(f"Like the paper's Fig. 9 bottom (LeNet-50, Adam, K={rec['Ks'][0]}): damping each "
                 f"linearisation\n{source}")
    fig.tight_layout()
    plt.show()
    print(f"{'lambda':>8} {'best test acc. (%)':>19} {'final test acc. (%)':>20} {'final train acc. (%)':>21}")
    for i, lam in enumerate(lams):
        print(f"{lam:>8g} {100 * best[i]:>19.1f} {100 * final[i]:>20.1f} "
              f"{100 * rec['metrics']['train_accuracy_proxy'][-1, i]:>21.1f}")


__all__ = ["DAMPINGS", "runs", "figure_8", "figure_9"]
