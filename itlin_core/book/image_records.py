"""The records of image run groups: what :func:`summarise` keeps of a training history, what the
chapters read from it (:func:`best_accuracy`), and the checks every record must pass
(:func:`check_record`), whatever the data and the scale."""

from __future__ import annotations

import dataclasses
import hashlib
import math

import jax
import numpy as np

import itlin_core as ic

from .common import feature_updates, k_text, parse_rule, rule_family
from .image_runs import ImageRunConfig


def params_digest(params) -> str:
    """A SHA-256 digest of a parameter tree: its structure, and every leaf's dtype, shape and
    bytes, in the tree's order. Two trees have the same digest exactly when they are equal bit for
    bit (up to a hash collision), so a record can say which parameters a run ended with in 64
    characters, and a chapter can check that the code it shows trains exactly the recorded run
    without training it twice.

    Example:
      >>> import numpy as np
      >>> a = {"w": np.zeros((2, 3), np.float32)}
      >>> params_digest(a) == params_digest({"w": np.zeros((2, 3), np.float32)})
      True
      >>> params_digest(a) == params_digest({"w": np.zeros((2, 3), np.float64)})
      False
    """
    leaves, treedef = jax.tree.flatten(params)
    h = hashlib.sha256(str(treedef).encode())
    for leaf in leaves:
        a = np.ascontiguousarray(np.asarray(leaf))
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def summarise(hist: dict) -> dict:
    """The record of one :func:`itlin_core.book.image_runs.run_images` group: JSON-able (via
    :func:`itlin_core.book.records.save_results`)
    and what the chapters plot. Keys: ``config``, ``labels``, ``Ks`` (``None`` for inf),
    ``dampings``, ``eval_step``, ``feature_updates`` ``(evals, runs)``, ``metrics`` (each
    ``(evals, runs)``; evaluations after a run diverged are NaN), ``filters`` (when recorded),
    ``train_loss`` (mean training loss over each evaluation interval, ``(evals - 1, runs)``),
    ``diverged_at`` (per run, step or ``None``), ``seconds``, ``steps_per_second``,
    ``n_params``, ``n_train``, ``n_eval``, ``stand_in`` and, when ``hist`` holds the final
    ``state``, ``params_digest`` (:func:`params_digest` of its parameters, stacked over runs)."""
    cfg: ImageRunConfig = hist["config"]
    runs = cfg.runs
    steps = np.asarray(hist["eval_step"])
    loss = np.asarray(hist["loss"], dtype=np.float64).reshape(-1, len(runs))
    block = int(hist.get("loss_every", 1))
    n_steps = int(steps[-1]) if len(steps) else 0
    nonfinite = hist.get("nonfinite_at")  # None only when no step was taken
    nonfinite = np.full(len(runs), -1) if nonfinite is None else np.asarray(nonfinite).reshape(len(runs))
    diverged = [int(d) if d >= 0 else None for d in nonfinite]
    mask = np.stack([steps > (d if d is not None else np.inf) for d in diverged], axis=1)
    # linearisations used so far: the schedule's count, or (a drift-triggered rule) the run's own
    # count, recorded at every evaluation as "updates"
    counted = np.asarray(hist["updates"], np.int64) if "updates" in hist else None
    updates = np.stack([np.maximum(1, counted[:, i]) if rule_family(k) == "drift"
                        else feature_updates([k], steps)[:, 0] for i, (k, _) in enumerate(runs)], axis=1) \
        if runs else np.zeros((len(steps), 0), np.int64)
    metrics = {}
    for k, v in hist.items():
        if k in ("loss", "eval_step", "filters", "updates") or not isinstance(v, np.ndarray) or v.ndim != 2:
            continue
        a = np.asarray(v, dtype=np.float64)
        metrics[k] = np.where(mask, np.nan, a)
    # loss[j] is the mean over steps [j * block, min((j + 1) * block, n_steps)); the evaluation at
    # step s follows the steps < s, and evaluation steps are multiples of block (or the last step)
    sizes = np.minimum(block, n_steps - block * np.arange(len(loss)))
    edges = -(-np.clip(steps, 0, n_steps) // block)
    train_loss = np.stack([(sizes[a:b, None] * loss[a:b]).sum(axis=0) / sizes[a:b].sum() if b > a
                           else np.full(len(runs), np.nan)
                           for a, b in zip(edges[:-1], edges[1:])]) if len(steps) > 1 else np.zeros((0, len(runs)))
    out = {"config": cfg.as_dict(), "labels": cfg.labels,
           "Ks": [k if isinstance(k, str) else None if k is None or k == math.inf else int(k) for k, _ in runs],
           "dampings": [float(lam) for _, lam in runs], "eval_step": steps,
           "feature_updates": updates, "metrics": metrics,
           "train_loss": train_loss, "diverged_at": diverged, "seconds": float(hist["seconds"]),
           "steps_per_second": float(n_steps / hist["seconds"]) if hist["seconds"] > 0 else None,
           "n_params": int(hist["n_params"]), "n_train": int(hist["n_train"]), "n_eval": int(hist["n_eval"]),
           "stand_in": bool(hist["stand_in"])}
    if "filters" in hist:
        out["filters"] = np.asarray(hist["filters"], dtype=np.float32)
    if "state" in hist:
        out["params_digest"] = params_digest(hist["state"].params)
    return out


def best_accuracy(record: dict, metric: str = "test_accuracy_proxy") -> np.ndarray:
    """Optimal early stopping (Goldwaser and Ge, App. C.2.1, Figs. 3 and 4): the best value of ``metric``
    over a record's evaluations, per run (NaN evaluations ignored).

    Examples:
      >>> acc = np.array([[0.1, 0.1], [0.5, 0.3], [0.4, np.nan]])     # (evaluations, runs); run 2 diverged
      >>> best_accuracy({"metrics": {"test_accuracy_proxy": acc}}).tolist()
      [0.5, 0.3]
    """
    a = np.asarray(record["metrics"][metric], dtype=np.float64)
    with np.errstate(all="ignore"):
        return np.where(np.isfinite(a).any(axis=0), np.nanmax(np.where(np.isfinite(a), a, -np.inf), axis=0), np.nan)


def accuracy_noise_points(n_eval: int) -> float:
    """The binomial standard error of a test accuracy measured on ``n_eval`` images, at its
    largest (accuracy 1/2), in percentage points: ``100 * sqrt(1/4 / n_eval)``. Two runs of one
    seed whose accuracies differ by less than about twice this are within noise.

    Examples:
      >>> accuracy_noise_points(10000), accuracy_noise_points(100)
      (0.5, 5.0)
    """
    if not isinstance(n_eval, (int, np.integer)) or isinstance(n_eval, bool) or n_eval < 1:
        raise ValueError(f"n_eval (the number of test images evaluated) must be an integer >= 1, got {n_eval!r}.")
    return 100.0 * float(np.sqrt(0.25 / n_eval))


def settings_markdown(groups: dict) -> str:
    """The run groups of a chapter (``{name: ImageRunConfig}``) as a Markdown table, one row per
    group: the table of typed settings a chapter notebook displays.

    Examples:
      >>> cfg = ImageRunConfig("cifar10", "lenet50", steps=4000, eval_every=100, Ks=(1, 20, None), lr=0.02)
      >>> print(settings_markdown({"fig2": cfg}).splitlines()[-1])
      | `fig2` | lenet50 | sgd | 0.02 | 256 | all | 1, 20, ∞ | 0 | 4,000 | 100 on 10,000 test images |
    """
    lines = ["| group | model | optimiser | lr | batch | training images | K | λ | steps | evaluated every |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, cfg in groups.items():
        model = cfg.model + ("" if cfg.width is None else f" (width {cfg.width})")
        opt = cfg.optimizer + (", restarted at updates" if cfg.reset_optimizer else "")
        batch = "full" if cfg.batch_size is None else f"{cfg.batch_size:,}"
        n = "all" if cfg.n_train is None else f"{cfg.n_train:,}"
        n += ", augmented" if cfg.augment else ""
        lines.append(f"| `{name}` | {model} | {opt} | {cfg.lr:g} | {batch} | {n} | "
                     f"{format_setting('Ks', cfg.Ks)} | {format_setting('dampings', cfg.dampings)} | {cfg.steps:,} | "
                     f"{cfg.eval_every:,} on {cfg.n_eval:,} test images |")
    return "\n".join(lines)


def format_setting(field: str, v) -> str:
    """A value of :func:`itlin_core.book.image_chapters.scale_table` as the chapters' tables show it (``None`` means K = inf,
    all images, full batch or the paper's width)."""
    if field == "Ks":
        return ", ".join(k_text(k) for k in v)
    if field == "dampings":
        return ", ".join(f"{x:g}" for x in v)
    if v is None:
        return {"n_train": "all", "batch_size": "full batch", "width": "paper's"}.get(field, "none")
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def config_matches(recorded: dict, cfg: ImageRunConfig) -> bool:
    """Whether a record's ``config`` (as saved) holds the settings of ``cfg``: equal after filling
    in, on both sides, the defaults of fields a record may lack (it was written before they
    existed, or left them out at their defaults, :meth:`~ImageRunConfig.as_dict`)."""
    defaults = {f.name: f.default for f in dataclasses.fields(ImageRunConfig)
                if f.default is not dataclasses.MISSING and not isinstance(f.default, tuple)}
    return {**defaults, **recorded} == {**defaults, **cfg.as_dict()}


def records_equal(a, b) -> bool:
    """Equal values, arrays (with dtype and shape) and NaNs, through nested dicts and lists: a
    record and its :func:`itlin_core.book.records.save_results` / ``load_results`` round trip."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(records_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(records_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b


#: On a GPU, how far the proxy at its anchor may be from the network (:func:`check_record` with
#: ``exact=False``): losses within this relative tolerance (or :data:`ANCHOR_ATOL`), accuracies
#: within :data:`ANCHOR_FLIPS` of the evaluated images. Loose enough for float rounding (the
#: committed GPU records pass, ``tests/test_book_records.py``), far too tight for an anchor that
#: failed to move (which the same tests check is caught).
ANCHOR_RTOL = 1e-3
#: The absolute tolerance on the losses at an anchor on a GPU (training losses near 1e-9 make a
#: relative one meaningless).
ANCHOR_ATOL = 1e-6
#: The share of evaluated images whose predicted class may flip at an anchor on a GPU.
ANCHOR_FLIPS = 0.005


def _same_at_anchor(a, b, exact: bool, accuracy: bool) -> bool:
    """Whether evaluations of the network and of its proxy at anchors agree: bit for bit with
    ``exact``, else up to the float rounding of :data:`ANCHOR_RTOL` and friends."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if exact:
        return np.array_equal(a, b, equal_nan=True)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    ok = ~np.isnan(a)
    if accuracy:
        return bool(np.all(np.abs(a[ok] - b[ok]) <= ANCHOR_FLIPS + 1e-9))
    return bool(np.allclose(a[ok], b[ok], rtol=ANCHOR_RTOL, atol=ANCHOR_ATOL))


def check_record(name: str, rec: dict, smoke: bool = False, exact: bool = True) -> None:
    """Assert the mechanics that hold for every run group, whatever the data and the scale (the
    chapters' check cells): all runs start from the same initialisation; at an evaluation step
    that is a multiple of K the proxy is the network (test and train accuracy, test loss);
    K = inf's trained network is not its proxy; ``feature_updates`` is ``ceil(step / K)``; a
    geometric rule's proxy is the network at its scheduled relinearisations and its count is the
    schedule's, a drift rule's count never decreases;
    evaluations after a divergence are NaN; K = 1 lowers its training loss unless it diverged;
    with ``smoke``, no run diverged.

    ``exact``: whether the proxy at an anchor must be the network bit for bit, as on the CPU,
    where the proxy's Jacobian-vector product and the network's forward pass run the same
    kernels. On a GPU the two may run different kernels (and JAX's default precision gives float32
    matrix products TF32 inputs on Ampere and later GPUs), so records computed there are checked
    with ``exact=False``: equal up to float rounding (:data:`ANCHOR_RTOL`, :data:`ANCHOR_FLIPS`).
    :func:`itlin_core.book.image_chapters.computed_on` says where a chapter's results came from.

    Examples:
      >>> acc, loss = np.array([[0.1], [0.5], [0.8]]), np.array([[2.3], [1.5], [0.9]])   # one run, K = 1
      >>> rec = {"eval_step": np.array([0, 5, 10]), "Ks": [1], "feature_updates": np.array([[1], [5], [10]]),
      ...        "diverged_at": [None], "train_loss": np.array([[1.9], [1.2]]),
      ...        "metrics": {f"{s}_{m}_{w}": acc if m == "accuracy" else loss for s in ("test", "train")
      ...                    for m in ("accuracy", "loss") for w in ("network", "proxy")}}
      >>> check_record("fig2", rec, smoke=True)      # passes silently
      >>> rec["feature_updates"] = np.array([[1], [1], [1]])      # not ceil(step / K)
      >>> check_record("fig2", rec)
      Traceback (most recent call last):
      AssertionError: ('fig2', 1)
    """
    steps, m = np.asarray(rec["eval_step"]), rec["metrics"]
    if steps[0] == 0:   # every run of a group starts from the same initialisation
        for key, a in m.items():
            assert np.allclose(a[0], a[0, 0], rtol=1e-6, equal_nan=True), (name, key)
    for i, K in enumerate(rec["Ks"]):
        upd = np.asarray(rec["feature_updates"])[:, i]
        if isinstance(K, str):
            if rule_family(K) == "drift":
                # a drift rule's count is the run's own: at least 1, never decreasing
                assert upd.min() >= 1 and np.all(np.diff(upd) >= 0), (name, K)
                continue
            # a schedule: at its relinearisation steps the proxy is the network
            at = np.isin(steps, ic.relin_steps(parse_rule(K), int(steps.max(initial=0)) + 1))
            for split in ("test", "train"):
                assert _same_at_anchor(m[f"{split}_accuracy_network"][at, i], m[f"{split}_accuracy_proxy"][at, i],
                                       exact, True), (name, K, split)
            assert np.array_equal(upd, feature_updates([K], steps)[:, 0]), (name, K)
            continue
        if K is None:
            # never relinearised: after training, the network at the trained parameters is not the proxy
            ok = np.flatnonzero(np.isfinite(m["test_loss_network"][:, i]) & (steps > 0))
            assert len(ok) and m["test_loss_network"][ok[-1], i] != m["test_loss_proxy"][ok[-1], i], (name, K)
            expected = np.ones(len(steps), dtype=np.int64)
        else:
            # at a multiple of K the anchor has just moved to the current parameters: proxy == network
            at = steps % K == 0
            for split in ("test", "train"):
                assert _same_at_anchor(m[f"{split}_accuracy_network"][at, i], m[f"{split}_accuracy_proxy"][at, i],
                                       exact, True), (name, K, split)
            assert (np.allclose(m["test_loss_network"][at, i], m["test_loss_proxy"][at, i], rtol=1e-5, equal_nan=True)
                    if exact else _same_at_anchor(m["test_loss_network"][at, i], m["test_loss_proxy"][at, i],
                                                  False, False)), (name, K)
            expected = np.maximum(1, -(-steps // K))      # ceil(step / K), the first linearisation counted
        assert np.array_equal(np.asarray(rec["feature_updates"])[:, i], expected), (name, K)
        d = rec["diverged_at"][i]
        if d is not None:   # evaluations after a divergence are masked
            assert np.all(np.isnan(m["test_accuracy_proxy"][steps > d, i])), (name, K)
        if K == 1 and d is None:
            loss = np.asarray(rec["train_loss"])[:, i]
            assert loss[-1] < loss[0], (name, loss)        # plain training (K = 1) lowers its training loss
    if smoke:
        assert all(d is None for d in rec["diverged_at"]), (name, rec["diverged_at"])


__all__ = ["config_matches", "settings_markdown", "params_digest", "summarise", "best_accuracy", "accuracy_noise_points", "format_setting", "records_equal", "check_record",
           "ANCHOR_RTOL", "ANCHOR_ATOL", "ANCHOR_FLIPS"]
