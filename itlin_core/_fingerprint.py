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
- ``init``: not a digest but a sample of the initial state the run is given (a few values of
  each leaf, evenly spread), compared within a relative tolerance of 1e-4: another seed or
  initialisation of the parameters changes it, while an initialisation recomputed on another
  device, which may differ in the last bit, still matches. A run is resumed only from the start
  it was begun with.
"""

from __future__ import annotations

import hashlib

import jax
import jax.numpy as jnp
import numpy as np

from ._io import FLOAT_WORDS, float_token


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


def state_sample(state, per_leaf: int = 4) -> list:
    """Up to ``per_leaf`` values of each leaf of ``state``, evenly spread over it, as JSON numbers
    (non-finite ones as their words ``"nan"``, ``"inf"``, ``"-inf"``)."""
    out = []
    for leaf in jax.tree.leaves(state):
        if jnp.issubdtype(getattr(leaf, "dtype", np.float32), jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        a = np.ravel(np.asarray(leaf))
        idx = np.unique(np.linspace(0, a.size - 1, min(per_leaf, a.size)).astype(int)) if a.size else []
        out.extend(float_token(float(v)) for v in a[idx].astype(np.float64))
    return out


def same_sample(a, b, rtol: float = 1e-4) -> bool:
    """Whether two :func:`state_sample` lists agree: the same length, and each value within ``rtol``
    relative (``rtol`` times 1e-2 absolute, for values near zero); NaN matches NaN."""
    if not isinstance(a, list) or not isinstance(b, list) or len(a) != len(b):
        return False
    try:
        x, y = (np.array([FLOAT_WORDS[v] if isinstance(v, str) else v for v in s], np.float64) for s in (a, b))
    except (KeyError, TypeError, ValueError):
        return False
    return bool(np.allclose(x, y, rtol=rtol, atol=rtol * 1e-2, equal_nan=True))


#: What each digest's difference means, for the message of a refused resumption.
MEANINGS = {"step": "the training step computes something else (its learning rate, K, damping, optimiser, model, "
                    "loss or batch size changed)",
            "data": "the training data differ",
            "init": "the initial state differs (another seed or initialisation of the parameters)",
            "jax": "another JAX version (a run is resumed only under the JAX it started with)",
            "itlin_core": "another version of itlin_core (a run is resumed only under the package version it "
                          "started with)"}
