"""
Leave-one-out variance calibration: honest intervals on a skewed target
=======================================================================

``cpu_performance`` (209 machines, 6 features) has a skewed, heteroscedastic target: the
largest machines carry most of the variance. A Student-t process fitted by its evidence is
then too confident, and its 95 % intervals cover fewer than 95 % of new machines.

With ``calibration="gaussian"`` the fitted model checks itself against its closed-form
leave-one-out predictions of the training rows and widens its predictive variance by the
smallest factor ``calibration_factor_ >= 1`` under which the 95 % interval holds 95 % of
them. The mean does not change. With ``"student_t"`` (what the default ``"auto"`` runs)
the same residuals also choose the predictive's degrees of freedom, and its scale where a
likelihood-ratio test says they are narrower than the posterior's (a factor below 1 with
heavy tails). The script
cross-validates the model with each setting (5 folds), prints each fold's factor, the 95 %
coverage and the test NLPD, and plots the observed coverage of the central intervals
against their nominal level.

Measured: 95 % coverage 0.871 without the calibration, 0.924 with either (factors 1.3-2.1
for ``"gaussian"``; 0.47-1.07 for the heavier-tailed t of ``"student_t"``), test NLPD 5.114 ->
5.008 (``"gaussian"``) -> 4.848 (``"student_t"``). The figure shows why: with ``"gaussian"`` the
residuals are heavier-tailed than the predictive, so once the 95 % interval is wide enough
the narrower intervals cover more than their level; the fitted t stays closest to the
nominal line at every level.
"""

# %%
import os
import tempfile
import warnings

import numpy as np
from sklearn.model_selection import KFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbnngp import StudentTProcessRegressor
from skbnngp.datasets import load_cpu_performance

X, y = load_cpu_performance(return_X_y=True)
LEVELS = np.linspace(0.05, 0.95, 19)
settings = {"calibration='auto' (default: 'student_t')": "auto",
            "calibration='gaussian'": "gaussian", "calibration=None": None}
coverage = {name: np.zeros(len(LEVELS)) for name in settings}
for name, calibration in settings.items():
    nlpd, cov95, factors = [], [], []
    for train, test in KFold(5, shuffle=True, random_state=0).split(X):
        model = make_pipeline(StandardScaler(), StudentTProcessRegressor(
            calibration=calibration, random_state=0))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a hyperparameter may end on its bound
            model.fit(X[train], y[train])
        reg = model[-1]
        dist = reg.predict_dist(model[0].transform(X[test]))
        nlpd.append(-dist.logpdf(y[test]).mean())
        lo, hi = dist.interval(0.95)
        cov95.append(np.mean((lo <= y[test]) & (y[test] <= hi)))
        factors.append(reg.calibration_factor_)
        for j, level in enumerate(LEVELS):
            lo, hi = dist.interval(level)
            coverage[name][j] += np.sum((lo <= y[test]) & (y[test] <= hi)) / len(y)
    print(f"{name:43s} factors {np.round(factors, 2)}  95% coverage {np.mean(cov95):.3f}  "
          f"test NLPD {np.mean(nlpd):.3f}")

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(4.5, 4.5))
ax.plot([0, 1], [0, 1], color="grey", lw=1, label="nominal")
for (name, cov), style in zip(coverage.items(), ("-o", "--s", ":^")):
    ax.plot(LEVELS, cov, style, ms=3, label=name)
ax.set_xlabel("nominal level of the central interval")
ax.set_ylabel("observed coverage (5-fold, pooled)")
ax.set_title("cpu_performance, Student-t process")
ax.legend(fontsize=8)
fig.tight_layout()
path = os.path.join(tempfile.gettempdir(), "plot_loo_variance_calibration.png")
fig.savefig(path, dpi=120)
print(f"saved {path}")
