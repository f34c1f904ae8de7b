"""Chapter "When should the features be refreshed?" (beyond Goldwaser and Ge, who name adaptive
periods as future work in §6.1): IL on the digits CNN with a fixed period, geometric periods and
drift-triggered refreshes (:mod:`itlin_core.relinearise`), all in one vmapped sweep, compared at
equal numbers of feature updates; the kernel's movement along training; the verdict computed."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

import itlin_core as ic

from .common import per_preset
from .digits_cnn import _digits_optimizer, digits_config, digits_data


@dataclasses.dataclass(frozen=True)
class RefreshConfig:
    """The digits problem of the digits chapter at the same preset (data, CNN, SGD learning rate,
    batch size: :class:`~itlin_core.book.digits_cnn.DigitsConfig`), trained for ``steps`` steps and
    evaluated every ``eval_every`` steps, with one run per rule: ``every(K)`` for ``K`` in ``fixed``,
    ``geometric(K0, ratio)`` for ``K0`` in ``geometric``, ``on_drift(tol)`` for ``tol`` in ``tols``
    (drift measured at every ``drift_every``-th step on the step's minibatch). At every evaluation:
    the proxy's and the network's test accuracy, the linearisations used so far, the drift on the
    first ``drift_examples`` training images, and the empirical NTK (trace over the 10 logits) on
    the first ``kernel_examples`` test images. Two runs count as tied when their test accuracies
    differ by less than ``tie_images`` test images."""

    steps: int
    eval_every: int
    fixed: tuple
    geometric: tuple
    ratio: float
    tols: tuple
    drift_every: int = 5
    drift_examples: int = 256
    kernel_examples: int = 64
    tie_images: int = 3


REFRESH = {
    "smoke": RefreshConfig(steps=600, eval_every=100, fixed=(1, 100, None), geometric=(10,), ratio=2.0,
                           tols=(0.2,)),
    "book": RefreshConfig(steps=2000, eval_every=100, fixed=(1, 10, 30, 100, 300, 1000, None), geometric=(3, 30),
                          ratio=1.5, tols=(0.1, 0.2, 0.4)),
}


def refresh_config(preset: str | None = None) -> RefreshConfig:
    return per_preset(REFRESH, preset)


def rules_of(cfg: RefreshConfig) -> dict:
    """``{family: [(label, rule), ...]}`` for the families ``fixed``, ``geometric``, ``drift``."""
    fixed = [("K=∞" if K is None else f"K={K}", ic.every(K)) for K in cfg.fixed]
    geo = [(f"geometric({K0}, {cfg.ratio:g})", ic.geometric(K0, cfg.ratio)) for K0 in cfg.geometric]
    drift = [(f"on_drift({tol:g})", ic.on_drift(tol)) for tol in cfg.tols]
    return {"fixed": fixed, "geometric": geo, "drift": drift}


def drift_on(apply_fn, params, anchor, x) -> jax.Array:
    """The drift ``d = ||f(params) - f_lin(params)|| / ||f(params) - f(anchor)||`` of
    :mod:`itlin_core.relinearise` on the inputs ``x`` (0 when ``params`` is the anchor)."""
    f = apply_fn(params, x)
    f_lin = ic.linearise(apply_fn, anchor)(params, x)
    sq = lambda a, b: jnp.sum(jnp.square(a - b))
    return ic.relinearise.drift_ratio(sq(f, f_lin), sq(f, apply_fn(anchor, x)))


def run_refresh(cfg: RefreshConfig, progress=None, data: dict | None = None, digits=None) -> dict:
    """Train every rule of :func:`rules_of` at once (:func:`itlin_core.make_il_sweep_step`) on the
    digits problem ``digits`` (default: the digits chapter's config at ``$ITLIN_PRESET``).

    Returns the :func:`itlin_core.train` history (arrays ``(evals, runs)``): ``test_accuracy_proxy``
    (the model being trained), ``test_accuracy_network``, ``updates`` (linearisations used by the
    steps before the evaluation), ``drift`` and ``ntk`` (``(evals, runs, n, n)``), plus ``labels``,
    ``families`` (one per run), ``rules``, the final ``state`` and ``n_params``."""
    dcfg = digits_config() if digits is None else digits
    data = digits_data(dcfg) if data is None else data
    model = ic.small_cnn(10, (8, 8, 1), dcfg.channels, dcfg.dense)
    params0 = model.init(jax.random.key(dcfg.seed + 1))
    opt = _digits_optimizer(dcfg)
    families = rules_of(cfg)
    runs = [(fam, label, rule) for fam, rs in families.items() for label, rule in rs]
    step, rules = ic.make_il_sweep_step(model.apply, ic.softmax_cross_entropy, opt, [r for _, _, r in runs],
                                        drift_every=cfg.drift_every)
    xte, yte = data["x_test"], data["y_test"]
    il_eval = ic.make_il_eval(model.apply, {"test": (xte, yte)}, {"accuracy": ic.accuracy})
    xd, xk = data["x_train"][:cfg.drift_examples], xte[:cfg.kernel_examples]

    def eval_fn(state):
        out = il_eval(state)
        out["updates"] = state.updates
        out["drift"] = drift_on(model.apply, state.params, state.anchor, xd)
        out["ntk"] = ic.empirical_ntk(model.apply, state.params, xk)
        return out

    batches = ic.minibatches(jax.random.key(dcfg.seed + 2), data["x_train"], data["y_train"], dcfg.batch_size)
    states, hist = ic.train(step, ic.replicate(ic.init_il_state(params0, opt), len(runs)), batches, cfg.steps,
                            eval_fn=jax.vmap(eval_fn), eval_every=cfg.eval_every, progress=progress,
                            desc=f"digits: {len(runs)} relinearisation rules")
    hist.update(labels=[label for _, label, _ in runs], families=[fam for fam, _, _ in runs], rules=rules,
                state=states, n_params=ic.count_params(params0), n_test=int(len(yte)))
    return hist


def kernel_movement(ntk: np.ndarray) -> dict:
    """From kernels ``(evals, n, n)`` of one run: ``from_init`` (kernel distance to the first) and
    ``per_interval`` (distance between consecutive evaluations; its first entry is NaN)."""
    ntk = np.asarray(ntk)
    d0 = np.array([float(ic.kernel_distance(ntk[0], k)) for k in ntk])
    step = np.array([np.nan] + [float(ic.kernel_distance(a, b)) for a, b in zip(ntk[:-1], ntk[1:])])
    return {"from_init": d0, "per_interval": step}


def compare_at_equal_updates(hist: dict, cfg: RefreshConfig) -> list:
    """For every geometric and drift run: its final test accuracy against the fixed-period curve
    interpolated (linearly in log updates) at the same number of updates. Returns dicts with
    ``label``, ``family``, ``updates``, ``accuracy``, ``fixed_accuracy`` (NaN where the run's count
    lies outside the fixed runs' range), ``difference`` and ``verdict`` (``"better"``, ``"worse"``,
    ``"tied"``: within ``cfg.tie_images`` test images, or ``"outside"``)."""
    acc, upd = hist["test_accuracy_proxy"][-1], hist["updates"][-1]
    fam = np.asarray(hist["families"])
    fixed = np.where(fam == "fixed")[0]
    order = fixed[np.argsort(upd[fixed])]
    xs, ys = np.log(upd[order].astype(float)), acc[order]
    tie = cfg.tie_images / hist["n_test"]
    rows = []
    for i in np.where(fam != "fixed")[0]:
        u = float(upd[i])
        inside = xs[0] <= math.log(u) <= xs[-1]
        ref = float(np.interp(math.log(u), xs, ys)) if inside else math.nan
        diff = float(acc[i]) - ref
        verdict = "outside" if not inside else "tied" if abs(diff) < tie else "better" if diff > 0 else "worse"
        rows.append({"label": hist["labels"][i], "family": str(fam[i]), "updates": int(u), "accuracy": float(acc[i]),
                     "fixed_accuracy": ref, "difference": diff, "verdict": verdict})
    return rows


def fixed_note(hist: dict) -> str:
    """A sentence on the fixed periods that end below ``K = inf`` (the reference curve's dips), or
    that none does."""
    acc, fam, labels = hist["test_accuracy_proxy"][-1], np.asarray(hist["families"]), hist["labels"]
    i_inf = labels.index("K=∞")
    below = [labels[i] for i in np.where(fam == "fixed")[0] if i != i_inf and acc[i] < acc[i_inf]]
    if not below:
        return "Every finite fixed period ends above K = ∞."
    return (f"At this budget {', '.join(below)} {'ends' if len(below) == 1 else 'end'} below K = ∞ "
            f"({', '.join(f'{100 * acc[labels.index(b)]:.1f}%' for b in below)} against {100 * acc[i_inf]:.1f}%), "
            "which pulls the fixed curve down between its neighbours.")


def verdict_sentence(rows: list, tie_images: int) -> str:
    """One sentence that says what wins at equal numbers of updates, generated from ``rows``."""
    inside = [r for r in rows if r["verdict"] != "outside"]
    if not inside:
        return "No adaptive run used a number of updates inside the fixed periods' range, so none can be compared."
    counts = {v: sum(r["verdict"] == v for r in inside) for v in ("better", "tied", "worse")}
    best = max(inside, key=lambda r: r["difference"])
    worst = min(inside, key=lambda r: r["difference"])
    head = (f"Of the {len(inside)} adaptive runs compared, {counts['better']} beat the fixed period at the same "
            f"number of updates, {counts['tied']} tie with it (within {tie_images} test images) and "
            f"{counts['worse']} fall behind it")
    return (f"{head}; the differences range from {100 * worst['difference']:+.1f} points ({worst['label']}) "
            f"to {100 * best['difference']:+.1f} points ({best['label']}).")


__all__ = ["RefreshConfig", "REFRESH", "refresh_config", "rules_of", "drift_on", "run_refresh", "kernel_movement",
           "compare_at_equal_updates", "fixed_note", "verdict_sentence"]
