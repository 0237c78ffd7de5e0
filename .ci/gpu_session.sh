#!/usr/bin/env bash
# Developer helper for a GPU machine (CI has none): the GPU tests, the fuzz count, the
# sanitizer runs (SANITIZE=1), then every benchmark of BENCHMARKS.md (SWEEP=1 adds the sweep), with
# autotuned configurations unless BENCH_ARGS says otherwise (BENCH_ARGS=" " for the tile model's pick).
# Writes its logs and JSON under ${OUT:-/tmp/nbwgmma-out}.
set -uo pipefail
OUT=${OUT:-/tmp/nbwgmma-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# The simulator against the GPU, bit for bit, on the examples, the library GEMM and a wrong descriptor.
NUMBA_ENABLE_CUDASIM=1 python3 tests/sim_vs_gpu.py "$OUT/sim.npz" > /dev/null && python3 tests/sim_vs_gpu.py "$OUT/gpu.npz" > /dev/null \
  && python3 tests/sim_vs_gpu.py --compare "$OUT/sim.npz" "$OUT/gpu.npz" | tee "$OUT/sim_vs_gpu.log"
[ -n "${SKIP_TESTS:-}" ] || \
timeout ${TEST_TIMEOUT:-900} python3 -m pytest -m gpu --gpu-parallel -q -p no:cacheprovider -rf ${PYTEST_ARGS:-} \
  2>&1 | tee "$OUT/gpu_tests.log" | grep -E "passed|failed|^FAILED|^ERROR|fuzz:" | tail -20
if [ -n "${SANITIZE:-}" ]; then
  python3 -m pytest -q -s -m sanitizer --run-sanitizer tests/test_sanitizer.py 2>&1 | tee "$OUT/sanitizer.log" \
    | grep -E "SUMMARY|passed|failed"
fi
: > "$OUT/bench.jsonl"
for args in "--dtype bf16" "--dtype bf16 --layout KN" "--dtype f16" "--dtype e4m3" \
            "--dtype e4m3 --m 4096 --n 4096 --k 4096"; do
  timeout 180 python3 -m nbwgmma bench $args ${BENCH_ARGS:---autotune} --json 2>/dev/null \
    | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)))" >> "$OUT/bench.jsonl"
done
python3 -c "
import json; from nbwgmma.bench import format_row
for line in open('$OUT/bench.jsonl'): print(format_row(json.loads(line)))"
python3 -m nbwgmma bench --overhead
python3 -m nbwgmma bench --first-call
if [ -n "${SWEEP:-}" ]; then
  timeout ${SWEEP_TIMEOUT:-300} python3 -m nbwgmma bench --sweep ${BENCH_ARGS:---autotune} --plot "$OUT/sweep_bf16.png" --json > "$OUT/sweep_bf16.json" 2>/dev/null
  python3 -c "
import json, statistics; from nbwgmma.bench import format_row
rows = json.load(open('$OUT/sweep_bf16.json'))
[print(format_row(r)) for r in rows]
print('geometric mean ratio %.3f' % statistics.geometric_mean([r['ratio'] for r in rows]))"
fi
