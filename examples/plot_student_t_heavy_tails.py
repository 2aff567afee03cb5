"""
Heavy-tailed noise: Student-t process vs the NNGP
=================================================

A 1-D regression with Student-t (df = 3, scale 0.1) noise and only 15 training points. The Student-t
process (inverse-gamma prior on the readout variance, degrees of freedom 2a + n) and the plain
NNGP (``prior="gaussian"``) share the same kernel and the same posterior mean; they differ in the
width and the tails of the predictive, which matter most when data are few (with many points
2a + n is large and the t predictive is close to Gaussian). The script prints the test NLL over
10 random draws and saves the fitted bands of the first.
"""

# %%
import numpy as np

from skbnngp import StudentTProcessRegressor
from skbnngp.datasets import make_heavy_tailed

def make_models():
    return {
        "Student-t process": StudentTProcessRegressor(random_state=0),
        "NNGP (Gaussian)": StudentTProcessRegressor(prior="gaussian", random_state=0),
    }


nll = {name: [] for name in make_models()}
for seed in range(10):
    X, y = make_heavy_tailed(n_samples=415, n_features=1, df=3, noise=0.1, random_state=seed)
    X_tr, y_tr, X_te, y_te = X[:15], y[:15], X[15:], y[15:]
    fitted = make_models()
    for name, model in fitted.items():
        model.fit(X_tr, y_tr)
        nll[name].append(-model.predict_dist(X_te).logpdf(y_te).mean())
    if seed == 0:
        first = (X, y, X_tr, y_tr, fitted)
for name, values in nll.items():
    print(f"{name:18s} test NLL {np.mean(values):6.3f} ± {np.std(values):5.3f} (10 draws)")
X, y, X_tr, y_tr, models = first

# %%
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # pragma: no cover
    plt = None
if plt is not None:
    grid = np.linspace(X.min(), X.max(), 300)[:, None]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
    for ax, (name, model) in zip(axes, models.items()):
        dist = model.predict_dist(grid)
        lo, hi = dist.interval(0.9)
        ax.fill_between(grid[:, 0], lo, hi, alpha=0.3, label="90% interval")
        ax.plot(grid[:, 0], dist.mean(), lw=2, label="mean")
        ax.scatter(X_tr[:, 0], y_tr, s=6, c="k", label="train")
        ax.set_xlabel(f"df = {model.df_:.0f}")
        ax.set_title(name)
        ax.set_ylim(np.percentile(y, 1) - 1, np.percentile(y, 99) + 1)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    import os
    import tempfile

    out = os.path.join(tempfile.gettempdir(), "plot_student_t_heavy_tails.png")
    fig.savefig(out, dpi=120)
    print("saved", out)
