"""Measures of how much the features (and the kernel they define) have changed, and of how good
they are: kernel distance, feature alignment, weighted cosine distance, least-squares re-fits of
the last layer and linear probes. Each takes arrays and returns a scalar or a small dict; the
least-squares solves share the eigen-solve of :func:`itlin_core.kernel_solve`."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ._linalg import solve
from ._validate import check_examples, check_finite, check_number, check_whole, is_traced


def _nonzero_rows(name: str, a, what: str) -> None:
    """ValueError when the concrete matrix ``a`` has a row of norm 0 (or a non-finite entry):
    its direction, hence its cosine, is undefined."""
    if not is_traced(a) and a.size:
        norms = np.linalg.norm(np.asarray(a, np.float64), axis=1)
        if not np.all(np.isfinite(norms) & (norms > 0)):
            raise ValueError(f"{name} must hold finite {what} of nonzero norm (a cosine needs a direction), got row(s) "
                             f"{np.flatnonzero(~(np.isfinite(norms) & (norms > 0))).tolist()} of norm 0 or NaN/inf.")


def _finite_nonzero(name: str, a, why: str) -> None:
    """ValueError when the concrete array ``a`` holds NaN or infinity, or only zeros (norm 0: ``why``)."""
    check_finite(name, a)
    if not is_traced(a) and a.size and not np.any(np.asarray(a) != 0):    # NumPy: a constant inside a trace too
        raise ValueError(f"{name} is all zeros (norm 0): {why}; it must have a nonzero entry.")


def kernel_distance(k1, k2):
    r"""Kernel distance of Fort et al. (2020): one minus the cosine similarity of two kernel
    matrices under the Frobenius inner product,

    .. math:: d(K_1, K_2) = 1 - \frac{\langle K_1, K_2\rangle_F}{\|K_1\|_F\,\|K_2\|_F} .

    It is 0 when one kernel is a positive multiple of the other (the features span the same
    geometry, only rescaled) and grows as the kernel changes shape; for PSD kernels it lies in
    [0, 1]. A fixed (lazy) kernel keeps it at 0 during training. Concrete kernels that are all
    zeros or hold NaN or infinity are refused (ValueError).

    Examples:
      A kernel is at distance 0 from any positive multiple of itself; the identity and
      ``diag(1, 0)`` have cosine ``1 / sqrt(2)``, so distance ``1 - 0.7071 = 0.2929``:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> K = jnp.array([[3.0, 2.0], [2.0, 8.0]])
      >>> print(round(float(ic.kernel_distance(K, 3 * K)), 4))
      0.0
      >>> print(round(float(ic.kernel_distance(jnp.eye(2), jnp.diag(jnp.array([1.0, 0.0])))), 4))
      0.2929
    """
    k1, k2 = jnp.asarray(k1), jnp.asarray(k2)
    if k1.shape != k2.shape:
        raise ValueError(f"kernels must have the same shape, got {k1.shape} and {k2.shape}.")
    for name, k in (("k1", k1), ("k2", k2)):
        _finite_nonzero(name, k, "a kernel of norm 0 has no direction, so its cosine with another is undefined")
    num = jnp.vdot(k1, k2)
    return 1.0 - num / (jnp.linalg.norm(k1) * jnp.linalg.norm(k2))


def feature_alignment(w, centres):
    r"""Feature alignment of Goldwaser and Ge 2024 (eq. (11)): for each feature (row of ``w``, shape
    ``(H, d)``), the largest cosine similarity with any of the cluster centres
    (rows of ``centres``, shape ``(C, d)``), ``a(w_i) = max_c <w_i, c> / (|w_i| |c|)``.

    Examples:
      A feature along a centre has alignment 1 whatever its norm; one at 45 degrees to both
      centres has alignment ``cos(pi / 4) = 0.7071``:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> a = ic.feature_alignment(jnp.array([[2.0, 0.0], [1.0, 1.0]]), jnp.eye(2))
      >>> [round(float(v), 4) for v in a]
      [1.0, 0.7071]
    """
    w, centres = jnp.asarray(w), jnp.asarray(centres)
    if w.ndim != 2 or centres.ndim != 2 or w.shape[1] != centres.shape[1]:
        raise ValueError(f"w must be (H, d) and centres (C, d) with the same d, got {w.shape} and {centres.shape}.")
    _nonzero_rows("w", w, "features")
    _nonzero_rows("centres", centres, "cluster centres")
    wn = w / jnp.linalg.norm(w, axis=1, keepdims=True)
    cn = centres / jnp.linalg.norm(centres, axis=1, keepdims=True)
    return jnp.max(wn @ cn.T, axis=1)


def weighted_cosine_distance(u, u_star):
    r"""Weighted cosine distance of Arbel et al. 2023 (eq. (9)) between a student's hidden weights ``u``
    ``(M, d)`` and a teacher's ``u_star`` ``(M*, d)``,

    .. math:: \mathrm{WCD}(u, u^\star) = 2\sum_{i=1}^M p_i\Big(1 - \max_j
              \frac{u_i^\top u^\star_j}{\|u_i\|\,\|u^\star_j\|}\Big), \qquad
              p_i = \frac{\|u_i\|^2}{\sum_k \|u_k\|^2}.

    Each student unit is matched to the teacher unit it is best aligned with, and its cosine
    distance is weighted by its share of the squared norm, so near-zero units (which barely
    affect the output of a ReLU network) barely count. 0 when every unit of non-zero norm
    points exactly along a teacher unit; at most 4. Units of exactly zero norm get weight 0;
    refused (ValueError, when concrete): NaN or infinity in ``u`` or ``u_star``, a ``u`` that is
    all zeros, a teacher unit of norm 0.

    Examples:
      A student unit along the teacher unit costs nothing; a unit orthogonal to it costs
      ``2 (1 - 0)`` times its share ``1 / (4 + 1)`` of the squared norm, ``0.4`` in all:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> u = jnp.array([[2.0, 0.0], [0.0, 1.0]])
      >>> print(round(float(ic.weighted_cosine_distance(u, jnp.array([[1.0, 0.0]]))), 4))
      0.4
    """
    u, u_star = jnp.asarray(u), jnp.asarray(u_star)
    if u.ndim != 2 or u_star.ndim != 2 or u.shape[1] != u_star.shape[1]:
        raise ValueError(f"u must be (M, d) and u_star (M*, d) with the same d, got {u.shape} and {u_star.shape}.")
    _nonzero_rows("u_star", u_star, "teacher units")
    _finite_nonzero("u", u, "no student unit has a direction or a weight, so the distance is undefined")
    sq = jnp.sum(u ** 2, axis=1)
    norm = jnp.sqrt(sq)
    safe = jnp.where(norm > 0, norm, 1.0)
    cos = (u / safe[:, None]) @ (u_star / jnp.linalg.norm(u_star, axis=1, keepdims=True)).T
    p = sq / jnp.sum(sq)
    return 2.0 * jnp.sum(p * (1.0 - jnp.max(cos, axis=1)))


def min_norm_readout(features, y, rcond=None):
    r"""Minimum-norm least-squares last layer on fixed features (Arbel et al. 2023, eq. (8)):
    ``v = Phi^T (Phi Phi^T)^+ y`` for features ``Phi`` ``(N, M)`` and targets ``y`` ``(N,)`` (or
    ``(N, C)``: one read-out column per output).

    With ``M >= N`` and independent rows this interpolates, ``Phi v = y``, and among all
    interpolating ``v`` it has the smallest norm. Computed in kernel form (an ``N x N`` ``eigh``
    with the relative cut-off ``rcond`` of :func:`itlin_core.kernel_solve`), which is also what
    keeps it accurate when the features are tiny (Arbel et al.'s ``tau0 = 1e-3``): the cut-off is
    relative to the largest eigenvalue, so a global rescaling of ``Phi`` only rescales ``v``. Use
    float64 there: with hidden features of order 1e-3, float32 loses the digits of the re-fit.
    Refused (ValueError, when concrete): features that are all zeros, NaN or infinity in
    ``features`` or ``y``.

    Examples:
      One example with features ``(1, 1)`` and target 2: of all ``v`` with ``v_1 + v_2 = 2``
      the shortest is ``(1, 1)``:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> v = ic.min_norm_readout(jnp.array([[1.0, 1.0]]), jnp.array([2.0]))
      >>> [round(float(a), 4) for a in v]
      [1.0, 1.0]
    """
    features, y = jnp.asarray(features), jnp.asarray(y)
    if features.ndim != 2 or y.ndim < 1 or y.shape[0] != features.shape[0]:
        raise ValueError(f"features must be (N, M) and y (N, ...), got {features.shape} and {y.shape}.")
    _finite_nonzero("features", features, "every direction is null, so the read-out would be 0 whatever y")
    check_finite("y", y)
    return features.T @ solve(features @ features.T, y, 0.0, rcond)


def refit_test_loss(features_train, y_train, features_test, y_test, rcond=None):
    r"""Test-LRfit of Arbel et al. 2023 (§5.2): freeze the features, re-fit the last layer by the
    minimum-norm least squares of eq. (8) (:func:`min_norm_readout`) on the training set, and
    return the test loss ``1/(2 N_test) sum_n ||Phi_test v - y_test||_n^2`` (the paper's mean
    loss; with targets ``(N, C)`` summed over the ``C`` outputs and averaged over examples, as
    :func:`itlin_core.mean_field_loss`). ``y_test`` must have the predictions' shape, ``(M,)`` plus
    ``y_train``'s trailing shape: ``(M,)`` and ``(M, 1)`` are not interchangeable here (ValueError).
    Refused as :func:`min_norm_readout`, and NaN or infinity in ``features_test`` or ``y_test``.

    Examples:
      The re-fit on one training example (features ``(1, 1)``, target 2) is ``v = (1, 1)``
      (see :func:`min_norm_readout`); on test features ``e_1`` and ``e_2`` with targets 1 and 0
      it errs by 0 and 1, a loss of ``(0 + 1) / (2 * 2) = 0.25``:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> phi, y = jnp.array([[1.0, 1.0]]), jnp.array([2.0])
      >>> print(round(float(ic.refit_test_loss(phi, y, jnp.eye(2), jnp.array([1.0, 0.0]))), 4))
      0.25
    """
    v = min_norm_readout(features_train, y_train, rcond)
    features_test, y_test = jnp.asarray(features_test), jnp.asarray(y_test)
    check_examples("features_test", features_test)
    check_finite("features_test", features_test)
    check_finite("y_test", y_test)
    if features_test.ndim != 2 or features_test.shape[1] != v.shape[0]:
        raise ValueError(f"features_test must be (M, {v.shape[0]}) (the training features' width), got shape "
                         f"{features_test.shape}.")
    pred = features_test @ v
    if y_test.shape != pred.shape:   # (M,) against (M, 1) would broadcast to an (M, M) error
        raise ValueError(f"y_test must have shape {pred.shape}: M = {pred.shape[0]} test examples with y_train's "
                         f"trailing shape {jnp.shape(y_train)[1:]}, got {y_test.shape}.")
    return 0.5 * jnp.sum((pred - y_test) ** 2) / pred.shape[0]


def linear_probe(features_train, y_train, features_test, y_test, *, ridge: float = 1e-3,
                 num_classes: int | None = None) -> dict:
    r"""Accuracy of a linear read-out fitted on frozen features: a *linear probe* (Alain &
    Bengio 2017; Goldwaser and Ge (2024, Fig. 5) probe a CNN's first- and second-layer features).

    The probe is ridge regression onto one-hot targets, with an unpenalised intercept:

    .. math:: (\hat W, \hat b) = \arg\min_{W, b}\ \|F W + \mathbf 1 b^\top - Y\|_F^2 + \lambda \|W\|_F^2,
              \qquad \lambda = \texttt{ridge}\cdot \tfrac{1}{D}\|F - \mathbf 1 \bar f^\top\|_F^2,

    with ``F`` the ``(N, D)`` training features, ``Y`` the ``(N, C)`` one-hot labels and
    ``\bar f`` the mean training feature. Centring removes the intercept:
    ``b = \bar y - W^\top \bar f`` and ``W = (F_c^\top F_c + \lambda I)^{-1} F_c^\top Y_c``
    (solved in this ``D x D`` form when ``D <= N``, else in the equal kernel form
    ``F_c^\top (F_c F_c^\top + \lambda I)^{-1} Y_c``). ``lambda`` is relative to the mean
    eigenvalue of ``F_c^\top F_c``, so rescaling the features does not change the probe.
    ``ridge = 0`` gives the minimum-norm least-squares fit (:func:`jax.numpy.linalg.lstsq`).
    A test example is classified by its largest output. A closed form rather than a few steps
    of logistic regression: no learning rate or step count to choose, and it is jittable and
    vmappable (one probe per run of a sweep).

    Returns ``{"train_accuracy", "test_accuracy"}``.

    Raises:
      ValueError: shapes that do not match, features with NaN or infinity (when concrete), a
        negative or non-finite ``ridge``, labels outside
        ``[0, num_classes)`` (``num_classes`` defaults to the largest label + 1), or
        ``num_classes`` missing under ``jit`` (labels are then not known in Python; there an
        out-of-range label makes both accuracies NaN).
      TypeError: labels that are not integers.

    Examples:
      On one feature, training examples at 0 and 1 (class 0) and at 4 and 5 (class 1) put the
      threshold halfway, at 2.5: the training set is fitted, and of the test examples at 0.5,
      4.5 and 1.5 (classes 0, 1, 1) the last is misclassified:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> f_train, y_train = jnp.array([[0.0], [1.0], [4.0], [5.0]]), jnp.array([0, 0, 1, 1])
      >>> f_test, y_test = jnp.array([[0.5], [4.5], [1.5]]), jnp.array([0, 1, 1])
      >>> acc = ic.linear_probe(f_train, y_train, f_test, y_test)
      >>> print(round(float(acc["train_accuracy"]), 4), round(float(acc["test_accuracy"]), 4))
      1.0 0.6667
    """
    ftr, fte = jnp.asarray(features_train), jnp.asarray(features_test)
    if ftr.ndim != 2 or fte.ndim != 2 or ftr.shape[1] != fte.shape[1]:
        raise ValueError(f"features must be (N, D) and (M, D) with the same D, got {ftr.shape} and {fte.shape}.")
    if jnp.shape(y_train) != ftr.shape[:1] or jnp.shape(y_test) != fte.shape[:1]:
        raise ValueError(f"labels must be (N,) and (M,) integer classes matching the features, got "
                         f"{jnp.shape(y_train)} and {jnp.shape(y_test)}.")
    check_number("ridge", ridge, minimum=0.0)
    check_examples("features_train", ftr)
    check_examples("features_test", fte)
    check_finite("features_train", ftr)
    check_finite("features_test", fte)
    y_train, y_test = jnp.asarray(y_train), jnp.asarray(y_test)
    for name, lab in (("y_train", y_train), ("y_test", y_test)):
        if not jnp.issubdtype(lab.dtype, jnp.integer):
            raise TypeError(f"{name} must be integer class labels in [0, num_classes), got dtype {lab.dtype}.")
    num_classes = None if num_classes is None else check_whole("num_classes", num_classes, 1)
    from jax.errors import ConcretizationTypeError
    try:
        lo, hi = int(min(jnp.min(y_train), jnp.min(y_test))), int(max(jnp.max(y_train), jnp.max(y_test)))
    except ConcretizationTypeError:       # under jit: out-of-range labels make the accuracies NaN
        lo = hi = None
        if num_classes is None:
            raise ValueError("pass num_classes when calling linear_probe under jit or vmap.") from None
    num_classes = hi + 1 if num_classes is None else num_classes
    if lo is not None and (lo < 0 or hi >= num_classes):
        raise ValueError(f"labels (y_train, y_test) must be classes in [0, {num_classes}) "
                         f"(num_classes={num_classes}), got values from {lo} to {hi}.")
    valid = jnp.all((y_train >= 0) & (y_train < num_classes)) & jnp.all((y_test >= 0) & (y_test < num_classes))
    n, d = ftr.shape
    y = (jnp.asarray(y_train)[:, None] == jnp.arange(num_classes)).astype(ftr.dtype)  # one-hot
    mean_f, mean_y = jnp.mean(ftr, axis=0), jnp.mean(y, axis=0)
    fc, yc = ftr - mean_f, y - mean_y
    if ridge == 0:
        w = jnp.linalg.lstsq(fc, yc)[0]
    else:
        lam = ridge * jnp.sum(fc * fc) / d
        if d <= n:
            w = jnp.linalg.solve(fc.T @ fc + lam * jnp.eye(d, dtype=fc.dtype), fc.T @ yc)
        else:
            w = fc.T @ jnp.linalg.solve(fc @ fc.T + lam * jnp.eye(n, dtype=fc.dtype), yc)
    predict = lambda f: jnp.argmax((f - mean_f) @ w + mean_y, axis=-1)
    return {"train_accuracy": jnp.where(valid, jnp.mean(predict(ftr) == y_train), jnp.nan),
            "test_accuracy": jnp.where(valid, jnp.mean(predict(fte) == y_test), jnp.nan)}


__all__ = ["kernel_distance", "feature_alignment", "weighted_cosine_distance", "min_norm_readout",
           "refit_test_loss", "linear_probe"]
