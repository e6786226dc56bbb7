#!/bin/sh
# The kernels as OpenCL C 1.2 and nothing more: clang -pedantic -Werror over every kernel file,
# portable and with the PTX helpers on, then over every program the ops' warm planners list
# (tests/warm_programs: each op of lib/ops/ops.def, planned for a CPU, the same emulating the
# tensor-core kernels, a GPU with TF32 tensor cores and PTX, a plain GPU; every head dim, mask,
# layout and operand form the planners take, the tensor-core kernels in both math modes and the
# GEMM pipelines the tuning key gemm.stages can force, and the native 16-bit attention backward
# that attention.lp_bwd_mma turns on), each as its device builds it (with the
# PTX helpers where that device has them). PoCL's compiler accepts clang's extensions (variadic macros once passed the
# whole suite here, then NVIDIA's OpenCL refused every program), so this is the suite's check
# that the kernels build where the standard is all a compiler promises.
# Skipped (77) where no clang is installed; CI has the one PoCL depends on.
src=${OCLML_TEST_SRCDIR:-${srcdir:-.}}
build=${OCLML_TEST_BUILDDIR:-.}
cc=
for c in clang clang-15 clang-16 clang-14 clang-17 clang-18; do
  if command -v "$c" >/dev/null 2>&1; then cc=$c; break; fi
done
[ -n "$cc" ] || { echo "no clang: skipped"; exit 77; }
programs=$build/tests/warm_programs
[ -x "$programs" ] || { echo "no $programs (make check builds it)"; exit 99; }
base="-x cl -cl-std=CL1.2 -fsyntax-only -pedantic -Werror -I$src/cl/include -DOCLML_WANT_ALL=1"
ptx="-target nvptx64-nvidia-nvcl -fgnu-keywords -Wno-language-extension-token -DOCLML_PTX=1"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cl_pedantic.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

# The lint list, one line a build: file, PTX (1 or 0), defines.
for f in "$src"/cl/ops/*.cl; do
  printf '%s\t0\t\n%s\t1\t\n' "${f##*/}" "${f##*/}"
done > "$tmp/list"
{
  "$programs" --every-shape || echo "warm_programs failed" >&2
  "$programs" --every-shape --tf32 gpu-mma cpu-mma-emulated || echo "warm_programs failed" >&2
  # the native 16-bit attention backward, off by default
  "$programs" --every-shape --tune attention.lp_bwd_mma=2 gpu-mma cpu-mma-emulated ||
    echo "warm_programs failed" >&2
  for stages in 3 4; do
    "$programs" --every-shape --tune gemm.stages=$stages gpu-mma cpu-mma-emulated ||
      echo "warm_programs failed" >&2
  done
} 2> "$tmp/errors" | awk -F '\t' '{ print $3 "\t" $4 "\t" $5 }' >> "$tmp/list"
if [ -s "$tmp/errors" ]; then
  cat "$tmp/errors"
  exit 99
fi
sort -u "$tmp/list" > "$tmp/builds"

# Each build once, in as many parallel runs as there are cores; a run prints a line a failure
# (the command and the first lines of clang's output) and its count of builds.
jobs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
j=0
while [ "$j" -lt "$jobs" ]; do
  awk -v n="$jobs" -v j="$j" 'NR % n == j' "$tmp/builds" | {
    runs=0
    while IFS='	' read -r file on defines; do
      runs=$((runs + 1))
      opts=$defines
      [ "$on" = 1 ] && opts="$ptx $defines"
      # shellcheck disable=SC2086 # the options are words
      if ! out=$("$cc" $base $opts "$src/cl/ops/$file" 2>&1) || [ -n "$out" ]; then
        echo "FAIL: $cc $opts $src/cl/ops/$file"
        echo "$out" | head -20
      fi
    done
    echo "runs $runs"
  } > "$tmp/out.$j" &
  j=$((j + 1))
done
wait
cat "$tmp"/out.* | grep -v '^runs '
runs=$(cat "$tmp"/out.* | awk '/^runs / { n += $2 } END { print n + 0 }')
fails=$(cat "$tmp"/out.* | grep -c '^FAIL: ')
echo "$runs builds with $cc, $fails failed"
[ "$fails" -eq 0 ] && [ "$runs" -eq "$(wc -l < "$tmp/builds")" ]
