"""The shared torch backend of skbnngp (imports no scikit-learn).

Device/dtype resolution and NumPy<->torch conversion (:mod:`._device`), stable Cholesky and
low-rank solves (:mod:`._linalg`), chunked evaluation (:mod:`._chunks`), the optimisation loop
(:mod:`._optim`), seeding (:mod:`._random`), exact/Nystrom GP likelihoods with adjoint
gradients (:mod:`._gp`), the calibration numerics (:mod:`._calibration`), Bayesian linear
regression on features (:mod:`._blr`) and the network-training loop with the MLP builder
(:mod:`._train`; its flat-buffer step, :mod:`._flat`, an MLP's hand-written
squared-error and per-sample gradients, :mod:`._mlp_grad`, and torch's optimisers without
their first-call import of torch's compiler, :mod:`._eager_optim`). Every estimator uses
these; extend them rather than writing a second one.
"""

from ._blr import (
    BLREvidence,
    BLRPosterior,
    DiagNoiseEvidence,
    blr_fit_scales,
    blr_log_evidence,
    blr_log_evidence_diag,
    blr_posterior,
    blr_stats,
)
from ._calibration import (
    fit_t,
    fit_t_df,
    loo_variance_factor,
    student_t_calibration,
    t_loglik,
    weighted_median,
)
from ._chunks import (
    DEFAULT_BLOCK_ELEMENTS,
    MemoryBudgetError,
    auto_batch_size,
    available_bytes,
    block_elements,
    check_dense_fits,
    chunked_apply,
    iter_slices,
)
from ._device import as_tensor, resolve_device, resolve_dtype, to_device_state, to_float, to_numpy
from ._gp import ExactGP, NystromGP, gp_predict, leave_group_out, leave_one_copy_out
from ._linalg import (
    JITTER_LADDER,
    LowRankPlusDiag,
    cho_inverse,
    cho_logdet,
    cho_solve,
    solve_lower,
    stable_cholesky,
    woodbury_solve,
)
from ._optim import OptimResult, minimize
from ._random import make_generator
from ._train import (
    ACTIVATIONS,
    NetworkTrainer,
    TrainingDivergedError,
    TrainResult,
    build_mlp,
    last_linear,
)

__all__ = [
    "auto_batch_size", "chunked_apply", "iter_slices", "block_elements", "available_bytes",
    "check_dense_fits", "MemoryBudgetError", "DEFAULT_BLOCK_ELEMENTS",
    "as_tensor", "resolve_device", "resolve_dtype", "to_device_state", "to_float", "to_numpy",
    "JITTER_LADDER", "LowRankPlusDiag", "cho_inverse", "cho_logdet", "cho_solve", "solve_lower",
    "stable_cholesky", "woodbury_solve",
    "OptimResult", "minimize", "make_generator",
    "ExactGP", "NystromGP", "gp_predict", "leave_group_out", "leave_one_copy_out",
    "loo_variance_factor", "student_t_calibration",
    "fit_t", "fit_t_df", "t_loglik", "weighted_median",
    "BLRPosterior", "blr_log_evidence", "blr_posterior", "blr_stats", "BLREvidence",
    "blr_fit_scales", "DiagNoiseEvidence", "blr_log_evidence_diag",
    "ACTIVATIONS", "NetworkTrainer", "TrainingDivergedError", "TrainResult", "build_mlp",
    "last_linear",
]
