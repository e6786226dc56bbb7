#!/usr/bin/env bash
# Times the own tensor-core GEMM kernel over tile shapes (the tuning key gemm.mma_tile:
# block rows:columns:K depth:warps along rows:along columns, optionally @STAGES for gemm.stages)
# on the given sizes, from the build tree, two rounds alternating (drift on a shared machine hits
# every tile alike). The fastest tile per size is what the planner's table (MMA_TILES in
# lib/ops/gemm_plan.c) should hold for the device. "default" times the planner's own choice.
# Usage, from the build tree:
#   tools/dev/gemm_sweep.sh [SIZES] [TILE[@STAGES] ...]
#   tools/dev/gemm_sweep.sh 4096x4096x4096,8192x8192x8192 default 64:128:16:2:2@4 64:128:32:2:2@2
set -u
sizes=${1:-4096x4096x4096}
shift || true
tiles=${*:-default 64:128:16:2:2@4 128:64:16:2:2@4 64:128:32:2:2@2 128:64:32:2:2@2 \
128:128:16:2:4 64:128:16:1:4@4 64:64:32:2:2}
for round in 1 2; do
  for t in $tiles; do
    tile=${t%@*} tuning="gemm.own=1"
    [ "$tile" != default ] && tuning="$tuning gemm.mma_tile=$tile"
    [ "$t" != "$tile" ] && tuning="$tuning gemm.stages=${t#*@}"
    OCLML_TUNE="$tuning" ./oclml-bench --reps 10 --sizes "$sizes" gemm 2>&1 |
      grep -E "^gemm" | grep "own:" | sed "s/^/[$round $t] /"
  done
done
