#!/usr/bin/env bash
# Every open issue's measured marks, in parts that each fit a few minutes of GPU time:
#
#     bash benchmarks/marks.sh OUTDIR [PART ...]
#
# PART: sweep (the broad sweep, its plot and JSON), random (44 ragged problems of a seeded draw),
# auto (default against config="auto"), fused, scaled, grouped, sparse, first (first calls with an
# empty kernel cache); all of them by default.
# Each part's output goes to OUTDIR/PART.log (and to the terminal); a part that fails or runs past
# its time limit is reported and the next one runs. BENCHMARKS.md says what each table means.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash benchmarks/marks.sh OUTDIR [PART ...]}
shift
mkdir -p "$out"
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(sweep random auto fused scaled grouped sparse first)

run() {  # name, seconds, command...
    local name=$1 limit=$2
    shift 2
    echo "== $name: $*" | tee "$out/$name.log"
    timeout "$limit" "$@" 2>&1 | grep -v "Warning\|warn(" | tee -a "$out/$name.log"
    local rc=${PIPESTATUS[0]}
    [ "$rc" -ne 0 ] && echo "== $name: exit status $rc" | tee -a "$out/$name.log"
    return 0
}

for part in "${parts[@]}"; do
    case $part in
        sweep) run sweep 500 python3 benchmarks/sweep.py --repeats 8 --json "$out/sweep.json" \
                   --plot "$out/sweep_default.png" ;;
        random) run random 400 python3 benchmarks/sweep.py --random 44 --seed 2026 --repeats 8 ;;
        auto) run auto 500 python3 benchmarks/sweep.py --auto --repeats 8 ;;
        fused) run fused 300 python3 benchmarks/fused.py ;;
        scaled) run scaled 300 python3 benchmarks/scaled.py ;;
        grouped) run grouped 300 python3 benchmarks/grouped.py ;;
        sparse) run sparse 300 python3 benchmarks/sparse.py ;;
        first) run first 300 env NBWGMMA_CACHE_DIR="$(mktemp -d)" python3 benchmarks/first_call.py ;;
        *) echo "marks.sh: unknown part $part (sweep random auto fused scaled grouped sparse first)" >&2; exit 2 ;;
    esac
done
