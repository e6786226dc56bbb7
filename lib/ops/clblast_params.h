/* CLBlast 1.5.3's single-precision GEMM parameters as liboclml stores them (tuning keys
 * clblast.xgemm, clblast.xgemm_direct, clblast.gemm_switch) and the rules a set must follow:
 * CLBlast's own tuner constraints (src/tuning/kernels/xgemm.hpp, xgemm_direct.hpp) and the
 * device's work-group and local-memory limits. Self-contained (no OpenCL, no core), so that the
 * library, which refuses a bad stored set at context creation, and oclml-tune, which only
 * generates valid ones, apply the same rules. */
#ifndef OCLML_OPS_CLBLAST_PARAMS_H
#define OCLML_OPS_CLBLAST_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The parameter names in CLBlast's database order (alphabetical): the order of the stored
 * integers. */
#define OCLML_CLBLAST_XGEMM_N 16
#define OCLML_CLBLAST_DIRECT_N 10
static const char *const oclml_clblast_xgemm_names[OCLML_CLBLAST_XGEMM_N] = {
    "GEMMK", "KREG", "KWG", "KWI", "MDIMA", "MDIMC", "MWG", "NDIMB",
    "NDIMC", "NWG",  "SA",  "SB",  "STRM",  "STRN",  "VWM", "VWN"};
static const char *const oclml_clblast_direct_names[OCLML_CLBLAST_DIRECT_N] = {
    "KWID", "MDIMAD", "MDIMCD", "NDIMBD", "NDIMCD", "PADA", "PADB", "VWMD", "VWND", "WGD"};
static const char *const oclml_clblast_switch_name = "XGEMM_MIN_INDIRECT_SIZE";

/* What a device allows a work-group: the limits the checks use. */
typedef struct oclml_clblast_limits {
    size_t max_work_group_size;
    size_t max_item[2]; /* per dimension (CL_DEVICE_MAX_WORK_ITEM_SIZES) */
    size_t local_mem_bytes;
} oclml_clblast_limits;

static inline bool oclml_clblast_pow2(long v) { return v > 0 && (v & (v - 1)) == 0; }
static inline bool oclml_clblast_multiple(long a, long b) { return b > 0 && a % b == 0; }

/* Whether an Xgemm set (CLBlast's order above) is one CLBlast's kernel computes correctly on a
 * device with these limits; why (may be NULL) receives the first rule it breaks. */
static inline bool oclml_clblast_xgemm_ok(const long v[OCLML_CLBLAST_XGEMM_N],
                                          const oclml_clblast_limits *lim, char *why,
                                          size_t why_len) {
    const long gemmk = v[0], kreg = v[1], kwg = v[2], kwi = v[3], mdima = v[4], mdimc = v[5],
               mwg = v[6], ndimb = v[7], ndimc = v[8], nwg = v[9], sa = v[10], sb = v[11],
               strm = v[12], strn = v[13], vwm = v[14], vwn = v[15];
    const char *bad = NULL;
    for (int i = 0; i < OCLML_CLBLAST_XGEMM_N && !bad; i++)
        if (v[i] < 0) bad = "a negative value";
    if (bad) {
    } else if (gemmk != 0 && gemmk != 1)
        bad = "GEMMK must be 0 or 1";
    else if (sa > 1 || sb > 1 || strm > 1 || strn > 1)
        bad = "SA, SB, STRM and STRN must be 0 or 1";
    else if (!oclml_clblast_pow2(kreg) || !oclml_clblast_pow2(kwg) || !oclml_clblast_pow2(kwi) ||
             !oclml_clblast_pow2(mdima) || !oclml_clblast_pow2(mdimc) || !oclml_clblast_pow2(mwg) ||
             !oclml_clblast_pow2(ndimb) || !oclml_clblast_pow2(ndimc) || !oclml_clblast_pow2(nwg) ||
             !oclml_clblast_pow2(vwm) || !oclml_clblast_pow2(vwn))
        bad = "KREG, KWG, KWI, MDIMA, MDIMC, MWG, NDIMB, NDIMC, NWG, VWM and VWN must be powers "
              "of two";
    else if (vwm > 16 || vwn > 16)
        bad = "VWM and VWN must be at most 16";
    else if (!oclml_clblast_multiple(kwg, kwi))
        bad = "KWG must be a multiple of KWI";
    else if (!oclml_clblast_multiple(mwg, mdimc * vwm))
        bad = "MWG must be a multiple of MDIMC*VWM";
    else if (!oclml_clblast_multiple(nwg, ndimc * vwn))
        bad = "NWG must be a multiple of NDIMC*VWN";
    else if (!oclml_clblast_multiple(mwg, mdima * vwm))
        bad = "MWG must be a multiple of MDIMA*VWM";
    else if (!oclml_clblast_multiple(nwg, ndimb * vwn))
        bad = "NWG must be a multiple of NDIMB*VWN";
    else if (gemmk == 0 && (mdimc * ndimc) % mdima != 0)
        bad = "MDIMC*NDIMC must be a multiple of MDIMA";
    else if (gemmk == 0 && (mdimc * ndimc) % ndimb != 0)
        bad = "MDIMC*NDIMC must be a multiple of NDIMB";
    else if (gemmk == 0 && !oclml_clblast_multiple(kwg, mdimc * ndimc / mdima))
        bad = "KWG must be a multiple of MDIMC*NDIMC/MDIMA";
    else if (gemmk == 0 && !oclml_clblast_multiple(kwg, mdimc * ndimc / ndimb))
        bad = "KWG must be a multiple of MDIMC*NDIMC/NDIMB";
    else if (gemmk == 1 && (kwg != 1 || kwi != 1 || sa || sb || strm || strn))
        bad = "GEMMK 1 needs KWG 1, KWI 1, SA 0, SB 0, STRM 0, STRN 0";
    else if (gemmk == 1 && (mdima != mdimc || ndimb != ndimc))
        bad = "GEMMK 1 needs MDIMA = MDIMC and NDIMB = NDIMC";
    else if (gemmk == 1 && !oclml_clblast_multiple(kreg, vwn))
        bad = "GEMMK 1 needs KREG to be a multiple of VWN";
    else if (gemmk == 0 && kreg != 1)
        bad = "GEMMK 0 needs KREG 1";
    else if (lim && (size_t)(mdimc * ndimc) > lim->max_work_group_size)
        bad = "the work-group MDIMC*NDIMC is larger than the device allows";
    else if (lim && ((size_t)mdimc > lim->max_item[0] || (size_t)ndimc > lim->max_item[1]))
        bad = "MDIMC or NDIMC is larger than the device's work-item sizes";
    else if (lim && (size_t)(4 * (sa * kwg * mwg + sb * kwg * nwg)) > lim->local_mem_bytes)
        bad = "the tiles SA*KWG*MWG + SB*KWG*NWG need more local memory than the device has";
    if (bad && why && why_len) snprintf(why, why_len, "%s", bad);
    return !bad;
}

/* The same for an XgemmDirect set. */
static inline bool oclml_clblast_direct_ok(const long v[OCLML_CLBLAST_DIRECT_N],
                                           const oclml_clblast_limits *lim, char *why,
                                           size_t why_len) {
    const long kwid = v[0], mdimad = v[1], mdimcd = v[2], ndimbd = v[3], ndimcd = v[4], pada = v[5],
               padb = v[6], vwmd = v[7], vwnd = v[8], wgd = v[9];
    const char *bad = NULL;
    if (pada < 0 || pada > 1 || padb < 0 || padb > 1)
        bad = "PADA and PADB must be 0 or 1";
    else if (!oclml_clblast_pow2(kwid) || !oclml_clblast_pow2(mdimad) ||
             !oclml_clblast_pow2(mdimcd) || !oclml_clblast_pow2(ndimbd) ||
             !oclml_clblast_pow2(ndimcd) || !oclml_clblast_pow2(vwmd) ||
             !oclml_clblast_pow2(vwnd) || !oclml_clblast_pow2(wgd))
        bad = "KWID, MDIMAD, MDIMCD, NDIMBD, NDIMCD, VWMD, VWND and WGD must be powers of two";
    else if (vwmd > 16 || vwnd > 16)
        bad = "VWMD and VWND must be at most 16";
    else if (!oclml_clblast_multiple(wgd, kwid))
        bad = "WGD must be a multiple of KWID";
    else if (!oclml_clblast_multiple(wgd, mdimcd * vwmd))
        bad = "WGD must be a multiple of MDIMCD*VWMD";
    else if (!oclml_clblast_multiple(wgd, ndimcd * vwnd))
        bad = "WGD must be a multiple of NDIMCD*VWND";
    else if (!oclml_clblast_multiple(wgd, mdimad * vwmd))
        bad = "WGD must be a multiple of MDIMAD*VWMD";
    else if (!oclml_clblast_multiple(wgd, ndimbd * vwnd))
        bad = "WGD must be a multiple of NDIMBD*VWND";
    else if ((mdimcd * ndimcd) % mdimad != 0 || (mdimcd * ndimcd) % ndimbd != 0)
        bad = "MDIMCD*NDIMCD must be a multiple of MDIMAD and of NDIMBD";
    else if (!oclml_clblast_multiple(wgd, mdimcd * ndimcd / mdimad) ||
             !oclml_clblast_multiple(wgd, mdimcd * ndimcd / ndimbd))
        bad = "WGD must be a multiple of MDIMCD*NDIMCD/MDIMAD and of MDIMCD*NDIMCD/NDIMBD";
    else if (lim && (size_t)(mdimcd * ndimcd) > lim->max_work_group_size)
        bad = "the work-group MDIMCD*NDIMCD is larger than the device allows";
    else if (lim && ((size_t)mdimcd > lim->max_item[0] || (size_t)ndimcd > lim->max_item[1]))
        bad = "MDIMCD or NDIMCD is larger than the device's work-item sizes";
    else if (lim && (size_t)(4 * (wgd * (wgd + pada) + wgd * (wgd + padb))) > lim->local_mem_bytes)
        bad = "the tiles WGD*(WGD+PADA) + WGD*(WGD+PADB) need more local memory than the device "
              "has";
    if (bad && why && why_len) snprintf(why, why_len, "%s", bad);
    return !bad;
}

/* Whether every integer of a set is 0: not tuned, CLBlast's own values stay. */
static inline bool oclml_clblast_unset(const long *v, int n) {
    for (int i = 0; i < n; i++)
        if (v[i]) return false;
    return true;
}

#endif
