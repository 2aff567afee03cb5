"""
Out-of-distribution scores on digits with FiD-GP
================================================

:class:`~skbnngp.FiDGPClassifier` is trained on the handwritten digits 0-4 only. The digits
5-9 are then inputs unlike anything it was trained on. Three scores are compared by how well
they separate held-out 0-4 digits (in distribution) from 5-9 (out of distribution):

* the single-pass ``ood_score``: the residual of the projected feature-gradients off the
  inducing matrices' row space;
* one minus the largest predicted probability (max-softmax);
* the mutual information between the label and the weights (the epistemic part of the
  predictive entropy).

The histograms show each score on both groups, with the area under the ROC curve (AUROC) in
the title; 0.5 is chance and 1 is perfect separation.
"""

# %%
import os
import tempfile
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split

from skbnngp import FiDGPClassifier

X, y = load_digits(return_X_y=True)
inside = y < 5
X_tr, X_te, y_tr, y_te = train_test_split(X[inside], y[inside], test_size=0.3,
                                          random_state=0, stratify=y[inside])
X_ood = X[~inside]

# %%
# 100 epochs keep this under a minute; the KL is annealed over the second half.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    clf = FiDGPClassifier(max_iter=100, random_state=0).fit(X_tr, y_tr)
print(f"test accuracy on 0-4: {clf.score(X_te, y_te):.3f}")

# %%
p_in, p_out = clf.predict_proba(X_te), clf.predict_proba(X_ood)
u_in, u_out = clf.predict_uncertainty(X_te), clf.predict_uncertainty(X_ood)
scores = {
    "ood_score": (clf.ood_score(X_te), clf.ood_score(X_ood)),
    "1 - max softmax": (1 - p_in.max(1), 1 - p_out.max(1)),
    "mutual information": (u_in["mutual_information"], u_out["mutual_information"]),
}
labels = np.r_[np.zeros(len(X_te)), np.ones(len(X_ood))]
for name, (s_in, s_out) in scores.items():
    print(f"{name:20s} AUROC {roc_auc_score(labels, np.r_[s_in, s_out]):.3f}")

# %%
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
for ax, (name, (s_in, s_out)) in zip(axes, scores.items()):
    auc = roc_auc_score(labels, np.r_[s_in, s_out])
    if name != "1 - max softmax":  # heavy right tails: show log10 of the score
        floor = 1e-12
        s_in, s_out = np.log10(s_in + floor), np.log10(s_out + floor)
        name = f"log10 {name}"
    bins = np.linspace(min(s_in.min(), s_out.min()), max(s_in.max(), s_out.max()), 40)
    ax.hist(s_in, bins=bins, alpha=0.6, density=True, label="digits 0-4 (test)")
    ax.hist(s_out, bins=bins, alpha=0.6, density=True, label="digits 5-9 (OoD)")
    ax.set_title(f"{name}  (AUROC {auc:.3f})")
    ax.set_yscale("log")
axes[0].legend()
fig.tight_layout()
out = os.path.join(tempfile.gettempdir(), "plot_fidgp_ood_digits.png")
fig.savefig(out, dpi=110)
print("saved", out)
