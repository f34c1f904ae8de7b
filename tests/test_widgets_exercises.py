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
    assert check(right) is True
    assert "✔" in capsys.readouterr().out
    for wrong, says in wrongs:
        assert check(wrong) is False, (name, wrong)
        out = capsys.readouterr().out
        assert "✘" in out and says in out, (name, out)


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
