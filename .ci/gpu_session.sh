#!/usr/bin/env bash
# Everything the GPU checks need in one go (developer helper, not CI): the GPU tests,
# the examples, then the benchmark. Writes logs and JSON under ${OUT:-/tmp/nbwgmma-out}.
set -uo pipefail
OUT=${OUT:-/tmp/nbwgmma-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
timeout ${TEST_TIMEOUT:-330} python3 -m pytest -m gpu -q --timeout=120 -p no:cacheprovider -rf ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/gpu_tests.log" | grep -v "^E  " | tail -40
for d in bf16 f16 e4m3; do
  timeout 120 python3 -m nbwgmma bench --dtype $d --json > "$OUT/bench_$d.json" 2> "$OUT/bench_$d.err"; echo "bench $d rc=$?"
  python3 -c "import json,sys; r=json.load(open('$OUT/bench_$d.json')); from nbwgmma.bench import format_row; print(format_row(r))" 2>/dev/null
done
if [ -n "${SWEEP:-}" ]; then
  timeout ${SWEEP_TIMEOUT:-200} python3 -m nbwgmma bench --sweep --plot "$OUT/sweep_bf16.png" --json > "$OUT/sweep_bf16.json" 2> "$OUT/sweep.err"; echo "sweep rc=$?"
  python3 -c "import json; from nbwgmma.bench import format_row; [print(format_row(r)) for r in json.load(open('$OUT/sweep_bf16.json'))]" 2>/dev/null
fi
