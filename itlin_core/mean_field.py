r"""One-hidden-layer networks in the mean-field scaling, and Gauss-Newton on them (Arbel et al. 2023).

The student of Arbel et al. 2023 (eq. (2), §5.1) is

.. math:: f_w(x) = \frac{1}{M}\sum_{i=1}^M v_i\,\gamma(u_i^\top x), \qquad w = (v, u),\;
          v \in \mathbb{R}^M,\; u \in \mathbb{R}^{M\times d},

with hidden weights ``u ~ N(0, tau0^2)`` and the last layer ``v = 0`` at initialisation. With
``C`` outputs (Arbel et al. 2023, App. C.4, where the targets are a teacher's ten class
probabilities) the last layer is ``v in R^{M x C}`` and ``f_w(x) in R^C``. There is
no bias term: the paper's eq. (2) and its teacher have none (a bias would be an extra constant
input coordinate; we follow the paper and leave it out).

**Why a special NTK.** With ``G = gamma(X u^T)`` and ``D = gamma'(X u^T)`` (both ``N x M``), the
Jacobian has a ``v``-block ``G / M`` and a ``u``-block whose row ``n``, unit ``i`` is
``v_i D_ni x_n / M``, so the empirical NTK factorises into two ``N x M`` products,

.. math:: J J^\top = \frac{1}{M^2}\Big(G G^\top + \big(D\,\mathrm{diag}(v^2)\,D^\top\big)\odot (X X^\top)\Big),

costing ``O(N^2 M)`` instead of the ``O(N^2 M d)`` of a per-example Jacobian (``P = M(d+1)``).
With ``C`` outputs the ``v``-block acts on each output separately and the ``u``-block couples
them through ``v``: entry ``((n, c), (n', c'))`` of the ``NC x NC`` kernel is

.. math:: \frac{1}{M^2}\Big((G G^\top)_{nn'}\,\delta_{cc'} + (X X^\top)_{nn'}
          \sum_i D_{ni} D_{n'i}\, v_{ic} v_{ic'}\Big),

one ``NC x M`` by ``M x N'C`` product, ``O(N^2 C^2 M)``.
:func:`mean_field_ntk` computes this; :func:`itlin_core.gn_step` accepts it through ``ntk_fn``,
so the chapter's fast GN step is still the generic kernel-form step with a faster kernel.

**Loss and step-size convention.** Arbel et al. 2023 minimise ``L = 1/(2N) sum_n ||f(x_n) - y_n||^2``
(:func:`mean_field_loss`; a mean over examples, a sum over outputs) and take
GN steps ``w - lr (J^T J + eps I)^{-1} J^T grad_f L`` with ``grad_f L = (f - y) / N`` (its
eq. (4) with ``H = I``). The package's GN convention is the sum loss ``1/2 ||f - y||^2``
(:mod:`itlin_core.losses`), so the paper's step size ``lr`` is ``lr / N`` in :func:`itlin_core.gn_step`; the
functions here take the paper's ``lr`` and do that conversion, so the numbers in the chapters
are the paper's. The damping is the paper's eq. (5) with ``alpha = 1``, floored at ``1e-7``.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from ._validate import check_finite, check_number, checked_model, positive_ints, tree_mismatch
from .activations import activation_pair
from .gauss_newton import damping_min_eigenvalue, gn_step
from .models import Model

class MeanFieldNet(NamedTuple):
    """The network of :func:`mean_field_net`: its ``(init, apply)`` pair, as every model of
    ``itlin_core``, together with its ``activation`` and ``beta``, so that steps that use its
    factorised kernel (:func:`make_gn_step`) take them from the network itself and cannot be
    given another activation than the network's.

    Examples:
      It unpacks like any ``(init, apply)`` model and carries the activation it was built with:

      >>> import itlin_core as ic
      >>> net = ic.mean_field_net(2, 8, activation="tanh")
      >>> init, apply = net[:2]
      >>> net.activation, net.beta, apply is net.apply
      ('tanh', 1.0, True)
    """

    init: Callable
    apply: Callable
    activation: str = "relu"
    beta: float = 1.0


def mean_field_net(d: int, width: int, tau0: float = 1.0, activation: str = "relu",
                   beta: float = 1.0, outputs: int | None = None) -> MeanFieldNet:
    """The student network of Arbel et al. 2023 (eq. (2)) as an ``(init, apply)`` pair.

    ``init(key)`` draws ``u ~ N(0, tau0^2)`` of shape ``(width, d)`` and sets ``v = 0``;
    ``apply(params, x)`` maps ``(N, d)`` inputs to ``(N,)`` outputs ``gamma(x u^T) v / width``.
    With ``outputs = C`` (an integer) ``v`` is ``(width, C)`` and the outputs ``(N, C)``, as in
    Arbel et al. 2023, App. C.4. ``apply`` refuses (ValueError, also under ``jit``) parameters
    of other shapes than ``init``'s and inputs whose last axis is not ``d``.

    Examples:
      The last layer starts at ``v = 0``, so the network starts at the zero function:

      >>> import jax, jax.numpy as jnp
      >>> import itlin_core as ic
      >>> net = ic.mean_field_net(3, 16)
      >>> p = net.init(jax.random.key(0))
      >>> p["u"].shape, p["v"].shape, net.apply(p, jnp.ones((4, 3))).tolist()
      ((16, 3), (16,), [0.0, 0.0, 0.0, 0.0])
      >>> ic.mean_field_net(3, 16, outputs=2).init(jax.random.key(0))["v"].shape
      (16, 2)
    """
    d, width = positive_ints(d=d, width=width)
    check_number("tau0 (the std of the hidden weights)", tau0, minimum=0.0, strict=True)
    if outputs is not None and (isinstance(outputs, bool) or not isinstance(outputs, int) or outputs < 1):
        raise ValueError(f"outputs must be None (one scalar output) or a whole number >= 1, got {outputs!r}.")
    gamma, _ = activation_pair(activation, beta)
    v_shape = (width,) if outputs is None else (width, outputs)

    def init(key):
        return {"u": tau0 * jax.random.normal(key, (width, d)), "v": jnp.zeros(v_shape)}

    def apply(params, x):
        _check_inputs("x", x, d)
        return gamma(x @ params["u"].T) @ params["v"] / params["v"].shape[0]

    init, apply = checked_model("mean-field network", init, apply)
    return MeanFieldNet(init, apply, activation, float(beta))


def _check_inputs(name: str, x, d: int) -> None:
    if getattr(x, "ndim", None) != 2 or x.shape[1] != d:
        raise ValueError(f"{name} must be (N, d) inputs with d = {d} (the hidden weights u are (width, {d})), got "
                         f"shape {getattr(x, 'shape', type(x).__name__)}.")


@functools.lru_cache(maxsize=64)
def _param_shapes(net: MeanFieldNet):
    return jax.eval_shape(net.init, jax.random.PRNGKey(0))


def _ntk_settings(params, net, activation, beta):
    """``(activation, beta)`` for :func:`mean_field_ntk`: the network's, or those given (never a silent
    default); with ``net``, ``params`` are checked against its ``init``."""
    if net is not None:
        if not isinstance(net, MeanFieldNet):
            raise TypeError(f"net must be the MeanFieldNet that ic.mean_field_net returns, got {type(net).__name__}.")
        if (activation is not None and activation != net.activation) or (beta is not None and beta != net.beta):
            raise ValueError(f"activation={activation!r}, beta={beta!r} differ from the network's "
                             f"({net.activation!r}, {net.beta!r}); pass net alone.")
        bad = tree_mismatch(params, _param_shapes(net), "params", "this network")
        if bad:
            raise ValueError(f"mean_field_ntk: {bad}; these parameters belong to another network.")
        return net.activation, net.beta
    if activation is None:
        raise TypeError("mean_field_ntk needs the network's activation: pass net= (the MeanFieldNet the params "
                        "belong to) or activation= (and beta=); there is no default, since a kernel of another "
                        "activation than the network's is silently wrong.")
    if not isinstance(params, dict) or set(params) != {"u", "v"}:
        raise ValueError(f"params must be a mean-field network's {{'u', 'v'}}, got {type(params).__name__} "
                         f"{sorted(params) if isinstance(params, dict) else ''}.")
    u, v = params["u"], params["v"]
    if u.ndim != 2 or v.ndim not in (1, 2) or v.shape[0] != u.shape[0]:
        raise ValueError(f"params must have u of shape (width, d) and v of shape (width,) or (width, C), got "
                         f"u {u.shape} and v {v.shape}.")
    return activation, 1.0 if beta is None else beta


def hidden_features(u, x, activation: str = "relu", beta: float = 1.0):
    """The hidden features ``gamma(x u^T)``, shape ``(N, M)`` (the paper's ``Gamma(u)^T``)."""
    gamma, _ = activation_pair(activation, beta)
    return gamma(x @ u.T)


def mean_field_ntk(params, x, x2=None, *, net: MeanFieldNet | None = None, activation: str | None = None,
                   beta: float | None = None):
    r"""The empirical NTK ``J(x) J(x2)^T`` of :func:`mean_field_net`, in factorised form (module
    docstring): ``(G G2^T + (D diag(v^2) D2^T) * (x x2^T)) / M^2``, shape ``(N, N2)``.
    Equal to ``itlin_core.empirical_ntk(net.apply, params, x, x2)`` (tested) at ``O(N N2 M)``
    cost; no Jacobian is formed. With ``C`` outputs (``v`` of shape ``(M, C)``) it is the
    ``(N C, N2 C)`` kernel of the module docstring, rows ordered example-major (row ``n C + c``),
    which is the flattening :func:`itlin_core.gn_step` uses, at ``O(N N2 C^2 M)`` cost.

    The activation is the network's: pass ``net`` (the :class:`MeanFieldNet` of ``params``,
    which are then checked against its shapes) or ``activation`` (and ``beta``, default 1).
    Refused: neither (TypeError; there is no default activation), an ``activation`` or ``beta``
    other than ``net``'s, parameters of another shape, inputs whose last axis is not ``d``, and
    concrete inputs with NaN or infinity (ValueError).

    Examples:
      The factorised kernel equals the generic empirical NTK of the network:

      >>> import jax, jax.numpy as jnp
      >>> import itlin_core as ic
      >>> net = ic.mean_field_net(3, 20, activation="silu")
      >>> k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
      >>> p = {"u": jax.random.normal(k1, (20, 3)), "v": jax.random.normal(k2, (20,))}
      >>> x = jax.random.normal(k3, (4, 3))
      >>> ntk = ic.mean_field_ntk(p, x, net=net)
      >>> ntk.shape, bool(jnp.allclose(ntk, ic.empirical_ntk(net.apply, p, x), rtol=1e-5, atol=1e-6))
      ((4, 4), True)
    """
    activation, beta = _ntk_settings(params, net, activation, beta)
    gamma, dgamma = activation_pair(activation, beta)
    u, v = params["u"], params["v"]
    for name, a in (("x", x), ("x2", x2)):
        if a is not None:
            _check_inputs(name, a, u.shape[1])
            check_finite(name, a)
    x2 = x if x2 is None else x2
    m = v.shape[0]
    pre1, pre2 = x @ u.T, x2 @ u.T
    feat = gamma(pre1) @ gamma(pre2).T
    if v.ndim == 1:
        grad = ((dgamma(pre1) * v ** 2) @ dgamma(pre2).T) * (x @ x2.T)
        return (feat + grad) / m ** 2
    c = v.shape[1]
    # rows (n, c) of D_ni v_ic, as an (N C, M) matrix
    e1 = (dgamma(pre1)[:, None, :] * v.T[None]).reshape(-1, m)
    e2 = (dgamma(pre2)[:, None, :] * v.T[None]).reshape(-1, m)
    n1, n2 = x.shape[0], x2.shape[0]
    grad = (e1 @ e2.T).reshape(n1, c, n2, c) * (x @ x2.T)[:, None, :, None]
    out = grad + feat[:, None, :, None] * jnp.eye(c, dtype=feat.dtype)[None, :, None, :]
    return out.reshape(n1 * c, n2 * c) / m ** 2


def mean_field_loss(outputs, targets):
    r"""The loss of Arbel et al. 2023, ``1/(2N) sum_n ||f(x_n) - y_n||^2``: half the squared
    error summed over outputs and averaged over the ``N`` examples (for one output, half the
    mean squared error). Scalar outputs ``(N,)`` or vector outputs ``(N, C)``; ``targets`` must
    have the shape of ``outputs``.

    Examples:
      A mean over examples: ``1/(2 * 2) (1^2 + 2^2) = 1.25``, ``1/N`` times :func:`itlin_core.squared_error`:

      >>> import jax.numpy as jnp
      >>> import itlin_core as ic
      >>> outputs = jnp.array([1.0, 2.0])
      >>> float(ic.mean_field_loss(outputs, jnp.zeros(2))), float(ic.squared_error(outputs, jnp.zeros(2)))
      (1.25, 2.5)
    """
    outputs, targets = jnp.asarray(outputs), jnp.asarray(targets)
    if outputs.shape != targets.shape or outputs.ndim not in (1, 2):
        raise ValueError(f"outputs and targets must have one shape, (N,) or (N, C); got {outputs.shape} "
                         f"and {targets.shape}.")
    return 0.5 * jnp.sum((outputs - targets) ** 2) / outputs.shape[0]


def make_gn_step(net: MeanFieldNet, x, y, *, alpha: float = 1.0, floor: float = 1e-7, fast: bool = True,
                 ntk_batch_size: int | None = None) -> Callable:
    r"""The damped GN update of Arbel et al. 2023 with its step size ``lr`` (eq. (4), ``H = I``, loss
    ``1/(2N) sum_n ||f(x_n) - y_n||^2``, damping eq. (5) ``eps = max(floor, alpha * sigma_min(J J^T))``).

    Returns ``step(params, lr) -> params``, which is
    ``itlin_core.gn_step(net.apply, params, x, y, lr=lr / N, damping=...)`` (the ``1 / N``
    converts to the book's sum-loss convention, module docstring). With ``fast=True`` the kernel
    is :func:`mean_field_ntk` with the network's own ``activation`` and ``beta`` (so ``net`` must
    be a :class:`MeanFieldNet`); with ``fast=False`` the generic empirical NTK
    (:func:`itlin_core.empirical_ntk`), for any ``(init, apply)`` model. Both give the same step
    (tested); ``python -m itlin_core.tools.bench --mean-field`` times them. ``ntk_batch_size``
    bounds the memory of the generic kernel (examples per chunk, see
    :func:`itlin_core.empirical_ntk`); by default its per-example Jacobians are formed at once
    when they fit in a gigabyte (about 220 MB at Arbel et al.'s size, N = 500, M = 5000).

    Raises:
      ValueError: ``fast=True`` with a network that is not a :class:`MeanFieldNet`; concrete ``x`` or
        ``y`` with NaN or infinity.

    Examples:
      Two damped GN steps with step size ``lr = 1`` on a small problem, each lowering the loss (the
      damping ``sigma_min(J J^T)`` keeps them short of the undamped GN step):

      >>> import jax, jax.numpy as jnp
      >>> import itlin_core as ic
      >>> x64 = jax.config.jax_enable_x64
      >>> jax.config.update("jax_enable_x64", True)        # Arbel et al.'s regime needs float64
      >>> net = ic.mean_field_net(3, 50, tau0=1.0, activation="silu")
      >>> x = jax.random.normal(jax.random.key(0), (8, 3)); y = jnp.sin(x[:, 0])
      >>> step = ic.make_gn_step(net, x, y)          # the kernel of net's own SiLU
      >>> p = net.init(jax.random.key(1))
      >>> losses = []
      >>> for _ in range(3):
      ...     losses.append(round(float(ic.mean_field_loss(net.apply(p, x), y)), 3))
      ...     p = step(p, 1.0)
      >>> losses
      [0.112, 0.086, 0.064]
      >>> jax.config.update("jax_enable_x64", x64)
    """
    if fast and not isinstance(net, MeanFieldNet):
        raise ValueError("fast=True uses the factorised kernel of the mean-field network, with its activation: pass "
                         "the network ic.mean_field_net returns, or fast=False for another model.")
    check_finite("x", x)
    check_finite("y", y)
    n = x.shape[0]
    damping = damping_min_eigenvalue(alpha, floor)
    ntk_fn = (lambda p, xx: mean_field_ntk(p, xx, net=net)) if fast else None

    def step(params, lr):
        check_number("lr (the step size)", lr, minimum=0.0, strict=True)
        return gn_step(net.apply, params, x, y, lr=lr / n, damping=damping, ntk_fn=ntk_fn,
                       ntk_batch_size=ntk_batch_size)

    return step


def make_gd_step(net: Model, x, y) -> Callable:
    """Gradient descent on ``1/(2N) sum_n ||f(x_n) - y_n||^2`` (:func:`mean_field_loss`) with step
    size ``lr``: ``step(params, lr)``.

    Examples:
      Steps with ``lr = 10`` lower the loss; at initialisation ``v = 0``, so the gradient in the
      hidden weights ``u`` is zero and the first step moves only ``v``:

      >>> import jax, jax.numpy as jnp
      >>> import itlin_core as ic
      >>> x64 = jax.config.jax_enable_x64
      >>> jax.config.update("jax_enable_x64", True)        # the same draws as make_gn_step's example
      >>> net = ic.mean_field_net(3, 50, activation="silu")
      >>> x = jax.random.normal(jax.random.key(0), (8, 3)); y = jnp.sin(x[:, 0])
      >>> step = ic.make_gd_step(net, x, y)
      >>> p = p0 = net.init(jax.random.key(1))
      >>> losses = []
      >>> for _ in range(3):
      ...     losses.append(round(float(ic.mean_field_loss(net.apply(p, x), y)), 3))
      ...     p = step(p, 10.0)
      >>> losses, bool(jnp.all(step(p0, 10.0)["u"] == p0["u"]))
      ([0.112, 0.107, 0.102], True)
      >>> jax.config.update("jax_enable_x64", x64)

    Raises:
      ValueError: concrete ``x`` or ``y`` with NaN or infinity (as :func:`make_gn_step`).
    """
    check_finite("x", x)
    check_finite("y", y)
    grad = jax.grad(lambda p: mean_field_loss(net.apply(p, x), y))

    def step(params, lr):
        check_number("lr (the step size)", lr, minimum=0.0, strict=True)
        return jax.tree.map(lambda p, g: p - lr * g, params, grad(params))

    return step


__all__ = ["MeanFieldNet", "mean_field_net", "hidden_features", "mean_field_ntk", "mean_field_loss",
           "make_gn_step", "make_gd_step"]
