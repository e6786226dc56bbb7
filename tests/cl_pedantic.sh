#!/bin/sh
# The kernels as OpenCL C 1.2 and nothing more: clang -pedantic -Werror over every kernel file,
# portable and with the PTX helpers on. PoCL's compiler accepts clang's extensions (variadic
# macros once passed the whole suite here, then NVIDIA's OpenCL refused every program), so this
# is the suite's check that the kernels build where the standard is all a compiler promises.
# Skipped (77) where no clang is installed; CI has the one PoCL depends on.
src=${OCLML_TEST_SRCDIR:-${srcdir:-.}}
cc=
for c in clang clang-15 clang-16 clang-14 clang-17 clang-18; do
  if command -v "$c" >/dev/null 2>&1; then cc=$c; break; fi
done
[ -n "$cc" ] || { echo "no clang: skipped"; exit 77; }
base="-x cl -cl-std=CL1.2 -fsyntax-only -pedantic -Werror -I$src/cl/include -DOCLML_WANT_ALL=1"
ptx="-target nvptx64-nvidia-nvcl -fgnu-keywords -Wno-language-extension-token -DOCLML_PTX=1"
fails=0 runs=0
lint() { # file, then the variant's options
  f=$1
  shift
  runs=$((runs + 1))
  if ! out=$("$cc" $base "$@" "$f" 2>&1) || [ -n "$out" ]; then
    echo "FAIL: $cc $* $f"
    echo "$out" | head -20
    fails=$((fails + 1))
  fi
}
for f in "$src"/cl/ops/*.cl; do
  lint "$f"
  lint "$f" $ptx
done
gemm="$src/cl/ops/gemm.cl"
for v in "-DGEMM_MMA=1" "-DGEMM_MMA=2" "-DGEMM_MMA=1 -DTRANS_A=1 -DTRANS_B=1 -DHAS_BIAS=2" \
         "-DTRANS_A=1 -DVEC_A=1 -DVEC_B=1 -DHAS_BIAS=1 -DHAS_PRE=1 -DACT_GELU_ERF=1" \
         "-DGATHER_B=1" "-DGATHER_B=1 -DGEMM_MMA=1 -DHAS_BIAS=2" "-DGATHER_B=2 -DTRANS_B=1" \
         "-DGATHER_B=2 -DTRANS_B=1 -DGEMM_MMA=1" "-DGEMM_MMA=1 -DGEMM_STAGES=3 -DVEC_A=1 -DVEC_B=1" \
         "-DGEMM_MMA=1 -DGEMM_STAGES=4 -DVEC_A=1 -DVEC_B=1 -DTRANS_A=1 -DTRANS_B=1 -DBK=32" \
         "-DGEMM_MMA=1 -DGEMM_STAGES=4 -DVEC_A=1 -DVEC_B=1 -DA_BANDED=1" "-DA_BANDED=1"; do
  lint "$gemm" -DMMA_EMULATE=1 $v
  lint "$gemm" $ptx $v
done
att="$src/cl/ops/attention.cl"
for v in "-DLAYOUT_BLHD=1 -DHAS_MASK=1 -DHAS_KEYLEN=1" \
         "-DHEAD_DIM=24 -DTX=4 -DTY=4 -DRQ=2 -DRK=4 -DDC=16 -DJC=4"; do
  lint "$att" $v
  lint "$att" $ptx $v
done
lint "$src/cl/ops/attention_fwd_mma.cl" -DHEAD_DIM=24 -DBN=32 -DLAYOUT_BLHD=1 -DHAS_MASK=1 -DHAS_KEYLEN=1
lint "$src/cl/ops/attention_bwd_mma.cl" -DHEAD_DIM=24 -DBN=32 -DLAYOUT_BLHD=1 -DHAS_MASK=1 -DHAS_KEYLEN=1
lint "$src/cl/ops/attention_fwd_mma.cl" $ptx -DHEAD_DIM=128 -DBN=16 -DHAS_MASK=1
lint "$src/cl/ops/attention_bwd_mma.cl" $ptx -DHEAD_DIM=128 -DBN=16 -DHAS_MASK=1
# The paired dK/dV and dQ kernels (head dim 128's defaults), emulated and on PTX; head dim 256's
# paired forward (K and V staged by turns) and the backward's warps in fours.
lint "$src/cl/ops/attention_bwd_mma.cl" -DHEAD_DIM=128 -DBN=16 -DBQ=32 -DDKDV_PAIRS=1 -DASYNC_KV=1 -DHAS_MASK=1
lint "$src/cl/ops/attention_bwd_mma.cl" $ptx -DHEAD_DIM=128 -DBN=16 -DBQ=16 -DDQ_PAIRS=1 -DHEAD_SPLIT=2 -DASYNC_KV=1 -DHAS_KEYLEN=1
lint "$src/cl/ops/attention_fwd_mma.cl" $ptx -DHEAD_DIM=256 -DBN=16 -DWARPS=8 -DBQ=64 -DFWD_PAIRS=1 -DHEAD_SPLIT=2 -DASYNC_KV=1 -DSPLIT_KV=1
lint "$src/cl/ops/attention_fwd_mma.cl" $ptx -DHEAD_DIM=256 -DBN=16 -DWARPS=8 -DBQ=64 -DFWD_PAIRS=1 -DHEAD_SPLIT=2 -DASYNC_KV=1 -DSPLIT_KV=1 -DVEC_FRAGMENTS=1 -DHAS_MASK=1
lint "$src/cl/ops/attention_fwd_mma.cl" -DHEAD_DIM=192 -DBN=16 -DWARPS=8 -DBQ=64 -DFWD_PAIRS=1 -DHEAD_SPLIT=2 -DASYNC_KV=1 -DSPLIT_KV=1 -DVEC_FRAGMENTS=1 -DLAYOUT_BLHD=1 -DHAS_KEYLEN=1
lint "$src/cl/ops/attention_bwd_mma.cl" -DHEAD_DIM=256 -DBN=16 -DBQ=16 -DDKDV_PAIRS=1 -DHEAD_SPLIT=2 -DASYNC_KV=1 -DHAS_MASK=1
lint "$src/cl/ops/attention_bwd_mma.cl" $ptx -DHEAD_DIM=256 -DBN=16 -DBQ=16 -DDQ_PAIRS=1 -DHEAD_SPLIT=4 -DHAS_KEYLEN=1
lint "$src/cl/ops/attention_fwd_mma.cl" -DHEAD_DIM=64 -DBN=32 -DVEC_FRAGMENTS=1 -DASYNC_KV=1 -DHAS_MASK=1
# The float4 dQ and dK/dV kernels (unpaired, head dim 64: one program holds both with OCLML_WANT_ALL).
lint "$src/cl/ops/attention_bwd_mma.cl" -DHEAD_DIM=64 -DBN=32 -DBQ=64 -DVEC_FRAGMENTS=1 -DASYNC_KV=1 -DHAS_MASK=1
lint "$src/cl/ops/attention_bwd_mma.cl" $ptx -DHEAD_DIM=64 -DBN=16 -DBQ=64 -DVEC_FRAGMENTS=1 -DASYNC_KV=1 -DHAS_KEYLEN=1
lint "$src/cl/ops/attention_fwd_mma.cl" $ptx -DHEAD_DIM=128 -DBN=16 -DWARPS=8 -DVEC_FRAGMENTS=1 -DASYNC_KV=1 -DLAYOUT_BLHD=1 -DHAS_KEYLEN=1
# The dK/dV kernel writing dS for the dQ GEMM (DS_OUT): unpaired float4, paired, in fours.
lint "$src/cl/ops/attention_bwd_mma.cl" $ptx -DHEAD_DIM=64 -DBN=32 -DBQ=64 -DVEC_FRAGMENTS=1 -DASYNC_KV=1 -DDS_OUT=1
lint "$src/cl/ops/attention_bwd_mma.cl" $ptx -DHEAD_DIM=128 -DBN=16 -DBQ=32 -DDKDV_PAIRS=1 -DASYNC_KV=1 -DDS_OUT=1 -DHAS_MASK=1
lint "$src/cl/ops/attention_bwd_mma.cl" -DHEAD_DIM=256 -DBN=16 -DBQ=16 -DDKDV_PAIRS=1 -DHEAD_SPLIT=2 -DDS_OUT=1 -DLAYOUT_BLHD=1
# The paired dK/dV kernel reading Q and dO as float4s (head dim 128's default), emulated and on PTX;
# in fours at 256, each warp a half of the head dim.
lint "$src/cl/ops/attention_bwd_mma.cl" -DHEAD_DIM=128 -DBN=16 -DBQ=32 -DDKDV_PAIRS=1 -DVEC_FRAGMENTS=1 -DASYNC_KV=1 -DHAS_MASK=1
lint "$src/cl/ops/attention_bwd_mma.cl" $ptx -DHEAD_DIM=128 -DBN=16 -DBQ=32 -DDKDV_PAIRS=1 -DVEC_FRAGMENTS=1 -DASYNC_KV=1 -DDS_OUT=1 -DHAS_KEYLEN=1
lint "$src/cl/ops/attention_bwd_mma.cl" $ptx -DHEAD_DIM=256 -DBN=16 -DBQ=16 -DDKDV_PAIRS=1 -DHEAD_SPLIT=2 -DVEC_FRAGMENTS=1 -DASYNC_KV=1 -DDS_OUT=1
lint "$src/cl/ops/attention_bwd_mma.cl" -DHEAD_DIM=256 -DBN=16 -DBQ=16 -DDKDV_PAIRS=1 -DHEAD_SPLIT=2 -DVEC_FRAGMENTS=1 -DASYNC_KV=1 -DHAS_MASK=1
# The direct weight gradient's wide tile in chunks of 32 positions (3 channels of 5x5 taps).
lint "$src/cl/ops/conv_direct_dw.cl" -DTK=32 -DTC=76 -DTP=32
lint "$src/cl/ops/conv_direct_dw.cl" $ptx -DTK=32 -DTC=76 -DTP=32
echo "$runs builds with $cc, $fails failed"
[ $fails -eq 0 ]
