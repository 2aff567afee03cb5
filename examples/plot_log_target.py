"""
A positive, skewed target: model log y, score in the units of y
===============================================================

Prices, durations and counts are positive and right-skewed: their noise grows with their
level. A regressor fitted on y itself gives symmetric intervals that reach below zero where
the level is low and are too narrow where it is high. scikit-learn's
``TransformedTargetRegressor`` fits the model on ``log y`` instead, and
:func:`skbnngp.metrics.predictive_response` maps that model's predictive back to y (a
:class:`~skbnngp.distributions.TransformedDistribution`), so the package's scores (NLPD,
CRPS, coverage) compare both models in the same units. Putting ``ConformalRegressor``
inside the transform gives the exponentials of conformal intervals of ``log y``: positive,
with the conformal coverage guarantee.

The script prints each model's test NLPD, CRPS, 90 % coverage, mean interval width and the
share of lower bounds below zero, and draws both models' 90 % intervals along the one input
that matters.
"""

# %%
import numpy as np
from sklearn.compose import TransformedTargetRegressor

from skbnngp import ConformalRegressor, StudentTProcessRegressor
from skbnngp.metrics import crps, interval_coverage, nlpd, predictive_response

rng = np.random.default_rng(0)
n_train, n_test = 300, 2000
X = rng.uniform(-2, 2, size=(n_train + n_test, 2))
y = np.exp(1.0 + X[:, 0] + 0.4 * rng.normal(size=len(X)))  # log-normal noise
X_tr, y_tr, X_te, y_te = X[:n_train], y[:n_train], X[n_train:], y[n_train:]


def log_target(regressor):
    return TransformedTargetRegressor(regressor, func=np.log, inverse_func=np.exp)


models = {
    "on y": StudentTProcessRegressor(random_state=0),
    "on log y": log_target(StudentTProcessRegressor(random_state=0)),
    "on log y, conformal": log_target(ConformalRegressor(
        StudentTProcessRegressor(random_state=0), random_state=0)),
}
dists = {}
for name, model in models.items():
    dist = predictive_response(model.fit(X_tr, y_tr), X_te)
    dists[name] = dist
    lo, hi = dist.interval(0.9)
    density = (f"NLPD {nlpd(y_te, dist):6.3f}" if callable(getattr(dist, "logpdf", None))
               else "NLPD    n/a")  # a conformal predictive has no density
    print(f"{name:20s} {density}  CRPS {crps(y_te, dist):6.3f}  "
          f"90 % coverage {interval_coverage(y_te, dist, 0.9):.3f}  "
          f"width {np.mean(hi - lo):6.2f}  lower bound < 0: {np.mean(lo < 0):.0%}")

# %%
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # pragma: no cover
    plt = None
if plt is not None:
    grid = np.column_stack([np.linspace(-2, 2, 200), np.zeros(200)])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.scatter(X_te[:, 0], y_te, s=2, c="0.7", label="test")
    for (name, model), color in zip(models.items(), ("C1", "C0", "C2")):
        lo, hi = predictive_response(model, grid).interval(0.9)
        ax.plot(grid[:, 0], lo, c=color, lw=1.5, label=f"{name}: 90 % interval")
        ax.plot(grid[:, 0], hi, c=color, lw=1.5)
    ax.axhline(0, c="k", lw=0.5)
    ax.set_xlabel("x0 (x1 = 0)")
    ax.set_ylabel("y")
    ax.set_ylim(-10, np.percentile(y_te, 99.5))
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    import os
    import tempfile

    out = os.path.join(tempfile.gettempdir(), "plot_log_target.png")
    fig.savefig(out, dpi=120)
    print("saved", out)
