"""The empirical NTK's memory estimate and limit, and the cost model of method="auto"."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import itlin_core as ic
from itlin_core import _ntk_memory

MODEL = ic.mlp([3, 8, 2])
PARAMS = MODEL.init(jax.random.PRNGKey(0))
X = jax.random.normal(jax.random.PRNGKey(1), (40, 3))


@pytest.mark.parametrize("method", ["contraction", "ntvp", "jacobian", "implicit", "auto"])
def test_a_kernel_over_the_limit_is_refused_naming_the_estimate_and_batch_size(method):
    with pytest.raises(ValueError, match=r"would need about [\d.]+ [kM]B.*memory limit of 1\.0 kB.*batch_size") as e:
        ic.empirical_ntk(MODEL.apply, PARAMS, X, X[:30], outputs="full", method=method, memory_limit=1000)
    assert "memory_limit" in str(e.value)


def numbers(method, outputs, x1, x2, batch_size):
    o, _, a = _ntk_memory.model_costs(MODEL.apply, PARAMS, X)
    n2 = x1.shape[0] if x2 is None else x2.shape[0]
    return _ntk_memory.kernel_numbers(method, outputs, x1.shape[0], n2, x2 is None, o, ic.count_params(PARAMS),
                                      batch_size, a)


def test_the_refusal_suggests_a_batch_size_that_fits():
    """Contraction with x2 given: all of x2's Jacobians plus a chunk of x1's; the suggested
    chunk runs under the same limit."""
    limit = 8 * numbers("contraction", "trace", X, X[:30], 10)   # chunks of 10 examples of x1 fit, not all 40
    assert 8 * numbers("contraction", "trace", X, X[:30], None) > limit
    with pytest.raises(ValueError, match=r"batch_size=\d+ or .* with method='ntvp' fits") as e:
        ic.empirical_ntk(MODEL.apply, PARAMS, X, X[:30], method="contraction", memory_limit=limit)
    b = int(str(e.value).split("batch_size=")[1].split(" ")[0])
    assert 1 <= b <= 10
    got = ic.empirical_ntk(MODEL.apply, PARAMS, X, X[:30], method="contraction", batch_size=b, memory_limit=limit)
    np.testing.assert_allclose(got, ic.empirical_ntk(MODEL.apply, PARAMS, X, X[:30]), rtol=1e-10)


def test_the_estimate_is_within_a_factor_two_of_the_kernel():
    """A linear model with two parameters: the kernel (N, N) is nearly all the memory. It runs
    under twice its size and is refused under half of it."""
    x = jax.random.normal(jax.random.PRNGKey(2), (1500, 2))
    apply = lambda w, x: x @ w
    k = ic.empirical_ntk(apply, jnp.zeros(2), x, method="contraction", memory_limit=2 * 1500 * 1500 * 8)
    assert k.shape == (1500, 1500)
    with pytest.raises(ValueError, match=r"about 18\.\d MB"):        # 1500^2 float64 = 18.0 MB
        ic.empirical_ntk(apply, jnp.zeros(2), x, method="contraction", memory_limit=k.nbytes // 2)


def test_the_check_runs_under_jit():
    with pytest.raises(ValueError, match="memory limit"):
        jax.jit(lambda p, a: ic.empirical_ntk(MODEL.apply, p, a, memory_limit=1000))(PARAMS, X)
    got = jax.jit(lambda p, a: ic.empirical_ntk(MODEL.apply, p, a, memory_limit=10 ** 7))(PARAMS, X)
    np.testing.assert_allclose(got, ic.empirical_ntk(MODEL.apply, PARAMS, X), rtol=1e-10)


def test_auto_plans_within_the_limit():
    """A limit below the per-example Jacobians: "auto" computes the kernel in chunks that fit."""
    limit = 8 * numbers("ntvp", "trace", X, None, 5)           # five examples of x2 at a time
    assert 8 * numbers("contraction", "trace", X, None, None) > limit
    got = ic.empirical_ntk(MODEL.apply, PARAMS, X, memory_limit=limit)
    np.testing.assert_allclose(got, ic.empirical_ntk(MODEL.apply, PARAMS, X, method="jacobian"), rtol=1e-10)


def test_flat_jacobian_is_refused_over_the_limit():
    with pytest.raises(ValueError, match=r"flat_jacobian.*would need about .* kB.*smaller N"):
        ic.flat_jacobian(MODEL.apply, PARAMS, X, memory_limit=1000)
    assert ic.flat_jacobian(MODEL.apply, PARAMS, X, memory_limit=10 ** 7).shape == (80, ic.count_params(PARAMS))


def test_the_default_limit_is_the_devices_free_memory_else_most_of_ram(monkeypatch):
    fake = types.SimpleNamespace(memory_stats=lambda: {"bytes_limit": 1000, "bytes_in_use": 400})
    monkeypatch.setattr(jax, "devices", lambda: [fake])
    assert _ntk_memory.default_limit() == 600
    with pytest.raises(ValueError, match="the default"):
        ic.empirical_ntk(MODEL.apply, PARAMS, X)
    fake.memory_stats = lambda: None                          # the CPU backend: no statistics
    ram = 0.8 * _ntk_memory.os.sysconf("SC_PAGE_SIZE") * _ntk_memory.os.sysconf("SC_PHYS_PAGES")
    assert _ntk_memory.default_limit() == int(ram)


def test_a_bad_memory_limit_is_refused():
    with pytest.raises(ValueError, match="memory_limit"):
        ic.empirical_ntk(MODEL.apply, PARAMS, X, memory_limit=-1)


@pytest.mark.parametrize("name, model, shape, outputs, want", [
    ("mlp", ic.mlp([10, 64, 64, 10]), (100, 10), "trace", "contraction"),
    ("mlp", ic.mlp([10, 64, 64, 10]), (100, 10), "diagonal", "contraction"),
    ("mlp", ic.mlp([10, 64, 64, 10]), (100, 10), "full", "ntvp"),
    ("mlp", ic.mlp([10, 64, 64, 1]), (100, 10), "full", "contraction"),
    ("lenet", ic.lenet50(10, (16, 16, 3), channels=4), (16, 16, 16, 3), "full", "contraction"),
])
def test_auto_counts_the_outputs(name, model, shape, outputs, want):
    """The cost model of "auto" counts O: the traced (or diagonal) kernel contracts per-example
    Jacobians, O(N^2 O P); the full blocks of a dense network with ten outputs, O(N^2 O^2 P) by
    contraction, come from NTK-vector products, O(N^2 O F) with F about 2P; a CNN, whose forward
    pass costs many flops per parameter (F >> P), contracts its Jacobians for full blocks too."""
    params = model.init(jax.random.PRNGKey(0))
    x = jnp.zeros(shape)
    costs = _ntk_memory.model_costs(model.apply, params, x)
    assert _ntk_memory.auto_method(False, params, x, None, costs, outputs, 2 ** 30)[0] == want


@pytest.mark.parametrize("method", ["contraction", "ntvp"])
@pytest.mark.parametrize("outputs", ["trace", "full"])
def test_the_estimate_is_within_a_factor_two_of_xlas_count(method, outputs):
    """The per-example methods against XLA's own count of the compiled program's memory (its
    temporaries and output), for an MLP with ten outputs, whole and in chunks. The estimate models
    XLA's default pass pipeline, so the program is compiled with it also under ``make test``,
    whose fast-compile preset (TEST_XLA_FLAGS) plans buffers differently (a third less here)."""
    default = {"xla_cpu_opt_preset": "CPU_OPT_PRESET_DEFAULT"} if jax.default_backend() == "cpu" else None
    model = ic.mlp([10, 32, 32, 10])
    params, x = model.init(jax.random.PRNGKey(0)), jnp.zeros((60, 10))
    costs = _ntk_memory.model_costs(model.apply, params, x)
    for x2, batch_size in ((None, None), (x[:40], 7)):
        fn = jax.jit(lambda p, a, b: ic.empirical_ntk(model.apply, p, a, b, outputs=outputs, method=method,
                                                      batch_size=batch_size))
        mem = fn.lower(params, x, x2).compile(compiler_options=default).memory_analysis()
        xla = mem.temp_size_in_bytes + mem.output_size_in_bytes
        est = 8 * _ntk_memory.kernel_numbers(method, outputs, 60, 60 if x2 is None else 40, x2 is None, costs[0],
                                             ic.count_params(params), batch_size, costs[2])
        assert 0.5 < est / xla < 2.5, (x2 is None, batch_size, est, xla)


def test_ntk_bench_checks_every_method_against_the_first_and_reports_as_it_goes():
    """``bench --ntk`` prints each problem as it finishes (on an H100 the whole bench ran for
    minutes with nothing printed) and reports how closely the methods agreed; on a CPU they agree
    to float32 rounding, so the tolerance there is 1e-4 of the kernel's largest entry."""
    from itlin_core.tools import bench
    import itlin_core as ic

    assert bench.agreement_tolerance() == 1e-4             # the tests run on a CPU
    seen = []
    problems = (("MLP 3-8-4, N=5", lambda: ic.mlp([3, 8, 4]), (5, 3)),)
    res = bench.ntk_bench(rounds=1, methods=("auto", "contraction", "jacobian"),
                          full_methods=("auto", "contraction"), problems=problems,
                          log=lambda label, row: seen.append(label))
    assert seen == ["MLP 3-8-4, N=5"]
    row = res["MLP 3-8-4, N=5"]
    assert (row["P"], row["O"]) == (3 * 8 + 8 + 8 * 4 + 4, 4)
    assert 0.0 <= row["disagreement"] <= 1e-4
    assert set(row["trace"]) == {"auto", "contraction", "jacobian", "before"}
