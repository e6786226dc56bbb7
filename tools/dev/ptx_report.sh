#!/usr/bin/env bash
# What NVIDIA's OpenCL compiler made of the kernels a command ran: the PTX it cached, assembled
# again with the ptxas that PyTorch's Triton ships, for each kernel's registers and spills and,
# with --sass, its machine code. On the GPU machine, from the build tree (source .gpu/env.sh
# first), e.g.
#   tools/dev/ptx_report.sh OUTDIR ./oclml-bench --sizes 4096x4096x4096 gemm
#   tools/dev/ptx_report.sh --sass --only attention OUTDIR /tmp/abl 4 16 16 4096 128 0
# --only REGEX keeps the kernels whose names match (ptxas takes minutes on the largest programs;
# each assembly is cut off after 60 s). PTXAS_FLAGS adds options to the assembly (e.g.
# -maxrregcount=168, what the library's register cap gives the driver's).
# The command runs with an empty disk cache of its own, so every program it builds lands there
# (NVIDIA's program binaries are PTX text). NVIDIA's compiler writes PTX 9.0, which Triton's
# ptxas (8.7) refuses by version alone: the report rewrites the version line. Registers and
# spills match what -cl-nv-verbose prints within a few registers; the SASS is ptxas's schedule,
# close to but not always the driver's. Writes OUTDIR/<kernel>-<hash>.{ptx,txt[,sass]} and
# prints the register lines.
set -u
sass=0 only=.
while [ $# -gt 0 ]; do
  case $1 in
    --sass) sass=1; shift ;;
    --only) only=$2; shift 2 ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || { echo "usage: $0 [--sass] [--only REGEX] OUTDIR COMMAND [ARGS...]" >&2; exit 2; }
out=$1
shift
bin=$(python3 -c "import triton, os; print(os.path.dirname(triton.__file__))" 2>/dev/null)/backends/nvidia/bin
[ -x "$bin/ptxas" ] || { echo "$0: no ptxas under $bin (Triton missing?)" >&2; exit 1; }
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
OCLML_CACHE_DIR=$cache "$@" > "$out.command.txt" 2>&1 || echo "$0: the command failed (see $out.command.txt)" >&2
mkdir -p "$out"
for f in "$cache"/*.bin; do
  [ -e "$f" ] || continue
  # The disk cache's header is 80 bytes (lib/core/diskcache.c); the payload ends with a NUL.
  ptx=$(mktemp)
  tail -c +81 "$f" | tr -d '\000' | sed 's/^\.version 9\.[0-9]*/.version 8.7/' > "$ptx"
  kernel=$(grep -m1 -oE '\.entry [A-Za-z_0-9]+' "$ptx" | awk '{print $2}')
  echo "$kernel" | grep -qE "$only" || { rm -f "$ptx"; continue; }
  name=$out/${kernel:-unknown}-$(basename "$f" .bin | cut -c1-8)
  mv "$ptx" "$name.ptx"
  timeout 60 "$bin/ptxas" -arch=sm_90 ${PTXAS_FLAGS:-} -v -o "$name.cubin" "$name.ptx" > "$name.txt" 2>&1
  [ $sass = 1 ] && [ -e "$name.cubin" ] && "$bin/cuobjdump" -sass "$name.cubin" > "$name.sass" 2>&1
  rm -f "$name.cubin"
  echo "$(basename "$name"): $(grep -hoE 'Used [0-9]+ registers|[0-9]+ bytes spill (stores|loads)' "$name.txt" | paste -sd, -)"
done
