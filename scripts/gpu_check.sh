#!/usr/bin/env bash
# The prepared check for a lent GPU machine (CUDA torch already installed, no network):
# installs the package without touching torch, runs the test suite on CUDA, then
# benchmarks/bench_gpu.py within a time budget. Everything lands in $OUT (default ./gpu_out).
# Usage: bash scripts/gpu_check.sh [test seconds, default 240] [bench seconds, default 240]
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT="${OUT:-gpu_out}"
mkdir -p "$OUT"
T_TESTS="${1:-240}"
T_BENCH="${2:-240}"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'available', torch.cuda.is_available())"
} | tee "$OUT/device.txt"
"$PY" -m pip install --quiet --no-deps --no-build-isolation -e . 2>&1 | tail -3
for mod in pytest hypothesis gpytorch; do
  "$PY" -c "import $mod" 2>/dev/null || echo "missing: $mod" | tee -a "$OUT/device.txt"
done
# the CUDA-against-CPU tests first (they skip on a CPU machine), then the whole suite, whose
# device="auto" estimators now run on the GPU
timeout 120 "$PY" -m pytest -q -p no:cacheprovider -k cuda tests > "$OUT/tests_cuda.log" 2>&1
echo "cuda tests rc=$?" | tee -a "$OUT/device.txt"
tail -3 "$OUT/tests_cuda.log"
timeout "$T_TESTS" "$PY" -m pytest -q -p no:cacheprovider tests > "$OUT/tests_all.log" 2>&1
echo "all tests rc=$? (124: cut at $T_TESTS s)" | tee -a "$OUT/device.txt"
tail -5 "$OUT/tests_all.log"
# each benchmark run ends at its budget (the row running then is cut). First the
# rows that decide issue 11's targets (STP and GPyTorch's exact GP at 20,000 rows, STP at
# 50,000; half the bench time), then the whole plan at 5,000 rows, then the package's other
# models at 20,000 (a quarter each). On a lent machine (10 minutes a command):
#   OUT=$OUT bash scripts/gpu_check.sh 150 330
bench() {  # bench NAME SECONDS ARGS...
  local name="$1" secs="$2"; shift 2
  "$PY" benchmarks/bench_gpu.py "$@" --budget "$secs" --timeout "$secs" \
    --out "$OUT/$name" > "$OUT/$name.log" 2>&1
  echo "$name rc=$?" | tee -a "$OUT/device.txt"
  tail -12 "$OUT/$name.log"
}
bench bench_gpu_targets "$((T_BENCH / 2))" --sizes 20000 50000 --models stp_ard gpytorch_exact
bench bench_gpu_5k "$((T_BENCH / 4))" --sizes 5000
bench bench_gpu_20k "$((T_BENCH / 4))" --sizes 20000 \
  --models mixed_nystrom dbk_exact dbk_svi mixed_exact
