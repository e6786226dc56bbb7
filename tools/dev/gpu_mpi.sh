# Open MPI for the lent NVIDIA machines, which have none (../shared/gpu/README.md).
#   here, once per checkout:      tools/dev/gpu_mpi.sh fetch   (Debian bookworm's packages into
#                                 .gpu/mpidebs: Open MPI 4.1 and the libraries it loads)
#   there, after .gpu/env.sh:     source tools/dev/gpu_mpi.sh  (unpacked under /tmp/gpu-mpi and
#                                 relocated there: OPAL_PREFIX, PMIx's prefix, PATH, pkg-config)
# Start ranks through tools/dev/gpu_rank.sh: on that machine a process that loads an OpenCL
# driver (mpirun's daemon through hwloc, a Python test through liboclml) finds its C environment's
# OCL_ICD_FILENAMES cut to the list's first item (PoCL), and its children lose NVIDIA's driver.
if [ "${1:-}" = fetch ]; then
  mkdir -p .gpu/mpidebs && cd .gpu/mpidebs &&
    apt-get download openmpi-bin libopenmpi3 libopenmpi-dev openmpi-common ibverbs-providers \
      libatomic1 libevent-core-2.1-7 libevent-pthreads-2.1-7 libevent-2.1-7 libfabric1 \
      libhwloc15 libibverbs1 libmunge2 libnl-3-200 libnl-route-3-200 libnuma1 libpmix2 \
      libpsm-infinipath1 libpsm2-2 librdmacm1 libucx0 libltdl7
  exit $?
fi
mroot=/tmp/gpu-mpi
if [ ! -f "$mroot/.done" ]; then
  mkdir -p "$mroot/bin"
  for f in .gpu/mpidebs/*.deb; do dpkg -x "$f" "$mroot"; done
  for p in mpirun mpiexec mpicc; do ln -sf "$mroot/usr/bin/$p.openmpi" "$mroot/bin/$p"; done
  for pc in "$mroot"/usr/lib/x86_64-linux-gnu/openmpi/lib/pkgconfig/*.pc; do
    sed -i "s|^prefix=/usr|prefix=$mroot/usr|" "$pc"
  done
  touch "$mroot/.done"
fi
lib="$mroot/usr/lib/x86_64-linux-gnu"
export OPAL_PREFIX="$mroot/usr" PMIX_INSTALL_PREFIX="$lib/pmix2"
export PATH="$mroot/bin:$mroot/usr/bin:$PATH"
export LD_LIBRARY_PATH="$lib/openmpi/lib:$lib/pmix2/lib:$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$lib/openmpi/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PMIX_MCA_pcompress_base_silence_warning=1
export OMPI_MCA_plm_rsh_agent=false OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
export OCLML_MPIEXEC="$mroot/bin/mpirun"
