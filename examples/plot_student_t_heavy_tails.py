"""
Outliers: where the Student-t predictive covers and the Gaussian does not
=========================================================================

Twelve training points of a smooth function with heavy-tailed noise (Student-t, df = 2: most
points lie close to the curve, a few far from it). Two models share the NNGP kernel and its
fitting: the Student-t process (an inverse-gamma prior on the readout variance; its predictive
is Student-t with ``2a + n`` degrees of freedom, here 16) and the plain NNGP
(``prior="gaussian"``). Their posterior means are equal. What differs is the predictive's
tails: the Gaussian's 99% interval misses the outliers among new points, which then cost it a
large negative log density each, while the Student-t interval, a little wider and with heavier
tails, covers most of them. Both use the paper's predictive (``calibration=None``):
the default Student-t calibration reads the leave-one-out residuals and would give both
models heavy tails, which is the point of it but not of this comparison of priors.

The script repeats the experiment over 20 random functions and noise draws and prints the
99% coverage, the number of test points covered by the Student-t interval but missed by the
Gaussian (and the reverse), and the test NLL. The figure shows the first draw: both 99% bands
(the Student-t solid, the Gaussian dashed), the test points only the Student-t band covers
(red), and the per-point NLL of the test points, whose right tail is the Gaussian's cost.
"""

# %%
import numpy as np

from skbnngp import StudentTProcessRegressor
from skbnngp.datasets import make_heavy_tailed

N_TRAIN, N_TEST, LEVEL = 12, 400, 0.99


def make_models():
    return {"Student-t process": StudentTProcessRegressor(calibration=None, random_state=0),
            "NNGP (Gaussian)": StudentTProcessRegressor(prior="gaussian", calibration=None,
                                                        random_state=0)}


inside = {name: [] for name in make_models()}
nll = {name: [] for name in make_models()}
for seed in range(20):
    X, y = make_heavy_tailed(n_samples=N_TRAIN + N_TEST, df=2, noise=0.1, random_state=seed)
    X_tr, y_tr, X_te, y_te = X[:N_TRAIN], y[:N_TRAIN], X[N_TRAIN:], y[N_TRAIN:]
    fitted = make_models()
    for name, model in fitted.items():
        dist = model.fit(X_tr, y_tr).predict_dist(X_te)
        lo, hi = dist.interval(LEVEL)
        inside[name].append((y_te >= lo) & (y_te <= hi))
        nll[name].append(-dist.logpdf(y_te))
    if seed == 0:
        first = (X_tr, y_tr, X_te, y_te, fitted)

t_in, g_in = (np.concatenate(inside[name]) for name in inside)
for name in inside:
    cover = np.concatenate(inside[name]).mean()
    values = np.concatenate(nll[name])
    print(f"{name:18s} {LEVEL:.0%} coverage {cover:.3f}   test NLL mean {values.mean():6.3f}"
          f"  (95th percentile {np.percentile(values, 95):5.2f}, max {values.max():7.1f})")
print(f"test points covered by the Student-t interval only: {np.sum(t_in & ~g_in)}; "
      f"by the Gaussian only: {np.sum(g_in & ~t_in)} (of {t_in.size})")

# %%
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # pragma: no cover
    plt = None
if plt is not None:
    X_tr, y_tr, X_te, y_te, models = first
    grid = np.linspace(-5, 5, 300)[:, None]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.8), width_ratios=(3, 2))
    styles = {"Student-t process": dict(color="C0", ls="-"),
              "NNGP (Gaussian)": dict(color="C1", ls="--")}
    covered = {}
    for name, model in models.items():
        lo, hi = model.predict_dist(grid).interval(LEVEL)
        ax.plot(grid[:, 0], lo, lw=1.8, label=f"{name}, {LEVEL:.0%} interval", **styles[name])
        ax.plot(grid[:, 0], hi, lw=1.8, **styles[name])
        t_lo, t_hi = model.predict_dist(X_te).interval(LEVEL)
        covered[name] = (y_te >= t_lo) & (y_te <= t_hi)
    ax.plot(grid[:, 0], models["Student-t process"].predict(grid), c="k", lw=1,
            label="posterior mean (both)")
    only_t = covered["Student-t process"] & ~covered["NNGP (Gaussian)"]
    ax.scatter(X_te[~only_t, 0], y_te[~only_t], s=4, c="0.6", label="test")
    ax.scatter(X_te[only_t, 0], y_te[only_t], s=18, c="red", marker="D",
               label="test, covered by the Student-t only")
    ax.scatter(X_tr[:, 0], y_tr, s=25, c="k", marker="x", label="train (12)")
    ax.set_ylim(np.percentile(y_te, 0.5) - 0.5, np.percentile(y_te, 99.5) + 0.5)
    ax.set_title("Heavy-tailed noise, 12 training points")
    ax.legend(fontsize=7, loc="lower left")
    bins = np.linspace(-2, 12, 60)
    for name, model in models.items():
        point_nll = -model.predict_dist(X_te).logpdf(y_te)
        ax2.hist(np.clip(point_nll, None, bins[-1]), bins=bins, histtype="step", lw=1.8,
                 color=styles[name]["color"], ls=styles[name]["ls"],
                 label=f"{name}: mean {point_nll.mean():.2f}")
    ax2.set_yscale("log")
    ax2.set_xlabel("test-point NLL, nats (last bin: all larger)")
    ax2.set_title("The cost of the outliers")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    import os
    import tempfile

    out = os.path.join(tempfile.gettempdir(), "plot_student_t_heavy_tails.png")
    fig.savefig(out, dpi=120)
    print("saved", out)
