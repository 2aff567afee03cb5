"""Fit times of the exact GP engines on a GPU with the tiled adjoint's old and new tile rule.

Before 2026-11-26 (stop 39) a tile of the tiled adjoint held an eighth of the training rows
(at least 256, at most ``ADJOINT_TILE``); now it is as large as the device's row-block budget
allows (:func:`skbnngp._backend._gp._adjoint_tile`). This script fits bench_gpu's rows with
both rules on the same card, alternating, each fit in its own process (``bench_gpu.child``,
the device warmed before the clock starts), and writes the rows, with the engine's stages,
to ``--out`` (JSON). GPyTorch's exact GP runs at the same sizes for the ratio.

Usage (on a CUDA machine): python benchmarks/gpu/compare_adjoint_tile.py --out /tmp/tile.json
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
sys.path.insert(0, {bench!r})
import skbnngp._backend._gp as g
if {old!r}:
    g._adjoint_tile = lambda n, block: min(g.ADJOINT_TILE, max(256, n // 8))
import bench_gpu
row = bench_gpu.child({kind!r}, {n!r}, {device!r})
row["tile_rule"] = "old" if {old!r} else "new"
print("RESULT " + json.dumps(row))
"""


def run(kind, n, old, device, timeout):
    code = CHILD.format(bench=str(ROOT / "benchmarks"), old=old, kind=kind, n=n,
                        device=device)
    t0 = time.perf_counter()
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"model": kind, "n": n, "tile_rule": "old" if old else "new",
                "error": f"timeout after {timeout} s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        return {"model": kind, "n": n, "tile_rule": "old" if old else "new",
                "error": (out.stderr.strip().splitlines() or ["?"])[-1][:300]}
    row = json.loads(lines[-1][7:])
    row["wall_s"] = time.perf_counter() - t0
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default="adjoint_tile.json")
    ap.add_argument("--timeout", type=int, default=90)
    ap.add_argument("--rows", nargs="+", default=["mixed_exact:5000", "stp_ard:5000",
                                                 "mixed_exact:20000", "stp_ard:20000"])
    args = ap.parse_args()
    rows = []
    for spec in args.rows:
        kind, n = spec.split(":")
        for old in (True, False):
            rows.append(run(kind, int(n), old, args.device, args.timeout))
            r = rows[-1]
            print(f"{kind:12s} {n:>6s} {r['tile_rule']}: "
                  + (r["error"] if "error" in r else
                     f"fit {r['fit_s']:.2f} s, NLPD {r['nlpd']:.4f}, peak {r['peak_gb']:.2f} GB"),
                  flush=True)
            Path(args.out).write_text(json.dumps(rows, indent=1))
    for n in sorted({int(s.split(":")[1]) for s in args.rows}):
        rows.append(run("gpytorch_exact", n, False, args.device, args.timeout))
        r = rows[-1]
        print(f"gpytorch_exact {n}: " + (r.get("error") or f"fit {r['fit_s']:.2f} s, "
                                         f"NLPD {r['nlpd']:.4f}"), flush=True)
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
