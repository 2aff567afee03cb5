"""The ECE that the true class probabilities themselves score on ``bench_classification``'s
synthetic sets (issue 20's "ECE <= 0.05 on every set").

``overlap`` and ``imbalanced`` come from ``make_classification``: cluster ``k``'s informative
features are ``z A_k + c_k`` with ``z ~ N(0, I)``, so its density there is
``N(c_k, A_k^T A_k)``, and a class is a mixture of its clusters (one on ``overlap``, two on
``imbalanced``); the other features are noise shared by every class; a share
``flip_y`` of the labels is redrawn uniformly; the shift, the scale and the shuffles change
no posterior (the
defaults, shift 0 and scale 1, draw nothing). This script replays the generator's draws (sklearn's own hypercube helper,
then the same calls in the same order), checks that the replay reproduces the benchmark's
rows and labels exactly, and evaluates the Bayes posterior

    p(y = j | x) = (1 - flip_y) sum_{k in j} w_k N(x; c_k, S_k) / sum_k w_k N(x; c_k, S_k)
                   + flip_y / K

on the benchmark's rows. It prints, per set and fold seed 0-2, the posterior's NLL and its
per-fold and pooled ECE on the benchmark's own labels and folds, with their noise floors
(the mean ECE when labels are drawn from the posterior itself) and how often such a
perfectly calibrated draw exceeds 0.05, by ``bench_classification``'s own ECE functions.

Usage: python scripts/overlap_bayes_ece.py
"""

import sys
from pathlib import Path

import numpy as np
from scipy.stats import multivariate_normal
from sklearn.datasets._samples_generator import _generate_hypercube
from sklearn.model_selection import StratifiedKFold
from sklearn.utils import shuffle

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_classification as bc

#: bench_classification.load's arguments, with the make_classification defaults it uses
SETS = {
    "overlap": {"n_samples": 600, "n_features": 6, "n_informative": 4, "n_classes": 3,
                "n_clusters_per_class": 1, "class_sep": 0.5, "flip_y": 0.01,
                "weights": None, "random_state": 0},
    "imbalanced": {"n_samples": 1050, "n_features": 8, "n_informative": 4, "n_classes": 2,
                   "n_clusters_per_class": 2, "class_sep": 1.0, "flip_y": 0.0,
                   "weights": [20 / 21], "random_state": 0},
}


def replay(kw):
    """Replay one ``make_classification`` call (no redundant or repeated features, hypercube
    vertices, shuffled). Returns the rows and labels as the call does, and the Bayes
    posterior at each row."""
    gen = np.random.RandomState(kw["random_state"])
    K, d, n, p = kw["n_classes"], kw["n_informative"], kw["n_samples"], kw["n_features"]
    per = kw["n_clusters_per_class"]
    w = kw["weights"]
    w = np.asarray([1.0 / K] * K if w is None else list(w) + [1.0 - sum(w)] * (len(w) < K))
    counts = [int(n * w[k % K] / per) for k in range(K * per)]
    for i in range(n - sum(counts)):
        counts[i % (K * per)] += 1
    c = _generate_hypercube(K * per, d, gen).astype(float)
    c = c * 2 * kw["class_sep"] - kw["class_sep"]
    X = np.zeros((n, p))
    y = np.zeros(n, dtype=int)
    X[:, :d] = gen.standard_normal(size=(n, d))
    A, stop = [], 0
    for k in range(K * per):
        start, stop = stop, stop + counts[k]
        y[start:stop] = k % K
        A.append(2 * gen.uniform(size=(d, d)) - 1)
        X[start:stop, :d] = X[start:stop, :d] @ A[k] + c[k]
    # the posterior depends on the informative block only: a mixture of the class's
    # clusters (each with weight w_class / per), flipped labels mixed in
    logp = np.column_stack([multivariate_normal(c[k], A[k].T @ A[k]).logpdf(X[:, :d])
                            + np.log(w[k % K] / per) for k in range(K * per)])
    dens = np.exp(logp - logp.max(axis=1, keepdims=True))
    post = np.column_stack([dens[:, j::K].sum(axis=1) for j in range(K)])
    post = (1 - kw["flip_y"]) * post / post.sum(axis=1, keepdims=True) + kw["flip_y"] / K
    X[:, d:] = gen.standard_normal(size=(n, p - d))
    flip = gen.uniform(size=n) < kw["flip_y"]
    y[flip] = gen.randint(K, size=flip.sum())
    rows = shuffle(np.arange(n), random_state=gen)
    cols = np.arange(p)
    gen.shuffle(cols)
    return X[rows][:, cols], y[rows], post[rows]


def main():
    for name, kw in SETS.items():
        Xr, y, P = replay(kw)
        X, yb = bc.load(name)
        assert np.allclose(Xr, X, rtol=1e-12, atol=0) and np.array_equal(y, yb), \
            f"the replay does not reproduce the benchmark's {name}"
        nll = -np.mean(np.log(P[np.arange(y.size), y]))
        print(f"{name}: {y.size} rows; the Bayes posterior: NLL {nll:.3f}, "
              f"accuracy {np.mean(P.argmax(1) == y):.3f}")
        for seed in (0, 1, 2):
            tests = [te for _, te in StratifiedKFold(5, shuffle=True,
                                                     random_state=seed).split(X, y)]
            ece = np.mean([bc.ece_of(y[te], P[te]) for te in tests])
            draws = bc.ece_calibrated_draws([P[te] for te in tests], 2000, seed=seed)
            print(f"  fold seed {seed}: per-fold ECE {ece:.3f}; calibrated draws: mean "
                  f"{draws.mean():.3f}, above {bc.ECE_MAX} in {np.mean(draws > bc.ECE_MAX):.0%}")
        draws = bc.ece_calibrated_draws([P], 2000)
        print(f"  pooled ECE {bc.ece_of(y, P):.3f}; calibrated draws: mean {draws.mean():.3f}, "
              f"above {bc.ECE_MAX} in {np.mean(draws > bc.ECE_MAX):.0%}")


if __name__ == "__main__":
    main()
