"""Losses, written as ``loss_fn(outputs, targets) -> scalar``.

Convention: the squared error is the papers' ``L = 1/2 ||f(X) - Y||^2``, a *sum* over
examples and outputs (not a mean), so that gradient descent with learning rate ``eta`` for
``n`` steps approximates the gradient flow of :func:`itlin_core.gradient_flow` at time
``t = eta * n``, and Gauss-Newton and the flow use the same ``L``.
Softmax and cross-entropy stay in the loss, outside any linearisation
(Goldwaser and Ge, §3 and App. A): the linearised model produces logits.
"""

from __future__ import annotations

import jax.numpy as jnp
import optax


def _matched(outputs, targets):
    """Targets in the outputs' shape; (N,) and (N, 1) are treated as the same."""
    outputs, targets = jnp.asarray(outputs), jnp.asarray(targets)
    if outputs.shape != targets.shape:
        if outputs.size != targets.size or outputs.shape[:1] != targets.shape[:1]:
            raise ValueError(
                f"outputs and targets must have the same shape (up to a trailing axis of 1), "
                f"got {outputs.shape} and {targets.shape}.")
        targets = targets.reshape(outputs.shape)
    return outputs, targets


def squared_error(outputs, targets):
    r"""Half the summed squared error, :math:`\tfrac12\|f(X) - Y\|^2` (Goldwaser and Ge, §2.2)."""
    outputs, targets = _matched(outputs, targets)
    return 0.5 * jnp.sum((outputs - targets) ** 2)


def softmax_cross_entropy(logits, labels):
    """Mean softmax cross-entropy over the batch; ``labels`` are integer classes."""
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))


def accuracy(logits, labels):
    """Fraction of examples whose largest logit is the label."""
    return jnp.mean(jnp.argmax(logits, axis=-1) == labels)


def rmse(outputs, targets):
    """Root mean squared error over all examples and outputs."""
    outputs, targets = _matched(outputs, targets)
    return jnp.sqrt(jnp.mean((outputs - targets) ** 2))


__all__ = ["squared_error", "softmax_cross_entropy", "accuracy", "rmse"]
