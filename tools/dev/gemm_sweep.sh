#!/usr/bin/env bash
# Times the own tensor-core GEMM kernel over tile shapes (the tuning key gemm.mma_tile:
# block rows:columns:K depth:warps along rows:along columns, optionally @STAGES for gemm.stages)
# on the given sizes, from the build tree, through bench_ab.sh (two rounds alternating, so drift
# on a shared machine hits every tile alike). The fastest tile per size is what the planner's
# table (MMA_TILES in lib/ops/gemm_plan.c) should hold for the device. "default" times the
# planner's own choice. Usage, from the build tree:
#   tools/dev/gemm_sweep.sh [SIZES] [TILE[@STAGES] ...]
#   tools/dev/gemm_sweep.sh 4096x4096x4096,8192x8192x8192 default 64:128:16:2:2@4 64:128:32:2:2@2
set -u
sizes=${1:-4096x4096x4096}
shift || true
tiles=${*:-default 64:128:16:2:2@4 128:64:16:2:2@4 64:128:32:2:2@2 128:64:32:2:2@2 \
128:128:16:2:4 64:128:16:1:4@4 64:64:32:2:2}
settings=()
for t in $tiles; do
  tile=${t%@*} tuning="gemm.own=1"
  [ "$tile" != default ] && tuning="$tuning gemm.mma_tile=$tile"
  [ "$t" != "$tile" ] && tuning="$tuning gemm.stages=${t#*@}"
  settings+=("$tuning")
done
[ ${#settings[@]} -ge 2 ] || settings+=("gemm.own=1") # bench_ab.sh compares two or more
"$(dirname "$0")/bench_ab.sh" gemm "${settings[@]}" -- --sizes "$sizes" | grep "own:"
