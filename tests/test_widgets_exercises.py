"""The slider helper and the exercise checkers."""

import base64
import json
import math
import re

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import itlin_core as ic  # noqa: E402

from itlin_core.book import exercises, widgets  # noqa: E402


def test_static_slider_embeds_one_frame_per_value(capsys):
    fig, ax = plt.subplots()
    seen = []

    def draw(v):
        seen.append(v)
        ax.clear()
        ax.plot([0, 1], [0, v])

    html = widgets.slider(fig, draw, [1.0, 2.0, 3.0], label="t", mode="static")
    text = html.data
    frames = json.loads(re.search(r"const frames = (\[.*?\]);", text).group(1))
    assert len(frames) == 3  # one embedded frame per value, each a PNG
    assert all(base64.b64decode(f).startswith(b"\x89PNG") for f in frames)
    assert 'type="range"' in text  # the HTML slider that steps through them
    assert sorted(set(seen)) == [1.0, 2.0, 3.0]
    assert not plt.fignum_exists(fig.number)  # closed: no duplicate still image


def test_slider_rejects_bad_input(monkeypatch):
    fig, _ = plt.subplots()
    with pytest.raises(ValueError, match="at least one"):
        widgets.slider(fig, lambda v: None, [], label="t", mode="static")
    monkeypatch.setenv("ITLIN_SLIDERS", "animated")
    with pytest.raises(ValueError, match="static' or 'live'"):
        widgets.slider(fig, lambda v: None, [1], label="t")
    plt.close(fig)


def test_check_gradient_flow_accepts_right_and_rejects_wrong(capsys):
    right = lambda ntk, f0, y, t: y + jax.scipy.linalg.expm(-ntk * t) @ (f0 - y)
    assert exercises.check_gradient_flow(right)
    wrong_sign = lambda ntk, f0, y, t: y + jax.scipy.linalg.expm(ntk * t) @ (f0 - y)
    assert not exercises.check_gradient_flow(wrong_sign)
    no_y = lambda ntk, f0, y, t: jax.scipy.linalg.expm(-ntk * t) @ f0
    assert not exercises.check_gradient_flow(no_y)
    def raises(ntk, f0, y, t):
        raise RuntimeError("oops")
    assert not exercises.check_gradient_flow(raises)
    out = capsys.readouterr().out
    assert "✔" in out and "✘" in out and "oops" in out


def test_check_half_life():
    a = jax.random.normal(jax.random.PRNGKey(0), (5, 8))
    ntk = a @ a.T
    lam_min = float(np.linalg.eigvalsh(np.asarray(ntk))[0])
    assert exercises.check_half_life(math.log(2) / lam_min, ntk)
    assert not exercises.check_half_life(math.log(2) / float(jnp.max(jnp.linalg.eigvalsh(ntk))), ntk)
    assert not exercises.check_half_life(float("nan"), ntk)


def test_check_kernel_form():
    right = lambda J, r, lam: J.T @ np.linalg.solve(J @ J.T + lam * np.eye(J.shape[0]), r)
    assert exercises.check_kernel_form(right)
    undamped = lambda J, r, lam: J.T @ np.linalg.lstsq(J @ J.T, r, rcond=None)[0]
    assert not exercises.check_kernel_form(undamped)
    wrong_transpose = lambda J, r, lam: np.linalg.solve(J @ J.T + lam * np.eye(J.shape[0]), r)
    assert not exercises.check_kernel_form(wrong_transpose)


def test_check_total_variation():
    assert exercises.check_total_variation(lambda v: np.abs(np.diff(v)).sum())
    assert not exercises.check_total_variation(lambda v: np.abs(v[-1] - v[0]))  # ignores wiggles
    assert not exercises.check_total_variation(lambda v: np.sum(np.diff(v) ** 2))


# Each checker: the reference answer passes; typical wrong answers fail with the hint for that
# mistake; nothing the student can write crashes the checker.
U, U_STAR = np.array([[1.0, 0.0], [0.0, 2.0], [-1.0, 1.0]]), np.array([[1.0, 0.0], [1.0, 1.0]])
_S = np.linspace(1e-3, 20, 200_001)
CHECKS = [
    ("feature updates", lambda a: exercises.check_feature_update_count(a),
     lambda T, K: 1 if K is None else math.ceil(T / K),
     [(lambda T, K: 1 if K is None else T // K, "counts too"), (lambda T, K: 0 if K is None else math.ceil(T / K),
                                                                 "K = inf still linearises once"),
      (lambda T, K: 1 / 0, "ZeroDivisionError")]),
    ("geometric count", lambda a: exercises.check_geometric_count(a),
     lambda T, K0, r: math.floor(math.log(1 + T * (r - 1) / K0) / math.log(r)) + 1,
     [(lambda T, K0, r: math.ceil(T / K0), "solve for j with a logarithm"), (lambda T, K0, r: "many", "wrong count")]),
    ("random alignment", lambda a: exercises.check_random_alignment(a), 2 * math.sqrt(2) / math.pi,
     [(math.cos(math.pi / 8), "cosine of the average angle"), (1.3, "between 0 and 1"), ("ninety", "a number")]),
    ("wcd", lambda a: exercises.check_wcd(a, U, U_STAR),
     float(ic.weighted_cosine_distance(U, U_STAR)),
     [(2 * np.mean(1 - np.max((U / np.linalg.norm(U, axis=1, keepdims=True)) @ (U_STAR / np.linalg.norm(
         U_STAR, axis=1, keepdims=True)).T, axis=1)), "share of the squared norm"),
      (float(ic.weighted_cosine_distance(U, U_STAR)) / 2, "factor 2")]),
    ("silu constant", lambda a: exercises.check_silu_constant(a), float(np.max(_S / (1 + np.exp(_S)))),
     [(0.5, "sigmoid(s) = 1"), (-0.28, "must be positive")]),
]


@pytest.mark.parametrize("name, check, right, wrongs", CHECKS, ids=[c[0] for c in CHECKS])
def test_exercise_checkers_pass_the_reference_and_explain_typical_mistakes(name, check, right, wrongs, capsys):
    assert_checker(name, check, right, wrongs, capsys)


def assert_checker(name, check, right, wrongs, capsys):
    """``check`` passes ``right`` with a tick, and fails each wrong answer with a cross and the hint ``says``."""
    assert check(right) is True, capsys.readouterr().out
    assert "✔" in capsys.readouterr().out
    for wrong, says in wrongs:
        assert check(wrong) is False, (name, wrong)
        out = capsys.readouterr().out
        assert "✘" in out and says in out, (name, says, out)


def test_the_random_alignment_is_the_mean_alignment_of_random_directions():
    """An independent check of the constant check_random_alignment compares with: the mean
    feature alignment (ic.feature_alignment with the XOR centres) of many random directions."""
    theta = np.random.default_rng(0).uniform(0, 2 * np.pi, 400_000)
    w = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    mc = float(np.mean(ic.feature_alignment(w, ic.data.XOR_CENTRES)))
    assert abs(mc - exercises.RANDOM_ALIGNMENT) < 5e-4


def test_live_slider_redraws_when_moved():
    pytest.importorskip("ipywidgets")
    fig, ax = plt.subplots()
    seen = []
    box = widgets.slider(fig, lambda v: seen.append(v), [10, 20, 30], label="K", mode="live")
    control = box.children[0]
    assert seen == [10, 20, 30, 10]  # every value once for the shared axes, then the initial value
    box = widgets.slider(fig, lambda v: seen.append(v), [10, 20, 30], label="K", mode="live", fixed_axes=False)
    control = box.children[0]
    assert seen[4:] == [10]  # without shared axes: drawn once for the initial value
    control.value = 2
    assert seen[-1] == 30 and fig._suptitle.get_text() == "K = 30"


# The checkers of issue 44: each reference answer passes, typical wrong answers fail with the hint
# for that mistake, and bad input (NaN, a wrong shape, not a number) fails with a sentence.
import functools  # noqa: E402

import optax  # noqa: E402

from itlin_core.book import exercises_features, exercises_images, image_chapters  # noqa: E402


def _weighted(run, i):
    w = np.abs(run["w2"][i]) * np.linalg.norm(run["w1"][i], axis=1)
    return float(np.sum(w * run["alignment"][i]) / np.sum(w))


@functools.cache
def _problems() -> dict:
    """The test problems of issue 44's checkers and the two tables of checks built on them,
    ``{name: value}``: computed once, by the first test that needs them, not at import (at
    module level they cost every pytest worker about 15 s of collection, measured on this 2-core
    machine, although only one worker runs these tests)."""
    _NET = ic.mlp([1, 16, 16, 1], "tanh", b_std=1.0)
    _P = _NET.init(jax.random.key(0))
    _U = jax.tree.map(lambda a: 0.1 * a, _NET.init(jax.random.key(1)))
    _X = jnp.linspace(-2, 2, 7)[:, None]
    _FLIN = ic.linearise(_NET.apply, _P)
    _ALONG = lambda a: jax.tree.map(lambda p, d: p + a * d, _P, _U)
    _SLOPE = _FLIN(_ALONG(1.0), _X) - _FLIN(_P, _X)
    _GRID = jnp.linspace(-3, 3, 31)[:, None]
    _NTK = np.asarray(ic.empirical_ntk(_NET.apply, _P, _GRID), dtype=np.float64)
    _EV = np.linalg.eigvalsh(_NTK)
    _RANK = int(np.sum(_EV > 1e-6 * _EV.max()))
    _C3 = ic.mlp([4, 8, 3], "tanh")
    _P3 = _C3.init(jax.random.key(3))
    _X3, _L3 = jax.random.normal(jax.random.key(4), (10, 4)), jax.random.randint(jax.random.key(5), (10,), 0, 3)
    _GLIN = jax.grad(lambda q: ic.softmax_cross_entropy(ic.linearise(_C3.apply, _P3)(q, _X3), _L3))(_P3)
    # gradient flow: a random positive definite kernel on 6 training and 4 test inputs
    _A = np.random.default_rng(0).normal(size=(10, 12))
    _K = _A @ _A.T / 12
    _KT, _KX, _KXT = _K[:6, :6], _K[6:, :6], None
    _F0, _Y, _F0T = np.linspace(-1, 1, 6), np.cos(np.arange(6.0)), np.linspace(0.5, -0.5, 4)
    _FINF = _F0T + _KX @ np.linalg.solve(_KT, _Y - _F0)
    # heavy damping: a small regression
    _XR, _YR = jax.random.normal(jax.random.key(6), (8, 1)), jax.random.normal(jax.random.key(7), (8, 1))
    _LAMMAX = float(np.linalg.eigvalsh(np.asarray(ic.empirical_ntk(_NET.apply, _P, _XR))).max())
    _LAM = 1e4 * _LAMMAX
    _FL = lambda t: jnp.concatenate([jnp.ravel(a) for a in jax.tree.leaves(t)])
    _GR = _FL(jax.grad(lambda p: ic.squared_error(_NET.apply(p, _XR), _YR))(_P))
    _DIR = _LAM * _FL(ic.gn_direction(_NET.apply, _P, _XR, _YR, damping=_LAM))
    _HEAVY = float(jnp.linalg.norm(_DIR - _GR) / jnp.linalg.norm(_GR))
    # relative change of weights
    _W0, _W1 = np.random.default_rng(1).normal(size=(12, 2)), np.random.default_rng(2).normal(size=(12, 2))
    # mean-field kernel at initialisation: 3 outputs, v = 0
    _MF = ic.mean_field_net(4, 6, 1.0, outputs=3)
    _PMF = _MF.init(jax.random.key(8))
    _XMF = np.asarray(jax.random.normal(jax.random.key(9), (5, 4)))
    _G = np.asarray(ic.mean_field.hidden_features(_PMF["u"], _XMF))
    _KRON = np.kron(_G @ _G.T, np.eye(3)) / 6**2
    # power law: noisy losses on five sizes
    _NS = np.array([100, 200, 400, 800, 1600])
    _LOSSES = 2.0 * _NS**-0.7 * np.exp(np.random.default_rng(3).normal(scale=0.05, size=5))
    _PL = lambda keep: float(np.exp(np.polyval(np.polyfit(np.log(_NS[keep]), np.log(_LOSSES[keep]), 1),
                                               np.log(_NS[-1]))))

    NEW_CHECKS = [
        ("lin slope", lambda a: exercises.check_lin_slope(a, _NET.apply, _P, _X, _U), _SLOPE,
         [(-_SLOPE, "wrong sign"), (_FLIN(_ALONG(1.0), _X), "subtract its value at the anchor"),
          (_NET.apply(_ALONG(1.0), _X) - _NET.apply(_P, _X), "the network's change"),
          (_SLOPE[:5], "wrong shape"), (jnp.full_like(_SLOPE, jnp.nan), "NaN"), ("steep", "array of numbers")]),
        ("ntk rank", lambda a: exercises.check_ntk_rank(a, _NTK), _RANK,
         [(31, "rounding errors"), (_RANK + 1, "count the eigenvalues"), (40, "at most 31"),
          (float("nan"), "whole number"), (2.5, "whole number")]),
        ("anchor gradient", lambda a: exercises.check_anchor_gradient(a, _C3.apply, _P3, _X3, _L3), _GLIN,
         [(jax.tree.map(lambda g: -g, _GLIN), "wrong sign"),
          (jax.grad(lambda q: ic.squared_error(_C3.apply(q, _X3), jax.nn.one_hot(_L3, 3)))(_P3), "jax.grad of"),
          (jax.grad(lambda o: ic.softmax_cross_entropy(o, _L3))(_C3.apply(_P3, _X3)), "one entry per output"),
          (_FL(_GLIN)[:-1], "wrong shape"), (jnp.full(ic.count_params(_P3), jnp.nan), "NaN")]),
        ("flow limit", lambda a: exercises.check_flow_limit(a, _KT, _F0, _Y, _KX, _F0T), _FINF,
         [(_FINF - _F0T, "add the initial function"), (_F0T + _KX @ np.linalg.solve(_KT, _Y), "initial residual"),
          (2 * _F0T - _FINF, "wrong sign"), (_FINF[:3], "wrong shape"), (_FINF * np.nan, "NaN")]),
        ("heavy damping", lambda a: exercises.check_heavy_damping(a, _LAM, _NET.apply, _P, _XR, _YR), _HEAVY,
         [(float(jnp.linalg.norm(_DIR + _GR) / jnp.linalg.norm(_GR)), "wrong sign"),
          (float(jnp.linalg.norm(_DIR / _LAM - _GR) / jnp.linalg.norm(_GR)), "multiply the direction by lambda"),
          (float(jnp.linalg.norm(_DIR - _GR)), "absolute error"), (float("nan"), "finite number")]),
        ("relative change", lambda a: exercises_features.check_relative_change(a, _W1, _W0),
         np.linalg.norm(_W1 - _W0) / np.linalg.norm(_W0),
         [(np.linalg.norm(_W1 - _W0), "absolute change"), (np.linalg.norm(_W1 - _W0) / np.linalg.norm(_W1), "not of the final"),
          (abs(np.linalg.norm(_W1) / np.linalg.norm(_W0) - 1), "change of the norm"), (None, "finite number")]),
        ("weighted alignment", lambda a: exercises_features.check_weighted_alignment(a), _weighted,
         [(lambda run, i: float(run["alignment"][i].mean()), "plain mean"),
          (lambda run, i: float(np.average(run["alignment"][i], weights=np.abs(run["w2"][i]))), "first-layer weights"),
          (lambda run, i: _weighted(run, i) * np.sum(np.abs(run["w2"][i]) * np.linalg.norm(run["w1"][i], axis=1)),
           "divide by the sum"),
          (lambda run, i: run["w3"], "KeyError"), (lambda run, i: np.nan, "wrong weighted alignment")]),
        ("init kernel", lambda a: exercises_features.check_init_kernel(a, _PMF, _XMF, _MF), _KRON,
         [(np.kron(np.eye(3), _G @ _G.T) / 36, "example-major"), (np.kron(_G @ _G.T, np.eye(3)) / 6, "1/M^2"),
          (np.kron(_G @ _G.T, np.ones((3, 3))) / 36, "hidden-features term"), (_G @ _G.T / 36, "wrong shape"),
          (_KRON * np.nan, "NaN")]),
        ("power law", lambda a: exercises_features.check_power_law_prediction(a, _NS, _LOSSES), _PL(slice(None, -1)),
         [(_LOSSES[-1], "measured loss"), (_PL(slice(None)), "leave the largest N out"), (-0.1, "positive number"),
          (float("nan"), "positive number"), ("small", "positive number")]),
    ]

    # The second round of issue 44's checkers: Gauss-Newton steps, agreement rates and the image
    # chapters' settings.
    # truncated GN with Adam on the small regression of the heavy-damping test
    _THETA0, _EXACT = _FL(_P), _FL(ic.gn_step(_NET.apply, _P, _XR, _YR))
    _TGN = _FL(ic.tgn_step(_NET.apply, _P, _XR, _YR, loss_fn=ic.squared_error, optimizer=optax.adam(1e-2),
                           num_steps=10).params)
    _SCALE, _GAP = float(jnp.linalg.norm(_EXACT - _THETA0)), float(jnp.linalg.norm(_TGN - _EXACT))
    # the hard pair: a copy of the first input moved by 1e-2, with the first target plus one
    _XD = jnp.concatenate([_XR, _XR[:1] + 1e-2])
    _YD = jnp.concatenate([_YR, _YR[:1] + 1.0])
    _TH = np.asarray(ic.kernel_matrix(ic.empirical_ntk(_NET.apply, _P, _XD, full=True)), dtype=np.float64)
    _RD = np.asarray(_NET.apply(_P, _XD) - _YD, dtype=np.float64).reshape(-1)
    _SD, _UD = np.linalg.eigh(_TH)
    _WD = np.clip(_SD, 0, None) * (_UD.T @ _RD) ** 2
    _ETA = 1.0 / _SD[-1]
    _KSTAR = {nu: ic.gd_steps_to_tolerance(_TH, _RD, _ETA, nu) for nu in (0.1, 1e-4)}
    _HARD = lambda lam=_SD[0], p=_WD[0] / _WD.sum(), k=_KSTAR: exercises_features.check_hard_pair(
        lam, p, k, _NET.apply, _P, _XD, _YD, _ETA)
    # a read-out on random features, judged against probabilities of three classes
    _RNG = np.random.default_rng(4)
    _PHI, _PHIT = _RNG.normal(size=(20, 50)), _RNG.normal(size=(60, 50))
    _TARG = np.asarray(jax.nn.softmax(_RNG.normal(size=(20, 3)) * 2.0))
    _TRUTH = _PHIT @ np.asarray(ic.min_norm_readout(_PHI, _TARG)) + _RNG.normal(size=(60, 3)) * 0.3
    _GUESS = lambda t: (_PHIT @ np.asarray(ic.min_norm_readout(_PHI, t))).argmax(1)
    _AGREE = float(np.mean(_GUESS(_TARG) == _TRUTH.argmax(1)))
    _AGREE_1HOT = float(np.mean(_GUESS(np.eye(3)[_TARG.argmax(1)]) == _TRUTH.argmax(1)))
    # a classifier moved far from its anchor, so that network and proxy disagree on some inputs
    _MOVED = jax.tree.map(lambda p, d: p + 3.0 * d, _P3, _C3.init(jax.random.key(10)))
    _XP = jax.random.normal(jax.random.key(11), (80, 4))
    _SAME = float(np.mean(np.asarray(_C3.apply(_MOVED, _XP)).argmax(1)
                          == np.asarray(ic.linearise(_C3.apply, _P3)(_MOVED, _XP)).argmax(1)))
    # damped GN steps over eight orders of magnitude of damping
    _LAMS = 10.0 ** np.arange(-4, 5, 2)
    _STEPS = [_FL(ic.gn_step(_NET.apply, _P, _XR, _YR, damping=float(lam))) for lam in _LAMS]
    _NORMS = np.array([float(jnp.linalg.norm(s - _THETA0)) for s in _STEPS])
    _JTR = np.asarray(ic.flat_jacobian(_NET.apply, _P, _XR)).T @ np.asarray(_YR - _NET.apply(_P, _XR)).reshape(-1)
    # the image chapters' settings
    _GROUPS = [cfg for p in ("paper", "colab", "laptop") for ch in ("cifar_damping", "resnet_mnist")
               for cfg in image_chapters.run_groups(ch, p).values()]
    _FIG4 = [cfg for p in ("laptop", "colab", "paper") for name, cfg in image_chapters.run_groups("cifar_features", p).items()
             if re.fullmatch(r"fig4_n\d+", name)]
    _REACH = lambda cfg, K: (math.inf, 1) if K is None else (cfg.lr * K, math.ceil(cfg.steps / K))
    _EPOCHS = lambda cfg, K: K * min(cfg.batch_size or cfg.n_train, cfg.n_train) / cfg.n_train

    ROUND2_CHECKS = [
        ("tgn distance", lambda a: exercises_features.check_tgn_distance(a, 10, _NET.apply, _P, _XR, _YR, optax.adam(1e-2)),
         _GAP / _SCALE,
         [(_GAP, "absolute distance"), (_GAP / float(jnp.linalg.norm(_EXACT)), "not by |theta_GN|"),
          (float(jnp.linalg.norm(_TGN - _THETA0)) / _SCALE, "moved from the anchor"), (float("nan"), "finite number")]),
        ("hard pair", lambda a: _HARD(*a), (_SD[0], _WD[0] / _WD.sum(), _KSTAR),
         [((_SD[-1], 0.1, _KSTAR), "largest eigenvalue"),
          ((_SD[0], (_UD.T @ _RD)[0] ** 2 / np.sum(_RD**2), _KSTAR), "residual's share"),
          ((_SD[0], 2.0, _KSTAR), "between 0 and 1"),
          ((_SD[0], _WD[0] / _WD.sum(), {nu: 2 * k for nu, k in _KSTAR.items()}), "gd_steps_to_tolerance"),
          ((_SD[0], _WD[0] / _WD.sum(), [1, 2]), "must be a dict"), ((float("nan"), 0.1, _KSTAR), "finite numbers")]),
        ("readout agreement", lambda a: exercises_images.check_readout_agreement(a, _PHI, _TARG, _PHIT, _TRUTH), _AGREE,
         [(100 * _AGREE, "percentage"), (60 * _AGREE, "a count"), (1 - _AGREE, "disagree"),
          (_AGREE_1HOT, "one-hot classes"), (float("nan"), "finite number"), ("most", "finite number")]),
        ("readout agreement, labels", lambda a: exercises_images.check_readout_agreement(
            a, _PHI, _TARG, _PHIT, _TRUTH.argmax(1)), _AGREE, [(1.2, "between 0 and 1")]),
        ("proxy agreement", lambda a: exercises_images.check_proxy_agreement(a, _C3.apply, _MOVED, _P3, _XP), _SAME,
         [(1.0, "state.anchor"), (100 * _SAME, "percentage"), (1 - _SAME, "disagree"), (None, "finite number")]),
        ("damped step norms", lambda a: exercises_images.check_damped_step_norms(a, _LAMS, _NET.apply, _P, _XR, _YR),
         _NORMS,
         [(np.array([float(jnp.linalg.norm(s)) for s in _STEPS]), "subtract the anchor"),
          (np.linalg.norm(_JTR) / _LAMS, "gradient step"), (_NORMS[::-1], "order of the dampings"),
          (_NORMS[:3], "wrong shape"), (_NORMS * np.nan, "NaN")]),
        ("reach", lambda a: exercises_images.check_reach(a, _GROUPS), _REACH,
         [(lambda cfg, K: (math.inf, 1) if K is None else (cfg.lr * cfg.steps, 1), "training time"),
          (lambda cfg, K: (0.0, 1) if K is None else _REACH(cfg, K), "math.inf"),
          (lambda cfg, K: (math.inf, 0) if K is None else _REACH(cfg, K), "still linearises once"),
          (lambda cfg, K: _REACH(cfg, K) if K is None else (cfg.lr * K, math.ceil(cfg.steps / K) - 1), "one too few"),
          (lambda cfg, K: cfg.lr * (K or 0), "two numbers"), (lambda cfg, K: (cfg.eta, 1), "AttributeError")]),
        ("run updates", lambda a: exercises_images.check_run_updates(a, _GROUPS), lambda cfg, K: _REACH(cfg, K)[1],
         [(lambda cfg, K: 0 if K is None else _REACH(cfg, K)[1], "still linearises once"),
          (lambda cfg, K: 1 if K is None else 2 * _REACH(cfg, K)[1], "ceil(steps / K)"),
          (lambda cfg, K: _REACH(cfg, K)[1] - (K is not None), "one too few"), (lambda cfg, K: cfg.K, "AttributeError")]),
        ("exact steps", lambda a: exercises_images.check_exact_steps(a, 3, 7), [3, 6],
         [([1, 4, 7], "end of step K"), (list(range(1, 8)), "bends away"), ([0, 3, 6], "from 1"), ([2, 5], "theta_s"),
          ("three and six", "whole numbers")]),
        ("epochs per linearisation", lambda a: exercises_images.check_epochs_per_linearisation(a, _FIG4), _EPOCHS,
         [(lambda cfg, K: 1 / _EPOCHS(cfg, K), "upside down"), (lambda cfg, K: K * cfg.batch_size, "divide by"),
          (lambda cfg, K: cfg.steps * cfg.batch_size / cfg.n_train, "whole run"),
          (lambda cfg, K: float("nan"), "wrong epochs")]),
    ]
    return locals()


#: The checks of the two tables, by name (the tables are built lazily by :func:`_problems`; a test
#: below checks that these are all their names, so none is skipped).
NEW_NAMES = ('lin slope', 'ntk rank', 'anchor gradient', 'flow limit', 'heavy damping', 'relative change', 'weighted alignment', 'init kernel', 'power law')
ROUND2_NAMES = ('tgn distance', 'hard pair', 'readout agreement', 'readout agreement, labels', 'proxy agreement', 'damped step norms', 'reach', 'run updates', 'exact steps', 'epochs per linearisation')


def _check(table, name):
    return next(c for c in _problems()[table] if c[0] == name)


def test_the_named_checks_are_every_check_of_the_tables():
    assert tuple(c[0] for c in _problems()["NEW_CHECKS"]) == NEW_NAMES
    assert tuple(c[0] for c in _problems()["ROUND2_CHECKS"]) == ROUND2_NAMES


@pytest.mark.parametrize("name", NEW_NAMES)
def test_issue44_checkers_pass_the_reference_and_explain_typical_mistakes(name, capsys):
    assert_checker(*_check("NEW_CHECKS", name), capsys)


def test_check_init_kernel_refuses_parameters_away_from_initialisation(capsys):
    pb = _problems()
    moved = {**pb["_PMF"], "v": jnp.ones_like(pb["_PMF"]["v"])}
    assert not exercises_features.check_init_kernel(pb["_KRON"], moved, pb["_XMF"], pb["_MF"])
    assert "not at initialisation" in capsys.readouterr().out


@pytest.mark.parametrize("name", ROUND2_NAMES)
def test_issue44_round2_checkers_pass_the_reference_and_explain_typical_mistakes(name, capsys):
    assert_checker(*_check("ROUND2_CHECKS", name), capsys)


def test_round2_test_problems_tell_the_mistakes_apart():
    """The wrong answers above differ from the right ones by more than the checkers' slack."""
    pb = _problems()
    assert abs(pb["_AGREE"] - pb["_AGREE_1HOT"]) > 1 / 60 and abs(pb["_AGREE"] - 0.5) > 1 / 60
    assert 0 < pb["_SAME"] < 1 - 1 / 80 and abs(pb["_SAME"] - 0.5) > 1 / 80
    assert any(K is None for cfg in pb["_GROUPS"] for K in cfg.Ks)


def test_check_drift_rule_ends_passes_the_solution_and_explains_typical_mistakes(capsys):
    """The solution of ``ex-refresh-ends`` (one initialisation, one sequence of minibatches, the
    rule passed to the step) passes; a run that ignores its rule, one that draws a new
    initialisation per call, one that returns the parameters instead of the state, and one that
    raises each fail with their hint."""
    net = ic.mlp([4, 8, 3], "tanh")
    params0 = net.init(jax.random.key(0))
    x, y = jax.random.normal(jax.random.key(1), (32, 4)), jax.random.randint(jax.random.key(2), (32,), 0, 3)
    batches, opt = ic.minibatches(jax.random.key(3), x, y, 8), optax.sgd(0.5)

    def run(rule, start=params0):
        step = ic.make_il_step(net.apply, ic.softmax_cross_entropy, opt, rule)
        return ic.train(step, ic.init_il_state(start, opt), batches, 6)[0]

    calls = iter(range(100))
    wrongs = [(lambda rule: run(1), "does not use"),
              (lambda rule: run(rule, net.init(jax.random.key(10 + next(calls)))), "from the same parameters"),
              (lambda rule: run(rule).params, "must return the IL state"),
              (lambda rule: 1 / 0, "ZeroDivisionError")]
    assert exercises_features.check_drift_rule_ends(run) is True
    assert "✔" in capsys.readouterr().out
    for wrong, says in wrongs:
        assert exercises_features.check_drift_rule_ends(wrong) is False, says
        out = capsys.readouterr().out
        assert "✘" in out and says in out, (says, out)


def test_check_pixel_probe_passes_the_solution_and_explains_typical_mistakes(capsys):
    """``ex-digits-pixels``: the probe on the first images with the chapter's ridge passes; its
    training accuracy, a percentage, a probe on all training images, one with the default ridge
    and a word fail with their hints."""
    rng = np.random.default_rng(5)
    centres = rng.normal(size=(3, 4, 4, 1))
    y, yt = rng.integers(0, 3, 120), rng.integers(0, 3, 80)
    data = {"x_train": centres[y] + 1.5 * rng.normal(size=(120, 4, 4, 1)), "y_train": y,
            "x_test": centres[yt] + 1.5 * rng.normal(size=(80, 4, 4, 1)), "y_test": yt}
    rows = lambda a: a.reshape(len(a), -1)
    probe = lambda n, lam: ic.linear_probe(rows(data["x_train"][:n]), y[:n], rows(data["x_test"]), yt, ridge=lam)
    right = probe(30, 0.3)
    wrongs = [(float(right["train_accuracy"]), "training accuracy"), (100 * float(right["test_accuracy"]), "percentage"),
              (float(probe(120, 0.3)["test_accuracy"]), "first 30 training images"),
              (float(probe(30, 1e-3)["test_accuracy"]), "ridge=cfg.probe_ridge"), ("high", "finite number")]
    # the wrong answers differ from the right one by more than the checker's slack of one image
    assert all(abs(w - float(right["test_accuracy"])) > 1 / 80 for w, _ in wrongs[:4]), wrongs
    assert_checker("pixel probe", lambda a: exercises_images.check_pixel_probe(a, data, 30, 0.3),
                   float(right["test_accuracy"]), wrongs, capsys)


def test_check_floor_rate_passes_the_solution_and_explains_typical_mistakes(capsys):
    """``ex-mf-floor`` (a): the eigenvalue of Q at the floor passes; its approximation, its
    complement, the band's end with 2 / N, a string and a raising function fail with their hints."""
    wrongs = [(lambda lam, eps: lam / eps, "approximation"), (lambda lam, eps: eps / (lam + eps), "1 - q_min"),
              (lambda lam, eps: 2 * lam / (lam + eps) / 500, "the 2 / N of the band"), (lambda lam, eps: "small", "finite number"),
              (lambda lam, eps: 1 / 0, "ZeroDivisionError"), (lambda lam, eps: lam / (lam + 2 * eps), "t / (t + lambda)")]
    assert_checker("floor rate", exercises_features.check_floor_rate, lambda lam, eps: lam / (lam + eps), wrongs, capsys)


def test_check_damping_vs_step_passes_the_solution_and_explains_typical_mistakes(capsys):
    """``ex-quintic-lr``: the three test RMSEs after the same Gauss-Newton iterations pass; the
    training RMSEs, the squared errors, a run twice as long, missing keys and a word fail with
    their hints."""
    net = ic.mlp([1, 12, 1], "tanh", b_std=1.0)
    params = net.init(jax.random.key(0))
    x = jnp.linspace(-2, 2, 9)[:, None]
    xt = jnp.linspace(-1.9, 1.9, 7)[:, None]
    data = {"x_train": x, "y_train": jnp.sin(2 * x), "x_test": xt, "y_test": jnp.sin(2 * xt)}
    settings = [(1e-3, 1.0), (1e-3, 0.3), (10.0, 1.0)]

    def answer(n=5, where="test", square=False):
        out = {}
        for lam, lr in settings:
            p = jax.jit(lambda q: ic.gn_iterate(net.apply, q, data["x_train"], data["y_train"], n, lr=lr, damping=lam))(params)
            xx, yy = (data["x_test"], data["y_test"]) if where == "test" else (data["x_train"], data["y_train"])
            e = float(ic.rmse(net.apply(p, xx), yy))
            out[lam, lr] = e ** 2 if square else e
        return out

    right = answer()
    wrongs = [(answer(where="train"), "training RMSE"), (answer(square=True), "square root"),
              (answer(n=10), "exactly 5 iterations"), ({(1e-3, 1.0): 0.1}, "give a dict with the keys"),
              ({**right, (10.0, 1.0): "low"}, "finite number")]
    assert_checker("damping vs step", lambda a: exercises_features.check_damping_vs_step(a, net.apply, params, data, 5),
                   right, wrongs, capsys)


def test_check_frozen_statistics_passes_the_solution_and_explains_typical_mistakes(capsys):
    """``ex-rn-frozen``: statistics frozen on the large batch pass; batch statistics, one image's
    logits and an exception fail with their hints."""
    net = ic.resnet18(10, batch_norm=True, width=2)
    p = net.init(jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (4, 8, 8, 3))
    x_other = x.at[1:].set(jax.random.normal(jax.random.key(2), (3, 8, 8, 3)))
    x_big = jnp.concatenate([x, x_other])
    stats = net.apply(p, x_big, return_stats=True)[1]
    right = jax.jit(lambda q, xx: net.apply(q, xx, stats=stats))
    check = lambda f: exercises_images.check_frozen_statistics(f, net.apply, p, x_big, x, x_other)
    wrongs = [(jax.jit(net.apply), "companions"), (lambda q, xx: right(q, xx)[0], "wrong shape"),
              (lambda q, xx: 1 / 0, "ZeroDivisionError")]
    assert_checker("frozen statistics", check, right, wrongs, capsys)
