"""Peak-memory estimates of the empirical-NTK methods, the limit they are checked against, and
the choice of ``method="auto"`` from its cost model and memory budget.

:func:`itlin_core.empirical_ntk` and :func:`itlin_core.flat_jacobian` estimate, before they form
anything, how many numbers a method will hold at once, from shapes alone, so the check also runs
under ``jit``, where shapes are static: ``N1``, ``N2``, ``O``, ``P``, the chunk size, and the
model's activations per example, read from its jaxpr on one example (:func:`model_costs`: the
outputs of its matrix products and convolutions). The estimate adds up the arrays the method
forms (Jacobians or pulled-back parameter vectors, one-hot bases, chunk buffers, the kernel it
returns) and the activations of the passes it runs at once. Against XLA's own count for the
compiled program (``memory_analysis``) it is within a factor of about two for the per-example
methods on an MLP and LeNet-50; it undercounts the whole-batch ``"jacobian"`` of LeNet-50 about
threefold (XLA materialises the im2col patches of every backward pass).
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np

from ._validate import check_whole

#: How much slower per flop NTK-vector products run than contracting per-example Jacobians (one
#: large matrix product), measured with ``python -m itlin_core.tools.bench --ntk`` on a CPU: the
#: full blocks of the 10-output MLP and LeNet-50 there took 2.5 to 3 times longer than the flop
#: counts of :func:`auto_method` predict.
NTVP_SLOWER = 3

#: The output modes of :func:`itlin_core.empirical_ntk`: what the kernel keeps of the output axes
#: (their trace, each output's own kernel, or every ``(O, O)`` block).
OUTPUTS = ("trace", "diagonal", "full")


def per_pair(outputs: str, o: int) -> int:
    """Numbers per pair of examples in the returned kernel: 1 (trace), O (diagonal), O^2 (full)."""
    return {"trace": 1, "diagonal": o, "full": o * o}[outputs]


def kernel_numbers(method, outputs, n1, n2, same, o, p, batch_size, a=0) -> int:
    """Numbers ``method`` holds at its peak for an ``(N1, N2)`` kernel (``same``: ``x2 = x1``) of a
    model with ``O`` outputs, ``P`` parameters and ``a`` activations per example (see
    :func:`model_costs`), chunked by ``batch_size`` (``None``: whole)."""
    out = n1 * n2 * per_pair(outputs, o)
    if method == "contraction":   # per-example Jacobians (twice: XLA lays them out again for the product)
        if same:
            return out + n1 * o * (2 * p + a) + n1 * a
        c = n1 if batch_size is None else min(batch_size, n1)
        return out + 2 * (n2 + c) * o * p + max(n2, c) * (1 + o) * a + (out if c < n1 else 0)
    if method == "ntvp":          # a chunk of x2: O pulled-back vectors, each pushed through all of x1
        c = n2 if batch_size is None else min(batch_size, n2)
        return out + c * o * (p + n1 * (o + a)) + n1 * a + (out if c < n2 else 0)
    if method == "jacobian":      # jacrev of the whole batch: a one-hot basis, J, N*O backward passes
        m1, m2 = n1 * o, (0 if same else n2 * o)
        return out + m1 * (m1 + p) + m2 * (m2 + p) + max(n1 * m1, n2 * m2) * a
    c = n2 * o if batch_size is None else min(batch_size, n2 * o)   # "implicit": columns of J2^T
    return 2 * out + (n2 * o) ** 2 + c * (p + n1 * o + (n1 + n2) * a) + n2 * a \
        + n2 * o * n1 * (o if outputs == "full" else 1)


def jacobian_numbers(n, o, p, a=0) -> int:
    """Numbers ``flat_jacobian`` holds: the ``(N*O, N*O)`` one-hot basis of ``jacrev``, ``J``, and
    the activations of ``N*O`` backward passes of the batch."""
    return n * o * (n * o + p + n * a)


def default_limit() -> int | None:
    """The memory a kernel may take by default, in bytes: the default device's free memory where
    JAX reports it (``bytes_limit - bytes_in_use`` of ``memory_stats()``, on GPUs and TPUs), else
    80% of the machine's physical memory (the CPU backend reports no statistics), else ``None``
    (unknown: no check)."""
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:                        # a backend without memory statistics may raise
        stats = None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    try:
        return int(0.8 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def fmt_bytes(b: float) -> str:
    """``b`` bytes in kB, MB or GB (decimal)."""
    return f"{b / 1e9:.2f} GB" if b >= 1e9 else f"{b / 1e6:.1f} MB" if b >= 1e6 else f"{b / 1e3:.1f} kB"


def largest_fitting(bytes_at, n: int, limit: float) -> int | None:
    """The largest chunk size among ``n``, ``n/2``, ``n/4``, ..., 1 whose ``bytes_at(size)`` is
    within ``limit``; ``None`` if even one at a time is not."""
    b = n
    while b >= 1:
        if bytes_at(b) <= limit:
            return b
        b //= 2
    return None


def resolve(limit) -> tuple[int | None, str]:
    """``(bytes, where the number comes from)`` for a ``memory_limit`` argument (``None``:
    :func:`default_limit`)."""
    if limit is None:
        return default_limit(), "the default: the device's free memory, or 80% of RAM"
    return check_whole("memory_limit", limit, 1), "memory_limit"


def message(what: str, need: float, limit: float, source: str, advice: str) -> str:
    """The refusal: ``what`` would need ``need`` bytes, more than ``limit`` (from ``source``)."""
    return (f"{what} would need about {fmt_bytes(need)} at its peak (estimated from the shapes: Jacobians, "
            f"activations, chunk buffers and result), more than the memory limit of {fmt_bytes(limit)} "
            f"({source}). {advice}")


def _sub_jaxprs(eqn):
    """The jaxprs inside an equation (``pjit``, ``custom_jvp_call``, ``scan``, ``cond``, ...)."""
    for v in eqn.params.values():
        for u in (v if isinstance(v, (tuple, list)) else (v,)):
            j = getattr(u, "jaxpr", u)
            if hasattr(j, "eqns"):
                yield j


def _costs(jaxpr):
    """``(flops, activations)`` of one run of ``jaxpr``: matrix products and convolutions at two
    flops per multiply-add, other operations at one per output; the activations are the outputs
    of the products and convolutions (XLA fuses the elementwise operations between them)."""
    flops = acts = 0
    for eqn in jaxpr.eqns:
        subs = list(_sub_jaxprs(eqn))
        if subs:
            times = eqn.params.get("length", 1) if isinstance(eqn.params.get("length", 1), int) else 1
            for j in subs:
                f, n = _costs(j)
                flops, acts = flops + times * f, acts + times * n
            continue
        size = sum(math.prod(getattr(v.aval, "shape", ())) for v in eqn.outvars)
        if eqn.primitive.name == "dot_general":
            (contracted, _), _ = eqn.params["dimension_numbers"]
            flops, acts = flops + 2 * size * math.prod(eqn.invars[0].aval.shape[d] for d in contracted), acts + size
        elif eqn.primitive.name == "conv_general_dilated":   # rhs_spec: (out features, in features, *window)
            rhs, spec = eqn.invars[1].aval.shape, eqn.params["dimension_numbers"].rhs_spec
            flops, acts = flops + 2 * size * math.prod(rhs[d] for d in spec[1:]), acts + size
        else:
            flops += size
    return flops, acts


def model_costs(apply_fn, params, x) -> tuple[int, int, int]:
    """``(O, F, A)`` of the model on one example, read from the jaxpr of ``apply_fn`` on the first
    example (traced, not run): its outputs, the flops of its forward pass, and its activations
    (what a backward or tangent pass keeps per example, as :func:`_costs` counts them)."""
    closed = jax.make_jaxpr(apply_fn)(params, jax.tree.map(lambda v: v[:1], x))
    flops, acts = _costs(closed.jaxpr)
    return math.prod(closed.out_avals[0].shape[1:]), flops, acts


def sizes(params, x1, x2):
    """``(N1, N2, P, itemsize)``; ``N2 = N1`` when ``x2`` is ``None``."""
    leaves = jax.tree.leaves(params)
    n1 = jax.tree.leaves(x1)[0].shape[0]
    n2 = n1 if x2 is None else jax.tree.leaves(x2)[0].shape[0]
    return n1, n2, sum(int(np.prod(jnp.shape(a))) for a in leaves), \
        max(jnp.dtype(jnp.result_type(a)).itemsize for a in leaves)


def auto_method(coupled, params, x1, x2, costs, outputs, budget):
    """The exact method expected to be fastest for these sizes within ``budget`` bytes, and its
    ``batch_size`` (the cost model is in :func:`empirical_ntk`); ``costs`` from :func:`model_costs`."""
    n1, n2, p, itemsize = sizes(params, x1, x2)
    (o, f, a), same, avail = costs, x2 is None, budget // itemsize
    numbers = lambda m, b: kernel_numbers(m, outputs, n1, n2, same, o, p, b, a)
    if coupled:
        if numbers("jacobian", None) <= avail:
            return "jacobian", None
        return "implicit", max(1, (avail - numbers("implicit", 0)) // (p + n1 * o + (n1 + n2) * a))
    contraction = (n1 + (0 if same else n2)) * (1 + 2 * o) * f + 2 * n1 * n2 * o * p * (o if outputs == "full" else 1)
    ntvp = NTVP_SLOWER * n2 * (1 + 2 * o) * f * (1 + n1)
    whole = numbers("contraction", None) <= avail       # else x1 in chunks, if x2's Jacobians fit
    chunk = None if whole or same else largest_fitting(lambda b: numbers("contraction", b), n1, avail)
    if contraction <= ntvp and (whole or chunk is not None):
        return "contraction", chunk
    c = (avail - numbers("ntvp", 0)) // (o * (p + n1 * (o + a)))     # examples of x2 per chunk
    return "ntvp", (None if c >= n2 else max(1, c))


def check_kernel(method, outputs, params, x1, x2, costs, batch_size, memory_limit):
    """ValueError when ``method`` would not fit in ``memory_limit`` bytes, naming the estimate, the
    limit and a ``batch_size`` (examples or columns per chunk) that would fit, if any."""
    n1, n2, p, itemsize = sizes(params, x1, x2)
    o, _, a = costs
    need = lambda m, b: kernel_numbers(m, outputs, n1, n2, x2 is None, o, p, b, a) * itemsize
    limit, source = resolve(memory_limit)
    if limit is None or need(method, batch_size) <= limit:
        return
    chunked = ([("contraction", n1)] if x2 is not None else []) + [("ntvp", n2)] \
        if method in ("contraction", "ntvp") else [("implicit", n2 * o)]
    tips = []
    for m, axis in sorted(chunked, key=lambda c: c[0] != method):
        b = largest_fitting(lambda b, m=m: need(m, b), axis, limit)
        if b is not None:
            tips.append(f"batch_size={b}" + ("" if m == method else f" with method={m!r}"))
    fix = (f"Pass a smaller batch_size (examples per chunk; {' or '.join(tips)} fits)" if tips
           else "Even batch_size=1 (one example per chunk) does not fit")
    raise ValueError(message(
        f"empirical_ntk (method={method!r}, outputs={outputs!r}, N1={n1}, N2={n2}, O={o}, P={p:,})",
        need(method, batch_size), limit, source,
        f"{fix}, or use fewer examples (a smaller N1 or N2)" + (", or outputs='trace'" if outputs != "trace" else "")
        + ", or raise memory_limit."))
