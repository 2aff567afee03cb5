"""Benchmark: DBKRegressor scaling, and accuracy/time against GPyTorch's SVGP and sklearn's GP.

One run measures, each model in a fresh subprocess (peak resident memory above the baseline
after imports):

* ``scale``: seconds per SVI epoch (batch 256, d = 8, r = 64, MLP 128-128) and peak memory
  for n = 10^4, 10^5, 10^6, with the log-log slopes; a 10^6-row SVI fit of 2 epochs (time,
  memory); and spec 002 §7.17: one exact log-likelihood + backward pass for
  n = 2k, 8k, 32k, 128k (r = 32, a 16-unit network), its slope against the dense Cholesky's 3.
* ``peers``: at n = 10^5, ``DBKRegressor(inference="svi")`` (40 epochs at most; also with
  the variance correction forced on) against GPyTorch's SVGP (256 inducing points, ARD RBF,
  20 epochs, the maintained variational GP), and at n = 4,000 ``DBKRegressor()`` (exact,
  defaults) against sklearn's ``GaussianProcessRegressor`` (ARD RBF + White), on the same
  synthetic data as ``bench_student_t.py``: test NLPD, RMSE, fit time.

Usage::

    python benchmarks/bench_dbk.py                 # everything (about 25 min on 2 cores)
    python benchmarks/bench_dbk.py --parts scale
    python benchmarks/bench_dbk.py --device cuda   # the same tables on a GPU

Writes ``benchmarks/results/bench_dbk.{json,md}`` (``bench_dbk_cuda.*`` on CUDA). Goals
(issue 8): epoch-time slope <= 1.1 and memory linear in n; at n = 10^5 DBK (svi) at least as
good in NLPD as SVGP in less time; at n = 4,000 NLPD within 0.05 nats of sklearn's GP.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _harness import RESULTS, gaussian_scores, make_d8, peak_mb  # noqa: E402 (adds the checkout)
from baselines import SVGPRegressor, sklearn_gpr  # noqa: E402

N_TEST = 2000
D = 8
#: The DBK configurations measured (the svi one is also used for the scale runs).
DBK_EXACT = dict()  # the defaults
DBK_SVI = dict(inference="svi", batch_size=256, max_iter=40, n_iter_no_change=20)
#: Validation interval (epochs) of the svi runs: ``skbnngp._dbk.SCHEDULE`` patched in run_dbk.
DBK_SVI_VALIDATION_INTERVAL = 2


def make_data(n, seed=0):
    """``_harness.make_d8`` with 2,000 test rows (as ``bench_gpu.py``)."""
    return make_d8(n, N_TEST, seed)


def scores(y, mean, std):
    return gaussian_scores(y, mean, std, what=("nlpd", "rmse"))


# --------------------------------------------------------------------------- runs
def run_epoch_time(n, device):
    """Seconds per SVI epoch (median of 3 after one warm-up epoch) and peak memory."""
    import torch  # noqa: F401
    from skbnngp import DBKRegressor
    X, y, _, _ = make_data(n)
    base = peak_mb()
    reg = DBKRegressor(n_basis=64, inference="svi", batch_size=256, early_stopping=False,
                       device=device, random_state=0)
    reg.partial_fit(X, y)  # warm-up epoch (initialises)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        reg.partial_fit(X, y)
        times.append(time.perf_counter() - t0)
    return dict(n=n, epoch_s=float(np.median(times)), peak_mb=peak_mb() - base)


def run_million(device, epochs=2):
    import warnings
    from skbnngp import DBKRegressor
    X, y, Xt, yt = make_data(1_000_000)
    base = peak_mb()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = DBKRegressor(n_basis=64, inference="svi", batch_size=256, max_iter=epochs,
                           early_stopping=False, device=device, random_state=0).fit(X, y)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    mean, std = reg.predict(Xt, return_std=True)
    return dict(n=1_000_000, epochs=epochs, fit_s=fit_s, predict_s=time.perf_counter() - t0,
                peak_mb=peak_mb() - base, **scores(yt, mean, std))


def run_loglik_time(n, device):
    """Spec §7.17: one exact log-likelihood + backward pass, fixed r = 32, a tiny network."""
    import torch
    from skbnngp._backend import blr_log_evidence, build_mlp, resolve_device
    dev = resolve_device(device)
    net = build_mlp(D, (16,), 32, device=dev)
    X = torch.randn(n, D, dtype=torch.float64, device=dev)
    y = torch.randn(n, 1, dtype=torch.float64, device=dev)
    times = []
    for rep in range(6):
        t0 = time.perf_counter()
        loss = -blr_log_evidence(net(X), y, torch.tensor(0.1, dtype=torch.float64,
                                                         device=dev))
        loss.backward()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if rep:
            times.append(time.perf_counter() - t0)
    return dict(n=n, seconds=float(np.median(times)))


def run_dbk(n, device, exact, **extra):
    import warnings
    from unittest import mock

    import skbnngp._dbk as dbk_module
    from skbnngp import DBKRegressor
    X, y, Xt, yt = make_data(n)
    base = peak_mb()
    max_iter, _, patience = dbk_module.SCHEDULE["svi"]
    schedule = dict(dbk_module.SCHEDULE, svi=(max_iter, DBK_SVI_VALIDATION_INTERVAL, patience))
    t0 = time.perf_counter()
    with warnings.catch_warnings(), mock.patch.object(dbk_module, "SCHEDULE", schedule):
        warnings.simplefilter("ignore")
        reg = DBKRegressor(device=device, random_state=0,
                           **dict(DBK_EXACT if exact else DBK_SVI, **extra)).fit(X, y)
    fit_s = time.perf_counter() - t0
    mean, std = reg.predict(Xt, return_std=True)
    label = "DBK (exact)" if exact else "DBK (svi)"
    if extra:
        label += " " + ", ".join(f"{k}={v}" for k, v in extra.items())
    return dict(model=label, n=n, fit_s=fit_s, **scores(yt, mean, std),
                peak_mb=peak_mb() - base, epochs=reg.n_iter_, best=reg.best_iteration_)


def run_svgp(n, device, epochs=20, m=256):
    """``baselines.SVGPRegressor``: 256 inducing points, batch 256, ``epochs`` epochs."""
    import torch

    X, y, Xt, yt = make_data(n)
    dev = torch.device(device if device != "auto" else
                       ("cuda" if torch.cuda.is_available() else "cpu"))
    base = peak_mb()
    t0 = time.perf_counter()
    svgp = SVGPRegressor(n_inducing=m, batch_size=256, n_steps=None, max_epochs=epochs,
                         device=dev).fit(X, y)
    fit_s = time.perf_counter() - t0
    mean, std = svgp.predict(Xt, return_std=True)
    return dict(model="GPyTorch SVGP (256)", n=n, fit_s=fit_s, **scores(yt, mean, std),
                peak_mb=peak_mb() - base, epochs=epochs)


def run_sklearn(n, device):
    X, y, Xt, yt = make_data(n)
    base = peak_mb()
    t0 = time.perf_counter()
    gpr = sklearn_gpr(D, random_state=0).fit(X, y)
    fit_s = time.perf_counter() - t0
    mean, std = gpr.predict(Xt, return_std=True)
    return dict(model="sklearn GPR (ARD RBF + White)", n=n, fit_s=fit_s,
                **scores(yt, mean, std), peak_mb=peak_mb() - base)


RUNNERS = {"epoch": run_epoch_time, "million": lambda n, dev: run_million(dev),
           "loglik": run_loglik_time, "dbk_exact": lambda n, dev: run_dbk(n, dev, True),
           "dbk_svi": lambda n, dev: run_dbk(n, dev, False),
           "dbk_svi_corr": lambda n, dev: run_dbk(n, dev, False, variance_correction=True),
           "svgp": run_svgp,
           "sklearn": run_sklearn}


#: Peer runs and their training-set sizes.
PEERS = {"dbk_svi": 100_000, "dbk_svi_corr": 100_000, "svgp": 100_000, "dbk_exact": 4000,
         "sklearn": 4000}


def spawn(kind, n, device):
    out = subprocess.run([sys.executable, __file__, "--child", kind, "--n", str(n),
                          "--device", device], capture_output=True, text=True, check=False)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def slope(ns, ts):
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="+", default=["scale", "peers"],
                    choices=["scale", "million", "peers"],
                    help="scale includes the 10^6-row fit; 'million' runs that alone")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--peers", nargs="+", default=list(PEERS), choices=list(PEERS),
                    help="which peer runs to (re)do; others keep their saved results")
    ap.add_argument("--child")
    ap.add_argument("--n", type=int, default=0)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(RUNNERS[args.child](args.n, args.device)))
        return
    import sklearn
    import torch
    report = {"date": time.strftime("%Y-%m-%d"), "device": args.device,
              "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, "
                         f"torch {torch.__version__}, scikit-learn {sklearn.__version__}",
              "threads": torch.get_num_threads()}
    if "million" in args.parts:
        report["million"] = spawn("million", 0, args.device)
        print("million", report["million"], flush=True)
    if "scale" in args.parts:
        ep = [spawn("epoch", n, args.device) for n in (10_000, 100_000, 1_000_000)]
        print("epoch times", ep, flush=True)
        ll = [spawn("loglik", n, args.device) for n in (2000, 8000, 32000, 128000)]
        print("loglik", ll, flush=True)
        report["epoch"] = ep
        report["epoch_slope"] = slope([e["n"] for e in ep], [e["epoch_s"] for e in ep])
        report["memory_slope"] = slope([e["n"] for e in ep],
                                       [max(e["peak_mb"], 1.0) for e in ep])
        report["loglik"] = ll
        report["loglik_slope"] = slope([e["n"] for e in ll], [e["seconds"] for e in ll])
        report["million"] = spawn("million", 0, args.device)
        print("million", report["million"], flush=True)
    if "peers" in args.parts:
        path = RESULTS / (("bench_dbk" if args.device == "cpu" else
                           f"bench_dbk_{args.device.split(':')[0]}") + ".json")
        saved = {p["kind"]: p for p in (json.loads(path.read_text()).get("peers", [])
                                        if path.exists() else [])}
        for kind in args.peers:
            saved[kind] = dict(spawn(kind, PEERS[kind], args.device), kind=kind,
                               date=report["date"])
            print(saved[kind], flush=True)
        report["peers"] = [saved[k] for k in PEERS if k in saved]
    RESULTS.mkdir(exist_ok=True)
    stem = "bench_dbk" if args.device == "cpu" else f"bench_dbk_{args.device.split(':')[0]}"
    old = {}
    path = RESULTS / f"{stem}.json"
    if path.exists():
        old = json.loads(path.read_text())
    old.update(report)
    path.write_text(json.dumps(old, indent=2))
    (RESULTS / f"{stem}.md").write_text(markdown(old))
    print(markdown(old))


def markdown(r):
    lines = [f"# DBKRegressor benchmark (last run {r['date']}, device {r['device']})", "",
             f"Machine: {r['machine']}, {r['threads']} threads. Each model ran in its own "
             "process; memory is the peak resident growth after imports. A run of some parts "
             "or peers keeps the others' earlier results (the peers' last column dates each "
             "row).", ""]
    if "epoch" in r:
        lines += ["## Scale (SVI, batch 256, d = 8, r = 64, MLP 128-128)", "",
                  "| n | s / epoch | peak MB |", "|---:|---:|---:|"]
        lines += [f"| {e['n']:,} | {e.get('epoch_s', float('nan')):.2f} | "
                  f"{e.get('peak_mb', float('nan')):.0f} |" for e in r["epoch"]]
        lines += ["", f"Log-log slope of epoch time: **{r['epoch_slope']:.2f}** (goal <= 1.1); "
                  f"of peak memory: {r['memory_slope']:.2f}.", "",
                  "Spec 002 §7.17, one exact log-likelihood + backward pass (r = 32, 16 units):",
                  "", "| n | seconds |", "|---:|---:|"]
        lines += [f"| {e['n']:,} | {e.get('seconds', float('nan')):.4f} |" for e in r["loglik"]]
        m = r["million"]
        lines += ["", f"Slope **{r['loglik_slope']:.2f}** (goal < 1.3; a dense Cholesky: 3).",
                  "", f"10^6 rows, SVI, {m.get('epochs')} epochs: fit {m.get('fit_s', 0):.0f} s, "
                  f"predict 2,000 rows {m.get('predict_s', 0):.2f} s, peak "
                  f"+{m.get('peak_mb', 0):.0f} MB, test NLPD {m.get('nlpd', 0):.3f}, "
                  f"RMSE {m.get('rmse', 0):.3f}.", ""]
    if "peers" in r:
        lines += ["## Peers (same data, test set of 2,000 rows)", "",
                  "| model | n | fit s | NLPD | RMSE | peak MB | run |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for p in r["peers"]:
            # a row re-run alone (--peers) keeps its own date; older rows predate the field
            when = p.get("date", "before 2026-11-29")
            if "error" in p:
                lines.append(f"| {p['kind']} | | error: {p['error']} | | | | {when} |")
                continue
            lines.append(f"| {p['model']} | {p['n']:,} | {p['fit_s']:.1f} | {p['nlpd']:.3f} | "
                         f"{p['rmse']:.3f} | {p['peak_mb']:.0f} | {when} |")
        lines += ["", f"DBK (exact): `{DBK_EXACT}`; DBK (svi): `{DBK_SVI}`, validated every "
                  f"{DBK_SVI_VALIDATION_INTERVAL} epochs.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
