"""Benchmarks: an iterative-linearisation step against a plain SGD step, and (``--mean-field``)
the fast against the generic Gauss-Newton step of the mean-field chapters.

    python -m itlin_core.tools.bench [--batch 256] [--rounds 7] [--steps 5]
    python -m itlin_core.tools.bench --mean-field [--n 500] [--width 5000] [--rounds 5] [--steps 3]
    python -m itlin_core.tools.bench --ntk [--rounds 5]
    python -m itlin_core.tools.bench --rules [--batch 256] [--rounds 7] [--steps 5]
    python -m itlin_core.tools.bench --conv [--batch 64] [--width 8] [--rounds 3] [--steps 5]
    XLA_FLAGS=--xla_force_host_platform_device_count=2 python -m itlin_core.tools.bench --mesh 2

Model: the LeNet-50 CNN of Goldwaser and Ge, App. C.2.1, on a batch of 32x32x3 inputs with softmax
cross-entropy. Both steps are jitted; they are timed interleaved (SGD, IL, SGD, IL, ...) so
that machine load affects both alike, and the ratio of the median times is printed. The IL
step evaluates the linearised model with a JVP and differentiates through it (no Jacobian is
formed), so its arithmetic is one forward pass, one tangent pass and one backward pass,
against a forward and a backward pass for SGD.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics

import jax
import optax

import itlin_core as ic

from ..book.common import interleaved_seconds, machine_line


def make_steps(batch: int = 256, seed: int = 0):
    """Jitted ``(sgd_step, il_step, sgd_carry, il_carry, batch)`` for LeNet-50."""
    model = ic.lenet50()
    params = model.init(jax.random.key(seed))
    kx, ky = jax.random.split(jax.random.key(seed + 1))
    x = jax.random.normal(kx, (batch, 32, 32, 3))
    y = jax.random.randint(ky, (batch,), 0, 10)
    opt = optax.sgd(1e-3)

    @jax.jit
    def sgd_step(carry, b):
        p, s = carry
        loss, g = jax.value_and_grad(lambda q: ic.softmax_cross_entropy(model.apply(q, b[0]), b[1]))(p)
        u, s = opt.update(g, s, p)
        return (optax.apply_updates(p, u), s), loss

    il = jax.jit(ic.make_il_step(model.apply, ic.softmax_cross_entropy, opt, K=10))
    return sgd_step, il, (params, opt.init(params)), ic.init_il_state(params, opt), (x, y), ic.count_params(params)


#: The rules of ``--rules``, each timed against the fixed period K = 10 (same model and batch).
#: Each entry makes ``(rule, drift_every)``.
RULES = {"every(10)": lambda: (ic.every(10), 1), "geometric(10, 2)": lambda: (ic.geometric(10, 2.0), 1),
         "on_drift(0.1), drift_every=10": lambda: (ic.on_drift(0.1), 10),
         "on_drift(0.1), drift_every=1": lambda: (ic.on_drift(0.1), 1)}


def rules_bench(batch: int = 256, rounds: int = 7, steps: int = 5, seed: int = 0, model=None,
                input_shape=(32, 32, 3)) -> dict:
    """Median seconds per IL step with each relinearisation rule of :data:`RULES` and with the
    integer period K = 10, timed interleaved in one run; ``{name: seconds}``. The model is
    LeNet-50 on 32x32x3 inputs unless ``model`` (10 outputs, inputs ``input_shape``) is given."""
    model = ic.lenet50() if model is None else model
    params = model.init(jax.random.key(seed))
    kx, ky = jax.random.split(jax.random.key(seed + 1))
    b = (jax.random.normal(kx, (batch, *input_shape)), jax.random.randint(ky, (batch,), 0, 10))
    opt = optax.sgd(1e-3)
    fns = {"K=10": jax.jit(ic.make_il_step(model.apply, ic.softmax_cross_entropy, opt, K=10))}
    for name, make in RULES.items():
        rule, every = make()
        fns[name] = jax.jit(ic.make_il_step(model.apply, ic.softmax_cross_entropy, opt, rule, drift_every=every))
    times = interleaved(fns, {k: ic.init_il_state(params, opt) for k in fns}, b, rounds, steps)
    return {k: statistics.median(v) for k, v in times.items()} | {
        f"{k} / K=10": statistics.median(a / c for a, c in zip(v, times["K=10"])) for k, v in times.items() if k != "K=10"}


def conv_bench(batch: int = 64, width: int = 8, rounds: int = 3, steps: int = 5, seed: int = 0) -> dict:
    """Seconds per SGD step inside ``lax.scan`` (as the run groups train) with the convolutions as
    im2col matrix products (the models' own, :func:`itlin_core.models._conv`) and as
    ``lax.conv_general_dilated`` (the references ``_conv_lax``, ``_conv_padded_lax``), for
    LeNet-50 and the plain ResNet-18 at ``width`` channels on ``batch`` CIFAR-sized images,
    timed interleaved in one run: ``{"<model> <form>": seconds, "<model> lax / im2col": ratio}``."""
    from unittest import mock

    from .. import models

    kx, ky = jax.random.split(jax.random.key(seed + 1))
    b = (jax.random.normal(kx, (batch, 32, 32, 3)), jax.random.randint(ky, (batch,), 0, 10))
    opt = optax.sgd(1e-3)
    lax_forms = {"_conv": models._conv_lax, "_conv_padded": models._conv_padded_lax}
    fns, carries = {}, {}
    for name, make in (("LeNet-50", lambda: models.lenet50(channels=width)),
                       ("ResNet-18", lambda: models.resnet18(width=width))):
        model = make()
        params = model.init(jax.random.key(seed))
        for form in ("im2col", "lax.conv"):
            def run(carry, batch_, model=model):
                def step(c, _):
                    p, s = c
                    g = jax.grad(lambda q: ic.softmax_cross_entropy(model.apply(q, batch_[0]), batch_[1]))(p)
                    u, s = opt.update(g, s, p)
                    return (optax.apply_updates(p, u), s), None
                carry, _ = jax.lax.scan(step, carry, None, length=steps)
                return carry, None
            fn = jax.jit(run)
            carry = (params, opt.init(params))
            patch = mock.patch.multiple(models, **lax_forms) if form == "lax.conv" else contextlib.nullcontext()
            with patch:                                # traced (and cached for the timed calls) with this form
                carry, _ = fn(carry, b)
            fns[f"{name} {form}"], carries[f"{name} {form}"] = fn, carry
    times = interleaved(fns, carries, b, rounds, 1)
    out = {k: statistics.median(v) / steps for k, v in times.items()}
    for name in ("LeNet-50", "ResNet-18"):
        out[f"{name} lax / im2col"] = statistics.median(
            a / c for a, c in zip(times[f"{name} lax.conv"], times[f"{name} im2col"]))
    return out


MESH_KS = (1, 2, 5, 10, 20, 50, 100, None)


def mesh_bench(devices: int = 2, batch: int = 64, width: int = 8, rounds: int = 5, steps: int = 10,
               seed: int = 0) -> dict:
    """Seconds per step of a K sweep (LeNet-50 at ``width`` channels, the eight runs of
    :data:`MESH_KS`, minibatches of ``batch`` CIFAR-sized images, :func:`itlin_core.train`) with
    its runs on one device and split over the first ``devices`` devices, timed interleaved in one
    run: ``{"1 device": s, "<n> devices": s, "speed-up": median per-round ratio}``. On a CPU,
    several devices are the same cores presented as several (``XLA_FLAGS``, see the module)."""
    if len(jax.devices()) < devices:
        raise ValueError(f"--mesh {devices} needs {devices} devices, but JAX sees {len(jax.devices())}; on a CPU "
                         f"start with XLA_FLAGS=--xla_force_host_platform_device_count={devices}.")
    model = ic.lenet50(channels=width)
    params = model.init(jax.random.key(seed))
    opt = optax.sgd(1e-3)
    step, _ = ic.make_il_sweep_step(model.apply, ic.softmax_cross_entropy, opt, MESH_KS)
    state = ic.replicate(ic.init_il_state(params, opt), len(MESH_KS))
    kx, ky = jax.random.split(jax.random.key(seed + 1))
    x, y = jax.random.normal(kx, (4 * batch, 32, 32, 3)), jax.random.randint(ky, (4 * batch,), 0, 10)
    batches = ic.minibatches(jax.random.key(seed + 2), x, y, batch)
    meshes = {"1 device": None, f"{devices} devices": ic.run_mesh(jax.devices()[:devices])}
    run = lambda mesh: ic.train(ic.on_devices(step, mesh), state, batches, steps, progress="off")
    for mesh in meshes.values():
        run(mesh)                                          # compile
    times = interleaved_seconds({k: (lambda m=m: run(m)[0]) for k, m in meshes.items()}, rounds, per=steps)
    out = {k: statistics.median(v) for k, v in times.items()}
    out["speed-up"] = statistics.median(a / b for a, b in zip(times["1 device"], times[list(meshes)[1]]))
    return out


def interleaved(fns: dict, carries: dict, b, rounds: int, steps: int) -> dict:
    """Seconds per step of each ``fn(carry, b) -> (carry, out)``, timed in interleaved blocks
    (after two warm-up steps each) so that machine load affects all alike: ``{name: [one time
    per round]}``."""
    def advance(k, n):
        def go():
            carry, out = carries[k], None
            for _ in range(n):
                carry, out = fns[k](carry, b)
            carries[k] = carry
            return carry, out
        return go

    for k in fns:
        jax.block_until_ready(advance(k, 2)())
    return interleaved_seconds({k: advance(k, steps) for k in fns}, rounds, per=steps)


def mean_field_bench(n: int = 500, width: int = 5000, d: int = 10, rounds: int = 5, steps: int = 3) -> dict:
    """Arbel et al.'s GN step at their size (N = 500, M = 5000, d = 10, float64): the generic
    kernel-form step (:func:`itlin_core.gn_step` with its default empirical NTK), the fast one
    (the same step with :func:`itlin_core.mean_field_ntk`) and one full-batch gradient step,
    timed interleaved in one run. The generic kernel comes from per-example Jacobians (about
    220 MB in float64 at this size). Returns the median seconds per step of each."""
    jax.config.update("jax_enable_x64", True)
    data = ic.data.teacher_student(jax.random.key(0), n, 10, d)
    x, y = data["x_train"], data["y_train"]
    net = ic.mean_field_net(d, width, 1.0)
    params = net.init(jax.random.key(1))
    params = {"u": params["u"], "v": jax.random.normal(jax.random.key(2), (width,))}
    wrap = lambda step: jax.jit(lambda p, _: (step(p, 1.0), None))
    fns = {"generic GN": wrap(ic.make_gn_step(net, x, y, fast=False)),
           "fast GN": wrap(ic.make_gn_step(net, x, y, fast=True)),
           "gradient": wrap(ic.make_gd_step(net, x, y))}
    times = interleaved(fns, {k: params for k in fns}, None, rounds, steps)
    return {k: statistics.median(v) for k, v in times.items()}


#: The problems of ``--ntk``: (label, model, input shape). The three MLPs with one output are the
#: sizes of the issue that compared the package with neural-tangents (P = 4,929, 68,865 and
#: 12,289); the others have 10 and 100 outputs, sized so that the traced kernel takes about a
#: second or less on a 2-core CPU.
NTK_PROBLEMS = (
    ("MLP 10-64-64-1, N=200", lambda: ic.mlp([10, 64, 64, 1]), (200, 10)),
    ("MLP 10-256-256-1, N=500", lambda: ic.mlp([10, 256, 256, 1]), (500, 10)),
    ("MLP 10-1024-1, N=500", lambda: ic.mlp([10, 1024, 1]), (500, 10)),
    ("MLP 10-64-64-10 (10 outputs), N=100", lambda: ic.mlp([10, 64, 64, 10]), (100, 10)),
    ("MLP 10-64-64-100 (100 outputs), N=40", lambda: ic.mlp([10, 64, 64, 100]), (40, 10)),
    ("LeNet-50 8 channels, 16x16x3, N=64", lambda: ic.lenet50(10, (16, 16, 3), channels=8), (64, 16, 16, 3)),
    ("LeNet-50 8 channels, 100 outputs, 16x16x3, N=32", lambda: ic.lenet50(100, (16, 16, 3), channels=8),
     (32, 16, 16, 3)),
)


def _outputs(apply, params, x) -> int:
    """O, the outputs per example."""
    return math.prod(jax.eval_shape(apply, params, x[:1]).shape[1:])


def before_traced_ntk(apply, params, x):
    """The traced kernel as ``empirical_ntk`` computed it before it contracted the output axis
    inside: every ``(O, O)`` block, by the method its memory-only ``"auto"`` chose
    (per-example Jacobians when they fit in 1 GiB, else NTK-vector products in chunks), then the
    trace. Kept to time the change (``--ntk``'s "before")."""
    import jax.numpy as jnp
    p, o = ic.count_params(params), _outputs(apply, params, x)
    size = p * o * max(a.dtype.itemsize for a in jax.tree.leaves(params))
    n = jax.tree.leaves(x)[0].shape[0]
    method, chunk = ("contraction", None) if n * size <= 2 ** 30 else ("ntvp", max(1, 2 ** 30 // size))
    return jnp.trace(ic.empirical_ntk(apply, params, x, full=True, method=method, batch_size=chunk),
                     axis1=2, axis2=3)


def agreement_tolerance() -> float:
    """The relative disagreement (to the kernel's largest entry) that ``--ntk`` allows between
    methods: 1e-4 where float32 matrix products are exact to float32 rounding (a CPU, or
    ``jax_default_matmul_precision="highest"``), 2e-2 on a GPU or TPU at its default precision,
    whose float32 products round their inputs to TF32 or bfloat16 (measured on an H100: the full
    LeNet-50 blocks of two methods differed by more than 1e-4 there; a wrong kernel differs by
    order one)."""
    exact = jax.default_backend() == "cpu" or str(jax.config.jax_default_matmul_precision) in (
        "highest", "float32", "Precision.HIGHEST")
    return 1e-4 if exact else 2e-2


def ntk_bench(rounds: int = 3, methods=("auto", "contraction", "ntvp", "jacobian", "implicit"),
              full_methods=("auto", "contraction", "ntvp"), problems=None, log=None):
    """Median seconds of ``ic.empirical_ntk(apply, params, x, method=m)`` (the traced kernel, the
    default) for each of ``methods`` and of :func:`before_traced_ntk` ("before"), and of the full
    blocks (``outputs="full"``) for each of ``full_methods``, on :data:`NTK_PROBLEMS`; every
    function compiled once, checked against the others (within :func:`agreement_tolerance`),
    called once more, then timed in interleaved rounds. ``log(label, row)`` is called as each
    problem finishes (the command prints its lines as they come, not all at the end).
    Returns ``{label: {"P": parameters, "O": outputs, "trace": {name: s}, "full": {name: s},
    "disagreement": largest relative difference between methods}}``."""
    import numpy as np
    out, tol = {}, agreement_tolerance()
    for label, make, shape in problems or NTK_PROBLEMS:
        model = make()
        params = model.init(jax.random.key(0))
        x = jax.random.normal(jax.random.key(1), shape)
        row = {"P": ic.count_params(params), "O": _outputs(model.apply, params, x), "disagreement": 0.0}
        for mode, names in (("trace", (*methods, "before")), ("full", full_methods)):
            fns = {m: jax.jit(lambda p, xx, m=m, mode=mode: before_traced_ntk(model.apply, p, xx) if m == "before"
                              else ic.empirical_ntk(model.apply, p, xx, outputs=mode, method=m)) for m in names}
            ref = None
            for m, f in fns.items():       # compile, and check that every method gives the same kernel
                k = np.asarray(f(params, x))
                ref = k if ref is None else ref
                diff = float(np.abs(k - ref).max() / np.abs(ref).max())
                row["disagreement"] = max(row["disagreement"], diff)
                if not diff <= tol:
                    raise AssertionError(f"{label}, outputs={mode}: method {m} differs from {names[0]} by "
                                         f"{diff:.1e} of the kernel's largest entry (allowed here: {tol:g})")
            for f in fns.values():         # one more untimed call each: no timed round is a warm-up
                jax.block_until_ready(f(params, x))
            times = interleaved_seconds({m: (lambda f=f: f(params, x)) for m, f in fns.items()}, rounds)
            row[mode] = {m: statistics.median(v) for m, v in times.items()}
        out[label] = row
        if log is not None:
            log(label, row)
    return out


def _print_ntk_row(label, row):
    print(f"{label} (P = {row['P']:,}, O = {row['O']}; methods agree within {row['disagreement']:.0e}):",
          flush=True)
    for mode, t in (("traced", row["trace"]), ("full", row["full"])):
        best = min(v for k, v in t.items() if k not in ("auto", "before"))
        before = f"; before / auto = {t['before'] / t['auto']:.2f}" if "before" in t else ""
        print(f"  {mode}: " + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in t.items())
              + f"; auto / fastest = {t['auto'] / best:.2f}{before}", flush=True)


def _device_line():
    return f"device: {machine_line()}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=5, help="steps per timed block")
    ap.add_argument("--mean-field", action="store_true", help="time the GN steps of the mean-field chapters")
    ap.add_argument("--ntk", action="store_true", help="time every method of ic.empirical_ntk (traced and full "
                    "outputs, and the traced kernel as computed before)")
    ap.add_argument("--rules", action="store_true", help="time the relinearisation rules against K = 10")
    ap.add_argument("--conv", action="store_true", help="time im2col against lax.conv inside lax.scan (--width "
                    "channels; default 8)")
    ap.add_argument("--mesh", type=int, default=None, metavar="N", help="time a K sweep on one device against "
                    "N devices (on a CPU, set XLA_FLAGS=--xla_force_host_platform_device_count=N)")
    ap.add_argument("--n", type=int, default=500, help="--mean-field: training-set size")
    ap.add_argument("--width", type=int, default=None, help="--mean-field: hidden units (default 5000); "
                    "--conv: channels (default 8)")
    args = ap.parse_args(argv)
    if args.mesh is not None:
        batch = 64 if args.batch == 256 else args.batch
        t = mesh_bench(args.mesh, batch, args.width or 8, min(args.rounds, 5), max(args.steps, 10))
        print(f"K sweep of {len(MESH_KS)} runs (LeNet-50 width {args.width or 8}, minibatch {batch} x 32x32x3), "
              f"ic.train with the runs on 1 device and split over {args.mesh}, interleaved")
        print(_device_line() + f", {len(jax.devices())} devices visible")
        print(f"1 device: {t['1 device'] * 1e3:.1f} ms per step; {args.mesh} devices: "
              f"{t[f'{args.mesh} devices'] * 1e3:.1f} ms per step; speed-up {t['speed-up']:.2f}")
        return t
    if args.conv:
        batch = 64 if args.batch == 256 else args.batch
        t = conv_bench(batch, args.width or 8, min(args.rounds, 3), args.steps)
        print(f"SGD step inside lax.scan ({args.steps} steps per call), batch {batch} x 32x32x3, width "
              f"{args.width or 8}: convolutions as im2col against lax.conv, interleaved")
        print(_device_line())
        for name in ("LeNet-50", "ResNet-18"):
            print(f"{name}: im2col {t[f'{name} im2col'] * 1e3:.1f} ms, lax.conv {t[f'{name} lax.conv'] * 1e3:.1f} ms "
                  f"per step; lax.conv / im2col = {t[f'{name} lax / im2col']:.2f}")
        return t
    if args.ntk:
        print("ic.empirical_ntk(apply, params, x[, outputs='full'], method=m), median ms after compilation; "
              "'before': the full blocks, then their trace (the default before the output axis was contracted inside)")
        print(_device_line() + f", matmul precision {jax.config.jax_default_matmul_precision or 'default'}",
              flush=True)
        return ntk_bench(rounds=min(args.rounds, 5), log=_print_ntk_row)
    if args.rules:
        t = rules_bench(args.batch, args.rounds, args.steps)
        print(f"LeNet-50 IL step, batch {args.batch} x 32x32x3, interleaved {args.rounds} rounds x {args.steps} steps "
              "(every(10) runs the same program as K=10: its ratio shows the noise)")
        print(_device_line())
        for k in ["K=10", *RULES]:
            ratio = "" if k == "K=10" else f"   median per-round ratio to K=10: {t[f'{k} / K=10']:.3f}"
            print(f"{k}: median {t[k] * 1e3:.1f} ms{ratio}")
        return t
    if args.mean_field:
        t = mean_field_bench(args.n, args.width or 5000, rounds=min(args.rounds, 5), steps=min(args.steps, 3))
        print(f"Mean-field GN step (Arbel et al.), N = {args.n}, M = {args.width or 5000}, d = 10, float64")
        print(_device_line())
        for k, v in t.items():
            print(f"median {k} step: {v * 1e3:.1f} ms")
        print(f"generic GN / fast GN = {t['generic GN'] / t['fast GN']:.1f}   "
              f"fast GN / gradient step = {t['fast GN'] / t['gradient']:.1f}   "
              f"generic GN / gradient step = {t['generic GN'] / t['gradient']:.1f}")
        return t
    sgd, il, c_sgd, c_il, b, n_params = make_steps(args.batch)
    times = interleaved({"SGD": sgd, "IL": il}, {"SGD": c_sgd, "IL": c_il}, b, args.rounds, args.steps)
    m_sgd, m_il = statistics.median(times["SGD"]), statistics.median(times["IL"])
    ratios = sorted(a / s for a, s in zip(times["IL"], times["SGD"]))
    print(f"LeNet-50 ({n_params} parameters), batch {args.batch} x 32x32x3, softmax cross-entropy")
    print(_device_line())
    print(f"interleaved rounds: {args.rounds} x {args.steps} steps each")
    print(f"median SGD step: {m_sgd * 1e3:.1f} ms   median IL step: {m_il * 1e3:.1f} ms")
    print(f"IL step / SGD step = {m_il / m_sgd:.3f}  (per-round ratios {ratios[0]:.3f} .. {ratios[-1]:.3f})")
    return m_il / m_sgd


if __name__ == "__main__":
    main()
