"""Where a Student-t process fit spends its time on a device, beyond the engine's stages.

Fits ``StudentTProcessRegressor(ard=True)`` on bench_gpu's data at the given sizes, in one
process, with each listed function wrapped in a device-synchronised timer (so asynchronous
work is charged to the function that launched it), and prints a cProfile summary of each fit.
Usage: python benchmarks/gpu/profile_stp_gpu.py [--device cuda] [--sizes 5000 5000 20000 50000]
"""
import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 5000, 20000, 50000])
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    import bench_gpu
    import torch

    import skbnngp._student_t as st
    from skbnngp import StudentTProcessRegressor
    from skbnngp._backend import _gp
    dev = torch.device(args.device)
    times = {}

    def wrap(owner, name):
        f = getattr(owner, name)

        def timed(*a, **k):
            bench_gpu._sync(torch, dev)
            t0 = time.perf_counter()
            out = f(*a, **k)
            bench_gpu._sync(torch, dev)
            e = times.setdefault(name, [0, 0.0])
            e[0] += 1
            e[1] += time.perf_counter() - t0
            return out
        setattr(owner, name, timed)

    for owner, name in [(st, "to_numpy"), (st, "fit_hyperparameters"), (st, "validate_data"),
                        (st, "as_tensor"),
                        (StudentTProcessRegressor, "_publish"),
                        (StudentTProcessRegressor, "_factorise"),
                        (StudentTProcessRegressor, "_calibrate_from_loo"),
                        (StudentTProcessRegressor, "_make_prior"),
                        (_gp.ExactGP, "value_and_grad"), (_gp.ExactGP, "state"),
                        (_gp.ExactGP, "loo"), (_gp.ExactGP, "subset")]:
        wrap(owner, name)
    bench_gpu._warm(torch, dev)
    for n in args.sizes:
        X, y, Xt, _ = bench_gpu._data(n, 2000)
        times.clear()
        prof = cProfile.Profile()
        bench_gpu._sync(torch, dev)
        t0 = time.perf_counter()
        prof.enable()
        reg = StudentTProcessRegressor(ard=True, device=args.device, random_state=0).fit(X, y)
        bench_gpu._sync(torch, dev)
        prof.disable()
        fit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        reg.predict(Xt, return_std=True)
        print(f"\n=== n={n}: fit {fit_s:.2f} s, predict {time.perf_counter() - t0:.2f} s, "
              f"n_iter_ {reg.n_iter_}")
        for k, (c, t) in sorted(times.items(), key=lambda kv: -kv[1][1]):
            print(f"  {k:24s} {c:4d} x {t:8.2f} s")
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(args.top)
        print("\n".join(s.getvalue().splitlines()[6:6 + args.top + 4]))
        del reg
        if dev.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
