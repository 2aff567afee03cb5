"""Benchmark: RichBLLRegressor against the BLL, laplace-torch's last-layer Laplace and sklearn's GP.

Two parts, in one run:

* ``gap``: the 1-D gap problem (``make_gap_1d``, 300 rows, no data in (-1, 1)); one trained
  MLP (2 x 50, ReLU), then BLL, Rich-BLL (all rows and 40 %), and the exact NTK-GP on it.
  Prints the mean latent std in the gap and the ratios Rich/BLL and Rich/NTK-GP, and saves
  the bands to ``benchmarks/results/bench_rich_bll_gap.png``.
* ``regression``: 4,000 training rows of the d = 8 problem of ``bench_dbk.py`` (2,000 test
  rows). One network is trained once (``RichBLLRegressor`` with its defaults); every
  post-hoc method runs on that same network: BLL, Rich-BLL (all rows, 40 %), laplace-torch's
  ``Laplace(..., subset_of_weights="last_layer", hessian_structure="full")`` with
  ``sigma_noise`` the same noise and its prior precision by marginal likelihood, and
  scikit-learn's ``GaussianProcessRegressor`` (ARD RBF + White) on the same rows. Figures:
  test NLPD, RMSE, post-hoc seconds.

Usage::

    python benchmarks/bench_rich_bll.py                    # about 12 min (sklearn's GP: 10)
    python benchmarks/bench_rich_bll.py --sklearn-from-dbk # reuse bench_dbk.json's sklearn
                                                           # row (same data, same model)

laplace-torch 0.3 normally pulls torchvision, which has no CPU build beside torch 2.13 on
this machine type; it runs when installed without dependencies::

    pip install --no-deps laplace-torch==0.3 asdfghjkl==0.1a4 backpack-for-pytorch \
        curvlinops-for-pytorch einops unfoldNd einconv opt-einsum torchmetrics \
        lightning-utilities jaxtyping wadler-lindig

Writes ``benchmarks/results/bench_rich_bll.{json,md}``. Goals (issue 9): Rich-BLL's NLPD at
least as good as the BLL's and laplace-torch's; Rich-BLL at 40 % within 3x of the BLL's
post-hoc time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _harness import RESULTS, gaussian_scores  # noqa: E402 (adds the checkout)
from baselines import PosthocLaplaceRegressor  # noqa: E402


def scores(y, mean, std):
    return gaussian_scores(y, mean, std, what=("nlpd", "rmse"))


def posthoc(net, X, y, Xt, yt, noise, **kw):
    from skbnngp import RichBLLRegressor
    t0 = time.perf_counter()
    reg = RichBLLRegressor(network=net, train_network=False, noise_variance=noise,
                           device="cpu", random_state=0, **kw).fit(X, y)
    sec = time.perf_counter() - t0
    return reg, dict(posthoc_s=sec, **scores(yt, *reg.predict(Xt, return_std=True)))


def gap_part():
    from skbnngp import RichBLLRegressor
    from skbnngp.datasets import make_gap_1d
    X, y = make_gap_1d(300, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the paper's Gaussian predictive throughout: this benchmark compares posteriors
        base = RichBLLRegressor(device="cpu", random_state=0, max_iter=1000,
                                calibration=None).fit(X, y)
    grid = np.linspace(-3, 3, 301)[:, None]
    gap = np.abs(grid[:, 0]) < 1
    out, bands = {}, {}
    for name, kw in {"BLL": dict(uncertainty="bll"), "Rich-BLL": {},
                     "Rich-BLL (40 %)": dict(subsample=0.4),
                     "NTK-GP": dict(uncertainty="ntk")}.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the 40 % subsample (40 rows) is below 5 r
            reg = RichBLLRegressor(network=base.network_, train_network=False,
                                   include_noise=False, noise_variance=base.noise_variance_,
                                   device="cpu", random_state=0, **kw).fit(X, y)
        mean, std = reg.predict(grid, return_std=True)
        bands[name] = (mean, std)
        out[name] = float(std[gap].mean())
    ratios = {"rich_over_bll": out["Rich-BLL"] / out["BLL"],
              "rich_over_ntk": out["Rich-BLL"] / out["NTK-GP"],
              "rich40_over_bll": out["Rich-BLL (40 %)"] / out["BLL"]}
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 4, figsize=(14, 3.2), sharey=True)
        for ax, (name, (mean, std)) in zip(axes, bands.items()):
            ax.plot(X[:, 0], y, "k.", ms=3)
            ax.plot(grid[:, 0], mean, "C0")
            ax.fill_between(grid[:, 0], mean - 2 * std, mean + 2 * std, alpha=0.3)
            ax.set_title(f"{name}: gap std {out[name]:.2f}")
        fig.tight_layout()
        RESULTS.mkdir(exist_ok=True)
        fig.savefig(RESULTS / "bench_rich_bll_gap.png", dpi=110)
    except ImportError:
        pass
    return dict(gap_std=out, **ratios)


def laplace_torch(net, X, y, Xt, yt, noise, x_off, x_sc, y_mean):
    """``baselines.PosthocLaplaceRegressor`` on ``net`` (inputs standardised as the network
    saw them, y centred)."""
    t0 = time.perf_counter()
    la = PosthocLaplaceRegressor(net, noise, x_offset=x_off, x_scale=x_sc,
                                 y_offset=y_mean).fit(X, y)
    sec = time.perf_counter() - t0
    return dict(posthoc_s=sec, **scores(yt, *la.predict(Xt, return_std=True)),
                prior_precision=la.prior_precision_)


def regression_part(sklearn_from_dbk):
    from bench_dbk import make_data, run_sklearn
    from skbnngp import RichBLLRegressor
    X, y, Xt, yt = make_data(4000)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = RichBLLRegressor(device="cpu", random_state=0,
                                calibration=None).fit(X, y)
    train_s = time.perf_counter() - t0
    net, noise = base.network_, base.noise_variance_
    rows = {}
    common = dict(normalize_X=True)
    for name, kw in {"BLL": dict(uncertainty="bll"), "Rich-BLL": {},
                     "Rich-BLL (40 %)": dict(subsample=0.4)}.items():
        _, rows[name] = posthoc(net, X, y, Xt, yt, noise, **common, **kw)
    try:
        rows["laplace-torch last-layer (full)"] = laplace_torch(
            net, X, y, Xt, yt, noise, base._X_offset, base._X_scale, base._y_train_mean[0])
    except ImportError as exc:
        rows["laplace-torch last-layer (full)"] = {"error": f"not installed ({exc})"}
    if sklearn_from_dbk:
        dbk = json.loads((RESULTS / "bench_dbk.json").read_text())
        sk = next(p for p in dbk["peers"] if p.get("kind") == "sklearn")
        rows["sklearn GPR (ARD RBF + White)"] = dict(posthoc_s=sk["fit_s"], nlpd=sk["nlpd"],
                                                     rmse=sk["rmse"],
                                                     note="from bench_dbk.json (same data)")
    else:
        sk = run_sklearn(4000, "cpu")
        rows["sklearn GPR (ARD RBF + White)"] = dict(posthoc_s=sk["fit_s"], nlpd=sk["nlpd"],
                                                     rmse=sk["rmse"], note="fit time")
    return dict(train_s=train_s, noise_variance=noise, epochs=base.n_iter_, rows=rows,
                time_ratio_rich40_over_bll=rows["Rich-BLL (40 %)"]["posthoc_s"]
                / rows["BLL"]["posthoc_s"])



# ---------------------------------------------------------------- evidence (issue 19 item 3)
# ``python benchmarks/bench_rich_bll.py --parts evidence``: for each set and split, one
# network with the old defaults (prior 1, ridge 1e-4, validation noise; "N") and one with
# the refit (``_rich_bll.REFIT = True``; "R"); on each, post-hoc Rich-BLL and BLL with the evidence's prior variance
# and ridge and the validation ("val") or the evidence's ("evid") noise, and laplace-torch's
# last-layer Laplace (marginal-likelihood prior, the validation noise). Splits: the first
# folds of KFold(5, shuffle=True, random_state=0), or the extrapolation split (sort by the
# feature most correlated with y, train on the lower 80 %). One JSON line per set, appended
# to benchmarks/results/bench_rich_bll.evidence.jsonl.
EVIDENCE_RUNS = [("smooth", "kfold", 1), ("step", "kfold", 2), ("heteroscedastic", "kfold", 2),
                 ("auto_mpg", "kfold", 2), ("concrete", "kfold", 2), ("diabetes", "kfold", 2),
                 ("concrete", "extrap", 1), ("auto_mpg", "extrap", 1), ("diabetes", "extrap", 1),
                 ("cpu_performance", "extrap", 1), ("cpu_performance", "kfold", 2)]


def _score(y, mean, std):
    score = gaussian_scores(y, mean, std)
    return dict(nlpd=score["nlpd"], cov95=score["coverage_95"], rmse=score["rmse"])


def _laplace_ll(reg, X, y, Xt, yt, noise):
    """``baselines.PosthocLaplaceRegressor`` on ``reg``'s network (its own scalings)."""
    la = PosthocLaplaceRegressor(reg.network_, noise, x_offset=reg._X_offset,
                                 x_scale=reg._X_scale, y_offset=reg._y_train_mean[0],
                                 y_scale=reg._y_train_std[0])
    return la.fit(X, y).predict(Xt, return_std=True)


def evidence_run(X, y, tr, te, max_iter, refits=(False, True)):
    from unittest import mock

    from skbnngp import RichBLLRegressor, _rich_bll

    out = {}
    for refit in refits:
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as w, \
                mock.patch.object(_rich_bll, "REFIT", refit):
            warnings.simplefilter("always")
            reg = RichBLLRegressor(device="cpu", random_state=0, max_iter=max_iter,
                                   noise_variance="validation", prior_variance=1.0,
                                   projection_ridge=1e-4,
                                   calibration=None).fit(X[tr], y[tr])
        fit_s = time.perf_counter() - t0
        warn = sum("ConvergenceWarning" in str(x.category) for x in w)
        val = reg.noise_variance_
        tag = "R" if refit else "N"
        out[f"{tag}:old"] = dict(_score(y[te], *reg.predict(X[te], return_std=True)), fit_s=fit_s,
                                 warn=warn, n_iter=reg.n_iter_, best=reg.best_iteration_)
        for unc in ("rich", "bll"):
            for nm in ("val", "evid"):
                ph = RichBLLRegressor(network=reg.network_, train_network=False, uncertainty=unc,
                                      noise_variance=val if nm == "val" else "evidence",
                                      device="cpu", random_state=0).fit(X[tr], y[tr])
                out[f"{tag}:{unc}:{nm}"] = dict(_score(y[te], *ph.predict(X[te], return_std=True)),
                                                s=ph.prior_variance_, ridge=ph.projection_ridge_,
                                                noise=ph.noise_variance_)
        try:
            out[f"{tag}:laplace"] = _score(y[te], *_laplace_ll(reg, X[tr], y[tr], X[te], y[te], val))
        except Exception as e:
            out[f"{tag}:laplace"] = dict(error=repr(e)[:100])
    return out


def evidence_part(max_iter=2000):
    import torch
    from sklearn.model_selection import KFold

    from bench_defaults import load
    torch.set_num_threads(1)
    out = []
    for ds, kind, folds in EVIDENCE_RUNS:
        X, y = load(ds, [])
        X, y = np.asarray(X, float), np.asarray(y, float)
        if kind == "kfold":
            splits = list(KFold(5, shuffle=True, random_state=0).split(X))[:folds]
        else:
            j = int(np.argmax([abs(np.corrcoef(X[:, k], y)[0, 1]) for k in range(X.shape[1])]))
            o = np.argsort(X[:, j], kind="stable")
            cut = int(0.8 * len(y))
            splits = [(o[:cut], o[cut:])]
        res = [evidence_run(X, y, tr, te, max_iter) for tr, te in splits]
        summ = {k: {m: float(np.mean([r[k][m] for r in res])) for m in res[0][k]
                    if isinstance(res[0][k][m], (int, float))} for k in res[0]}
        line = dict(ds=ds, kind=kind, folds=folds, max_iter=max_iter, summ=summ)
        print(json.dumps(line), flush=True)
        RESULTS.mkdir(exist_ok=True)
        with open(RESULTS / "bench_rich_bll.evidence.jsonl", "a") as fh:
            fh.write(json.dumps(line) + "\n")
    return out

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="+", default=["gap", "regression"],
                    choices=["gap", "regression", "evidence"])
    ap.add_argument("--sklearn-from-dbk", action="store_true")
    args = ap.parse_args()
    import sklearn
    import torch
    report = {"date": time.strftime("%Y-%m-%d"), "threads": torch.get_num_threads(),
              "versions": f"torch {torch.__version__}, scikit-learn {sklearn.__version__}"}
    if "gap" in args.parts:
        report["gap"] = gap_part()
        print(report["gap"], flush=True)
    if "evidence" in args.parts:
        evidence_part()
        if set(args.parts) == {"evidence"}:
            return
    if "regression" in args.parts:
        report["regression"] = regression_part(args.sklearn_from_dbk)
        print(report["regression"], flush=True)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "bench_rich_bll.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    old.update(report)
    path.write_text(json.dumps(old, indent=2))
    (RESULTS / "bench_rich_bll.md").write_text(markdown(old))
    print(markdown(old))


def markdown(r):
    lines = [f"# RichBLLRegressor benchmark ({r['date']}, CPU, {r['threads']} threads, "
             f"{r['versions']})", ""]
    if "gap" in r:
        g = r["gap"]
        lines += ["## 1-D gap problem: mean latent std in the gap (|x| < 1)", "",
                  "| method | gap std |", "|---|---:|"]
        lines += [f"| {k} | {v:.3f} |" for k, v in g["gap_std"].items()]
        lines += ["", f"Rich/BLL **{g['rich_over_bll']:.2f}**, Rich/NTK-GP "
                  f"**{g['rich_over_ntk']:.2f}**, Rich (40 %)/BLL {g['rich40_over_bll']:.2f}. "
                  "Bands: `bench_rich_bll_gap.png`.", ""]
    if "regression" in r:
        g = r["regression"]
        lines += ["## 4,000-row regression (d = 8), one trained network", "",
                  f"Network training: {g['train_s']:.1f} s ({g['epochs']} epochs); noise "
                  f"variance {g['noise_variance']:.4f} (validation MSE).", "",
                  "| method | NLPD | RMSE | post-hoc s |", "|---|---:|---:|---:|"]
        for k, v in g["rows"].items():
            if "error" in v:
                lines.append(f"| {k} | {v['error']} | | |")
                continue
            note = f" ({v['note']})" if "note" in v else ""
            lines.append(f"| {k} | {v['nlpd']:.3f} | {v['rmse']:.3f} | "
                         f"{v['posthoc_s']:.3f}{note} |")
        lines += ["", f"Post-hoc time Rich-BLL (40 %) / BLL: "
                  f"**{g['time_ratio_rich40_over_bll']:.2f}x** (goal <= 3).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
