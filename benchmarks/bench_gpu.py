"""Benchmark on CUDA: every regressor of the package against GPyTorch, fit time, test NLPD and
peak device memory, in one run (issue 11).

For n = 5,000 / 20,000 / 50,000 rows of the d = 8 problem of ``bench_dbk.py`` (2,000 test
rows), in float64:

* ``StudentTProcessRegressor(ard=True)``, ``MixedActivationGPRegressor(approx="exact")``
  (n <= 20,000) and ``MixedActivationGPRegressor()`` (Nystrom, 512 anchors),
  ``DBKRegressor()`` (exact) and ``DBKRegressor(inference="svi")``;
* GPyTorch's exact GP (ARD RBF, 50 Adam steps at lr 0.1, float32 as GPyTorch's examples) and,
  for n >= 10^5, its SVGP (``bench_dbk.run_svgp``);
* at n = 10^6: the Nystrom mixed-activation GP and DBK (svi) against the SVGP.

Each model runs in its own process; peak memory is ``torch.cuda.max_memory_allocated``.
Without CUDA the script says so and exits with status 0 (nothing to measure).

Usage::

    python benchmarks/bench_gpu.py                  # all sizes
    python benchmarks/bench_gpu.py --sizes 20000

Writes ``benchmarks/results/bench_gpu.{json,md}``. Targets (issue 11, one H100): STP at
n = 50,000 under 60 s, at n = 20,000 faster than GPyTorch's exact GP with a better NLPD, peak
device memory at most 3 n^2 x 8 bytes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def _ours(name, n):
    import torch
    from bench_dbk import make_data

    from skbnngp import DBKRegressor, MixedActivationGPRegressor, StudentTProcessRegressor
    models = {
        "stp_ard": lambda: StudentTProcessRegressor(ard=True, device="cuda", random_state=0),
        "mixed_exact": lambda: MixedActivationGPRegressor(approx="exact", device="cuda",
                                                          random_state=0),
        "mixed_nystrom": lambda: MixedActivationGPRegressor(device="cuda", random_state=0),
        "dbk_exact": lambda: DBKRegressor(device="cuda", random_state=0),
        "dbk_svi": lambda: DBKRegressor(inference="svi", device="cuda", random_state=0),
    }
    X, y, Xt, yt = make_data(n)
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = models[name]().fit(X, y)
    torch.cuda.synchronize()
    fit_s = time.perf_counter() - t0
    dist = reg.predict_dist(Xt)
    return dict(model=name, n=n, fit_s=fit_s, nlpd=float(-np.mean(dist.logpdf(yt))),
                peak_gb=torch.cuda.max_memory_allocated() / 2**30)


def _gpytorch_exact(n, steps=50):
    import gpytorch
    import torch
    from bench_dbk import D, make_data, nlpd
    X, y, Xt, yt = make_data(n)
    dev = torch.device("cuda")
    ym, ys = y.mean(), y.std()
    Xtr = torch.as_tensor(X, dtype=torch.float32, device=dev)
    ytr = torch.as_tensor((y - ym) / ys, dtype=torch.float32, device=dev)

    class GP(gpytorch.models.ExactGP):
        def __init__(self, lik):
            super().__init__(Xtr, ytr, lik)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.RBFKernel(ard_num_dims=D))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                             self.covar_module(x))

    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    lik = gpytorch.likelihoods.GaussianLikelihood().to(dev)
    model = GP(lik).to(dev)
    model.train(), lik.train()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    for _ in range(steps):
        opt.zero_grad()
        (-mll(model(Xtr), ytr)).backward()
        opt.step()
    torch.cuda.synchronize()
    fit_s = time.perf_counter() - t0
    model.eval(), lik.eval()
    with torch.no_grad(), gpytorch.settings.fast_pred_var():
        pred = lik(model(torch.as_tensor(Xt, dtype=torch.float32, device=dev)))
        mean = pred.mean.cpu().double().numpy() * ys + ym
        std = pred.variance.sqrt().cpu().double().numpy() * ys
    return dict(model="gpytorch_exact", n=n, fit_s=fit_s, nlpd=nlpd(yt, mean, std),
                peak_gb=torch.cuda.max_memory_allocated() / 2**30)


def _svgp(n):
    import torch
    from bench_dbk import run_svgp
    torch.cuda.reset_peak_memory_stats()
    out = run_svgp(n, "cuda")
    return dict(model="gpytorch_svgp", n=n, fit_s=out["fit_s"], nlpd=out["nlpd"],
                peak_gb=torch.cuda.max_memory_allocated() / 2**30)


def child(kind, n):
    if kind == "gpytorch_exact":
        return _gpytorch_exact(n)
    if kind == "gpytorch_svgp":
        return _svgp(n)
    return _ours(kind, n)


def plan(sizes):
    for n in sizes:
        kinds = ["stp_ard", "mixed_nystrom", "dbk_exact", "dbk_svi"]
        kinds += ["mixed_exact"] if n <= 20_000 else []
        kinds += ["gpytorch_exact"] if n <= 50_000 else ["gpytorch_svgp"]
        if n >= 10**6:
            kinds = ["mixed_nystrom", "dbk_svi", "gpytorch_svgp"]
        for kind in kinds:
            yield kind, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 20_000, 50_000, 10**6])
    ap.add_argument("--child")
    ap.add_argument("--n", type=int, default=0)
    args = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("bench_gpu: CUDA is not available on this machine; nothing to measure.")
        return 0
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.n)))
        return 0
    rows = []
    for kind, n in plan(args.sizes):
        out = subprocess.run([sys.executable, __file__, "--child", kind, "--n", str(n)],
                             capture_output=True, text=True, check=False)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
        row = (json.loads(lines[-1][7:]) if lines else
               dict(model=kind, n=n, error=(out.stderr.strip().splitlines() or ["?"])[-1]))
        rows.append(row)
        print(row, flush=True)
    report = dict(date=time.strftime("%Y-%m-%d"), device=torch.cuda.get_device_name(0),
                  torch=torch.__version__, rows=rows)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_gpu.json").write_text(json.dumps(report, indent=2))
    lines = [f"# GPU benchmark ({report['date']}, {report['device']}, torch {report['torch']})",
             "", "| model | n | fit s | NLPD | peak GB | 3 n^2 x 8 B (GB) |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['n']:,} | error: {r['error']} | | | |")
            continue
        lines.append(f"| {r['model']} | {r['n']:,} | {r['fit_s']:.1f} | {r['nlpd']:.3f} | "
                     f"{r['peak_gb']:.2f} | {3 * r['n'] ** 2 * 8 / 2**30:.1f} |")
    (RESULTS / "bench_gpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
