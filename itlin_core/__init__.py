"""itlin_core: the algorithms of the iterative-linearisation teaching book, in JAX.

A flat public API over small modules, one idea each::

    import itlin_core as ic
    apply_lin = ic.linearise(apply_fn, params_s)          # f(params_s, x) + J(params_s, x)(params - params_s)
    ntk = ic.empirical_ntk(apply_fn, params, x1, x2)      # (N1, N2); vector outputs: traced over outputs
    d = ic.gn_direction(apply_fn, params, x, y, damping)  # J^T (J J^T + lambda I)^+ (f(x) - y)
    params = ic.gn_step(apply_fn, params, x, y, lr=1.0, damping=0.0)
    f_train_t, f_test_t = ic.gradient_flow(ntk_train, f0_train, y_train, t, ntk_test_train, f0_test)
    state = ic.init_il_state(params, optimizer)           # ILState(params, anchor, opt_state, step, ...)
    il = ic.iterative_linearisation(apply_fn, loss_fn, optimizer, K)   # an (init, step) pair, as optax's
    state, metrics = il.step(il.init(params), (x, y))                  # ILState(params, anchor, ...)
    step = ic.make_il_step(apply_fn, loss_fn, optimizer, K)   # step(state, (x, y)) -> (state, metrics)
    step = ic.make_il_step(apply_fn, loss_fn, optimizer, ic.on_drift(0.1))   # or ic.geometric(K0, ratio)
    state, history = ic.train(step, state, ic.minibatches(key, x, y, 128), num_steps, evaluate=ic.Evaluation(eval_fn, every=...))

Conventions, stated once here and in the module docstrings:

* Models are pure ``(init, apply)`` pairs over pytrees (:mod:`itlin_core.models`); outputs have
  a leading example axis.
* Gauss-Newton and the gradient flow use the papers' loss ``L = 1/2 ||f(X) - Y||^2``, a sum over
  examples and outputs, and time ``t`` in units of learning rate x steps (:mod:`itlin_core.losses`).
* ``K = 1`` is exactly SGD; ``K = None`` (or ``math.inf``) never relinearises, which is training
  the linearised (NTK) model; rules (``ic.every``, ``ic.geometric``, ``ic.on_drift``) decide
  adaptively (:mod:`itlin_core.relinearise`). Softmax and cross-entropy stay outside the linearisation.
* Bad arguments raise ``ValueError`` (or ``TypeError``) with a sentence that names the argument,
  says what was wrong and what is allowed; training loops stop with a clear message on a
  non-finite loss instead of returning NaNs.
* Arbel et al.'s small-initialisation regime (``tau0 = 1e-3``) needs float64 for the NTK solve and
  the least-squares re-fits: enable ``jax_enable_x64`` there.

The code that runs the book's chapters (presets, per-chapter runs, records, plots, sliders) is
in :mod:`itlin_core.book`, which builds on this layer and is never imported by it.
"""

from .activations import activation_pair
from .checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from .flow import gradient_flow, gradient_flow_params
from .gauss_newton import TGNResult, damping_min_eigenvalue, gd_steps_to_tolerance, gn_direction, gn_iterate, gn_step, kernel_solve, tgn_step
from .il import IterativeLinearisation, iterative_linearisation
from .iterative import ILState, init_il_state, make_il_eval, make_il_step, make_il_sweep_step, period_as_int, replicate
from .linearise import linearise, linearised_objective, linearised_value_and_grad, tree_sub, tree_vdot
from .losses import accuracy, rmse, softmax_cross_entropy, squared_error
from .mean_field import MeanFieldNet, make_gd_step, make_gn_step, mean_field_loss, mean_field_net, mean_field_ntk
from .metrics import (feature_alignment, kernel_distance, linear_probe, min_norm_readout, refit_test_loss,
                      weighted_cosine_distance)
from .models import FeatureModel, Model, count_params, lenet50, lenet50_features, mlp, resnet18, small_cnn
from .ntk import empirical_ntk, flat_jacobian, kernel_matrix, max_ntk_eigenvalue
from .stability import max_curvature, stable_lr
from .relinearise import RelinRule, every, geometric, on_drift, relin_steps, stack_rules
from .pipeline import (Batches, augment, augmented_minibatches, channel_stats, full_batch, minibatches, normalise,
                       random_crop, random_flip, split_microbatches)
from .sharding import describe_mesh, on_devices, pad_runs, padded_runs, run_mesh, shard_runs, sharded_vmap, unpad_runs
from .train_options import Checkpointing, Evaluation, Progress
from .training import TrainingDiverged, train

from . import activations, data, datasets, mean_field, sharding  # noqa: E402  (submodules: ic.data.single_index, ...)

__version__ = "0.1.0"

__all__ = [
    # linearisation and kernels
    "linearise", "empirical_ntk", "kernel_matrix", "flat_jacobian", "max_ntk_eigenvalue", "tree_sub", "tree_vdot",
    # iterative linearisation
    "iterative_linearisation", "IterativeLinearisation", "ILState", "init_il_state", "make_il_step", "make_il_sweep_step", "period_as_int", "replicate",
    "linearised_objective", "linearised_value_and_grad", "make_il_eval",
    # when to relinearise (beyond a fixed K)
    "RelinRule", "every", "geometric", "on_drift", "stack_rules", "relin_steps",
    # training loop, batches and checkpoints
    "train", "Evaluation", "Checkpointing", "Progress", "TrainingDiverged", "Batches", "full_batch", "minibatches", "augmented_minibatches",
    "split_microbatches", "Checkpoint", "save_checkpoint", "load_checkpoint",
    # runs of a sweep split over several devices (jax.sharding)
    "on_devices", "run_mesh", "describe_mesh", "sharded_vmap", "pad_runs", "padded_runs", "unpad_runs", "shard_runs",
    # Gauss-Newton
    "gn_direction", "gn_step", "gn_iterate", "kernel_solve", "tgn_step", "TGNResult", "gd_steps_to_tolerance", "damping_min_eigenvalue",
    # gradient flow
    "gradient_flow", "gradient_flow_params",
    # the curvature of a linearised problem, and stable learning rates
    "max_curvature", "stable_lr",
    # losses and metrics
    "squared_error", "softmax_cross_entropy", "accuracy", "rmse", "kernel_distance", "feature_alignment",
    "weighted_cosine_distance", "min_norm_readout", "refit_test_loss", "linear_probe",
    # models
    "Model", "FeatureModel", "mlp", "lenet50", "lenet50_features", "resnet18", "small_cnn", "count_params",
    "activation_pair",
    # mean-field one-hidden-layer networks (Arbel et al. 2023)
    "MeanFieldNet", "mean_field_net", "mean_field_ntk", "mean_field_loss", "make_gn_step", "make_gd_step",
    # images: augmentation and normalisation (loaders: itlin_core.data.cifar10 / mnist)
    "augment", "random_crop", "random_flip", "normalise", "channel_stats",
]
