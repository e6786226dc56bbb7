#!/usr/bin/env bash
# One device call's worth of measurement on the lent NVIDIA machine (../shared/gpu/README.md):
# build, the suite on the GPU, CLBlast tuning, the benches of issues 13 and 14 with their
# PyTorch peers, the PyTorch golden files, all under $OUT. Run from the repository root with
# .gpu carried:  source .gpu/env.sh; tools/dev/gpu_measure.sh [--no-tune] [--no-check]
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
tune=1 check=1
for a in "$@"; do
  case $a in --no-tune) tune=0 ;; --no-check) check=0 ;; esac
done
(autoreconf -fi && ./configure -q && make -j16) > "$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
export OCLML_KERNEL_PATH=$PWD/cl OCLML_CACHE_DIR=$PWD/tests/cache OCLML_TEST_TMP=$PWD/tests/tmp
mkdir -p tests/tmp tests/data
./oclml-info > "$OUT/info.txt" 2>&1
# PyTorch's golden files first (seconds): the suite's golden tests then run instead of skipping.
for g in tests/data/make_*_golden.py; do
  python3 "$g" > "$OUT/$(basename "$g" .py).log" 2>&1 || echo "$g failed"
done
python3 examples/train_golden.py tests/data > "$OUT/train_golden.log" 2>&1 || echo "train_golden failed"
cp tests/data/*golden* "$OUT/" 2>/dev/null
if [ $check = 1 ]; then
  timeout 420 make check -j8 > "$OUT/check.txt" 2>&1; echo "make check rc $?"
  grep -E "^(PASS|FAIL|ERROR)" "$OUT/check.txt"; cp tests/check_*.log "$OUT/" 2>/dev/null
fi
if [ $tune = 1 ]; then
  timeout 200 ./oclml-tune --out tuning/ > "$OUT/tune.txt" 2>&1; cp tuning/*.jsonl "$OUT/"
fi
for suite in gemm linear conv optim loss train layout; do
  timeout 240 ./oclml-bench --json "$OUT/ours-$suite.jsonl" "$suite" > "$OUT/bench-$suite.txt" 2>&1
  echo "bench $suite rc $?"
done
python3 .gpu/torch_peers.py --only gemm,linear,conv,adam,xent,train > "$OUT/peer.jsonl" 2>"$OUT/peer.err"
tools/dev/gemm_sweep.sh 4096x4096x4096 > "$OUT/sweep.txt" 2>&1
cat "$OUT"/bench-*.txt | grep -vE "^(device|limits|op )"
