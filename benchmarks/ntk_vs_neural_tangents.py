"""ic.empirical_ntk (method="auto") against neural-tangents' empirical NTK, in one process.

Not part of the tests and not a dependency of the project: neural-tangents 0.6.5 needs an older
JAX than the book pins, so run this from a separate environment, e.g.

    python3 -m venv /tmp/ntenv
    /tmp/ntenv/bin/pip install "jax[cpu]==0.4.30" "neural-tangents==0.6.5" "optax==0.2.5" "numpy<2" tqdm matplotlib
    PYTHONPATH=. /tmp/ntenv/bin/python benchmarks/ntk_vs_neural_tangents.py

Both compute the full kernel blocks J(x) J(x)^T, (N, N, O, O), of the same function
``model.apply`` at the same parameters; every function is jitted and compiled first, then timed in
interleaved rounds, and the median is reported. neural-tangents is given each of its three
implementations (Jacobian contraction, NTK-vector products, structured derivatives), with
``vmap_axes=0`` (its per-example derivatives); the ratio compares ic with the fastest of them.
"""

import statistics
import sys
import time

import jax
import numpy as np

import itlin_core as ic
from itlin_core.book.bench import NTK_PROBLEMS

try:
    import neural_tangents as nt
except ImportError:
    sys.exit("neural-tangents is not installed in this environment; see the module docstring.")


def main(rounds=7):
    print(f"jax {jax.__version__}, neural-tangents {nt.__version__}, device {jax.devices()[0].device_kind}")
    print("median ms after compilation; ratio = ic / fastest neural-tangents implementation")
    for label, make, shape in NTK_PROBLEMS:
        model = make()
        params = model.init(jax.random.key(0))
        x = jax.random.normal(jax.random.key(1), shape)
        fns = {"ic auto": jax.jit(lambda p, xx: ic.empirical_ntk(model.apply, p, xx, full=True))}
        for impl in (1, 2, 3):
            kernel = nt.empirical_ntk_fn(model.apply, trace_axes=(), vmap_axes=0, implementation=impl)
            fns[f"nt {nt.NtkImplementation(impl).name.lower()}"] = jax.jit(lambda p, xx, k=kernel: k(xx, None, p))
        ref = np.asarray(fns["ic auto"](params, x))
        for name, f in list(fns.items()):
            try:
                k = np.asarray(f(params, x))
            except Exception as e:  # structured derivatives do not run with every JAX version
                print(f"  {label}: {name} failed ({type(e).__name__}: {str(e).splitlines()[0][:80]}); left out")
                del fns[name]
                continue
            assert np.allclose(k, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max()), (label, name)
        times = {name: [] for name in fns}
        for _ in range(rounds):
            for name, f in fns.items():
                t0 = time.perf_counter()
                jax.block_until_ready(f(params, x))
                times[name].append(time.perf_counter() - t0)
        med = {name: statistics.median(v) for name, v in times.items()}
        best_nt = min(v for name, v in med.items() if name.startswith("nt"))
        print(f"{label} (P = {ic.count_params(params):,}): " + ", ".join(f"{n} {v * 1e3:.1f}" for n, v in med.items())
              + f"; ratio {med['ic auto'] / best_nt:.2f}")


if __name__ == "__main__":
    main()
