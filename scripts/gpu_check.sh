#!/usr/bin/env bash
# Run bigkernel's GPU checks on a machine with a CUDA GPU: the GPU tests, the namespace suite,
# and scripts/bench_gpu.py; results (logs, JUnit XML, benchmark JSON + table) go to $OUT.
#
# Usage, from the repository root:
#   OUT=/path/to/results scripts/gpu_check.sh               # everything, full benchmark sizes
#   BENCH_ARGS="--n 4000000 --cases bare,rf_gpu,rf_cpu,exact --exact-n 100000" scripts/gpu_check.sh
#   SKIP_BENCH=1 scripts/gpu_check.sh                        # tests only
#
# Packages: CuPy must already be installed (it is on the lent H100/H200 machines); anything
# else missing there (dask, distributed, zarr, numcodecs, dask-cuda, array-api-compat/strict,
# …) can travel as wheels in ./.whl (see /work/shared/gpu/README.md for the download line: cp312,
# --no-deps): they are installed into /tmp/site, which goes first on PYTHONPATH, and the
# project itself is imported from this checkout (PYTHONPATH=$PWD).
set -uo pipefail

OUT="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"

if [ -d .whl ] && compgen -G ".whl/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "gpu_check: installing the carried wheels failed" | tee "$OUT/FAILED"; exit 1; }
    export PYTHONPATH="/tmp/site:$PWD"
else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1

{
    echo "date: $(date -u +%FT%TZ)"
    echo "host: $(hostname)  cores: $(nproc)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi: not available"
    "$PY" - <<'EOF'
import importlib
for name in ("numpy", "cupy", "dask", "distributed", "zarr", "dask_cuda", "array_api_compat", "array_api_strict"):
    try:
        m = importlib.import_module(name)
        print(f"{name} {getattr(m, '__version__', '?')}")
    except Exception as exc:  # report, do not stop: the tests say what they need
        print(f"{name} MISSING ({type(exc).__name__}: {exc})")
try:
    from bigkernel.devices import resolve_device
    print("resolve_device('cuda') ->", resolve_device("cuda"))
except Exception as exc:
    print("resolve_device('cuda') FAILED:", exc)
EOF
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

status=0
# -p no:cacheprovider: the checkout may be read-only; -rs: say why anything was skipped
"$PY" -m pytest -p no:cacheprovider -q -rs tests/test_gpu.py tests/test_gpu_pass.py tests/test_namespace_exact.py \
    tests/test_namespace_pass.py tests/test_device.py \
    --junitxml="$OUT/tests.xml" > "$OUT/tests.log" 2>&1 || status=1
tail -n 30 "$OUT/tests.log"

if [ -z "${SKIP_BENCH:-}" ]; then
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of options
    "$PY" scripts/bench_gpu.py --workdir "${BENCH_WORKDIR:-/tmp}" --out "$OUT/bench_gpu.json" ${BENCH_ARGS:-} \
        > "$OUT/bench_gpu.txt" 2> "$OUT/bench_gpu.log" || status=1
    cat "$OUT/bench_gpu.txt"
    tail -n 5 "$OUT/bench_gpu.log"
fi
echo "gpu_check: exit $status; results in $OUT"
exit $status
