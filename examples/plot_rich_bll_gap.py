"""
Richer Bayesian last layers on a 1-D gap problem
================================================

A network trained on data with a gap in the inputs (no training points in (-1, 1)) is as
confident in the gap as on the data if only its last layer is Bayesian (BLL): the last
layer's features barely change there. :class:`~skbnngp.RichBLLRegressor` projects the
gradients of all earlier layers (the network's NTK features) onto the last-layer features
and folds them into its prior, so its variance is never below the BLL's and grows where the
whole network, not only its last layer, is unsure (Calvo-Ordonez et al., Fig. 1). The exact
NTK-GP of the same network is shown for reference.

One network is trained once; the four posteriors are computed post hoc on it
(``train_network=False``), which is also how a network trained elsewhere gets its
uncertainty.
"""

# %%
import warnings

import numpy as np

from skbnngp import RichBLLRegressor
from skbnngp.datasets import make_gap_1d

X, y = make_gap_1d(300, random_state=0)
base = RichBLLRegressor(max_iter=1000, random_state=0).fit(X, y)
grid = np.linspace(-3, 3, 301)[:, None]
in_gap = np.abs(grid[:, 0]) < 1

methods = {"BLL": dict(uncertainty="bll"), "Rich-BLL": {},
           "Rich-BLL, 40 % subsample": dict(subsample=0.4), "NTK-GP (exact)": dict(uncertainty="ntk")}
bands = {}
for name, kw in methods.items():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # 120 rows is below 5 r for the subsample
        head = RichBLLRegressor(network=base.network_, train_network=False,
                                noise_variance=base.noise_variance_, random_state=0,
                                **kw).fit(X, y)
    mean, std = head.predict(grid, return_std=True)
    bands[name] = (mean, std)
    print(f"{name:26s} mean predictive std in the gap {std[in_gap].mean():.3f}")

# %%
try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # pragma: no cover
    plt = None
if plt is not None:
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.4), sharey=True)
    for ax, (name, (mean, std)) in zip(axes, bands.items()):
        ax.axvspan(-1, 1, color="0.93")
        ax.plot(X[:, 0], y, ".", ms=3, color="0.5")
        ax.plot(grid[:, 0], mean, color="C0")
        ax.fill_between(grid[:, 0], mean - 1.96 * std, mean + 1.96 * std, color="C0",
                        alpha=0.3)
        ax.set_title(name)
        ax.set_xlabel("x")
    fig.tight_layout()
    import os
    import tempfile

    out = os.path.join(tempfile.gettempdir(), "rich_bll_gap.png")
    fig.savefig(out, dpi=110)
    print("saved", out)
