r"""The empirical neural tangent kernel and the Jacobian it is built from.

Conventions (as in neural-tangents' ``empirical.py``):

* ``apply_fn(params, x) -> outputs`` with a leading batch axis; outputs are ``(N,)`` or
  ``(N, O)``. A vector of ``N`` scalars is treated as ``(N, 1)``.
* ``J`` is the Jacobian of the outputs flattened example-major (``f.reshape(-1)`` of an
  ``(N, O)`` array) with respect to the flattened parameters, shape ``(N*O, P)``; its rows are the
  *features* of the linearised model (Goldwaser and Ge, §2.1).
* The kernel ``J(x1) J(x2)^T`` is returned as the trace over outputs, ``(N1, N2)`` (the default,
  as the papers' plots use; contracted inside the computation, never formed as blocks), as each
  output's own kernel, ``(N1, N2, O)`` (``outputs="diagonal"``), or as all output blocks,
  ``(N1, N2, O, O)`` (``outputs="full"`` or ``full=True``), which is what Gauss-Newton and the
  gradient flow of a vector-output model need; :func:`kernel_matrix` turns the blocks into the
  ``(N1*O, N2*O)`` matrix.
* Every function that forms a kernel or a Jacobian first estimates its peak memory from the
  shapes and refuses (``ValueError``) above ``memory_limit`` (``itlin_core._ntk_memory``).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.flatten_util
import jax.numpy as jnp

from . import _ntk_memory as _mem
from ._validate import check_examples, check_finite, check_whole

PyTree = Any


def as_2d(out: jax.Array) -> jax.Array:
    """Outputs as (N, O): a vector of N scalars becomes (N, 1)."""
    return out[:, None] if out.ndim == 1 else out.reshape(out.shape[0], -1)


#: The methods :func:`empirical_ntk` accepts.
METHODS = ("auto", "contraction", "ntvp", "jacobian", "implicit")
#: The output modes :func:`empirical_ntk` accepts (what it keeps of the output axes).
OUTPUTS = _mem.OUTPUTS
#: The memory (bytes) that ``method="auto"`` lets a kernel's arrays take at once.
DEFAULT_MEMORY = 2 ** 30
#: Two Jacobians ``(N, O, P)`` contracted per output mode: the trace contracts ``o`` with ``p``.
_SPEC = {"trace": "nop,mop->nm", "diagonal": "nop,mop->nmo", "full": "nop,mqp->nmoq"}


def couples_examples(apply_fn) -> bool:
    """Whether ``apply_fn`` declares that its output for one example depends on the other
    examples of its batch (``apply_fn.couples_examples = True``; :func:`itlin_core.resnet18` with
    BatchNorm in batch mode does, and :func:`itlin_core.linearise` passes it on). Such a model's
    kernel must be computed on whole batches, never one example at a time."""
    return bool(getattr(apply_fn, "couples_examples", False))


def _single(apply_fn):
    """``f(params, one example) -> (O,)``: the model on a batch of one."""
    return lambda p, xi: as_2d(apply_fn(p, jax.tree.map(lambda a: a[None], xi)))[0]


def _per_example_jacobian(apply_fn, params, x):
    """Per-example Jacobians: a pytree like ``params`` whose leaves are ``(N, O, *leaf shape)``."""
    return jax.vmap(jax.jacrev(_single(apply_fn)), in_axes=(None, 0))(params, x)


def _contract(j1, j2, outputs):
    """``sum over leaves of J1 J2^T`` in the output mode ``outputs`` (see :data:`_SPEC`)."""
    leaves1, leaves2 = jax.tree.leaves(j1), jax.tree.leaves(j2)
    n1, o = leaves1[0].shape[:2]
    n2 = leaves2[0].shape[0]
    if outputs == "full":   # one (N1 O) x (N2 O) product per leaf, then blocks
        k = sum(a.reshape(n1 * o, -1) @ b.reshape(n2 * o, -1).T for a, b in zip(leaves1, leaves2))
        return k.reshape(n1, o, n2, o).transpose(0, 2, 1, 3)
    if outputs == "trace":  # sum over o and p at once: one (N1, O P) x (O P, N2) matrix product per leaf
        return sum(a.reshape(n1, -1) @ b.reshape(n2, -1).T for a, b in zip(leaves1, leaves2))
    return sum(jnp.einsum(_SPEC[outputs], a.reshape(n1, o, -1), b.reshape(n2, o, -1))
               for a, b in zip(leaves1, leaves2))


def _chunks(x, size):
    """``x`` (leading axis ``n``) as ``(n // size, size, ...)`` plus the remainder (or ``None``)."""
    n = jax.tree.leaves(x)[0].shape[0]
    whole = (n // size) * size
    head = jax.tree.map(lambda a: a[:whole].reshape((n // size, size) + a.shape[1:]), x)
    tail = jax.tree.map(lambda a: a[whole:], x) if whole < n else None
    return head, tail


def _map_examples(fn, x, size):
    """``fn`` over chunks of ``size`` examples of ``x`` with ``lax.map`` (memory bounded by one
    chunk), concatenated along the leading axis of every output."""
    if size is None or size >= jax.tree.leaves(x)[0].shape[0]:
        return fn(x)
    head, tail = _chunks(x, size)
    out = jax.tree.map(lambda a: a.reshape((-1,) + a.shape[2:]), jax.lax.map(fn, head))
    if tail is None:
        return out
    return jax.tree.map(lambda a, b: jnp.concatenate([a, b]), out, fn(tail))


def _visibly_coupled(apply_fn, params, x) -> bool:
    """Whether ``apply_fn``'s outputs on a batch differ from its outputs on the same examples one
    at a time (the first four examples; ``False`` under ``jit``, where values are not known)."""
    xs = jax.tree.map(lambda a: a[:4], x)
    if any(isinstance(a, jax.core.Tracer) for a in jax.tree.leaves((params, xs))):
        return False
    batch = as_2d(apply_fn(params, xs))
    alone = jax.vmap(_single(apply_fn), in_axes=(None, 0))(params, xs)
    if isinstance(batch, jax.core.Tracer) or isinstance(alone, jax.core.Tracer):
        return False                          # apply_fn closes over a traced value: not knowable here
    finite = jnp.isfinite(batch)
    scale = float(jnp.max(jnp.where(finite, jnp.abs(batch), 0.0))) + 1e-30
    return not bool(jnp.allclose(batch, alone, rtol=1e-4, atol=1e-4 * scale, equal_nan=True))


def empirical_ntk(apply_fn: Callable, params: PyTree, x1, x2=None, *, outputs: str | None = None,
                  full: bool = False, batch_size: int | None = None, method: str = "auto",
                  memory: int = DEFAULT_MEMORY, memory_limit: int | None = None) -> jax.Array:
    r"""Empirical neural tangent kernel ``J(x1) J(x2)^T`` at ``params``.

    .. math:: \hat\Theta(x_1, x_2)_{ij} = \sum_o \Big\langle \frac{\partial f_o(\theta, x_{1,i})}{\partial\theta},
              \frac{\partial f_o(\theta, x_{2,j})}{\partial\theta} \Big\rangle

    Goldwaser and Ge, eq. (5). What is kept of the output axes (``outputs``):

    * ``"trace"`` (default): the sum above, ``(N1, N2)``. The output axis is contracted inside the
      computation, never formed as blocks: per-example Jacobians ``(N, O, P)`` are contracted
      over ``o`` and ``p`` at once: reshaped to ``(N, O P)``, one plain matrix product with
      inner size ``O P`` (measured on a 2-core CPU: 1.2-1.5x faster than the same contraction
      written as ``einsum('nop,mop->nm')``, which XLA does not lower to one matrix product),
      so time ``O(N1 N2 O P)`` and memory ``O(N1 N2)`` for the result.
    * ``"diagonal"``: each output's own kernel, ``(N1, N2, O)``,
      ``Theta[i, j, o] = <d f_o(x1_i), d f_o(x2_j)>`` (the diagonals of the blocks); same cost.
    * ``"full"`` (``full=True``, kept as its alias): every block ``(N1, N2, O, O)``, what
      Gauss-Newton and the gradient flow of a vector-output model need; time ``O(N1 N2 O^2 P)``.

    Methods (all exact; they differ in time and memory, as in neural-tangents):

    * ``"contraction"``: per-example Jacobians (``vmap`` over examples of a one-example
      ``jacrev``: N backward passes of one example, not N of the whole batch) contracted leaf by
      leaf, ``sum_l J1_l J2_l^T``. Memory ``(N1 + N2) O P`` numbers; ``batch_size`` examples of
      ``x1`` at a time bound it at ``(batch_size + N2) O P`` (with ``x2`` given).
    * ``"ntvp"``: NTK-vector products: each example of ``x2`` is pulled back through the
      one-example model (``vjp``, one-hot cotangents on its ``O`` outputs) and pushed forward
      through the batch ``x1`` (``jvp``), chunked over ``batch_size`` examples of ``x2``: memory
      ``batch_size O P``, no Jacobian of ``x1``. With traced or diagonal outputs each push keeps
      only the output its cotangent picked: ``O`` contributions ``J_o(x1) J_o(x2_j)^T``, summed.
    * ``"jacobian"``: the explicit Jacobian of the whole batch (``jacrev``, N*O backward passes of
      the batch); for models whose examples are coupled.
    * ``"implicit"``: the columns ``J(x2)^T e_j`` pulled back through the whole batch and pushed
      forward through ``J(x1)``; ``batch_size`` columns at a time. The most memory-frugal method
      for coupled models, and the slowest (it grows like N squared times one batch pass).
    * ``"auto"`` (default): the cheaper of ``"contraction"`` and ``"ntvp"`` under a flop count,
      among those whose arrays fit in ``memory`` bytes (and ``memory_limit``), in chunks if
      needed. With ``F`` the flops of one example's forward pass (counted in the model's jaxpr;
      a backward or tangent pass about ``2F``): contraction ``(N1 + N2)(1 + 2O) F + 2 N1 N2 O^k P``
      (``k = 2`` for full blocks, ``k = 1`` for traced or diagonal outputs), ntvp
      ``3 N2 (1 + 2O)(1 + N1) F`` (3: its many small passes run about three times slower per flop
      than one large matrix product, on the ``--ntk`` benchmark). So traced and diagonal kernels
      get ``"contraction"`` whenever it fits (``F >= 2P`` for any network), and full blocks get
      ``"ntvp"`` when ``O P`` outweighs ``F``: ten outputs of a dense network (``F = 2P``), not
      of a CNN, whose forward pass costs many flops per parameter.
      A model that couples the examples of a batch (BatchNorm with batch statistics:
      :func:`couples_examples`) gets ``"jacobian"``, or ``"implicit"`` in chunks when it does
      not fit.

    Memory: before forming anything the peak is estimated from the shapes (``N1``, ``N2``, ``O``,
    ``P``, the dtype, ``batch_size`` and the model's activations per example, read from its
    jaxpr), and a ``ValueError`` naming the estimate, the limit and a ``batch_size`` that would
    fit is raised above ``memory_limit`` bytes (default: the device's free memory, or 80% of RAM
    on a CPU). Shapes are static, so this works under ``jit`` too.

    The per-example methods assume that an example's output does not depend on the other
    examples of its batch. A model marked with ``couples_examples`` never gets them; when values
    are concrete (outside ``jit``) the assumption is also checked on a few examples (a batch
    against its examples one at a time), so that an unmarked BatchNorm model gets a whole-batch
    method from ``"auto"`` and a ``ValueError`` from an explicit per-example method. Under
    ``jit`` only the mark is seen: mark such a model (``apply.couples_examples = True``).

    Args:
      apply_fn: ``apply_fn(params, x) -> (N,)`` or ``(N, O)`` outputs.
      params: where the kernel is evaluated.
      x1, x2: inputs (leading axis = examples); ``x2=None`` means ``x1``.
      outputs: ``"trace"``, ``"diagonal"`` or ``"full"`` (:data:`OUTPUTS`); ``None``: ``"full"``
        if ``full`` else ``"trace"``.
      full: the older spelling of ``outputs="full"``.
      batch_size: examples (``"contraction"``, ``"ntvp"``) or columns (``"implicit"``) per chunk;
        ``None``: all at once (``"auto"`` chooses it from ``memory``).
      method: one of :data:`METHODS`.
      memory: bytes the arrays of the kernel may take at once under ``"auto"``.
      memory_limit: bytes above which the kernel is refused; ``None``: the default above.

    Returns:
      ``(N1, N2)``, ``(N1, N2, O)`` or ``(N1, N2, O, O)`` for traced, diagonal or full outputs.

    Raises:
      ValueError: an unknown method or output mode, a per-example method on a model that couples
        examples, a kernel that would not fit in ``memory_limit``, or (outside ``jit``) inputs
        ``x1``/``x2`` with NaN or infinity.

    Examples:
      The kernel of a model that is linear in its parameters is the Gram matrix of its features:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> x = jnp.array([[1.0, 0.0], [1.0, 2.0]])
      >>> print(ic.empirical_ntk(lambda w, x: x @ w, jnp.zeros(2), x))
      [[1. 1.]
       [1. 5.]]

      With two outputs ``x @ W`` each output has that kernel, and the trace is their sum:

      >>> print(ic.empirical_ntk(lambda w, x: x @ w, jnp.zeros((2, 2)), x, outputs="diagonal")[..., 1])
      [[1. 1.]
       [1. 5.]]
      >>> print(ic.empirical_ntk(lambda w, x: x @ w, jnp.zeros((2, 2)), x))
      [[ 2.  2.]
       [ 2. 10.]]
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}.")
    if outputs is None:
        outputs = "full" if full else "trace"
    elif outputs not in OUTPUTS or (full and outputs != "full"):
        raise ValueError(f"outputs must be one of {', '.join(OUTPUTS)} (full=True means outputs='full'), "
                         f"got outputs={outputs!r}" + (" with full=True." if full else "."))
    if batch_size is not None:
        batch_size = check_whole("batch_size", batch_size, 1)
    same = x2 is None
    check_examples("x1", x1)
    check_finite("x1", x1)
    if not same:
        check_examples("x2", x2)
        check_finite("x2", x2)
        s1 = [a.shape[1:] for a in jax.tree.leaves(x1)]
        s2 = [a.shape[1:] for a in jax.tree.leaves(x2)]
        if s1 != s2:
            raise ValueError(f"x1 and x2 must hold examples of the same shape, got {s1} and {s2} "
                             "(after the leading axis of examples).")
    costs = _mem.model_costs(apply_fn, params, x1)   # (O, flops and activations of one example)
    x2_or_none, x2 = x2, (x1 if same else x2)
    if method == "auto":
        coupled = couples_examples(apply_fn) or _visibly_coupled(apply_fn, params, x2)
        limit = _mem.resolve(memory_limit)[0]
        budget = memory if limit is None else min(memory, limit)
        method, auto_size = _mem.auto_method(coupled, params, x1, x2_or_none, costs, outputs, budget)
        batch_size = auto_size if batch_size is None else batch_size
    elif method in ("contraction", "ntvp") and (couples_examples(apply_fn) or _visibly_coupled(apply_fn, params, x2)):
        raise ValueError(
            f"method={method!r} computes the kernel one example at a time, but apply_fn's output for one example "
            "depends on the other examples of its batch (e.g. BatchNorm with batch statistics): use "
            "method='jacobian', 'implicit' or 'auto'.")
    _mem.check_kernel(method, outputs, params, x1, x2_or_none, costs, batch_size, memory_limit)
    o = costs[0]
    if method == "contraction":
        j2 = _per_example_jacobian(apply_fn, params, x2)
        if same:                              # all Jacobians are in memory already: contract once
            return _contract(j2, j2, outputs)
        return _map_examples(lambda xc: _contract(_per_example_jacobian(apply_fn, params, xc), j2, outputs), x1,
                             batch_size)
    if method == "ntvp":
        f1 = lambda p: as_2d(apply_fn(p, x1))
        single = _single(apply_fn)

        def columns(xc):   # the kernel's columns for a chunk of x2's examples
            def one(xj):
                out, pull = jax.vjp(lambda p: single(p, xj), params)
                push = lambda e: jax.jvp(f1, (params,), pull(e))[1]      # J(x1) J_e(xj)^T, (N1, O)
                eye = jnp.eye(out.shape[0], dtype=out.dtype)
                if outputs == "full":
                    return jax.vmap(push)(eye)                           # (O2, N1, O1)
                diag = jax.vmap(lambda e: push(e) @ e)(eye)              # (O, N1): <J_o(x1), J_o(xj)>
                return diag.sum(0) if outputs == "trace" else diag.T
            return jax.vmap(one)(xc)

        cols = _map_examples(columns, x2, batch_size)   # (N2, N1), (N2, N1, O) or (N2, O2, N1, O1)
        return cols.T if outputs == "trace" else cols.transpose((1, 0, 2) if outputs == "diagonal" else (2, 0, 3, 1))
    if method == "jacobian":
        j1 = _flat_jacobian(apply_fn, params, x1)
        j2 = j1 if same else _flat_jacobian(apply_fn, params, x2)
        if outputs == "trace":            # rows (N O, P) -> (N, O P): the trace is one matrix product
            return j1.reshape(-1, o * j1.shape[1]) @ j2.reshape(-1, o * j2.shape[1]).T
        return jnp.einsum(_SPEC[outputs], j1.reshape(-1, o, j1.shape[1]), j2.reshape(-1, o, j2.shape[1]))
    return _implicit(apply_fn, params, x1, x2, batch_size, outputs)


def _implicit(apply_fn, params, x1, x2, batch_size, outputs):
    """The whole-batch implicit kernel: columns ``J(x2)^T e_j`` pulled back with one ``vjp``
    (vmapped over the ``N2*O`` unit cotangents, ``batch_size`` at a time) and pushed forward
    through ``J(x1)`` with ``jvp``; traced or diagonal outputs keep only the output that each
    cotangent picks. Works for any model; memory ``batch_size * P``."""
    f1 = lambda p: as_2d(apply_fn(p, x1))
    f2 = lambda p: as_2d(apply_fn(p, x2))
    out2, pullback = jax.vjp(f2, params)
    n2, o = out2.shape
    eye = jnp.eye(n2 * o, dtype=out2.dtype).reshape(n2 * o, n2, o)

    def column(cot):  # J1 J2^T cot, for one cotangent on x2's outputs
        (g,) = pullback(cot)
        push = jax.jvp(f1, (params,), (g,))[1]  # (N1, O)
        return push if outputs == "full" else push @ cot.sum(0)

    if batch_size is None:
        cols = jax.vmap(column)(eye)
    else:
        cols = jax.lax.map(column, eye, batch_size=batch_size)
    if outputs == "full":   # cols[j2*O + o2, i1, o1] = <d f_{o1}(x1_i1), d f_{o2}(x2_j2)>
        return cols.reshape(n2, o, -1, o).transpose(2, 0, 3, 1)  # (N1, N2, O1, O2)
    cols = cols.reshape(n2, o, -1)  # cols[j2, o, i1] = <d f_o(x1_i1), d f_o(x2_j2)>
    return cols.sum(1).T if outputs == "trace" else cols.transpose(2, 0, 1)


def kernel_matrix(ntk_full: jax.Array) -> jax.Array:
    """Reshape full NTK blocks ``(N1, N2, O, O)`` to the ``(N1*O, N2*O)`` matrix ``J1 J2^T``
    acting on outputs flattened example-major (``f.reshape(-1)`` of an ``(N, O)`` array).

    Examples:
      The linear map ``x @ W`` to two outputs has blocks ``<x_i, x_j> I_2``, so on outputs
      flattened example-major its kernel matrix is ``kron(X X^T, I_2)``, with
      ``X X^T = [[1, 1], [1, 5]]`` here:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> x = jnp.array([[1.0, 0.0], [1.0, 2.0]])
      >>> blocks = ic.empirical_ntk(lambda w, x: x @ w, jnp.zeros((2, 2)), x, full=True)
      >>> blocks.shape
      (2, 2, 2, 2)
      >>> print(ic.kernel_matrix(blocks))
      [[1. 0. 1. 0.]
       [0. 1. 0. 1.]
       [1. 0. 5. 0.]
       [0. 1. 0. 5.]]
    """
    if ntk_full.ndim != 4:
        raise ValueError(f"expected NTK blocks of shape (N1, N2, O, O), got shape {ntk_full.shape}.")
    n1, n2, o1, o2 = ntk_full.shape
    return ntk_full.transpose(0, 2, 1, 3).reshape(n1 * o1, n2 * o2)


def flat_jacobian(apply_fn: Callable, params: PyTree, x, *, memory_limit: int | None = None) -> jax.Array:
    """The explicit Jacobian ``J`` of the flattened outputs with respect to the
    flattened parameters, shape ``(N*O, P)``. Only for small problems and for
    teaching (the rest of the package never forms it). ``jacrev`` pulls the ``N*O`` one-hot
    cotangents back through the whole batch at once, so the peak holds that basis, ``J`` and the
    activations of ``N*O`` backward passes; when its estimate exceeds ``memory_limit`` bytes
    (default: the device's free memory, or 80% of RAM) it raises ``ValueError`` before starting.

    Examples:
      The model ``x @ w``, linear in its parameters ``w``, has the input matrix as its Jacobian:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> x = jnp.array([[1.0, 0.0], [1.0, 2.0]])
      >>> print(ic.flat_jacobian(lambda w, x: x @ w, jnp.zeros(2), x))
      [[1. 0.]
       [1. 2.]]
    """
    n = check_examples("x", x)
    o, _, a = _mem.model_costs(apply_fn, params, x)
    _, _, p, itemsize = _mem.sizes(params, x, None)
    need = _mem.jacobian_numbers(n, o, p, a) * itemsize
    limit, source = _mem.resolve(memory_limit)
    if limit is not None and need > limit:
        raise ValueError(_mem.message(f"flat_jacobian (N={n}, O={o}, P={p:,})", need, limit, source,
                                      "Use fewer examples (a smaller N; there is no batch_size: the Jacobian "
                                      "is formed whole), empirical_ntk for the kernel alone, or raise memory_limit."))
    return _flat_jacobian(apply_fn, params, x)


def _flat_jacobian(apply_fn, params, x):
    """:func:`flat_jacobian` without the memory check."""
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    return jax.jacrev(lambda v: as_2d(apply_fn(unravel(v), x)).reshape(-1))(flat)


def max_ntk_eigenvalue(apply_fn: Callable, params: PyTree, x, **kwargs) -> float:
    r"""The largest eigenvalue ``lambda_max`` of the empirical NTK ``J J^T`` on ``x`` (traced
    over outputs), a Python float. Gradient descent on the squared error ``1/2 ||f - y||^2`` of
    the model linearised at ``params`` is stable for learning rates below ``2 / lambda_max``,
    which is why the toy chapters set their rates as a fraction of ``1 / lambda_max``.
    Keyword arguments go to :func:`empirical_ntk`.

    Examples:
      For ``x @ w`` the kernel is ``X X^T``; with ``X = diag(1, 3)`` its largest eigenvalue is 9,
      so gradient descent on the linearised model is stable for learning rates below ``2 / 9``:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> x = jnp.diag(jnp.array([1.0, 3.0]))
      >>> print(round(ic.max_ntk_eigenvalue(lambda w, x: x @ w, jnp.zeros(2), x), 4))
      9.0
    """
    check_finite("x", x)
    return float(jnp.linalg.eigvalsh(empirical_ntk(apply_fn, params, x, **kwargs))[-1])


__all__ = ["empirical_ntk", "kernel_matrix", "flat_jacobian", "max_ntk_eigenvalue", "couples_examples", "METHODS",
           "OUTPUTS"]
