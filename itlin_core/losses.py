"""Losses, written as ``loss_fn(outputs, targets) -> scalar``.

Convention: the squared error is the papers' ``L = 1/2 ||f(X) - Y||^2``, a *sum* over
examples and outputs (not a mean), so that gradient descent with learning rate ``eta`` for
``n`` steps approximates the gradient flow of :func:`itlin_core.gradient_flow` at time
``t = eta * n``, and Gauss-Newton and the flow use the same ``L``.
Softmax and cross-entropy stay in the loss, outside any linearisation
(Goldwaser and Ge, §3 and App. A): the linearised model produces logits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._validate import check_finite


def _matched(outputs, targets):
    """Targets in the outputs' shape; shapes that differ only by a trailing axis of 1 ((N,) and
    (N, 1)) are treated as the same, any other difference (even of equal size) is refused."""
    outputs, targets = jnp.asarray(outputs), jnp.asarray(targets)
    for name, a in (("outputs", outputs), ("targets", targets)):
        if not (jnp.issubdtype(a.dtype, jnp.integer) or jnp.issubdtype(a.dtype, jnp.floating)):
            raise TypeError(f"{name} must hold real numbers, got dtype {a.dtype}.")
    # integers are compared as floats: an int32 difference squared overflows past 46340
    floats = [a.dtype for a in (outputs, targets) if jnp.issubdtype(a.dtype, jnp.floating)]
    to = floats[0] if floats else jnp.result_type(float)
    outputs, targets = (a if jnp.issubdtype(a.dtype, jnp.floating) else a.astype(to) for a in (outputs, targets))
    if outputs.shape != targets.shape:   # only (N, ...) against (N, ..., 1): no other reshape
        if outputs.shape + (1,) != targets.shape and targets.shape + (1,) != outputs.shape:
            raise ValueError(
                f"outputs and targets must have the same shape (up to one trailing axis of 1, as (N,) and "
                f"(N, 1)), got {outputs.shape} and {targets.shape}.")
        targets = targets.reshape(outputs.shape)
    if outputs.size == 0:
        raise ValueError(f"outputs and targets are empty (shape {outputs.shape}); a loss over no examples is undefined.")
    check_finite("targets", targets)     # a diverged model's NaN outputs give a NaN loss, as they should
    return outputs, targets


def squared_error(outputs, targets):
    r"""Half the summed squared error, :math:`\tfrac12\|f(X) - Y\|^2` (Goldwaser and Ge, §2.2).

    Examples:
      Half the sum of squares, not a mean: ``1/2 (1^2 + 2^2) = 2.5``; ``(N, 1)`` outputs match ``(N,)`` targets:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> float(ic.squared_error(jnp.array([1.0, 2.0]), jnp.zeros(2)))
      2.5
      >>> float(ic.squared_error(jnp.array([[1.0], [2.0]]), jnp.zeros(2)))
      2.5

    Raises:
      ValueError: shapes that differ other than by one trailing axis of 1 (no other reshape, even
        of equal size), no entries, or NaN or infinity in concrete ``targets`` (NaN ``outputs``,
        a diverged model's, give a NaN loss).
      TypeError: values that are not real numbers.
    """
    outputs, targets = _matched(outputs, targets)
    return 0.5 * jnp.sum((outputs - targets) ** 2)


def _class_labels(fn: str, logits, labels):
    """``(logits, labels, valid)``: labels as integer classes of shape ``logits.shape[:-1]`` ((N, 1)
    is squeezed), checked; ``valid`` marks labels in ``[0, C)``. Out-of-range labels raise
    outside ``jit``; inside, where values are unknown, they make the result NaN, never a silent
    wrong class (an index of -1 would otherwise pick the last class)."""
    logits, labels = jnp.asarray(logits), jnp.asarray(labels)
    if logits.ndim < 2:
        raise ValueError(f"{fn}: logits must have shape (N, C) (classes on the last axis), got {logits.shape}.")
    if labels.shape == logits.shape and logits.shape[-1] > 1:
        raise ValueError(f"{fn}: labels have the logits' shape {logits.shape}; pass integer class indices of "
                         f"shape {logits.shape[:-1]} (for one-hot labels: labels.argmax(-1)).")
    if labels.shape == (*logits.shape[:-1], 1):
        labels = labels[..., 0]
    if labels.shape != logits.shape[:-1]:
        raise ValueError(f"{fn}: labels must have shape {logits.shape[:-1]} (one class index per example), "
                         f"got {labels.shape}.")
    if not jnp.issubdtype(labels.dtype, jnp.integer):
        raise TypeError(f"{fn}: labels must be integer class indices, got dtype {labels.dtype}.")
    if labels.size == 0:
        raise ValueError(f"{fn}: the batch is empty (logits of shape {logits.shape}); a mean over no examples "
                         "is undefined.")
    classes = logits.shape[-1]
    if not isinstance(labels, jax.core.Tracer):
        bad = np.asarray(labels)
        if bad.min() < 0 or bad.max() >= classes:
            raise ValueError(f"{fn}: labels must be classes in [0, {classes}) for {classes} logits, got values "
                             f"from {int(bad.min())} to {int(bad.max())}.")
    return logits, labels, (labels >= 0) & (labels < classes)


def softmax_cross_entropy(logits, labels):
    """Mean softmax cross-entropy over the batch; ``labels`` are integer classes in ``[0, C)``
    of shape ``(N,)`` (or ``(N, 1)``). Bad labels raise ValueError/TypeError; under ``jit``, an
    out-of-range label makes the loss NaN (so that training reports it instead of learning it).
    NaN logits (a diverged model's) give a NaN loss.

    Examples:
      Equal logits over ``C = 4`` classes give the loss ``log 4``, whatever the labels:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> round(float(ic.softmax_cross_entropy(jnp.zeros((2, 4)), jnp.array([0, 3]))), 4)
      1.3863
    """
    logits, labels, valid = _class_labels("softmax_cross_entropy", logits, labels)
    per = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.where(valid, labels, 0))
    return jnp.mean(jnp.where(valid, per, jnp.nan))


def accuracy(logits, labels):
    """Fraction of examples whose largest logit is the label (labels as for
    :func:`softmax_cross_entropy`; NaN under ``jit`` if any label is out of range).

    Examples:
      The largest logits are in classes 0, 1, 0 and the labels are all 0: two hits of three:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> logits = jnp.array([[2.0, 1.0], [0.0, 3.0], [1.0, 0.0]])
      >>> round(float(ic.accuracy(logits, jnp.array([0, 0, 0]))), 4)
      0.6667
    """
    logits, labels, valid = _class_labels("accuracy", logits, labels)
    hits = jnp.argmax(logits, axis=-1) == labels
    return jnp.where(jnp.all(valid), jnp.mean(hits), jnp.nan)


def rmse(outputs, targets):
    """Root mean squared error over all examples and outputs (refused as :func:`squared_error`).

    Examples:
      One error of 4 among four entries (two examples, two outputs): ``sqrt(16 / 4) = 2``:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> float(ic.rmse(jnp.array([[1.0, 2.0], [3.0, 4.0]]), jnp.array([[1.0, 2.0], [3.0, 0.0]])))
      2.0
    """
    outputs, targets = _matched(outputs, targets)
    return jnp.sqrt(jnp.mean((outputs - targets) ** 2))


__all__ = ["squared_error", "softmax_cross_entropy", "accuracy", "rmse"]
