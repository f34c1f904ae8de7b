"""ic.empirical_ntk (method="auto") against neural-tangents' empirical NTK, in one process.

Not part of the tests and not a dependency of the project: neural-tangents 0.6.5 needs an older
JAX than the book pins, so run this from a separate environment, e.g.

    python3 -m venv /tmp/ntenv
    /tmp/ntenv/bin/pip install "jax[cpu]==0.4.30" "neural-tangents==0.6.5" "optax==0.2.5" "numpy<2" tqdm matplotlib
    PYTHONPATH=. /tmp/ntenv/bin/python benchmarks/ntk_vs_neural_tangents.py

Both compute the kernel J(x) J(x)^T of the same function ``model.apply`` at the same
parameters, in two forms: traced over the outputs, (N, N) (neural-tangents' ``trace_axes=(-1,)``;
ic's default; neural-tangents' is the mean over the outputs where ic's is the sum, so the check
that they agree scales it by O), and the full blocks, (N, N, O, O) (``trace_axes=()``; ic's
``outputs="full"``). For the traced kernel ic is also timed as it computed it before it
contracted the output axis inside (``ic before``: the full blocks, then their trace). Every
function is jitted and compiled first, then timed in interleaved rounds, and the median is
reported. neural-tangents is given
each of its three implementations (Jacobian contraction, NTK-vector products, structured
derivatives), with ``vmap_axes=0`` (its per-example derivatives); the ratio compares ic with the
fastest of them.
"""

import statistics
import sys
import time

import jax
import numpy as np

import itlin_core as ic
from itlin_core.tools.bench import NTK_PROBLEMS, before_traced_ntk

try:
    import neural_tangents as nt
except ImportError:
    sys.exit("neural-tangents is not installed in this environment; see the module docstring.")


def functions(model, traced):
    """The jitted kernels to compare, ``{name: f(params, x)}``."""
    if traced:
        fns = {"ic auto": jax.jit(lambda p, xx: ic.empirical_ntk(model.apply, p, xx)),
               "ic before": jax.jit(lambda p, xx: before_traced_ntk(model.apply, p, xx))}
    else:
        fns = {"ic auto": jax.jit(lambda p, xx: ic.empirical_ntk(model.apply, p, xx, outputs="full"))}
    for impl in (1, 2, 3):
        kernel = nt.empirical_ntk_fn(model.apply, trace_axes=(-1,) if traced else (), vmap_axes=0,
                                     implementation=impl)
        fns[f"nt {nt.NtkImplementation(impl).name.lower()}"] = jax.jit(lambda p, xx, k=kernel: k(xx, None, p))
    return fns


def compare(label, model, params, x, o, traced, rounds):
    """Median seconds of each function of :func:`functions`, after checking that they agree."""
    fns = functions(model, traced)
    ref = np.asarray(fns["ic auto"](params, x))
    for name, f in list(fns.items()):
        try:
            k = np.asarray(f(params, x))
        except Exception as e:  # structured derivatives do not run with every JAX version
            print(f"  {label}: {name} failed ({type(e).__name__}: {str(e).splitlines()[0][:80]}); left out")
            del fns[name]
            continue
        if traced and name.startswith("nt"):
            k = k * o              # neural-tangents' trace_axes average over the outputs; ic sums them
        k = k.reshape(ref.shape)   # full blocks of a one-output model: (N, N) from nt, (N, N, 1, 1) from ic
        assert np.allclose(k, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max()), (label, name, traced)
    for f in fns.values():         # one more untimed call each: the first timed round is not a warm-up
        jax.block_until_ready(f(params, x))
    times = {name: [] for name in fns}
    for r in range(rounds):
        names = list(fns)
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            jax.block_until_ready(fns[name](params, x))
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) for name, v in times.items()}


def main(rounds=5):
    print(f"jax {jax.__version__}, neural-tangents {nt.__version__}, device {jax.devices()[0].device_kind}")
    print("median ms after compilation; ratio = ic auto / fastest neural-tangents implementation")
    for label, make, shape in NTK_PROBLEMS:
        model = make()
        params = model.init(jax.random.key(0))
        x = jax.random.normal(jax.random.key(1), shape)
        o = int(np.prod(jax.eval_shape(model.apply, params, x[:1]).shape[1:]))
        print(f"{label} (P = {ic.count_params(params):,}, O = {o}):")
        for traced in (True, False):
            if not traced and o == 1:
                continue   # one output: the full blocks are the traced kernel
            med = compare(label, model, params, x, o, traced, rounds)
            best_nt = min(v for name, v in med.items() if name.startswith("nt"))
            extra = f", ic before / ic auto {med['ic before'] / med['ic auto']:.2f}" if traced else ""
            print(f"  {'traced' if traced else 'full'}: " + ", ".join(f"{n} {v * 1e3:.1f}" for n, v in med.items())
                  + f"; ratio {med['ic auto'] / best_nt:.2f}{extra}", flush=True)


if __name__ == "__main__":
    main()
