/* The GRU kernels' host/kernel contract, valid C and OpenCL C (lib/ops/gru.c, cl/ops/gru.cl,
 * cl/ops/gru_tiled.cl, cl/ops/rssm.cl): which optional biases a call passes. */
#ifndef OCLML_GRU_ABI_H
#define OCLML_GRU_ABI_H
#define GRU_B_IH 1 /* b_ih given */
#define GRU_B_HH 2 /* b_hh given */
#endif
