"""Benchmark: StudentTProcessRegressor vs sklearn's GaussianProcessRegressor vs a GPyTorch exact GP.

One run measures, on the same synthetic data (d = 8) for each n:

* fit time (hyperparameter optimisation included) and predict time on 1000 test rows,
* peak resident memory above the process's baseline after imports (each model runs in its own
  fresh subprocess, so the figures do not contaminate each other),
* test NLL of y and RMSE.

``stp`` is ``StudentTProcessRegressor()`` with its defaults (depth-3 ReLU NNGP, inverse-gamma
prior, hyperparameters by marginal likelihood with a 500-row warm start); ``stp_ard`` adds
``ard=True`` (one first-layer weight variance per feature), the NNGP counterpart of sklearn's
ARD lengthscales. sklearn's model is ``C * RBF(ARD) + WhiteKernel`` with its default optimiser;
GPyTorch's is an exact GP with the same kernel trained by 50 Adam steps (lr 0.1).

It also predicts 10^6 rows with a fitted model and reports the memory growth against the chunk
size, and the achieved GFLOP/s of torch's Cholesky against a float64 matmul on this machine.

Usage::

    python benchmarks/bench_student_t.py                  # n = 1000, 2000, 4000
    python benchmarks/bench_student_t.py --sizes 1000     # quicker
    python benchmarks/bench_student_t.py --skip gpytorch

Writes ``benchmarks/results/bench_student_t.{json,md}``. Targets (issue 2): at n = 4000 at least
5x faster than sklearn with at most half its peak memory, and test NLL no worse.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
N_TEST = 1000
D = 8


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + N_TEST, D))
    f = (np.sin(1.5 * X[:, 0]) + 0.5 * np.cos(2 * X[:, 1]) + 0.5 * X[:, 2] * X[:, 3]
         + 0.3 * X[:, 4] ** 2 - 0.4 * np.abs(X[:, 5]) + 0.2 * X[:, 6])
    y = f + 0.2 * rng.normal(size=f.shape)
    X = (X - X[:n].mean(0)) / X[:n].std(0)
    return X[:n], y[:n], X[n:], y[n:]


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def gaussian_nll(y, mean, std):
    return float(np.mean(0.5 * np.log(2 * np.pi * std**2) + 0.5 * ((y - mean) / std) ** 2))


# --------------------------------------------------------------------------- single runs
def run_stp(X, y, Xt, yt, **params):
    from skbnngp import StudentTProcessRegressor
    base = peak_mb()
    t0 = time.perf_counter()
    reg = StudentTProcessRegressor(random_state=0, device="cpu", **params).fit(X, y)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    dist = reg.predict_dist(Xt)
    pred_s = time.perf_counter() - t0
    return dict(fit_s=fit_s, predict_s=pred_s, peak_mb=peak_mb() - base,
                nll=float(-np.mean(dist.logpdf(yt))),
                rmse=float(np.sqrt(np.mean((dist.mean() - yt) ** 2))),
                n_iter=reg.n_iter_, df=reg.df_,
                hyperparameters=reg.hyperparameters_)


def run_sklearn(X, y, Xt, yt):
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    base = peak_mb()
    kernel = ConstantKernel() * RBF(length_scale=np.ones(X.shape[1])) + WhiteKernel()
    t0 = time.perf_counter()
    gpr = GaussianProcessRegressor(kernel=kernel, normalize_y=True, random_state=0).fit(X, y)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    mean, std = gpr.predict(Xt, return_std=True)
    pred_s = time.perf_counter() - t0
    return dict(fit_s=fit_s, predict_s=pred_s, peak_mb=peak_mb() - base,
                nll=gaussian_nll(yt, mean, std), rmse=float(np.sqrt(np.mean((mean - yt) ** 2))))


def run_gpytorch(X, y, Xt, yt, steps=50):
    import gpytorch
    import torch

    base = peak_mb()
    Xtr = torch.as_tensor(X)
    ym, ys = y.mean(), y.std()
    ytr = torch.as_tensor((y - ym) / ys)

    class GP(gpytorch.models.ExactGP):
        def __init__(self, Xtr, ytr, lik):
            super().__init__(Xtr, ytr, lik)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(ard_num_dims=Xtr.shape[1]))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    lik = gpytorch.likelihoods.GaussianLikelihood().double()
    model = GP(Xtr, ytr, lik).double()
    t0 = time.perf_counter()
    model.train()
    lik.train()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    for _ in range(steps):
        opt.zero_grad()
        loss = -mll(model(Xtr), ytr)
        loss.backward()
        opt.step()
    fit_s = time.perf_counter() - t0
    model.eval()
    lik.eval()
    t0 = time.perf_counter()
    with torch.no_grad():
        pred = lik(model(torch.as_tensor(Xt)))
        mean = pred.mean.numpy() * ys + ym
        std = pred.variance.sqrt().numpy() * ys
    pred_s = time.perf_counter() - t0
    return dict(fit_s=fit_s, predict_s=pred_s, peak_mb=peak_mb() - base,
                nll=gaussian_nll(yt, mean, std), rmse=float(np.sqrt(np.mean((mean - yt) ** 2))))


def run_million(n_train=1000, n_rows=1_000_000, batch_size=16384):
    """Predict 10^6 rows; peak memory growth should track batch_size x n_train, not n_rows."""
    from skbnngp import StudentTProcessRegressor
    X, y, _, _ = make_data(n_train)
    reg = StudentTProcessRegressor(random_state=0, device="cpu", batch_size=batch_size,
                                   max_iter=20).fit(X, y)
    rng = np.random.default_rng(1)
    Xbig = rng.normal(size=(n_rows, D))
    base = peak_mb()
    t0 = time.perf_counter()
    mean, std = reg.predict(Xbig, return_std=True)
    secs = time.perf_counter() - t0
    out_mb = (mean.nbytes + std.nbytes) / 2**20
    block_mb = batch_size * n_train * 8 / 2**20
    return dict(n_rows=n_rows, n_train=n_train, batch_size=batch_size, predict_s=secs,
                peak_growth_mb=peak_mb() - base, outputs_mb=out_mb, block_mb=block_mb,
                finite=bool(np.all(np.isfinite(std))))


def run_flops(n=4000, reps=3):
    import torch
    g = torch.Generator().manual_seed(0)
    A = torch.randn(n, n, dtype=torch.float64, generator=g)
    t0 = time.perf_counter()
    for _ in range(reps):
        C = A @ A.T
    mm = 2 * n**3 * reps / (time.perf_counter() - t0) / 1e9
    C.diagonal().add_(n)
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.linalg.cholesky(C)
    ch = n**3 / 3 * reps / (time.perf_counter() - t0) / 1e9
    return dict(n=n, matmul_gflops=mm, cholesky_gflops=ch, cholesky_fraction_of_peak=ch / mm)


def run_stp_ard(X, y, Xt, yt):
    return run_stp(X, y, Xt, yt, ard=True)


RUNNERS = {"stp": run_stp, "stp_ard": run_stp_ard, "sklearn": run_sklearn,
           "gpytorch": run_gpytorch}


def child(kind, n):
    if kind == "million":
        res = run_million()
    elif kind == "flops":
        res = run_flops()
    else:
        res = RUNNERS[kind](*make_data(n))
    print("RESULT " + json.dumps(res))


def spawn(kind, n=0):
    cmd = [sys.executable, __file__, "--child", kind, "--n", str(n)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{kind} n={n} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000])
    ap.add_argument("--skip", nargs="*", default=[], choices=list(RUNNERS) + ["million", "flops"])
    ap.add_argument("--child")
    ap.add_argument("--n", type=int, default=0)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.n)
        return
    RESULTS.mkdir(exist_ok=True)
    report = dict(machine=dict(platform=platform.platform(), cpus=os.cpu_count(),
                               python=platform.python_version()),
                  d=D, n_test=N_TEST, runs=[])
    for n in args.sizes:
        for kind in RUNNERS:
            if kind in args.skip:
                continue
            res = spawn(kind, n)
            res.update(model=kind, n=n)
            report["runs"].append(res)
            print(f"n={n:5d} {kind:9s} fit {res['fit_s']:8.2f}s  predict {res['predict_s']:6.2f}s"
                  f"  peak +{res['peak_mb']:7.0f} MB  NLL {res['nll']:7.3f}  RMSE {res['rmse']:.3f}",
                  flush=True)
    if "million" not in args.skip:
        report["million_rows"] = spawn("million")
        print("10^6 rows:", report["million_rows"], flush=True)
    if "flops" not in args.skip:
        report["flops"] = spawn("flops")
        print("GFLOP/s:", report["flops"], flush=True)
    (RESULTS / "bench_student_t.json").write_text(json.dumps(report, indent=2))
    (RESULTS / "bench_student_t.md").write_text(markdown(report))
    print(markdown(report))


def markdown(report):
    lines = ["| n | model | fit s | predict s | peak MB | test NLL | RMSE | fit speed-up vs sklearn "
             "| memory ratio vs sklearn |", "|---|---|---|---|---|---|---|---|---|"]
    runs = report["runs"]
    for r in runs:
        sk = next((s for s in runs if s["model"] == "sklearn" and s["n"] == r["n"]), None)
        speed = f"{sk['fit_s'] / r['fit_s']:.1f}x" if sk else "-"
        mem = f"{r['peak_mb'] / max(sk['peak_mb'], 1e-9):.2f}" if sk else "-"
        lines.append(f"| {r['n']} | {r['model']} | {r['fit_s']:.2f} | {r['predict_s']:.2f} | "
                     f"{r['peak_mb']:.0f} | {r['nll']:.3f} | {r['rmse']:.3f} | {speed} | {mem} |")
    if "million_rows" in report:
        m = report["million_rows"]
        lines += ["", f"Predicting {m['n_rows']:,} rows (n_train={m['n_train']}, batch_size="
                  f"{m['batch_size']}): {m['predict_s']:.1f} s, peak memory growth "
                  f"{m['peak_growth_mb']:.0f} MB (one kernel block is {m['block_mb']:.0f} MB, the "
                  f"outputs {m['outputs_mb']:.0f} MB)."]
    if "flops" in report:
        f = report["flops"]
        lines += ["", f"Cholesky (n={f['n']}, float64): {f['cholesky_gflops']:.1f} GFLOP/s, "
                  f"{100 * f['cholesky_fraction_of_peak']:.0f}% of the measured matmul peak "
                  f"{f['matmul_gflops']:.1f} GFLOP/s."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
