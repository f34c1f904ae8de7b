"""Relinearisation rules (itlin_core.relinearise): the equivalences with fixed periods, the
geometric schedule against a direct count, the drift against an explicit linearisation, the
sweep of mixed rules against single runs, and the argument checks."""

import math
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st

import itlin_core as ic
from itlin_core import relinearise

MODEL = ic.mlp([2, 24, 24, 1], "tanh")
CE_MODEL = ic.mlp([2, 24, 24, 2], "tanh")
X = jax.random.normal(jax.random.PRNGKey(1), (16, 2))
Y = jnp.sin(2 * X[:, :1]) * X[:, 1:]
PROBLEMS = {
    "squared_error": (MODEL, ic.squared_error, Y),
    "cross_entropy": (CE_MODEL, ic.softmax_cross_entropy, (Y[:, 0] > 0).astype(jnp.int32)),
}
OPTIMIZERS = {"sgd": lambda: optax.sgd(0.004), "adam": lambda: optax.adam(3e-3)}
STEPS = 24


def trajectory(problem, opt_name, K, steps=STEPS, **kwargs):
    model, loss_fn, y = PROBLEMS[problem]
    opt = OPTIMIZERS[opt_name]()
    step = jax.jit(ic.make_il_step(model.apply, loss_fn, opt, K, **kwargs))
    state, metrics = ic.init_il_state(model.init(jax.random.PRNGKey(0)), opt), []
    for _ in range(steps):
        state, m = step(state, (X, y))
        metrics.append(jax.tree.map(np.asarray, m))
    return state, metrics


def assert_same_params(a, b):
    for u, v in zip(jax.tree.leaves(a.params), jax.tree.leaves(b.params)):
        np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("problem", sorted(PROBLEMS))
@pytest.mark.parametrize("rule, K", [
    (ic.every(1), 1), (ic.on_drift(0.0), 1),             # relinearising at every step is the optimiser itself
    (ic.every(5), 5), (ic.geometric(5, 1.0), 5),          # a ratio of 1 is a fixed period
    (ic.on_drift(math.inf), None), (ic.every(None), None),  # never: the linearised model
])
def test_rules_that_are_fixed_periods_give_the_same_training(problem, opt_name, rule, K):
    by_rule, m_rule = trajectory(problem, opt_name, rule)
    by_K, m_K = trajectory(problem, opt_name, K)
    assert_same_params(by_rule, by_K)
    np.testing.assert_array_equal([m["relinearised"] for m in m_rule], [m["relinearised"] for m in m_K])
    assert int(by_rule.updates) == {1: STEPS, 5: STEPS // 5 + 1, None: 1}[K]


@pytest.mark.parametrize("K0, ratio", [(1, 2.0), (2, 1.5), (3, 3.0), (4, 1.0)])
def test_geometric_schedule_matches_a_direct_count(K0, ratio):
    """Periods round(K0 * ratio**j): relinearise at 0, P0, P0 + P1, ... and nowhere else."""
    expected, s, j = [], 0, 0
    while s < 60:
        expected.append(s)
        s += max(1, round(K0 * ratio ** j))
        j += 1
    assert ic.relin_steps(ic.geometric(K0, ratio), 60) == expected
    state, metrics = trajectory("squared_error", "sgd", ic.geometric(K0, ratio), steps=60)
    assert [t for t, m in enumerate(metrics) if m["relinearised"]] == expected
    assert int(state.updates) == len(expected)


def test_geometric_periods_that_outgrow_int32_mean_never():
    rule = ic.geometric(10, 1e3)
    lengths = [int(ic.relinearise.period_length(rule, j)) for j in range(6)]
    assert lengths[:3] == [10, 10_000, 10_000_000]
    assert lengths[4:] == [np.iinfo(np.int32).max] * 2


@pytest.mark.parametrize("microbatch", [None, 4])
def test_drift_is_the_relative_gap_of_the_proxy_measured_directly(microbatch):
    """d_t = ||f(theta_t) - f_lin_s(theta_t)|| / ||f(theta_t) - f(theta_s)|| on the step's batch,
    against ic.linearise and the network evaluated outside the step."""
    model, loss_fn, y = PROBLEMS["squared_error"]
    opt = optax.sgd(0.01)
    step = jax.jit(ic.make_il_step(model.apply, loss_fn, opt, ic.on_drift(0.02), microbatch=microbatch,
                                   loss_reduction="sum"))
    state = ic.init_il_state(model.init(jax.random.PRNGKey(0)), opt)
    seen = []
    for t in range(20):
        f, f_s = model.apply(state.params, X), model.apply(state.anchor, X)
        f_lin = ic.linearise(model.apply, state.anchor)(state.params, X)
        direct = 0.0 if t == int(state.last_relin) else float(jnp.linalg.norm(f - f_lin) / jnp.linalg.norm(f - f_s))
        new, m = step(state, (X, y))
        np.testing.assert_allclose(float(m["drift"]), direct, rtol=1e-6, atol=1e-12)
        # the next step relinearises exactly when this drift reached the threshold
        assert bool(new.last_relin == t + 1) == (direct >= 0.02), t
        seen.append(direct >= 0.02)
        state = new
    assert any(seen) and not all(seen), "the threshold should be crossed at some steps and not at others"


def test_rounding_right_after_a_refresh_is_no_drift():
    """When the network and its proxy round differently (two programs for one function), the gap
    and the change right after a refresh are the same rounding error: d_t is 0 there, not their
    ratio 1, so a drift rule does not refresh on rounding; a gap above the floor still counts."""
    model, loss_fn, y = PROBLEMS["squared_error"]
    ulp = lambda p, x: model.apply(p, x) * (1 + 2.0 ** -23)   # the network, one rounding away from the proxy
    calls = {"n": 0}

    def apply(p, x):   # the forward pass outside the linearisation rounds differently
        calls["n"] += 1
        return ulp(p, x) if calls["n"] > 1 else model.apply(p, x)

    assert float(relinearise.drift_ratio(1e-14, 1e-14, 1.0)) == 0.0           # a gap of 1e-7 ||f||: rounding
    assert float(relinearise.drift_ratio(1e-4, 4e-4, 1.0)) == 0.5          # a real gap: the ratio
    assert float(relinearise.drift_ratio(1e-4, 0.0, 1.0)) == math.inf       # the proxy alone is wrong
    opt = optax.sgd(0.01)
    step = jax.jit(ic.make_il_step(model.apply, loss_fn, opt, ic.on_drift(0.5)))
    state = ic.init_il_state(model.init(jax.random.PRNGKey(0)), opt)
    vg = sys.modules["itlin_core.linearise"]._value_grad(apply, loss_fn, 0.0, None, "mean", drift=True)
    _, _, (g2, c2, s2) = vg(state.params, state.params, X, y)   # at the anchor: f_net rounds, f_s does not
    assert float(g2) == float(c2) > 0                                         # the same rounding error
    assert float(relinearise.drift_ratio(g2, c2, s2)) == 0.0
    assert float(jnp.sqrt(s2)) == pytest.approx(float(jnp.linalg.norm(ulp(state.params, X))), rel=1e-6)
    _, m = step(state, (X, y))
    assert float(m["drift"]) == 0.0


def test_drift_every_measures_only_at_multiples_and_triggers_only_there():
    state, metrics = trajectory("squared_error", "sgd", ic.on_drift(0.0), drift_every=3)
    drifts = np.array([m["drift"] for m in metrics])
    measured = np.arange(STEPS) % 3 == 0
    assert np.all(np.isnan(drifts[~measured])) and np.all(np.isfinite(drifts[measured]))
    relin = [t for t, m in enumerate(metrics) if m["relinearised"]]
    assert relin == [0] + [t + 1 for t in range(STEPS - 1) if t % 3 == 0]
    assert int(state.updates) == len(relin)


def test_on_drift_with_a_max_period_relinearises_by_the_period_at_the_latest():
    _, metrics = trajectory("squared_error", "sgd", ic.on_drift(math.inf, max_period=4))
    assert [t for t, m in enumerate(metrics) if m["relinearised"]] == list(range(0, STEPS, 4))


def test_a_sweep_of_mixed_rules_matches_single_runs():
    model, loss_fn, y = PROBLEMS["squared_error"]
    opt = optax.sgd(0.01)
    Ks = [1, 5, None, ic.geometric(2, 2.0), ic.on_drift(0.02), ic.on_drift(0.05, max_period=6)]
    step, rules = ic.make_il_sweep_step(model.apply, loss_fn, opt, Ks)
    assert step.run_labels == ["K=1", "K=5", "K=∞", "geometric(2, 2)", "on_drift(0.02)",
                               "on_drift(0.05, max_period=6)"]
    assert rules.period.shape == (6,)
    params = model.init(jax.random.PRNGKey(0))
    states = ic.replicate(ic.init_il_state(params, opt), len(Ks))
    sweep = jax.jit(step)
    for _ in range(STEPS):
        states, m = sweep(states, (X, y))
    for i, K in enumerate(Ks):
        single = ic.init_il_state(params, opt)
        one = jax.jit(ic.make_il_step(model.apply, loss_fn, opt, K))
        for _ in range(STEPS):
            single, _ = one(single, (X, y))
        assert int(states.updates[i]) == int(single.updates), Ks[i]
        for a, b in zip(jax.tree.leaves(states.params), jax.tree.leaves(single.params)):
            np.testing.assert_allclose(a[i], b, rtol=1e-9, atol=1e-12)


def test_a_sweep_with_drift_every_skips_the_measurement_between_checks():
    model, loss_fn, y = PROBLEMS["squared_error"]
    opt = optax.sgd(0.01)
    step, _ = ic.make_il_sweep_step(model.apply, loss_fn, opt, [3, ic.on_drift(0.0)], drift_every=4)
    states = ic.replicate(ic.init_il_state(model.init(jax.random.PRNGKey(0)), opt), 2)
    drifts = []
    for _ in range(9):
        states, m = jax.jit(step)(states, (X, y))
        drifts.append(np.asarray(m["drift"]))
    drifts = np.array(drifts)
    assert np.all(np.isfinite(drifts[[0, 4, 8]])) and np.all(np.isnan(np.delete(drifts, [0, 4, 8], axis=0)))
    # in the jaxpr, the extra forward pass sits in a cond whose predicate is not batched over runs
    jaxpr = str(jax.make_jaxpr(step)(states, (X, y)))
    assert "cond[" in jaxpr


@pytest.mark.parametrize("call, phrase", [
    (lambda: ic.geometric(0, 2.0), "K (the relinearisation period) must be at least 1"),
    (lambda: ic.geometric(None, 2.0), "K0 (the first period of geometric) must be a finite"),
    (lambda: ic.geometric(3, 0.5), "ratio (the growth of geometric's periods) must be a number >= 1"),
    (lambda: ic.geometric(3, math.nan), "ratio (the growth of geometric's periods) must be a number, got NaN"),
    (lambda: ic.geometric(3, math.inf), "must be a number >= 1, finite"),
    (lambda: ic.geometric(3, "2"), "must be a real number"),
    (lambda: ic.on_drift(-0.1), "tol (the drift threshold of on_drift) must be a number >= 0"),
    (lambda: ic.on_drift(math.nan), "tol (the drift threshold of on_drift) must be a number, got NaN"),
    (lambda: ic.on_drift(0.1, max_period=0), "must be at least 1"),
    (lambda: ic.make_il_step(MODEL.apply, ic.squared_error, optax.sgd(0.1), ic.on_drift(0.1), drift_every=0),
     "drift_every"),
    (lambda: ic.make_il_sweep_step(MODEL.apply, ic.squared_error, optax.sgd(0.1), []), "at least one rule"),
])
def test_bad_rules_raise_a_sentence_that_names_the_argument(call, phrase):
    with pytest.raises(ValueError, match=re.escape(phrase)):
        call()


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5), st.text(max_size=3),
                 st.none()))
def test_any_tolerance_is_accepted_or_refused_with_a_value_error(tol):
    ok = isinstance(tol, (int, float)) and not isinstance(tol, bool) and not math.isnan(tol) and tol >= 0
    if ok:
        expected = math.inf if tol > float(np.finfo(np.float32).max) else float(np.float32(tol))
        assert float(ic.on_drift(tol).tol) == pytest.approx(expected)
    else:
        with pytest.raises(ValueError, match="tol"):
            ic.on_drift(tol)


def test_rules_bench_times_every_rule_against_fixed_k():
    """``bench --rules`` builds and times every rule (it once crashed on a rule being a tuple)."""
    from itlin_core.tools import bench

    t = bench.rules_bench(batch=8, rounds=1, steps=1, model=ic.mlp([6, 8, 10]), input_shape=(6,))
    assert set(t) == {"K=10", *bench.RULES, *(f"{k} / K=10" for k in bench.RULES)}
    assert all(np.isfinite(v) and v > 0 for v in t.values())


# ---- one rule type: parse, print, count --------------------------------------------------------
RULES = st.one_of(
    st.integers(1, 10 ** 7).map(ic.every),
    st.just(ic.every(None)),
    st.tuples(st.integers(1, 5000), st.sampled_from([1.1, 1.5, 2.0, 3.0])).map(lambda a: ic.geometric(*a)),
    st.sampled_from([0.0, 0.01, 0.05, 0.2, 1.0, 7.5]).map(ic.on_drift),
    st.tuples(st.sampled_from([0.05, 0.3]), st.integers(1, 10 ** 5)).map(lambda a: ic.on_drift(a[0], max_period=a[1])))


@settings(max_examples=60, deadline=None)
@given(RULES)
def test_a_rule_prints_as_text_that_parses_back_to_it(rule):
    text = str(rule)
    back = ic.RelinRule.parse(text)
    assert str(back) == text
    for a, b in zip(rule, back):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


@pytest.mark.parametrize("text, same", [
    ("K=10", ic.every(10)), ("10", ic.every(10)), ("every(10)", ic.every(10)), ("K=1e3", ic.every(1000)),
    ("K=∞", ic.every(None)), ("K=inf", ic.every(None)), ("never", ic.every(None)), (None, ic.every(None)),
    (math.inf, ic.every(None)), (7, ic.every(7)), ("geometric( 10 , 1.5 )", ic.geometric(10, 1.5)),
    ("on_drift(0.1, max_period=50)", ic.on_drift(0.1, max_period=50))])
def test_the_texts_a_rule_is_written_as(text, same):
    got = ic.RelinRule.parse(text)
    assert str(got) == str(same)


@pytest.mark.parametrize("bad, match", [
    ("sometimes", "must read"), ("K=0", "at least 1"), ("K=2.5", "whole number"), ("geometric(1)", "arguments"),
    ("geometric(0, 1.5)", "at least 1"), ("on_drift(x)", "numbers"), ("on_drift(-1)", "tol"),
    ("on_drift(0.1, foo=3)", "max_period"), ("every(1, 2)", "arguments"), (True, "K")])
def test_a_text_that_names_no_rule_is_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        ic.RelinRule.parse(bad)


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.integers(1, 300).map(ic.every), st.just(ic.every(None)),
                 st.tuples(st.integers(1, 20), st.sampled_from([1.3, 2.0])).map(lambda a: ic.geometric(*a))),
       st.lists(st.integers(0, 2000), min_size=1, max_size=8))
def test_feature_updates_count_the_schedule(rule, steps):
    """The count of linearisations used after t steps is the number of scheduled relinearisations
    before t (at least the first), from relin_steps."""
    starts = ic.relin_steps(rule, max(steps) + 1)
    want = [max(1, sum(s < t for s in starts)) for t in steps]
    assert rule.feature_updates(steps).tolist() == want


def test_a_drift_rule_has_no_count_in_advance():
    with pytest.raises(ValueError, match="depends on the run"):
        ic.on_drift(0.1).feature_updates([10])


@pytest.mark.parametrize("rule, words", [
    (ic.every(1), "K = 1"), (ic.every(20_000), "K = 20,000"), (ic.every(None), "K = ∞"),
    (ic.geometric(10, 1.5), "geometric, K₀ = 10, ζ = 1.5"), (ic.on_drift(0.2), "on drift, d̄ = 0.2"),
    (ic.on_drift(0.05, max_period=500), "on drift, d̄ = 0.05, K ≤ 500")])
def test_a_rule_is_described_in_the_books_symbols(rule, words):
    assert rule.describe() == words


@settings(max_examples=40, deadline=None)
@given(RULES, RULES)
def test_two_rules_that_differ_are_described_differently(a, b):
    """describe() loses nothing that tells two rules apart (the words are what a legend or a
    slider shows)."""
    assert (a.describe() == b.describe()) == (str(a) == str(b))


def test_a_stacked_rule_is_described_one_rule_at_a_time():
    with pytest.raises(ValueError, match="single rule"):
        ic.stack_rules([ic.every(1), ic.every(2)]).describe()
