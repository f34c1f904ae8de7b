"""Benchmark: cost of an iterative-linearisation step relative to a plain SGD step.

    python -m itlin_core.bench [--batch 256] [--rounds 7] [--steps 5]

Model: the LeNet-50 CNN of paper 000 App. C.2.1 on a batch of 32x32x3 inputs with softmax
cross-entropy. Both steps are jitted; they are timed interleaved (SGD, IL, SGD, IL, ...) so
that machine load affects both alike, and the ratio of the median times is printed. The IL
step evaluates the linearised model with a JVP and differentiates through it (no Jacobian is
formed), so its arithmetic is one forward pass, one tangent pass and one backward pass,
against a forward and a backward pass for SGD.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import jax
import optax

from .iterative import init_il_state, make_il_step
from .losses import softmax_cross_entropy
from .models import count_params, lenet50


def make_steps(batch: int = 256, seed: int = 0):
    """Jitted ``(sgd_step, il_step, sgd_carry, il_carry, batch)`` for LeNet-50."""
    model = lenet50()
    params = model.init(jax.random.PRNGKey(seed))
    kx, ky = jax.random.split(jax.random.PRNGKey(seed + 1))
    x = jax.random.normal(kx, (batch, 32, 32, 3))
    y = jax.random.randint(ky, (batch,), 0, 10)
    opt = optax.sgd(1e-3)

    @jax.jit
    def sgd_step(carry, b):
        p, s = carry
        loss, g = jax.value_and_grad(lambda q: softmax_cross_entropy(model.apply(q, b[0]), b[1]))(p)
        u, s = opt.update(g, s, p)
        return (optax.apply_updates(p, u), s), loss

    il = jax.jit(make_il_step(model.apply, softmax_cross_entropy, opt, K=10))
    return sgd_step, il, (params, opt.init(params)), init_il_state(params, opt), (x, y), count_params(params)


def time_steps(fn, carry, b, n):
    t0 = time.perf_counter()
    for _ in range(n):
        carry, out = fn(carry, b)
    jax.block_until_ready((carry, out))
    return (time.perf_counter() - t0) / n, carry


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=5, help="steps per timed block")
    args = ap.parse_args(argv)
    sgd, il, c_sgd, c_il, b, n_params = make_steps(args.batch)
    # compile and warm up both
    _, c_sgd = time_steps(sgd, c_sgd, b, 2)
    _, c_il = time_steps(il, c_il, b, 2)
    t_sgd, t_il = [], []
    for _ in range(args.rounds):
        t, c_sgd = time_steps(sgd, c_sgd, b, args.steps)
        t_sgd.append(t)
        t, c_il = time_steps(il, c_il, b, args.steps)
        t_il.append(t)
    m_sgd, m_il = statistics.median(t_sgd), statistics.median(t_il)
    ratios = sorted(a / s for a, s in zip(t_il, t_sgd))
    print(f"LeNet-50 ({n_params} parameters), batch {args.batch} x 32x32x3, softmax cross-entropy")
    print(f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}), {platform.processor() or platform.machine()}, "
          f"jax {jax.__version__}")
    print(f"interleaved rounds: {args.rounds} x {args.steps} steps each")
    print(f"median SGD step: {m_sgd * 1e3:.1f} ms   median IL step: {m_il * 1e3:.1f} ms")
    print(f"IL step / SGD step = {m_il / m_sgd:.3f}  (per-round ratios {ratios[0]:.3f} .. {ratios[-1]:.3f})")
    return m_il / m_sgd


if __name__ == "__main__":
    main()
