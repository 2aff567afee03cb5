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

Each model runs in its own process (so one out-of-memory error or hang costs one row), under
``--timeout`` seconds; ``--budget`` ends the run after that many seconds (the row running
then is cut, later rows are listed as not run), so a run on a lent GPU machine with a fixed
allowance ends in time with what it measured.
The report is rewritten after every row, so a run that is killed still leaves its rows.
Each row warms the device up (its context, BLAS and solver libraries) before the clock
starts, ours and GPyTorch's alike. For the package's exact models the report also says
where the fit time went: each call of the exact GP engine's stages (gradient evaluations,
factorisations, the leave-one-out pass) by row count, timed with the device synchronised,
with each stage's peak memory on CUDA. Peak memory is ``torch.cuda.max_memory_allocated`` on CUDA (on the CPU, the child's peak
resident set, which includes the interpreter and is no device figure).

Without CUDA the script says so and exits with status 0 (nothing to measure), unless
``--device cpu`` asks for the CPU smoke run that checks the script itself (the tests run it
at a few hundred rows).

Usage::

    python benchmarks/bench_gpu.py                              # all sizes, on CUDA
    python benchmarks/bench_gpu.py --sizes 20000 --budget 300   # one size, 5 minutes at most
    python benchmarks/bench_gpu.py --device cpu --sizes 300 --models stp_ard dbk_exact \\
        --n-test 200 --out /tmp/gpu_smoke                       # smoke run without a GPU

Writes ``benchmarks/results/bench_gpu.{json,md}`` (or ``--out``). Targets (issue 11, one
H100): STP at n = 50,000 under 60 s, at n = 20,000 faster than GPyTorch's exact GP with a
better NLPD, peak device memory at most 3 n^2 x 8 bytes; the report checks each one it has
the rows for.
"""

from __future__ import annotations

import argparse
import json
import resource
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

#: Every row kind the plan can hold (``--models`` picks among them).
KINDS = ("stp_ard", "mixed_exact", "mixed_nystrom", "dbk_exact", "dbk_svi", "gpytorch_exact",
         "gpytorch_svgp")


def _data(n, n_test):
    from bench_dbk import make_data
    X, y, Xt, yt = make_data(n)
    return X, y, Xt[:n_test], yt[:n_test]


def _sync(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _warm(torch, dev):
    """Start the device's context and its BLAS / solver libraries before the clock starts
    (done for every row, ours and GPyTorch's alike, so no row pays the one-off start-up).
    That includes torch's own first optimizer: ``torch.optim.Optimizer.__init__`` imports
    ``torch._dynamo`` (and SymPy) once per process, which took 3-6 s on the H200 machine and
    fell inside both libraries' fits (both use ``torch.optim``)."""
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    a = torch.eye(64, dtype=torch.float64, device=dev) * 2.0
    torch.linalg.cholesky(a @ a)
    torch.linalg.solve_triangular(a, a, upper=False)
    (a.float() @ a.float()).sum().item()
    _sync(torch, dev)


def _reset_peak(torch, dev):
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)


def _peak_gb(torch, dev):
    if dev.type == "cuda":
        return torch.cuda.max_memory_allocated(dev) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux


class _Stages:
    """Time (and on CUDA the peak memory of) each call of the exact GP engine's stages
    during a fit, by stage and row count: where a fit's time goes. The overall peak is kept
    as the largest of the stages' peaks and the peaks between them."""

    METHODS = ("value_and_grad", "state", "loo")

    def __init__(self, torch, dev):
        self.torch, self.dev, self.cuda = torch, dev, dev.type == "cuda"
        self.table, self.peak, self._saved, self._stack = {}, 0, [], []

    def _wrap(self, name, f):
        torch, prof = self.torch, self

        def timed(eng, *a, **k):
            _sync(torch, prof.dev)
            if prof.cuda:
                prof.peak = max(prof.peak, torch.cuda.max_memory_allocated(prof.dev))
                torch.cuda.reset_peak_memory_stats(prof.dev)
            # a stage called inside another (the factorisation inside a gradient) is listed
            # under it, and counted in its time only once
            key = "/".join([*prof._stack, f"{name} n={eng.n}"])
            prof._stack.append(f"{name} n={eng.n}")
            t0 = time.perf_counter()
            try:
                out = f(eng, *a, **k)
            finally:
                prof._stack.pop()
            _sync(torch, prof.dev)
            entry = prof.table.setdefault(key, [0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - t0
            if prof.cuda:
                stage_peak = torch.cuda.max_memory_allocated(prof.dev)
                entry[2] = max(entry[2], stage_peak / 2**30)
                prof.peak = max(prof.peak, stage_peak)
            return out
        return timed

    def __enter__(self):
        from skbnngp._backend._gp import ExactGP
        for m in self.METHODS:
            f = ExactGP.__dict__[m]
            self._saved.append((m, f))
            setattr(ExactGP, m, self._wrap(m, f))
        return self

    def __exit__(self, *exc):
        from skbnngp._backend._gp import ExactGP
        for m, f in self._saved:
            setattr(ExactGP, m, f)
        if self.cuda:
            self.peak = max(self.peak, self.torch.cuda.max_memory_allocated(self.dev))

    def rows(self):
        return {k: {"calls": c, "seconds": round(t, 3),
                    "peak_gb": round(g, 3) if self.cuda else None}
                for k, (c, t, g) in self.table.items()}


def _ours(name, n, device, n_test):
    import torch

    from skbnngp import DBKRegressor, MixedActivationGPRegressor, StudentTProcessRegressor
    models = {
        "stp_ard": lambda: StudentTProcessRegressor(ard=True, device=device, random_state=0),
        "mixed_exact": lambda: MixedActivationGPRegressor(approx="exact", device=device,
                                                          random_state=0),
        "mixed_nystrom": lambda: MixedActivationGPRegressor(device=device, random_state=0),
        "dbk_exact": lambda: DBKRegressor(device=device, random_state=0),
        "dbk_svi": lambda: DBKRegressor(inference="svi", device=device, random_state=0),
    }
    dev = torch.device(device)
    X, y, Xt, yt = _data(n, n_test)
    _warm(torch, dev)
    _reset_peak(torch, dev)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught, _Stages(torch, dev) as stages:
        warnings.simplefilter("always")
        reg = models[name]().fit(X, y)
        _sync(torch, dev)
    fit_s = time.perf_counter() - t0
    warns = sorted({f"{w.category.__name__}: {str(w.message)[:120]}" for w in caught})
    t0 = time.perf_counter()
    dist = reg.predict_dist(Xt)
    predict_s = time.perf_counter() - t0
    mean = dist.mean()
    peak = (max(stages.peak, torch.cuda.max_memory_allocated(dev)) / 2**30
            if dev.type == "cuda" else _peak_gb(torch, dev))
    return dict(model=name, n=n, fit_s=fit_s, predict_s=predict_s,
                nlpd=float(-np.mean(dist.logpdf(yt))),
                rmse=float(np.sqrt(np.mean((mean - yt) ** 2))),
                peak_gb=peak, device=str(reg.device_), warnings=warns,
                stages=stages.rows())


def _gpytorch_exact(n, device, n_test, steps=50):
    import torch

    from _harness import gaussian_scores
    from baselines import GPyTorchExactGPRegressor
    X, y, Xt, yt = _data(n, n_test)
    dev = torch.device(device)
    _warm(torch, dev)
    _reset_peak(torch, dev)
    t0 = time.perf_counter()
    model = GPyTorchExactGPRegressor(n_steps=steps, dtype="float32", fast_pred_var=True,
                                     device=dev).fit(X, y)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    mean, std = model.predict(Xt, return_std=True)
    predict_s = time.perf_counter() - t0
    return dict(model="gpytorch_exact", n=n, fit_s=fit_s, predict_s=predict_s,
                **gaussian_scores(yt, mean, std, what=("nlpd", "rmse")),
                peak_gb=_peak_gb(torch, dev), device=str(dev), warnings=[])


def _svgp(n, device, n_test):
    import torch
    from bench_dbk import run_svgp
    dev = torch.device(device)
    _warm(torch, dev)
    _reset_peak(torch, dev)
    out = run_svgp(n, device)  # scores on bench_dbk's 2,000 test rows
    return dict(model="gpytorch_svgp", n=n, fit_s=out["fit_s"], predict_s=None,
                nlpd=out["nlpd"], rmse=out["rmse"], peak_gb=_peak_gb(torch, dev),
                device=str(dev), warnings=[])


def child(kind, n, device="cuda", n_test=2000):
    """One row, measured in this process."""
    if kind == "gpytorch_exact":
        return _gpytorch_exact(n, device, n_test)
    if kind == "gpytorch_svgp":
        return _svgp(n, device, n_test)
    return _ours(kind, n, device, n_test)


def plan(sizes, models=None):
    """``(kind, n)`` for every row, smallest ``n`` first."""
    for n in sorted(sizes):
        kinds = ["stp_ard", "mixed_nystrom", "dbk_exact", "dbk_svi"]
        kinds += ["mixed_exact"] if n <= 20_000 else []
        kinds += ["gpytorch_exact"] if n <= 50_000 else ["gpytorch_svgp"]
        if n >= 10**6:
            kinds = ["mixed_nystrom", "dbk_svi", "gpytorch_svgp"]
        for kind in kinds:
            if models is None or kind in models:
                yield kind, n


def _run_child(kind, n, args, timeout):
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--n", str(n),
           "--device", args.device, "--n-test", str(args.n_test)]
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=False,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(model=kind, n=n, error=f"timeout after {timeout:.1f} s",
                    wall_s=time.perf_counter() - t0)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if lines:
        row = json.loads(lines[-1][7:])
    else:
        tail = [ln for ln in out.stderr.strip().splitlines() if ln.strip()] or ["?"]
        row = dict(model=kind, n=n, error=f"exit {out.returncode}: {tail[-1][:200]}")
    row["wall_s"] = time.perf_counter() - t0
    return row


def _row_of(rows, model, n):
    for r in rows:
        if r["model"] == model and r["n"] == n and "error" not in r:
            return r
    return None


def targets(rows):
    """The issue's targets that ``rows`` can decide: (text, verdict) pairs."""
    out = []
    stp50 = _row_of(rows, "stp_ard", 50_000)
    if stp50 is not None:
        out.append(("STP (ARD) at n = 50,000 fits in under 60 s",
                    f"{'yes' if stp50['fit_s'] < 60 else 'no'} ({stp50['fit_s']:.1f} s)"))
    stp20, gp20 = _row_of(rows, "stp_ard", 20_000), _row_of(rows, "gpytorch_exact", 20_000)
    if stp20 is not None and gp20 is not None:
        ok = stp20["fit_s"] < gp20["fit_s"] and stp20["nlpd"] < gp20["nlpd"]
        out.append(("STP at n = 20,000 faster than GPyTorch's exact GP with a better NLPD",
                    f"{'yes' if ok else 'no'} (fit {stp20['fit_s']:.1f} s vs "
                    f"{gp20['fit_s']:.1f} s, ratio {stp20['fit_s'] / gp20['fit_s']:.2f}; "
                    f"NLPD {stp20['nlpd']:.3f} vs {gp20['nlpd']:.3f})"))
    for r in rows:
        if "error" in r or r["model"] not in ("stp_ard", "mixed_exact", "dbk_exact") \
                or not str(r.get("device", "")).startswith("cuda"):
            continue
        limit = 3 * r["n"] ** 2 * 8 / 2**30
        out.append((f"{r['model']} at n = {r['n']:,}: peak device memory <= 3 n^2 x 8 B "
                    f"({limit:.1f} GB)",
                    f"{'yes' if r['peak_gb'] <= limit else 'no'} ({r['peak_gb']:.2f} GB)"))
    return out


def write_report(report, stem):
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    Path(str(stem) + ".json").write_text(json.dumps(report, indent=2))
    on_cuda = report["device"].startswith("cuda")
    mem = "peak device GB" if on_cuda else "peak RSS GB (CPU smoke run)"
    lines = [f"# GPU benchmark ({report['date']}, {report['device_name']}, "
             f"torch {report['torch']})", "",
             f"Command: `{report['command']}`; {report['elapsed_s']:.0f} s in all.", "",
             f"| model | n | fit s | predict s | NLPD | RMSE | {mem} | 3 n^2 x 8 B (GB) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['n']:,} | error: {r['error']} | | | | | |")
            continue
        pred = "" if r.get("predict_s") is None else f"{r['predict_s']:.2f}"
        lines.append(f"| {r['model']} | {r['n']:,} | {r['fit_s']:.1f} | {pred} | "
                     f"{r['nlpd']:.3f} | {r['rmse']:.4f} | {r['peak_gb']:.2f} | "
                     f"{3 * r['n'] ** 2 * 8 / 2**30:.1f} |")
    if report.get("skipped"):
        lines += ["", "Not run (the --budget was spent): " + ", ".join(
            f"{k} at n = {n:,}" for k, n in report["skipped"]) + "."]
    checks = targets(report["rows"])
    if checks:
        lines += ["", "## Targets", ""] + [f"- {t}: {v}" for t, v in checks]
    staged = [r for r in report["rows"] if r.get("stages")]
    if staged:
        lines += ["", "## Where the fit time went (the exact GP engine's stages)", ""]
        for r in staged:
            parts = [f"{k}: {v['calls']} x, {v['seconds']:.2f} s"
                     + (f", peak {v['peak_gb']:.2f} GB" if v.get("peak_gb") is not None else "")
                     for k, v in r["stages"].items()]
            inside = sum(v["seconds"] for k, v in r["stages"].items() if "/" not in k)
            lines.append(f"- {r['model']} at n = {r['n']:,} (fit {r['fit_s']:.1f} s, "
                         f"{r['fit_s'] - inside:.1f} s outside these): " + "; ".join(parts))
    warned = [(r["model"], r["n"], w) for r in report["rows"] for w in r.get("warnings") or []]
    if warned:
        lines += ["", "## Warnings raised by the fits", ""]
        lines += [f"- {m} at n = {n:,}: {w}" for m, n, w in warned]
    Path(str(stem) + ".md").write_text("\n".join(lines) + "\n")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 20_000, 50_000, 10**6])
    ap.add_argument("--models", nargs="+", choices=KINDS, default=None,
                    help="only these row kinds (default: the whole plan)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: a smoke run of the script itself, not a GPU figure")
    ap.add_argument("--n-test", type=int, default=2000)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per row")
    ap.add_argument("--budget", type=float, default=None,
                    help="end the run after this many seconds (a running row is cut "
                         "at the budget; later rows are listed as not run)")
    ap.add_argument("--out", default=str(RESULTS / "bench_gpu"),
                    help="report stem: writes STEM.json and STEM.md")
    ap.add_argument("--child")
    ap.add_argument("--n", type=int, default=0)
    args = ap.parse_args(argv)
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_gpu: CUDA is not available on this machine; nothing to measure "
              "(--device cpu runs the smoke test of the script).")
        return None
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.n, args.device, args.n_test)),
              flush=True)
        return None
    t_start = time.perf_counter()
    report = dict(date=time.strftime("%Y-%m-%d %H:%M"), device=args.device,
                  device_name=(torch.cuda.get_device_name(0) if args.device == "cuda"
                               else "CPU"),
                  torch=torch.__version__, command=" ".join(["bench_gpu.py", *(argv or
                                                                              sys.argv[1:])]),
                  elapsed_s=0.0, rows=[], skipped=[])
    for kind, n in plan(args.sizes, args.models):
        elapsed = time.perf_counter() - t_start
        timeout = args.timeout
        if args.budget is not None:
            if elapsed >= args.budget:
                report["skipped"].append((kind, n))
                continue
            timeout = min(timeout, args.budget - elapsed)  # the budget is a hard end
        row = _run_child(kind, n, args, timeout)
        report["rows"].append(row)
        report["elapsed_s"] = time.perf_counter() - t_start
        write_report(report, args.out)
        print(json.dumps(row), flush=True)
    report["elapsed_s"] = time.perf_counter() - t_start
    print(write_report(report, args.out))
    return report


if __name__ == "__main__":
    main()
    sys.exit(0)
