#!/bin/sh
# A rank on the lent NVIDIA machine: both OpenCL drivers again (tools/dev/gpu_mpi.sh says why).
#   mpirun -np 2 tools/dev/gpu_rank.sh ./oclml-bench-dp ...
export OCL_ICD_FILENAMES=libpocl.so.2:libnvidia-opencl.so.1
exec "$@"
