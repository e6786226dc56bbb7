#!/bin/bash
# The data-parallel measurement on a two-GPU machine, in one device call (.gpu carried, MPI
# fetched with tools/dev/gpu_mpi.sh): build with MPI, oclml-bench-dp at two ranks once per
# argument string, then PyTorch DDP (DDP=1). Results in $OUT: dp.txt, dp.jsonl, ddp.jsonl.
#   DDP=1 tools/dev/gpu_dp.sh "" "--only gpt2fp32" "--only gpt2,allreduce --wire bf16"
source .gpu/env.sh; source tools/dev/gpu_mpi.sh
export OCLML_KERNEL_PATH=$PWD/cl OCLML_CACHE_DIR=/tmp/oclml-cache
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
if [ ! -x ./oclml-bench-dp ]; then
  (autoreconf -fi && ./configure -q --with-mpi && make -j32) > "$OUT/build.log" 2>&1 ||
    { tail -40 "$OUT/build.log"; exit 1; }
fi
date -u +%H:%M > "$OUT/when.txt"
for args in "$@"; do
  echo "== $args" >> "$OUT/dp.txt"
  rm -f /tmp/dp.jsonl
  timeout 300 mpirun -np 2 tools/dev/gpu_rank.sh ./oclml-bench-dp $args --json /tmp/dp.jsonl \
    >> "$OUT/dp.txt" 2>&1
  cat /tmp/dp.jsonl >> "$OUT/dp.jsonl"
done
[ -n "${DDP:-}" ] && timeout 200 python3 .gpu/torch_ddp.py > "$OUT/ddp.jsonl" 2> "$OUT/ddp.err"
date -u +%H:%M >> "$OUT/when.txt"
grep -v "pmix_mca\|dlopen error\|Perhaps a missing" "$OUT/dp.txt" | tail -60
cat "$OUT/ddp.jsonl" 2>/dev/null
