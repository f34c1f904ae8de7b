"""Paper 003's mean-field network, its fast NTK and GN step, WCD and the eq. (8) re-fit,
each against an independent computation (generic implicit NTK, explicit Jacobian with a dense
primal solve, numpy loops, numpy lstsq)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import itlin_core as ic
from itlin_core.book import mean_field_gn as ex
from itlin_core import mean_field as mf

ACTS = [("relu", 1.0), ("silu", 1.0), ("silu", 50.0)]


def _net_and_params(act, beta, d=4, width=7, seed=0):
    net = mf.mean_field_net(d, width, tau0=0.7, activation=act, beta=beta)
    p = net.init(jax.random.PRNGKey(seed))
    p = {"u": p["u"], "v": jax.random.normal(jax.random.PRNGKey(seed + 1), (width,))}
    return net, p


@pytest.mark.parametrize("act,beta", ACTS)
def test_factorised_ntk_equals_generic_ntk(act, beta):
    net, p = _net_and_params(act, beta)
    x = jax.random.normal(jax.random.PRNGKey(3), (6, 4))
    x2 = jax.random.normal(jax.random.PRNGKey(4), (5, 4))
    np.testing.assert_allclose(mf.mean_field_ntk(p, x, activation=act, beta=beta),
                               ic.empirical_ntk(net.apply, p, x), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(mf.mean_field_ntk(p, x, x2, activation=act, beta=beta),
                               ic.empirical_ntk(net.apply, p, x, x2), rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("act,beta", ACTS)
@pytest.mark.parametrize("lr", [0.3, 5.0])
def test_gn_step_fast_generic_and_dense_primal_agree(act, beta, lr):
    """Paper 003's update w - lr (J^T J + eps I)^-1 J^T grad_f L, with grad_f L = (f - y)/N and
    eps = max(1e-7, sigma_min(J J^T)), computed here in the primal (P x P) form from the
    explicit Jacobian; the fast and generic kernel-form steps must both equal it."""
    d, width, n = 3, 5, 4                     # P = 20 > N = 4: over-parameterised
    net, p = _net_and_params(act, beta, d, width)
    x = jax.random.normal(jax.random.PRNGKey(5), (n, d))
    y = jax.random.normal(jax.random.PRNGKey(6), (n,))
    fast = mf.make_gn_step(net, x, y, fast=True)(p, lr)
    generic = mf.make_gn_step(net, x, y, fast=False)(p, lr)

    flat, unravel = jax.flatten_util.ravel_pytree(p)
    jac = np.asarray(ic.flat_jacobian(net.apply, p, x))
    eps = max(1e-7, np.linalg.eigvalsh(jac @ jac.T)[0])
    grad_f = (np.asarray(net.apply(p, x)) - np.asarray(y)) / n
    step = np.linalg.solve(jac.T @ jac + eps * np.eye(flat.size), jac.T @ grad_f)
    dense = unravel(jnp.asarray(np.asarray(flat) - lr * step))
    for got in (fast, generic):
        for k in ("u", "v"):
            np.testing.assert_allclose(got[k], dense[k], rtol=1e-7, atol=1e-10)


def test_gd_step_is_gradient_of_half_mean_squared_error():
    net, p = _net_and_params("relu", 1.0)
    x = jax.random.normal(jax.random.PRNGKey(7), (9, 4))
    y = jax.random.normal(jax.random.PRNGKey(8), (9,))
    got = mf.make_gd_step(net, x, y)(p, 0.1)
    jac = np.asarray(ic.flat_jacobian(net.apply, p, x))
    flat, unravel = jax.flatten_util.ravel_pytree(p)
    want = unravel(jnp.asarray(np.asarray(flat) - 0.1 * jac.T @ (np.asarray(net.apply(p, x)) - np.asarray(y)) / 9))
    for k in ("u", "v"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-12)


def _wcd_loops(u, u_star):
    """Eq. (9) with explicit loops."""
    norms = [float(np.dot(ui, ui)) for ui in u]
    total = sum(norms)
    out = 0.0
    for ui, sq in zip(u, norms):
        if sq == 0:
            continue
        best = max(float(np.dot(ui, uj) / (np.sqrt(sq) * np.linalg.norm(uj))) for uj in u_star)
        out += 2 * sq / total * (1 - best)
    return out


def test_weighted_cosine_distance_by_hand_three_units():
    u = np.array([[1.0, 0.0], [0.0, 2.0], [-1.0, 1.0]])
    u_star = np.array([[1.0, 0.0], [1.0, 1.0]])
    # by hand: norms^2 1, 4, 2 (total 7); best cosines 1, 1/sqrt2, 0
    by_hand = 2 * (1 / 7 * 0 + 4 / 7 * (1 - 1 / np.sqrt(2)) + 2 / 7 * 1)
    assert float(ic.weighted_cosine_distance(u, u_star)) == pytest.approx(by_hand, rel=1e-12)
    rng = np.random.default_rng(0)
    u, u_star = rng.normal(size=(30, 5)), rng.normal(size=(4, 5))
    u[3] = 0.0                                      # a dead unit counts for nothing
    assert float(ic.weighted_cosine_distance(u, u_star)) == pytest.approx(_wcd_loops(u, u_star), rel=1e-12)


def test_weighted_cosine_distance_properties():
    rng = np.random.default_rng(1)
    u_star = rng.normal(size=(3, 6))
    aligned = np.concatenate([2.5 * u_star, 0.1 * u_star[:1]])
    assert float(ic.weighted_cosine_distance(aligned, u_star)) == pytest.approx(0.0, abs=1e-12)
    u = rng.normal(size=(10, 6))
    # scaling all units by one positive factor changes nothing; tiny extra units barely matter
    assert float(ic.weighted_cosine_distance(7 * u, u_star)) == pytest.approx(
        float(ic.weighted_cosine_distance(u, u_star)), rel=1e-12)
    with_tiny = np.concatenate([u, 1e-6 * rng.normal(size=(5, 6))])
    assert float(ic.weighted_cosine_distance(with_tiny, u_star)) == pytest.approx(
        float(ic.weighted_cosine_distance(u, u_star)), rel=1e-9)
    with pytest.raises(ValueError, match="same d"):
        ic.weighted_cosine_distance(u, u_star[:, :3])


@pytest.mark.parametrize("scale", [1.0, 1e-6])
def test_min_norm_readout_is_numpy_min_norm_least_squares(scale):
    rng = np.random.default_rng(2)
    phi = scale * rng.normal(size=(8, 20))
    y = rng.normal(size=8)
    v = np.asarray(ic.min_norm_readout(phi, y))
    np.testing.assert_allclose(v, np.linalg.lstsq(phi, y, rcond=None)[0], rtol=1e-8)
    np.testing.assert_allclose(phi @ v, y, rtol=1e-8, atol=1e-10)       # interpolates (M > N)


def test_teacher_student_targets_are_the_teacher():
    data = ic.data.teacher_student(jax.random.PRNGKey(0), 12, 7, d=10, m_star=5)
    assert data["x_train"].shape == (12, 10) and data["y_train"].shape == (12,)
    assert data["u_star"].shape == (5, 10) and data["x_test"].shape == (7, 10)
    x, u, v = (np.asarray(data[k]) for k in ("x_train", "u_star", "v_star"))
    want = np.array([sum(v[j] * max(0.0, u[j] @ xi) for j in range(5)) / 5 for xi in x])
    np.testing.assert_allclose(data["y_train"], want, rtol=1e-12)


SMALL = dataclasses.replace(ex.teacher_student_config("smoke"), n_train=12, width=40, n_test=50,
                            gn_iterations=60, gd_iterations=60, n_evals=5)


def test_run_stops_below_threshold_and_flags_divergence():
    cfg = dataclasses.replace(SMALL, stop_loss=1e-4)
    r = ex.run_teacher_student(cfg, "gn", [1.0, 1.0], [1.0, 12.0], progress="off")
    # a full GN step (lr = N) from tau0 = 1 interpolates almost at once and stops early
    assert r["stopped_at"][1] < cfg.gn_iterations and r["final_train_loss"][1] < 1e-4
    assert r["iters"][0] == 0 and np.all(np.diff(r["iters"]) > 0)
    assert r["train_loss"].shape == (r["iters"].size, 2)
    g = ex.run_teacher_student(cfg, "gd", [1.0, 1.0], [1.0, 1e12], progress="off")
    assert list(g["diverged"]) == [False, True]
    assert np.isnan(g["final_test_loss"][1]) and np.isfinite(g["final_test_loss"][0])


def test_a_run_that_blows_up_is_stopped_by_diverge_above():
    # GD at step 300 multiplies the training loss by about 16 and then 1e23 before it overflows
    plain = ex.run_teacher_student(SMALL, "gd", [1.0, 1.0], [1.0, 300.0], progress="off")
    capped = ex.run_teacher_student(SMALL, "gd", [1.0, 1.0], [1.0, 300.0], progress="off", diverge_above=1e4)
    assert list(capped["diverged"]) == [False, True] and np.isnan(capped["final_test_loss"][1])
    assert capped["stopped_at"][1] < plain["stopped_at"][1]       # stopped before the overflow
    for k in ("train_loss", "test_loss", "lrfit", "wcd"):      # a run that stays finite is unchanged
        np.testing.assert_array_equal(capped[k][:, 0], plain[k][:, 0])
    for bad in (1.0, 0.5, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="diverge_above"):
            ex.run_teacher_student(SMALL, "gd", [1.0], [1.0], diverge_above=bad)


def test_rf_baseline_is_lrfit_at_initialisation():
    data = ex.teacher_student_problem(SMALL)
    rf = ex.random_features_baseline(SMALL, [0.5], data=data)
    r = ex.run_teacher_student(SMALL, "gd", [0.5], [1.0], data=data, progress="off")
    assert rf["test_loss"][0] == pytest.approx(r["lrfit"][0, 0], rel=1e-12)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="method"):
        ex.run_teacher_student(SMALL, "adam", [1.0], [1.0])
    with pytest.raises(ValueError, match="equal length"):
        ex.run_teacher_student(SMALL, "gn", [1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="> 0"):
        ex.run_teacher_student(SMALL, "gn", [1.0], [-1.0])
    with pytest.raises(ValueError, match="activation"):
        mf.mean_field_net(3, 4, activation="softsign")
    with pytest.raises(ValueError, match="tau0"):
        mf.mean_field_net(3, 4, tau0=0.0)


def test_x64_is_required():
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(ValueError, match="64-bit"):
            ex.teacher_student_problem(SMALL)
    finally:
        jax.config.update("jax_enable_x64", True)


def test_refit_test_loss_is_numpy_refit():
    rng = np.random.default_rng(3)
    phi, phi_t = rng.normal(size=(6, 15)), rng.normal(size=(9, 15))
    y, y_t = rng.normal(size=6), rng.normal(size=9)
    v = np.linalg.pinv(phi) @ y                      # min-norm least squares
    want = 0.5 * np.mean((phi_t @ v - y_t) ** 2)
    assert float(ic.refit_test_loss(phi, y, phi_t, y_t)) == pytest.approx(want, rel=1e-9)


def test_a_run_in_a_group_is_the_run_alone():
    """Runs that finish early leave the batch (it shrinks and recompiles); that changes none of the
    other runs: each run of a group equals the same run trained alone."""
    cfg = dataclasses.replace(SMALL, stop_loss=1e-4, gn_iterations=80, n_evals=8)
    tau0s, lrs = [1.0, 1.0, 1.0, 0.5], [12.0, 6.0, 0.3, 0.1]
    group = ex.run_teacher_student(cfg, "gn", tau0s, lrs, progress="off")
    assert group["stopped_at"].min() < cfg.gn_iterations        # some runs do finish early
    for i, (t, lr) in enumerate(zip(tau0s, lrs)):
        alone = ex.run_teacher_student(cfg, "gn", [t], [lr], progress="off")
        assert alone["stopped_at"][0] == group["stopped_at"][i]
        for key in ("train_loss", "test_loss", "lrfit"):
            n = min(len(alone["iters"]), len(group["iters"]))
            np.testing.assert_allclose(group[key][:n, i], alone[key][:n, 0], rtol=1e-9, atol=1e-13)


def test_seeded_runs_each_draw_their_own_problem_and_match_it_trained_alone():
    """With ``seeds``, run g is the run of ``cfg.seed = seeds[g]`` (its own teacher, data and
    initial draw), trained with the others in one program; finished runs leave the batch."""
    cfg = dataclasses.replace(SMALL, stop_loss=1e-4, gn_iterations=60, n_evals=8)
    seeds, lrs = [0, 7, 11], [12.0, 0.3, 6.0]
    group = ex.run_teacher_student(cfg, "gn", [1.0] * 3, lrs, seeds=seeds, progress="off")
    assert list(group["seeds"]) == seeds and group["stopped_at"].min() < cfg.gn_iterations
    for g, (s, lr) in enumerate(zip(seeds, lrs)):
        alone = ex.run_teacher_student(dataclasses.replace(cfg, seed=s), "gn", [1.0], [lr], progress="off")
        assert alone["stopped_at"][0] == group["stopped_at"][g]
        n = min(len(alone["iters"]), len(group["iters"]))
        for key in ("train_loss", "test_loss", "wcd"):
            np.testing.assert_allclose(group[key][:n, g], alone[key][:n, 0], rtol=1e-9, atol=1e-13)
    # different seeds really are different problems
    assert len({float(v) for v in group["train_loss"][0]}) == 3
    with pytest.raises(ValueError, match="one integer per run"):
        ex.run_teacher_student(cfg, "gn", [1.0, 1.0], [1.0, 1.0], seeds=[0])
    with pytest.raises(ValueError, match="data=None"):
        ex.run_teacher_student(cfg, "gn", [1.0], [1.0], seeds=[0], data=ex.teacher_student_problem(cfg))


@pytest.mark.parametrize("log", [True, False])
def test_seed_interval_is_students_t_interval(log):
    from scipy import stats
    v = np.random.default_rng(0).lognormal(size=(4, 6))
    mean, low, high = ex.seed_interval(v, 0.95, log=log)
    w = np.log10(v) if log else v
    for row, m, lo, hi in zip(w, mean, low, high):
        want = stats.t.interval(0.95, len(row) - 1, loc=row.mean(), scale=stats.sem(row))
        got = (np.log10(lo), np.log10(hi)) if log else (lo, hi)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert lo <= m <= hi
    with pytest.raises(ValueError, match="at least 2 seeds"):
        ex.seed_interval(v[:, :1])


@pytest.mark.parametrize("method", ["gd", "gn"])
@pytest.mark.parametrize("lr", [0.3, 3.0])
def test_a_linear_models_loss_decays_inside_the_rate_band(method, lr):
    """For a linear model f = J w every step's rate -log(L_{k+1}/L_k)/lr lies between the rate
    of the slowest and the fastest direction (rate_band), for GD (directions: the eigenvalues of
    A = J J^T) and for damped GN (lambda / (lambda + eps)); checked on an explicit simulation."""
    rng = np.random.default_rng(1)
    n, p, eps = 6, 20, 0.05
    J, y = rng.normal(size=(n, p)) / 6, rng.normal(size=n)
    A = J @ J.T
    lam = np.linalg.eigvalsh(A)
    w, losses = np.zeros(p), []
    for _ in range(40):
        r = J @ w - y
        losses.append(0.5 * np.mean(r ** 2))
        g = J.T @ (r if method == "gd" else np.linalg.solve(A + eps * np.eye(n), r)) / n
        w = w - lr * g
    rate = -np.diff(np.log(losses)) / lr
    c = lam if method == "gd" else lam / (lam + eps)
    assert lr * c.max() / n < 1                            # every direction contracts monotonically
    low, high = ex.rate_band(c.min(), lr, n), ex.rate_band(c.max(), lr, n)
    assert np.all(rate >= low * (1 - 1e-9)) and np.all(rate <= high * (1 + 1e-9))
    assert ex.rate_band(c.min(), 1e-8, n) == pytest.approx(2 * c.min() / n, rel=1e-6)


def test_width_sweep_takes_each_widths_best_step_size_and_rf():
    from itlin_core.book import mean_field_scaling as ms
    cfg = dataclasses.replace(SMALL, widths=(6, 12), width_tau0=1.0, scaling_gn_lrs=(1.0, 4.0),
                              scaling_gd_lrs=(1.0,), gn_iterations=30, gd_iterations=30, n_evals=4)
    res = ms.run_width(cfg)
    data = ex.teacher_student_problem(cfg)
    for j, m in enumerate(cfg.widths):
        c = dataclasses.replace(cfg, width=m)
        rf = ex.random_features_baseline(c, [1.0], data=data)["test_loss"][0]
        assert res["rf"][j] == pytest.approx(rf, rel=1e-12)
        gn = ex.run_teacher_student(c, "gn", [1.0, 1.0], [1.0, 4.0], data=data, progress="off")
        assert res["gn"]["test_loss"][j] == pytest.approx(np.nanmin(gn["final_test_loss"]), rel=1e-9)
        assert res["gn"]["lr"][j] == gn["lr"][np.nanargmin(gn["final_test_loss"])]
    with pytest.raises(ValueError, match="no widths"):
        ms.run_width(dataclasses.replace(cfg, widths=()))


# ----------------------------------------------------------------- vector outputs (App. C.4)

def _vector_net(act, beta, d=4, width=6, c=3, seed=0):
    net = mf.mean_field_net(d, width, tau0=0.7, activation=act, beta=beta, outputs=c)
    p = net.init(jax.random.PRNGKey(seed))
    return net, {"u": p["u"], "v": jax.random.normal(jax.random.PRNGKey(seed + 1), (width, c))}


@pytest.mark.parametrize("act,beta", ACTS)
def test_vector_output_ntk_is_explicit_jacobian_product(act, beta):
    """The (N C, N2 C) factorised kernel equals J(x) J(x2)^T from explicit Jacobians (rows
    ordered example-major, as gn_step flattens the outputs)."""
    net, p = _vector_net(act, beta)
    x = jax.random.normal(jax.random.PRNGKey(3), (5, 4))
    x2 = jax.random.normal(jax.random.PRNGKey(4), (2, 4))
    j1 = np.asarray(ic.flat_jacobian(net.apply, p, x))
    j2 = np.asarray(ic.flat_jacobian(net.apply, p, x2))
    assert j1.shape == (15, 6 * 4 + 6 * 3)
    np.testing.assert_allclose(mf.mean_field_ntk(p, x, activation=act, beta=beta), j1 @ j1.T, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(mf.mean_field_ntk(p, x, x2, activation=act, beta=beta), j1 @ j2.T,
                               rtol=1e-10, atol=1e-13)


def test_one_output_column_is_the_scalar_network():
    """A network with C = 1 output is the scalar network: same outputs, and its kernel is the
    scalar kernel."""
    net1, p = _net_and_params("relu", 1.0)
    netc = mf.mean_field_net(4, 7, 0.7, outputs=1)
    pc = {"u": p["u"], "v": p["v"][:, None]}
    x = jax.random.normal(jax.random.PRNGKey(9), (5, 4))
    np.testing.assert_allclose(netc.apply(pc, x)[:, 0], net1.apply(p, x), rtol=1e-12)
    np.testing.assert_allclose(mf.mean_field_ntk(pc, x, net=netc), mf.mean_field_ntk(p, x, net=net1), rtol=1e-12)
    assert netc.init(jax.random.PRNGKey(0))["v"].shape == (7, 1)


@pytest.mark.parametrize("lr", [0.3, 5.0])
def test_vector_gn_step_is_dense_primal_step(lr):
    """Paper 003's step with ten-dimensional targets in App. C.4, w - lr (J^T J + eps I)^-1 J^T
    grad_f L with grad_f L = (F - Y)/N flattened, from the explicit Jacobian; fast and generic
    kernel-form steps must both equal it."""
    d, width, n, c = 3, 6, 4, 3                  # P = 36 > N C = 12
    net, p = _vector_net("silu", 1.0, d, width, c)
    x = jax.random.normal(jax.random.PRNGKey(5), (n, d))
    y = jax.random.normal(jax.random.PRNGKey(6), (n, c))
    flat, unravel = jax.flatten_util.ravel_pytree(p)
    jac = np.asarray(ic.flat_jacobian(net.apply, p, x))
    eps = max(1e-7, np.linalg.eigvalsh(jac @ jac.T)[0])
    grad_f = (np.asarray(net.apply(p, x)) - np.asarray(y)).reshape(-1) / n
    dense = unravel(jnp.asarray(np.asarray(flat) - lr * np.linalg.solve(jac.T @ jac + eps * np.eye(flat.size),
                                                                         jac.T @ grad_f)))
    for fast in (True, False):
        got = mf.make_gn_step(net, x, y, fast=fast)(p, lr)
        for k in ("u", "v"):
            np.testing.assert_allclose(got[k], dense[k], rtol=1e-7, atol=1e-10)


def test_vector_loss_gd_step_and_refit():
    """The loss is 1/(2N) sum_n ||f_n - y_n||^2 (numpy loop), GD follows its gradient (finite
    differences along a random direction), and Test-LRfit with C columns is the numpy lstsq
    re-fit with the same convention."""
    net, p = _vector_net("relu", 1.0)
    x = jax.random.normal(jax.random.PRNGKey(7), (5, 4))
    y = jax.random.normal(jax.random.PRNGKey(8), (5, 3))
    f = np.asarray(net.apply(p, x))
    want = sum(0.5 * np.sum((f[i] - np.asarray(y)[i]) ** 2) for i in range(5)) / 5
    assert float(ic.mean_field_loss(f, y)) == pytest.approx(want, rel=1e-12)
    loss = lambda q: float(ic.mean_field_loss(net.apply(q, x), y))
    new = ic.make_gd_step(net, x, y)(p, 1e-3)
    step = jax.tree.map(lambda a, b: (a - b) / 1e-3, p, new)          # the gradient
    dirn = jax.tree.map(lambda a: jax.random.normal(jax.random.PRNGKey(1), a.shape), p)
    h = 1e-6
    fd = (loss(jax.tree.map(lambda a, b: a + h * b, p, dirn)) - loss(jax.tree.map(lambda a, b: a - h * b, p, dirn))) / (2 * h)
    assert float(ic.tree_vdot(step, dirn)) == pytest.approx(fd, rel=1e-6)
    rng = np.random.default_rng(0)
    phi, phi_t, yt = rng.normal(size=(6, 9)), rng.normal(size=(4, 9)), rng.normal(size=(4, 3))
    yy = rng.normal(size=(6, 3))
    v = np.linalg.lstsq(phi, yy, rcond=None)[0]
    want = 0.5 * np.sum((phi_t @ v - yt) ** 2) / 4
    assert float(ic.refit_test_loss(phi, yy, phi_t, yt)) == pytest.approx(want, rel=1e-9)
    with pytest.raises(ValueError, match="outputs and targets"):
        ic.mean_field_loss(f, y[:, :2])


@pytest.mark.parametrize("bad", [0, -2, 2.0, True, "10"])
def test_bad_outputs_argument(bad):
    with pytest.raises(ValueError, match="outputs must be None"):
        mf.mean_field_net(4, 5, outputs=bad)


def test_the_gn_step_takes_the_activation_from_its_network():
    """The fast step's kernel uses the network's own activation and beta: a SiLU network's fast
    step equals its generic step (the kernel of a ReLU default would not), and a plain model
    cannot ask for the fast kernel."""
    net = mf.mean_field_net(3, 12, tau0=0.8, activation="silu", beta=3.0)
    assert (net.activation, net.beta) == ("silu", 3.0)
    x = jax.random.normal(jax.random.PRNGKey(4), (6, 3))
    y = jnp.cos(x[:, 1])
    p = net.init(jax.random.PRNGKey(5))
    p = {"u": p["u"], "v": jax.random.normal(jax.random.PRNGKey(6), p["v"].shape)}
    fast = mf.make_gn_step(net, x, y, fast=True)(p, 0.5)
    generic = mf.make_gn_step(net, x, y, fast=False)(p, 0.5)
    relu_kernel = mf.make_gn_step(net._replace(activation="relu", beta=1.0), x, y, fast=True)(p, 0.5)
    np.testing.assert_allclose(fast["u"], generic["u"], rtol=1e-6, atol=1e-9)
    assert not np.allclose(relu_kernel["u"], generic["u"], rtol=1e-3)
    with pytest.raises(ValueError, match="mean_field_net"):
        mf.make_gn_step(ic.Model(net.init, net.apply), x, y, fast=True)


def test_the_ntk_takes_its_activation_from_the_network_or_is_told_it():
    """No silent ReLU default: the kernel of SiLU parameters is the SiLU kernel when the network is
    passed, and without net or activation the call is refused."""
    net, p = _net_and_params("silu", 2.0)
    x = jax.random.normal(jax.random.PRNGKey(3), (5, 4))
    np.testing.assert_allclose(mf.mean_field_ntk(p, x, net=net), ic.empirical_ntk(net.apply, p, x),
                               rtol=1e-10, atol=1e-14)
    with pytest.raises(TypeError, match="needs the network's activation: pass net="):
        mf.mean_field_ntk(p, x)
    with pytest.raises(ValueError, match="differ from the network's"):
        mf.mean_field_ntk(p, x, net=net, activation="relu")
    with pytest.raises(TypeError, match="net must be the MeanFieldNet"):
        mf.mean_field_ntk(p, x, net=ic.Model(net.init, net.apply))


@pytest.mark.parametrize("call, words", [
    (lambda net, p, x: net.apply(mf.mean_field_net(4, 8).init(jax.random.PRNGKey(0)), x),
     r"params\['u'\] has shape \(8, 4\), but this mean-field network expects \(7, 4\)"),
    (lambda net, p, x: jax.jit(net.apply)({"u": p["u"]}, x), r"params has no leaf params\['v'\]"),
    (lambda net, p, x: net.apply(p, jnp.ones((2, 5))), r"x must be \(N, d\) inputs with d = 4 .*got shape \(2, 5\)"),
    (lambda net, p, x: mf.mean_field_ntk({"u": p["u"][:3], "v": p["v"][:3]}, x, net=net),
     r"mean_field_ntk: params\['u'\] has shape \(3, 4\), but this network expects \(7, 4\)"),
    (lambda net, p, x: mf.mean_field_ntk(p, jnp.ones((2, 5)), net=net), r"x must be \(N, d\) inputs with d = 4"),
    (lambda net, p, x: mf.mean_field_ntk(p, x, jnp.ones((2, 3)), activation="relu"), r"x2 must be \(N, d\)"),
    (lambda net, p, x: mf.mean_field_ntk({"u": p["u"], "v": p["v"][:2]}, x, activation="relu"),
     r"u of shape \(width, d\) and v of shape \(width,\)"),
    (lambda net, p, x: mf.mean_field_ntk(p, x.at[0, 0].set(jnp.nan), net=net), "^x holds 1 NaN"),
], ids=["apply width", "apply missing v (jit)", "apply d", "ntk width", "ntk d", "ntk x2 d", "ntk v", "ntk nan"])
def test_parameters_and_inputs_are_checked_against_the_network(call, words):
    net, p = _net_and_params("relu", 1.0)
    with pytest.raises(ValueError, match=words):
        call(net, p, jax.random.normal(jax.random.PRNGKey(3), (5, 4)))


@pytest.mark.parametrize("where", ["x", "y"])
def test_make_gn_step_names_non_finite_data(where):
    """NaN data are refused when the step is made, naming the data, not the damping rule."""
    net = mf.mean_field_net(3, 6, activation="silu")
    x, y = jax.random.normal(jax.random.PRNGKey(0), (4, 3)), jnp.ones(4)
    x, y = (x.at[0, 0].set(jnp.nan), y) if where == "x" else (x, y.at[2].set(jnp.inf))
    with pytest.raises(ValueError, match=f"^{where} holds 1 NaN") as e:
        mf.make_gn_step(net, x, y)
    assert "damping" not in str(e.value)
    with pytest.raises(ValueError, match=f"^{where} holds 1 NaN"):      # gradient descent too (was: NaN parameters)
        mf.make_gd_step(net, x, y)
