/* The RSSM rollout's host/kernel contract, valid C and OpenCL C (lib/ops/rssm.c,
 * cl/ops/rssm.cl): the flag bits of which optional tensors a call passes. The bias bits are the
 * GRU's (gru_abi.h). */
#ifndef OCLML_RSSM_ABI_H
#define OCLML_RSSM_ABI_H
#define R_BIH 1        /* b_ih given */
#define R_BHH 2        /* b_hh given */
#define R_HNORM 4      /* write |h| per step */
#define R_HFIN 8       /* write the final h */
#define R_ZFIN 16      /* write the final z */
#define R_FFIN 32      /* write the final f */
#define R_F0_SHARED 64 /* f0 is [F], shared by every member */
#endif
