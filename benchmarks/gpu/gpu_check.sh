#!/usr/bin/env bash
# The prepared check for a lent GPU machine (CUDA torch already installed, no network):
# installs the package without touching torch, runs the CUDA tests, benchmarks/bench_gpu.py
# in three budgeted parts, then the whole test suite on the GPU with what time is left.
# Everything is written to a work folder and packed into $OUT/gpu_check.tar.gz after every
# step (a lent machine returns at most 8 files, and a command cut at its limit still returns
# what it had packed); $OUT/summary.txt is the short account.
#
# Usage: bash benchmarks/gpu/gpu_check.sh [total seconds, default 570] [all | bench | targets | suite | gaps | tile | classifiers | graphs]
# "bench" stops after the benchmark, "targets" runs only the benchmark rows that decide
# issue 11's targets (no tests), "suite" runs only the whole suite (with all the time),
# "gaps" runs the CUDA tests, the rows earlier loans left unmeasured, then the suite; "tile"
# runs benchmarks/gpu/compare_adjoint_tile.py (the tiled adjoint's old and new tile rule, same card),
# then the suite; "classifiers" runs benchmarks/gpu/gpu_classifiers.py (both classifiers on digits
# on CUDA), then the suite; "graphs" runs benchmarks/gpu/gpu_fidgp_graphs.py (FiD-GP's steps as
# CUDA graphs against eager steps), then the suite.
# On a lent machine (10 minutes a command), with wheels of the optional packages the image
# lacks in .whl/ (zuko, skops and its needs; scikit-learn, installed only when the image's
# is older than the package needs):
#   run(command="OUT=$OUT bash benchmarks/gpu/gpu_check.sh 570", carry=[".whl"], timeout_s=600)
# The suite took 232 s for 542 of its ~1,400 tests with -n 12 on an H200 machine
# (2026-11-26), so it needs a call of its own (and still does not finish): "bench" in one
# call, then "suite" at once in a second (the machine stays warm only 30 s between calls).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$(date +%s)
TOTAL="${1:-570}"
MODE="${2:-all}"
PY="${PYTHON:-python3}"
OUT="${OUT:-gpu_out}"
W="$(mktemp -d)"
mkdir -p "$OUT"
left() { echo $((TOTAL - ($(date +%s) - T0))); }
pack() { tar -czf "$OUT/gpu_check.tar.gz" -C "$W" . 2>/dev/null; cp "$W/summary.txt" "$OUT/"; }
say() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$W/summary.txt"; }
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  nproc
  "$PY" -c "import torch, numpy, scipy, sklearn; print('torch', torch.__version__, 'cuda', \
torch.version.cuda, 'available', torch.cuda.is_available(), '| numpy', numpy.__version__, \
'scipy', scipy.__version__, 'sklearn', sklearn.__version__)"
} 2>&1 | tee -a "$W/summary.txt"

# optional packages the image lacks, carried as wheels; scikit-learn only when too old
if ls .whl/*.whl >/dev/null 2>&1; then
  wheels=$(ls .whl/*.whl | grep -v scikit_learn)
  if ! "$PY" -c "import sklearn, sys; v = tuple(map(int, sklearn.__version__.split('.')[:2])); \
sys.exit(v < (1, 6))"; then
    wheels="$wheels $(ls .whl/scikit_learn*.whl 2>/dev/null)"
  fi
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site $wheels 2>&1 | tail -2
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  say "wheels: $(echo $wheels | xargs -n1 basename | tr '\n' ' ')"
fi
"$PY" -m pip install --quiet --no-deps --no-build-isolation -e . 2>&1 | tail -3
if ! "$PY" -c "import skbnngp, torch; assert torch.cuda.is_available(); \
print('skbnngp', skbnngp.__version__, 'from', skbnngp.__file__)" 2>&1 | tee -a "$W/summary.txt"; then
  say "ABORT: skbnngp does not import, or CUDA is not available"; pack; exit 1
fi
for mod in pytest xdist hypothesis gpytorch zuko skops; do
  "$PY" -c "import $mod" 2>/dev/null || say "missing: $mod"
done
pack

par=""; "$PY" -c "import xdist" 2>/dev/null && par="-n $(( $(nproc) > 8 ? 12 : 2 ))"

if [ "$MODE" != "suite" ] && [ "$MODE" != "targets" ] && [ "$MODE" != "tile" ] \
   && [ "$MODE" != "classifiers" ] && [ "$MODE" != "graphs" ]; then
# 1. the CUDA tests: CUDA against CPU per estimator, and CUDA fits pickled and loaded without
#    CUDA (they skip on a CPU machine)
timeout -s INT -k 10 150 "$PY" -m pytest -q -p no:cacheprovider -rfEs $par -k cuda tests \
  > "$W/tests_cuda.log" 2>&1
say "cuda tests rc=$?: $(tail -1 "$W/tests_cuda.log")"
pack
fi

# 2. the benchmark; each part ends at its budget (the row running then is cut). First the
#    rows that decide issue 11's targets (STP and GPyTorch's exact GP at 20,000 rows, STP at
#    50,000), then the whole plan at 5,000 rows, then the package's other models at 20,000.
bench() {  # bench NAME SECONDS ARGS...
  local name="$1" secs="$2"; shift 2
  "$PY" benchmarks/bench_gpu.py "$@" --budget "$secs" --timeout "$secs" \
    --out "$W/$name" > "$W/$name.log" 2>&1
  say "$name rc=$?"
  cat "$W/$name.md" 2>/dev/null
  pack
}
if [ "$MODE" = "tile" ]; then
  timeout -s INT -k 10 "${TILE_SECONDS:-200}" "$PY" benchmarks/gpu/compare_adjoint_tile.py \
    --out "$W/adjoint_tile.json" > "$W/adjoint_tile.log" 2>&1
  say "adjoint tile rc=$?"; cat "$W/adjoint_tile.log" | tee -a "$W/summary.txt"; pack
fi
if [ "$MODE" = "classifiers" ]; then
  # both classifiers' default fits on digits on CUDA (FiD-GP was 2.9x slower than 2 CPU
  # cores on an H100 in the sixth loan: launch-bound), then the suite
  timeout -s INT -k 10 "${CLASSIFIER_SECONDS:-240}" "$PY" benchmarks/gpu/gpu_classifiers.py "$W" \
    > "$W/gpu_classifiers.log" 2>&1
  say "classifiers rc=$?"; grep '^{' "$W/gpu_classifiers.log" | tee -a "$W/summary.txt"; pack
fi
if [ "$MODE" = "graphs" ]; then
  timeout -s INT -k 10 "${GRAPH_SECONDS:-300}" "$PY" benchmarks/gpu/gpu_fidgp_graphs.py "$W" \
    > "$W/gpu_fidgp_graphs.log" 2>&1
  say "graphs rc=$?"; grep '^{' "$W/gpu_fidgp_graphs.log" | tee -a "$W/summary.txt"
  tail -5 "$W/gpu_fidgp_graphs.log" | grep -v '^{' | tee -a "$W/summary.txt"; pack
fi
if [ "$MODE" = "gaps" ]; then
# the rows earlier loans left unmeasured (cut by their parts' budgets), and the STP and
# GPyTorch rows at 20,000 again with the current defaults
bench bench_gpu_gaps_5k 70 --sizes 5000 --models mixed_exact gpytorch_exact
bench bench_gpu_gaps_20k 150 --sizes 20000 --models stp_ard gpytorch_exact dbk_svi mixed_exact
fi
if [ "$MODE" != "suite" ] && [ "$MODE" != "gaps" ] && [ "$MODE" != "tile" ] \
   && [ "$MODE" != "classifiers" ] && [ "$MODE" != "graphs" ]; then
bench bench_gpu_targets 180 --sizes 20000 50000 --models stp_ard gpytorch_exact
fi
if [ "$MODE" = "targets" ]; then say "done (targets only)"; pack; exit 0; fi
if [ "$MODE" != "suite" ] && [ "$MODE" != "gaps" ] && [ "$MODE" != "tile" ] \
   && [ "$MODE" != "classifiers" ] && [ "$MODE" != "graphs" ]; then
bench bench_gpu_5k 90 --sizes 5000
bench bench_gpu_20k 90 --sizes 20000 --models mixed_nystrom dbk_exact dbk_svi mixed_exact
fi
if [ "$MODE" = "bench" ]; then say "done (bench only)"; pack; exit 0; fi

# 3. the whole suite, with the time left: first the CUDA tests (CUDA against CPU for each
#    estimator, CUDA fits pickled and loaded without CUDA), then every other test with the
#    files that pin device="cpu" in bulk (sklearn's checks, the kernel checklist) last, so a
#    run cut at its limit has covered what the GPU can change. In parallel where pytest-xdist
#    is installed; -v names each result as it comes, so a cut run still says what failed.
T_SUITE=$(( $(left) - 25 ))
if [ "$T_SUITE" -gt 30 ]; then
  T_CUDA=$(( T_SUITE / 3 < 150 ? T_SUITE / 3 : 150 ))
  [ "$MODE" != "suite" ] && [ "$MODE" != "tile" ] && [ "$MODE" != "classifiers" ] \
    && [ "$MODE" != "graphs" ] \
    && T_CUDA=0  # step 1 ran them
  [ "$T_CUDA" -gt 0 ] && timeout -s INT -k 10 "$T_CUDA" "$PY" -m pytest -v -p no:cacheprovider -rfEs $par -k cuda \
    tests > "$W/tests_cuda.log" 2>&1
  [ "$T_CUDA" -gt 0 ] && say "cuda tests rc=$? (${T_CUDA} s allowed): $(tail -1 "$W/tests_cuda.log")"
  pack
  T_REST=$(( $(left) - 20 ))
  last="tests/test_common.py tests/kernels/test_checklist.py"
  first=$(ls tests/test_*.py tests/backend/test_*.py tests/kernels/test_*.py \
          | grep -v -e test_common.py -e test_checklist.py | tr '\n' ' ')
  # FIRST_TESTS (files) run before the others: a loan's suite is cut at its limit, so the
  # files an earlier loan did not reach can go first
  if [ -n "${FIRST_TESTS:-}" ]; then
    first="$FIRST_TESTS $(for f in $first; do case " $FIRST_TESTS " in *" $f "*) ;; *) echo $f;; esac; done | tr '\n' ' ')"
  fi
  timeout -s INT -k 20 "$T_REST" "$PY" -m pytest -v -p no:cacheprovider -rfE $par \
    -k "not cuda" $first $last > "$W/tests_all.log" 2>&1
  say "other tests rc=$? (${T_REST} s allowed, $par): $(tail -1 "$W/tests_all.log")"
  grep -cE "PASSED" "$W/tests_all.log" | sed 's/^/passed lines: /' | tee -a "$W/summary.txt"
  grep -E "(FAILED|ERROR)" "$W/tests_cuda.log" "$W/tests_all.log" | grep -v ":E " \
    | sort -u | head -40 | tee -a "$W/summary.txt"
else
  say "all tests: not run (${T_SUITE} s left)"
fi
pack
say "done"
