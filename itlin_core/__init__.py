"""itlin_core: the algorithms of the iterative-linearisation teaching book, in JAX.

A flat public API over small modules (see DESIGN.md §3)::

    import itlin_core as ic
    apply_lin = ic.linearise(apply_fn, params_s)
    ntk = ic.empirical_ntk(apply_fn, params, x1, x2)
    params = ic.gn_step(apply_fn, params, x, y, lr=1.0, damping=0.0)
    f_train_t, f_test_t = ic.gradient_flow(ntk_train, f0_train, y_train, t, ntk_test_train, f0_test)
    state = ic.init_il_state(params, optimizer)
    step = ic.make_il_step(apply_fn, loss_fn, optimizer, K)
"""

from .flow import gradient_flow, gradient_flow_params
from .gauss_newton import (TGNResult, damping_min_eigenvalue, gn_direction, gn_step, kernel_solve,
                           tgn_step)
from .iterative import (ILState, TrainingDiverged, full_batch, init_il_state, linearised_objective, linearised_value_and_grad,
                        make_il_eval, make_il_step, make_il_sweep_step, minibatches, period_as_int,
                        replicate, train)
from .linearise import empirical_ntk, flat_jacobian, kernel_matrix, linearise, tree_sub, tree_vdot
from .losses import accuracy, rmse, softmax_cross_entropy, squared_error
from .mean_field import make_gd_step, make_gn_step, mean_field_net, mean_field_ntk
from .metrics import (feature_alignment, kernel_distance, min_norm_readout, refit_test_loss,
                      weighted_cosine_distance)
from .metrics import linear_probe
from .models import FeatureModel, small_cnn
from .models import Model, count_params, lenet50, lenet50_features, mlp, resnet18
from .datasets import augment, augmented_minibatches, channel_stats, normalise, random_crop, random_flip
from .records import (default_checkpoint_dir, default_results_dir, load_checkpoint, load_results,
                      save_checkpoint, save_results, train_with_checkpoints)

from . import data, datasets, exercises, experiments, image_runs, mean_field  # noqa: E402  (submodules: ic.data.single_index, ...)

__version__ = "0.1.0"

__all__ = [
    # linearisation and kernels
    "linearise", "empirical_ntk", "kernel_matrix", "flat_jacobian", "tree_sub", "tree_vdot",
    # iterative linearisation
    "ILState", "init_il_state", "make_il_step", "make_il_sweep_step", "period_as_int", "replicate",
    "linearised_objective", "linearised_value_and_grad", "make_il_eval", "train", "full_batch", "minibatches", "TrainingDiverged",
    # Gauss-Newton
    "gn_direction", "gn_step", "kernel_solve", "tgn_step", "TGNResult", "damping_min_eigenvalue",
    # gradient flow
    "gradient_flow", "gradient_flow_params",
    # losses and metrics
    "squared_error", "softmax_cross_entropy", "accuracy", "rmse", "kernel_distance", "feature_alignment",
    # models
    "Model", "mlp", "lenet50", "lenet50_features", "resnet18", "count_params",
    # mean-field one-hidden-layer networks (paper 003)
    "mean_field_net", "mean_field_ntk", "make_gn_step", "make_gd_step", "weighted_cosine_distance", "min_norm_readout",
    "refit_test_loss",
    # image data (loaders: itlin_core.data.cifar10 / mnist)
    "augment", "random_crop", "random_flip", "normalise", "channel_stats", "augmented_minibatches",
    # real-image CPU chapter (digits): small CNN with features, linear probes
    "FeatureModel", "small_cnn", "linear_probe",
    # run records and checkpoints
    "save_results", "load_results", "default_results_dir", "save_checkpoint", "load_checkpoint",
    "train_with_checkpoints", "default_checkpoint_dir",
]
