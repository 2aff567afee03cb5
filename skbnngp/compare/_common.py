"""Names shared by the compare modules: the program name, the metrics, the usage error."""

from __future__ import annotations

from dataclasses import dataclass

PROG = "skbnngp"
DEFAULT_DATASET = "concrete"
DEFAULT_FOLDS = 5
N_LEVELS = 19  # nominal levels 0.05, ..., 0.95 of the calibration curve
N_BINS = 10  # confidence bins of the classification reliability diagram
# Spellings read as a missing value (pandas' defaults, plus "?" as in UCI files).


class UsageError(Exception):
    """Bad command-line input: printed as one line ``<prog>: error: <msg>``, exit status 2."""

    def __init__(self, message, prog=f"{PROG} compare"):
        super().__init__(message)
        self.prog = prog



@dataclass(frozen=True)
class _Metric:
    key: str
    header: str
    kind: str  # "loss"/"time": lower is better; "score": higher; "coverage": near nominal;
    # "width": narrower is better at the nominal coverage
    in_table: bool = True


REGRESSION_METRICS = (
    _Metric("rmse", "RMSE", "loss"),
    _Metric("mae", "MAE", "loss", in_table=False),
    _Metric("nlpd", "NLPD", "loss"),
    _Metric("crps", "CRPS", "loss"),
    _Metric("coverage_90", "cov 90%", "coverage"),
    _Metric("coverage_95", "cov 95%", "coverage"),
    _Metric("width_90", "width 90%", "width", in_table=False),
    _Metric("width_95", "width 95%", "width"),
    _Metric("calibration_error", "cal. err", "loss"),
    _Metric("fit_s", "fit s", "time"),
    _Metric("predict_s", "predict s", "time"),
)
CLASSIFICATION_METRICS = (
    _Metric("accuracy", "accuracy", "score"),
    _Metric("nll", "NLL", "loss"),
    _Metric("ece", "ECE", "loss"),
    _Metric("fit_s", "fit s", "time"),
    _Metric("predict_s", "predict s", "time"),
)
METRIC_DOCS = {
    "regression": [
        "RMSE, MAE: error of the predictive median (the mean for the symmetric predictives "
        "here), in the units of y.",
        "NLPD: mean negative log predictive density of the test targets, in nats "
        "(`skbnngp.metrics.nlpd`; rescaling y by a shifts it by log a).",
        "CRPS: continuous ranked probability score, in the units of y "
        "(`skbnngp.metrics.crps`, closed forms for Gaussian, Student-t and scale mixtures).",
        "cov 90% / 95%: fraction of test targets inside the central 90 % / 95 % predictive "
        "interval (should be close to 0.90 / 0.95); width: its mean width.",
        f"cal. err: mean |observed - nominal| coverage over the central intervals at "
        f"{N_LEVELS} levels 0.05 ... 0.95 (`skbnngp.metrics.regression_calibration_error`).",
        "fit s / predict s: wall-clock seconds of `fit` and of the predictive on the test fold.",
    ],
    "classification": [
        "accuracy: fraction of correct labels.",
        "NLL: log loss of `predict_proba` (`sklearn.metrics.log_loss`).",
        "ECE: top-label expected calibration error with 15 equal-width bins "
        "(`skbnngp.metrics.expected_calibration_error`).",
        "fit s / predict s: wall-clock seconds of `fit` and of `predict_proba` on the test fold.",
    ],
}


def _metrics_for(task):
    return REGRESSION_METRICS if task == "regression" else CLASSIFICATION_METRICS
