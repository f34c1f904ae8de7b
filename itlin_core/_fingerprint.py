"""What a checkpointed run computes, as short digests that its resumption must match
(:func:`itlin_core.train` stores them in each checkpoint and refuses a checkpoint whose digests
differ, naming which).

- ``step``: the SHA-256 of the StableHLO text of one training step, lowered (traced, not
  compiled) on the shapes and dtypes of the state and the batch source, without source
  locations. Two steps that compute the same thing digest alike however they were built; a
  changed learning rate, K, damping, optimiser, model, loss or batch size changes the program,
  hence the digest. So does another JAX version, which may lower the same step differently:
  a run is resumed only under the JAX it started with (exact resumption needs that anyway).
- ``data``: the SHA-256 of the batch source's arrays (shapes, dtypes and bytes).
"""

from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import numpy as np


def _abstract(tree):
    """The shapes and dtypes of ``tree``'s arrays, without their values or devices."""
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(np.shape(a), jnp.asarray(a).dtype)
                        if not isinstance(a, jax.ShapeDtypeStruct) else a, tree)


def step_digest(step, state, batch_fn, data) -> str:
    """16 hex digits of the lowered program ``step(state, batch_fn(data, i))`` (see the module)."""
    lowered = jax.jit(lambda s, d, i: step(s, batch_fn(d, i))).lower(
        _abstract(state), _abstract(data), jax.ShapeDtypeStruct((), jnp.int32))
    return hashlib.sha256(lowered.as_text(debug_info=False).encode()).hexdigest()[:16]


def data_digest(data) -> str:
    """16 hex digits of the arrays of ``data`` (any pytree; ``None`` for none)."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(data):
        a = np.ascontiguousarray(np.asarray(jax.random.key_data(leaf) if jnp.issubdtype(
            getattr(leaf, "dtype", np.float32), jax.dtypes.prng_key) else leaf))
        h.update(f"{a.shape}{a.dtype}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


#: What each digest's difference means, for the message of a refused resumption.
MEANINGS = {"step": "the training step computes something else (its learning rate, K, damping, optimiser, model, "
                    "loss or batch size changed)",
            "data": "the training data differ",
            "jax": "another JAX version (a run is resumed only under the JAX it started with)"}
