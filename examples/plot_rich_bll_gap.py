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

The network here is trained by a plain PyTorch loop, outside the package, as any user's
network would be; the four posteriors are then computed post hoc on it
(``train_network=False``), without retraining it.
"""

# %%
import warnings

import numpy as np
import torch

from skbnngp import RichBLLRegressor
from skbnngp.datasets import make_gap_1d

X, y = make_gap_1d(300, random_state=0)

# %%
# A network trained outside the package: a 2 x 50 ReLU MLP, MSE, Adam, 3000 full-batch steps.
gen = torch.Generator().manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(1, 50), torch.nn.ReLU(), torch.nn.Linear(50, 50),
                          torch.nn.ReLU(), torch.nn.Linear(50, 1)).double()
with torch.no_grad():
    for p in net.parameters():
        p.uniform_(-1, 1, generator=gen).mul_(1 / np.sqrt(p.shape[-1]))
Xt, yt = torch.as_tensor(X), torch.as_tensor(y)[:, None]
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
for step in range(3000):
    opt.zero_grad()
    loss = (net(Xt) - yt).square().mean()
    loss.backward()
    opt.step()
noise = float(loss.detach())  # the training MSE as the noise variance

# %%
# Post-hoc heads on that network (the inputs are fed as the network was trained).
grid = np.linspace(-3, 3, 301)[:, None]
in_gap = np.abs(grid[:, 0]) < 1

methods = {"BLL": dict(uncertainty="bll"), "Rich-BLL": {},
           "Rich-BLL, 40 % subsample": dict(subsample=0.4), "NTK-GP (exact)": dict(uncertainty="ntk")}
bands = {}
for name, kw in methods.items():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # 120 rows is below 5 r for the subsample
        head = RichBLLRegressor(network=net, train_network=False, normalize_X=False,
                                noise_variance=noise, random_state=0, **kw).fit(X, y)
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
