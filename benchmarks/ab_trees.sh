#!/usr/bin/env bash
# A/B across two versions of nbwgmma on one GPU machine: the same benchmark command run from an
# exported earlier tree and from this checkout, in turn, ROUNDS times each, each run a fresh
# process (so compare what each run measures against its in-process peer, e.g. cuBLAS or
# cuBLASLt, not raw TFLOP/s across processes). Make the earlier tree where git is:
#     mkdir -p /tmp/old && git archive <commit> | tar -x -C /tmp/old
# then:
#     bash benchmarks/ab_trees.sh /tmp/old 2 python benchmarks/fused.py
set -uo pipefail
old=$(cd "$1" && pwd); rounds=$2; shift 2
new=$(cd "$(dirname "$0")/.." && pwd)
for r in $(seq 1 "$rounds"); do
  for side in old new; do
    tree=${!side}
    echo "== $side ($tree), round $r: $*"
    (cd "$tree" && PYTHONPATH="$tree${PYTHONPATH:+:$PYTHONPATH}" "$@")
  done
done
