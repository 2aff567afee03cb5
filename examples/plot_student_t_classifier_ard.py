"""
Student-t classifier: per-feature relevances only where they pay
=================================================================

``StudentTProcessClassifier(ard="auto")`` (the default) fits its one-hot Student-t process
twice, with one shared first-layer weight variance and with one relevance per feature
(ARD), scores both by their closed-form leave-one-out class log loss, and keeps ARD only
when its per-row gains are more than two standard errors above zero. Relevances help when
some features are noise and overfit when every feature matters on few rows, so the choice
is made on the data.

The data are those of the benchmark's ``overlap`` set (three overlapping classes, 600 rows,
six features of which two are pure noise), generated with ``shuffle=False`` so that the
four informative features come first. The script cross-validates ``ard=False`` and
``ard="auto"`` (5 folds), prints each fold's leave-one-out gain and choice with the test
scores, and plots the relevances of the model fitted on all rows.

Measured (2-core CPU, 14 s): ARD kept in every fold (gains 0.10-0.12 nats a row, standard
errors about 0.02); pooled test NLL 0.362 -> 0.261, accuracy 0.872 -> 0.912; the informative
features get relevances of 10-290 and the two noise features 0.002 and 0.003 (the lower
bound is 0.001).
"""

# %%
import os
import tempfile
import warnings

import numpy as np
from sklearn.datasets import make_classification
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbnngp import StudentTProcessClassifier

X, y = make_classification(600, 6, n_informative=4, n_redundant=0, n_classes=3,
                           n_clusters_per_class=1, class_sep=0.5, shuffle=False,
                           random_state=0)
for ard in (False, "auto"):
    proba = np.zeros((len(y), 3))
    for train, test in StratifiedKFold(5, shuffle=True, random_state=0).split(X, y):
        model = make_pipeline(StandardScaler(),
                              StudentTProcessClassifier(ard=ard, random_state=0))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a hyperparameter may end on its bound
            model.fit(X[train], y[train])
        proba[test] = model.predict_proba(X[test])
        clf = model[-1]
        if clf.ard_loo_gain_ is not None:
            gain, se = clf.ard_loo_gain_
            print(f"  fold: leave-one-out gain of ARD {gain:.3f} +- {se:.3f} -> "
                  f"{'ARD' if clf.ard_ else 'shared'} kernel")
    print(f"ard={ard!r:7}  test NLL {log_loss(y, proba):.3f}  "
          f"accuracy {accuracy_score(y, proba.argmax(1)):.3f}")

# %%
# The relevances of the model fitted on every row: the two noise features are switched off.
import matplotlib.pyplot as plt

clf = make_pipeline(StandardScaler(), StudentTProcessClassifier(random_state=0)).fit(X, y)[-1]
relevance = clf.regressor_.relevance_
print("kept ARD:", clf.ard_, " relevances:", np.round(relevance, 3))

fig, ax = plt.subplots(figsize=(5, 3))
ax.bar(range(6), relevance, color=["C0"] * 4 + ["C3"] * 2)
ax.set_yscale("log")
ax.set_xticks(range(6), ["x1", "x2", "x3", "x4", "noise 1", "noise 2"])
ax.set_ylabel("fitted relevance")
ax.set_title("overlap: Student-t classifier, ard='auto'")
fig.tight_layout()
path = os.path.join(tempfile.gettempdir(), "plot_student_t_classifier_ard.png")
fig.savefig(path, dpi=120)
print(f"saved {path}")
