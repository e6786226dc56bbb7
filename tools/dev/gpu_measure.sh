#!/usr/bin/env bash
# One device call's worth of measurement on the lent NVIDIA machine (../shared/gpu/README.md):
# build, the benches with their PyTorch peers, optionally the suite on the GPU and CLBlast
# tuning, everything in one archive $OUT/all.tgz (the device call returns at most a few files).
# Run from the repository root with .gpu carried:
#   source .gpu/env.sh; tools/dev/gpu_measure.sh [--check] [--tune] [SUITE ...]
# Default suites: gemm linear conv train (the peers' groups follow from them).
set -u
FINAL=${OUT:-/tmp/out}
OUT=/tmp/gpu_measure
mkdir -p "$OUT" "$FINAL"
trap 'tar czf "$FINAL/all.tgz" -C "$(dirname "$OUT")" "$(basename "$OUT")"' EXIT
t0=$(date +%s)
ts() { echo "[$(($(date +%s) - t0))s] $*"; }
check=0 tune=0 suites=()
for a in "$@"; do
  case $a in --check) check=1 ;; --tune) tune=1 ;; *) suites+=("$a") ;; esac
done
[ ${#suites[@]} -gt 0 ] || suites=(gemm linear conv train)
(autoreconf -fi && ./configure -q && make -j16 && make -j16 check TESTS=) > "$OUT/build.txt" 2>&1 ||
  { tail -30 "$OUT/build.txt"; exit 1; }
ts built
export OCLML_KERNEL_PATH=$PWD/cl OCLML_CACHE_DIR=$PWD/tests/cache OCLML_TEST_TMP=$PWD/tests/tmp
mkdir -p tests/tmp tests/cache
./oclml-info > "$OUT/info.txt" 2>&1
if [ $tune = 1 ]; then
  timeout 200 ./oclml-tune --budget 150 --out tuning/ > "$OUT/tune.txt" 2>&1
  tail -12 "$OUT/tune.txt"; cp tuning/*.jsonl "$OUT/"; ts tuned
fi
peers=()
for suite in "${suites[@]}"; do
  timeout 120 ./oclml-bench --json "$OUT/ours-$suite.jsonl" "$suite" > "$OUT/bench-$suite.txt" 2>&1
  echo "bench $suite rc $?"; grep -vE "^(device|limits|op |$)" "$OUT/bench-$suite.txt" | cut -c1-160
  case $suite in
    optim) peers+=(adam) ;; loss) peers+=(xent) ;; layout) ;;
    attention) peers+=(attention attention_bwd) ;; *) peers+=("$suite") ;;
  esac
  ts "$suite"
done
groups=$(IFS=,; echo "${peers[*]}")
python3 .gpu/torch_peers.py --only "$groups" > "$OUT/peer.jsonl" 2> "$OUT/peer.err"
python3 scripts/torch_peers_extra.py --only "$groups" >> "$OUT/peer.jsonl" 2>> "$OUT/peer.err"
ts peers
if [ $check = 1 ]; then
  left=$((560 - ($(date +%s) - t0)))
  timeout $left make check -j8 > "$OUT/check.txt" 2>&1; echo "make check rc $?"
  grep -E "^(PASS|FAIL|ERROR)" "$OUT/check.txt"; cp tests/*.log "$OUT/" 2>/dev/null
fi
ts end
