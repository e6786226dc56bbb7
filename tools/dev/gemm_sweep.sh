#!/usr/bin/env bash
# Times the own tensor-core GEMM kernel over tile shapes (the tuning key gemm.mma_tile:
# block rows:columns:K depth:warps along rows:along columns) on the given sizes, from the build
# tree. The fastest tile per size is what the planner's table (MMA_TILES in lib/ops/gemm_plan.c)
# should hold for the device. Usage, from the build tree:
#   tools/dev/gemm_sweep.sh [SIZES] [TILE ...]
#   tools/dev/gemm_sweep.sh 4096x4096x4096,8192x8192x8192 128:128:16:2:4 128:128:16:2:2
set -u
sizes=${1:-4096x4096x4096}
shift || true
tiles=${*:-128:128:16:2:4 128:128:16:4:2 128:128:16:2:2 128:64:16:2:2 64:128:16:2:4 \
128:128:8:2:4 256:128:8:4:2 128:256:8:2:4 64:64:16:2:2}
for t in $tiles; do
  OCLML_TUNE="gemm.mma_tile=$t" ./oclml-bench --reps 10 --sizes "$sizes" gemm 2>&1 |
    grep -E "^gemm" | grep "own:" | sed "s/^/$t  /"
done
