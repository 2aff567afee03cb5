"""Diagnostic: the Student-t calibration read from leave-one-out residuals (the default)
against the same rule read from k-fold residuals of refitted models.

The default calibration of :class:`~skbnngp.StudentTProcessRegressor` reads the
leave-one-out residuals of the fitted model, whose hyperparameters were fitted on every
training row, the left-out one included. With ARD on a few hundred rows those residuals can
be narrower than fresh ones. Here the outer 5-fold split of ``bench_uncertainty.py``'s
``cv`` section (``KFold(5, shuffle=True, random_state=SEED)``, inputs standardised on the
training rows) is kept, and inside each training split:

* ``loo``: the default model (``calibration="auto"``, the Student-t calibration);
* ``cv``: the model with ``calibration=None``, whose predictive t (location,
  scale, ``df_``) is then calibrated by :func:`student_t_calibration` on the standardised
  residuals of 5 inner refits (``KFold(5, shuffle=True, random_state=0)``), each fitted with
  its own hyperparameters on four fifths of the training rows, capped at the outer model's
  ``df_`` as the default is.

Prints the 95 % coverage and mean test NLPD of both, per outer fold seed. Used for the
User Guide's account of the cpu_performance coverage (doc/user_guide/student_t.rst)::

    python scripts/diag_cv_calibration.py --sets cpu_performance --seeds 0 1 2
"""
import argparse
import warnings

import numpy as np
from scipy import stats
from sklearn.model_selection import KFold
from sklearn.preprocessing import StandardScaler

from skbnngp import StudentTProcessRegressor
from skbnngp._backend._calibration import student_t_calibration
from skbnngp.datasets import load_dataset


def _t(model, X):
    """Location, scale and degrees of freedom of a fitted model's predictive at ``X``."""
    kw = model.predict_dist(X).kwds
    return np.asarray(kw["loc"]), np.asarray(kw["scale"]), kw.get("df", np.inf)


def _score(dist, y):
    lo, hi = dist.interval(0.95)
    return float(np.mean((y >= lo) & (y <= hi))), float(-np.mean(dist.logpdf(y)))


def run(name, seed, inner_folds=5):
    X, y = load_dataset(name, return_X_y=True)
    scores = {"loo": [], "cv": []}
    for tr, te in KFold(5, shuffle=True, random_state=seed).split(X):
        scaler = StandardScaler().fit(X[tr])
        Xtr, Xte, ytr = scaler.transform(X[tr]), scaler.transform(X[te]), y[tr]
        default = StudentTProcessRegressor(device="cpu", random_state=0).fit(Xtr, ytr)
        scores["loo"].append(_score(default.predict_dist(Xte), y[te]))

        plain = {"device": "cpu", "random_state": 0, "calibration": None}
        loc, scale, df_model = _t(StudentTProcessRegressor(**plain).fit(Xtr, ytr), Xte)
        z = []
        for itr, ite in KFold(inner_folds, shuffle=True, random_state=0).split(Xtr):
            inner = StudentTProcessRegressor(**plain).fit(Xtr[itr], ytr[itr])
            m, s, _ = _t(inner, Xtr[ite])
            z.append((ytr[ite] - m) / s)
        df, factor = student_t_calibration(np.concatenate(z), 0.95, max_df=df_model)
        scale = scale * np.sqrt(factor)
        dist = stats.norm(loc, scale) if np.isinf(df) else stats.t(df, loc, scale)
        scores["cv"].append(_score(dist, y[te]))
    return {k: tuple(float(x) for x in np.mean(v, axis=0).round(3)) for k, v in scores.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=["cpu_performance"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    print("set | fold seed | 95 % coverage, NLPD: leave-one-out (default) | 5-fold refits")
    for name in args.sets:
        for seed in args.seeds:
            r = run(name, seed)
            print(f"{name} | {seed} | {r['loo']} | {r['cv']}", flush=True)


if __name__ == "__main__":
    main()
