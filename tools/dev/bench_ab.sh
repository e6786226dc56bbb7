#!/usr/bin/env bash
# A/B of one oclml-bench suite under two or more tuning settings in one run (alternating, so
# drift on a shared machine hits each alike). From the build tree, e.g. on the GPU machine:
#   tools/dev/bench_ab.sh conv "conv.implicit=0" "conv.implicit=1"
#   tools/dev/bench_ab.sh gemm "gemm.mma_tile=128:64:16:2:2" "" --sizes 4096x4096x4096
# Options after the settings go to oclml-bench. Prints each setting's result lines, tagged.
set -u
[ $# -ge 3 ] || { echo "usage: $0 SUITE SETTING SETTING [...] [-- BENCH OPTIONS]" >&2; exit 2; }
suite=$1
shift
settings=()
while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do settings+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
for round in 1 2; do
  for s in "${settings[@]}"; do
    OCLML_TUNE="$s" ./oclml-bench --reps 10 "$@" "$suite" 2>&1 |
      grep -vE "^(device|limits|op |$)" | sed "s|^|[$round ${s:-default}] |"
  done
done
