#!/usr/bin/env bash
# Developer helper for a GPU machine (CI has none): the GPU tests, then the benchmark.
# Writes gpu_tests.log, bench.jsonl, sweep_bf16.json and sweep_bf16.png under ${OUT:-/tmp/nbwgmma-out}.
set -uo pipefail
OUT=${OUT:-/tmp/nbwgmma-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
timeout ${TEST_TIMEOUT:-330} python3 -m pytest -m gpu -q --timeout=120 -p no:cacheprovider -rf ${PYTEST_ARGS:-} \
  2>&1 | tee "$OUT/gpu_tests.log" | grep -E "passed|failed|^FAILED|^ERROR" | tail -20
: > "$OUT/bench.jsonl"
for d in bf16 f16 e4m3; do
  timeout 120 python3 -m nbwgmma bench --dtype $d --json 2>/dev/null | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)))" >> "$OUT/bench.jsonl"
done
python3 -c "
import json; from nbwgmma.bench import format_row
for line in open('$OUT/bench.jsonl'): print(format_row(json.loads(line)))"
if [ -n "${SWEEP:-}" ]; then
  timeout ${SWEEP_TIMEOUT:-200} python3 -m nbwgmma bench --sweep --plot "$OUT/sweep_bf16.png" --json > "$OUT/sweep_bf16.json" 2>/dev/null
  python3 -c "
import json, statistics; from nbwgmma.bench import format_row
rows = json.load(open('$OUT/sweep_bf16.json'))
[print(format_row(r)) for r in rows]
print('geometric mean ratio %.3f' % statistics.geometric_mean([r['ratio'] for r in rows]))"
fi
