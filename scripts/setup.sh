#!/usr/bin/env bash
# One command on a fresh Debian bookworm machine (as root): installs liboclml's dependencies,
# builds the library, then shows what it does on the default device (a GPU if there is one, else
# the CPU through PoCL): oclml-info and a short benchmark.
#   usage: sudo scripts/setup.sh [--no-install] [--no-demo]
set -euo pipefail
cd "$(dirname "$0")/.."

install=1 demo=1
for a in "$@"; do
  case "$a" in
    --no-install) install=0 ;;
    --no-demo) demo=0 ;;
    *) echo "usage: $0 [--no-install] [--no-demo]" >&2; exit 2 ;;
  esac
done

# Open MPI: liboclml-mpi (data parallelism) and its tests under mpirun; python3 with NumPy,
# cffi, pytest and PyOpenCL: the Python package and its tests.
packages=(build-essential autoconf automake libtool autoconf-archive pkg-config
          ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libclblast-dev check clinfo
          openmpi-bin libopenmpi-dev python3-numpy python3-cffi python3-pytest python3-pyopencl)
if [ "$install" = 1 ]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "== installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi

echo "== building"
[ -x configure ] || autoreconf -fi
# OCLML_CONFIGURE_FLAGS: extra configure options (CI: --enable-werror).
[ -f Makefile ] || ./configure ${OCLML_CONFIGURE_FLAGS:-}
make -j"$(nproc)"

[ "$demo" = 1 ] || exit 0
# Kernels from this checkout, caches inside the build tree (so a second run is fast).
export OCLML_KERNEL_PATH="$PWD/cl"
export OCLML_CACHE_DIR="${OCLML_CACHE_DIR-$PWD/.cache/oclml}"
export POCL_CACHE_DIR="${POCL_CACHE_DIR:-$PWD/.cache/pocl}"
echo
echo "== oclml-info"
./oclml-info
echo
echo "== demo: C = A * B through liboclml"
./examples/gemm_example
echo
echo "== benchmark (short): copy bandwidth and a 512^3 GEMM on the selected device"
./oclml-bench --quick --reps 10 copy
./oclml-bench --quick --reps 10 --sizes 512x512x512 gemm
