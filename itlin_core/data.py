"""Small synthetic data sets for the CPU chapters (no download needed).

Conventions: each function takes a PRNG key (where it draws anything) and returns arrays with a
leading example axis; regression targets are ``(N, 1)`` except the teacher-student targets,
``(N,)``, as in Arbel et al. CIFAR10 and MNIST are in :mod:`itlin_core.datasets` (re-exported
here as ``data.cifar10`` and ``data.mnist``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._validate import check_key, check_number, positive_ints
from .activations import activation_pair
# CIFAR10 and MNIST live in itlin_core.datasets; re-exported so that ``data.cifar10()`` reads
# like the toy sets.
from .datasets import ChecksumError, DatasetUnavailableError, cifar10, mnist, write_stand_in  # noqa: F401


def single_index(key, n_train: int, n_test: int, d: int, link: str = "abs"):
    r"""Gaussian inputs ``x ~ N(0, I_d)`` and a target that depends on one hidden direction,
    ``y = g(<w*, x>)`` with a unit vector ``w*`` drawn at random.

    A network that learns features can find ``w*`` and then only has a 1-D function to fit;
    a fixed kernel (the linearised network) must fit a function of ``d`` variables from the
    same data, so it generalises worse as ``d`` grows. ``link``: ``"abs"``
    (``|z| - E|z|``, centred), ``"relu"`` or ``"tanh3"`` (``tanh(3z)``).

    Returns a dict with ``x_train (n_train, d)``, ``y_train (n_train, 1)``, ``x_test``,
    ``y_test`` and the direction ``w_star (d,)``.
    """
    links = {"abs": lambda z: jnp.abs(z) - jnp.sqrt(2.0 / jnp.pi),
             "relu": jax.nn.relu,
             "tanh3": lambda z: jnp.tanh(3.0 * z)}
    if link not in links:
        raise ValueError(f"unknown link {link!r}; use one of {sorted(links)}.")
    n_train, n_test, d = positive_ints(n_train=n_train, n_test=n_test, d=d)
    kw, ktr, kte = jax.random.split(check_key(key), 3)
    w = jax.random.normal(kw, (d,))
    w = w / jnp.linalg.norm(w)
    x_train = jax.random.normal(ktr, (n_train, d))
    x_test = jax.random.normal(kte, (n_test, d))
    g = links[link]
    return {"x_train": x_train, "y_train": g(x_train @ w)[:, None],
            "x_test": x_test, "y_test": g(x_test @ w)[:, None], "w_star": w}


def regression_1d(key, n_train: int, n_test: int, noise_std: float = 0.0, interval=(-3.0, 3.0)):
    r"""A 1-D regression toy: ``y = sin(x) + 0.3 x`` (plus optional Gaussian noise on the
    training targets) with training inputs uniform on ``interval`` and test inputs on an evenly
    spaced grid over it (for plotting functions). Returns the same dict layout as
    :func:`single_index` (without ``w_star``)."""
    n_train, n_test = positive_ints(n_train=n_train, n_test=n_test)
    check_number("noise_std", noise_std, minimum=0.0)
    lo, hi = interval
    if not hi > lo:
        raise ValueError(f"interval must be (low, high) with low < high, got {interval!r}.")
    k1, k2 = jax.random.split(check_key(key))
    f = lambda x: jnp.sin(x) + 0.3 * x
    x_train = jax.random.uniform(k1, (n_train, 1), minval=lo, maxval=hi)
    x_test = jnp.linspace(lo, hi, n_test)[:, None]
    y_train = f(x_train) + noise_std * jax.random.normal(k2, x_train.shape)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": f(x_test)}


def quintic(x):
    """The 1-D target of Goldwaser and Ge 2024 (App. C.2.3): ``x^5 / 32 - x^3 / 2 + 2 x - 1``."""
    return x ** 5 / 32.0 - x ** 3 / 2.0 + 2.0 * x - 1.0


def quintic_data(n_train: int = 20, n_test: int = 1000, interval=(-3.5, 3.5)):
    """Evenly spaced training and test inputs on ``interval`` with quintic targets (Goldwaser and
    Ge 2024, App.
    C.2.3 uses 20 and 1000 points; it does not give the interval: the book uses [-3.5, 3.5],
    where the target stays within [-4, 4] and all four of its turning points lie inside)."""
    n_train, n_test = positive_ints(n_train=n_train, n_test=n_test)
    lo, hi = interval
    if not hi > lo:
        raise ValueError(f"interval must be (low, high) with low < high, got {interval!r}.")
    x_train = jnp.linspace(lo, hi, n_train)[:, None]
    x_test = jnp.linspace(lo, hi, n_test)[:, None]
    return {"x_train": x_train, "y_train": quintic(x_train), "x_test": x_test, "y_test": quintic(x_test)}


XOR_CENTRES = jnp.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])


def xor(key, n: int, noise_var: float = 0.1):
    """The XOR data of Goldwaser and Ge 2024 (§4.2, Fig. 7): ``x = z + eps`` with ``z`` uniform on the four
    corners ``{-1, 1}^2`` (:data:`XOR_CENTRES`) and ``eps ~ N(0, noise_var I)``, and the label
    ``y = x_1 x_2`` (shape ``(n, 1)``). Returns ``(x, y)``."""
    (n,), noise_var = positive_ints(n=n), check_number("noise_var", noise_var, minimum=0.0)
    kz, ke = jax.random.split(check_key(key))
    z = XOR_CENTRES[jax.random.randint(kz, (n,), 0, 4)]
    x = z + jnp.sqrt(noise_var) * jax.random.normal(ke, (n, 2))
    return x, (x[:, 0] * x[:, 1])[:, None]


def teacher_student(key, n_train: int, n_test: int, d: int = 10, m_star: int = 5,
                    activation: str = "relu", beta: float = 1.0):
    r"""The teacher-student regression of Arbel et al. 2023 (§5.1): inputs ``x ~ N(0, I_d)`` and
    targets from a
    one-hidden-layer teacher of the student's form (the paper's eq. (2)),
    ``f*(x) = (1/M*) sum_j v*_j gamma(u*_j^T x)``, with ``M* = m_star`` units and all teacher
    weights standard Gaussian. ``activation``: ``"relu"`` or ``"silu"`` with temperature
    ``beta`` (:func:`itlin_core.activations.activation_pair`).

    Returns a dict with ``x_train (n_train, d)``, ``y_train (n_train,)``, ``x_test``, ``y_test``
    and the teacher's ``u_star (m_star, d)``, ``v_star (m_star,)``.
    """
    n_train, n_test, d, m_star = positive_ints(n_train=n_train, n_test=n_test, d=d, m_star=m_star)
    gamma, _ = activation_pair(activation, beta)
    ku, kv, ktr, kte = jax.random.split(check_key(key), 4)
    u_star = jax.random.normal(ku, (m_star, d))
    v_star = jax.random.normal(kv, (m_star,))
    x_train = jax.random.normal(ktr, (n_train, d))
    x_test = jax.random.normal(kte, (n_test, d))
    teacher = lambda x: gamma(x @ u_star.T) @ v_star / m_star
    return {"x_train": x_train, "y_train": teacher(x_train), "x_test": x_test, "y_test": teacher(x_test),
            "u_star": u_star, "v_star": v_star}


__all__ = ["single_index", "regression_1d", "quintic", "quintic_data", "xor", "XOR_CENTRES", "teacher_student"]
