/* oclml-tune: searches CLBlast 1.5.3's single-precision GEMM parameters for one device and
 * writes the winners into the tuning store that liboclml reads at context creation
 * (<cache dir>/tuning/<device>.jsonl; keys clblast.xgemm, clblast.xgemm_direct,
 * clblast.gemm_switch).
 *
 * The search sets parameters with CLBlastOverrideParameters and times CLBlastSgemm with OpenCL
 * events: a row-major product without transposes, asked for as the library asks for it (with
 * GEMMK 0 the column-major product of the swapped operands: call_of in lib/ops/gemm_clblast.c).
 * Each candidate's first call compiles it (CLBlast keys its programs by the parameter values)
 * and is checked: NaN-poisoned output, every element written and finite, sampled rows and
 * columns against a double reference; a set that fails to compile,
 * to launch or to compute right is discarded. Candidates respect CLBlast's tuner constraints
 * and the device's limits (lib/ops/clblast_params.h), and come in an order meant to find the
 * winners early: seeds from CLBlast's database for similar devices, then local moves around
 * the best so far, then the rest of the space ranked by a device-type heuristic, until the time
 * budget runs out. Phases: Xgemm at a large square size (2048, smaller on slow devices), its
 * best few checked at half that size too; XgemmDirect at small sizes; then the switch point
 * between the two (XGEMM_MIN_INDIRECT_SIZE) from both kernels timed over a range of sizes.
 * A phase whose winner is not faster than CLBlast's own values writes nothing for its key. */
#include <oclml.h>

#include "ops/clblast_params.h"
#include "tree.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <clblast_c.h>
#pragma GCC diagnostic pop

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAXP OCLML_CLBLAST_XGEMM_N
#define NO_INDIRECT 100000L /* switch value: every GEMM on XgemmDirect */
#define ALL_INDIRECT 1L     /* switch value: every GEMM on Xgemm */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the device, its buffers and the reference ---- */

typedef struct sample {
    size_t m, n, k;
    size_t rows[6], cols[6];
    double *ref_rows, *ref_cols; /* [6][n], [6][m] */
} sample;

typedef struct tuner {
    cl_context context;
    cl_device_id device;
    cl_command_queue queue;
    bool is_gpu;
    oclml_clblast_limits lim;
    cl_mem a, b, c;
    size_t cap_n; /* buffers hold cap_n x cap_n */
    float *ha, *hb, *hc;
    sample samples[32];
    int n_samples;
    double t0, budget;
    bool quick, verbose;
    bool progress_open;
    bool gemmk1; /* the Xgemm set in force has GEMMK 1: products asked for row-major */
} tuner;

static void progress(tuner *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress(tuner *t, const char *fmt, ...) {
    char line[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (isatty(STDERR_FILENO))
        fprintf(stderr, "\r%-100.100s", line);
    else
        fprintf(stderr, "%s\n", line);
    t->progress_open = isatty(STDERR_FILENO);
    fflush(stderr);
}

static void progress_end(tuner *t) {
    if (t->progress_open) fprintf(stderr, "\n");
    t->progress_open = false;
}

static double left_s(const tuner *t) { return t->budget - (now_s() - t->t0); }

static const sample *get_sample(tuner *t, size_t m, size_t n, size_t k) {
    for (int i = 0; i < t->n_samples; i++)
        if (t->samples[i].m == m && t->samples[i].n == n && t->samples[i].k == k)
            return &t->samples[i];
    if (t->n_samples == (int)(sizeof t->samples / sizeof t->samples[0])) return NULL;
    sample *s = &t->samples[t->n_samples++];
    s->m = m, s->n = n, s->k = k;
    s->ref_rows = malloc(6 * n * sizeof(double));
    s->ref_cols = malloc(6 * m * sizeof(double));
    if (!s->ref_rows || !s->ref_cols) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    /* First and last rows and columns (edge tiles), and four spread between. */
    for (int i = 0; i < 6; i++) {
        s->rows[i] = i == 0 ? 0 : i == 5 ? m - 1 : (m * (size_t)(2 * i + 1)) / 11 % m;
        s->cols[i] = i == 0 ? 0 : i == 5 ? n - 1 : (n * (size_t)(3 * i + 1)) / 17 % n;
    }
    /* A is m x k (lda k), B is k x n (ldb n), both from the start of the buffers. */
    for (int i = 0; i < 6; i++) {
        for (size_t j = 0; j < n; j++) {
            double acc = 0;
            for (size_t p = 0; p < k; p++)
                acc += (double)t->ha[s->rows[i] * k + p] * (double)t->hb[p * n + j];
            s->ref_rows[(size_t)i * n + j] = acc;
        }
        for (size_t r = 0; r < m; r++) {
            double acc = 0;
            for (size_t p = 0; p < k; p++)
                acc += (double)t->ha[r * k + p] * (double)t->hb[p * n + s->cols[i]];
            s->ref_cols[(size_t)i * m + r] = acc;
        }
    }
    return s;
}

/* Enqueues `reps` products C = A B of m x n x k; returns the mean milliseconds per call from
 * the events (a marker before, CLBlast's last event after), or -1 with *why set. */
static double run_gemm(tuner *t, size_t m, size_t n, size_t k, int reps, char *why, size_t wl) {
    clFinish(t->queue);
    cl_event start = NULL, last = NULL;
    cl_int err = clEnqueueMarkerWithWaitList(t->queue, 0, NULL, &start);
    if (err) {
        snprintf(why, wl, "clEnqueueMarkerWithWaitList: %d", err);
        return -1;
    }
    double h0 = now_s();
    for (int r = 0; r < reps; r++) {
        cl_event ev = NULL;
        CLBlastStatusCode s =
            t->gemmk1
                ? CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, m, n,
                               k, 1.0f, t->a, 0, k, t->b, 0, n, 0.0f, t->c, 0, n, &t->queue, &ev)
                : CLBlastSgemm(CLBlastLayoutColMajor, CLBlastTransposeNo, CLBlastTransposeNo, n, m,
                               k, 1.0f, t->b, 0, n, t->a, 0, k, 0.0f, t->c, 0, n, &t->queue, &ev);
        if (s != CLBlastSuccess) {
            snprintf(why, wl, "CLBlastSgemm status %d", (int)s);
            if (last) clReleaseEvent(last);
            clReleaseEvent(start);
            clFinish(t->queue);
            return -1;
        }
        if (last) clReleaseEvent(last);
        last = ev;
    }
    err = clWaitForEvents(1, &last);
    double host_ms = (now_s() - h0) * 1e3 / reps;
    cl_ulong e0 = 0, e1 = 0;
    cl_int perr = clGetEventProfilingInfo(start, CL_PROFILING_COMMAND_END, sizeof e0, &e0, NULL);
    if (!perr) perr = clGetEventProfilingInfo(last, CL_PROFILING_COMMAND_END, sizeof e1, &e1, NULL);
    clReleaseEvent(start);
    clReleaseEvent(last);
    if (err) {
        snprintf(why, wl, "the GEMM failed on the device: %d", err);
        return -1;
    }
    /* Event times exclude the compile of a first call; the host's clock is the fallback. */
    return !perr && e1 > e0 ? (double)(e1 - e0) / 1e6 / reps : host_ms;
}

/* One checked call: C poisoned with NaN first, then every element finite and the sampled rows
 * and columns within fp32 rounding of the double reference. Returns ms or -1 with *why. */
static double checked_gemm(tuner *t, size_t m, size_t n, size_t k, char *why, size_t wl) {
    const float nan = NAN;
    cl_int err =
        clEnqueueFillBuffer(t->queue, t->c, &nan, sizeof nan, 0, m * n * sizeof(float), 0, 0, 0);
    if (err) {
        snprintf(why, wl, "clEnqueueFillBuffer: %d", err);
        return -1;
    }
    double ms = run_gemm(t, m, n, k, 1, why, wl);
    if (ms < 0) return ms;
    err = clEnqueueReadBuffer(t->queue, t->c, CL_TRUE, 0, m * n * sizeof(float), t->hc, 0, NULL,
                              NULL);
    if (err) {
        snprintf(why, wl, "clEnqueueReadBuffer: %d", err);
        return -1;
    }
    for (size_t i = 0; i < m * n; i++)
        if (!isfinite(t->hc[i])) {
            snprintf(why, wl, "C[%zu][%zu] not written or not finite", i / n, i % n);
            return -1;
        }
    const sample *s = get_sample(t, m, n, k);
    if (!s) return ms;
    double tol = 4e-7 * (double)k + 1e-6; /* |a|, |b| <= 1 */
    for (int i = 0; i < 6; i++) {
        for (size_t j = 0; j < n; j++)
            if (fabs(t->hc[s->rows[i] * n + j] - s->ref_rows[(size_t)i * n + j]) > tol) {
                snprintf(why, wl, "wrong result at C[%zu][%zu]", s->rows[i], j);
                return -1;
            }
        for (size_t r = 0; r < m; r++)
            if (fabs(t->hc[r * n + s->cols[i]] - s->ref_cols[(size_t)i * m + r]) > tol) {
                snprintf(why, wl, "wrong result at C[%zu][%zu]", r, s->cols[i]);
                return -1;
            }
    }
    return ms;
}

/* Times a checked configuration: the checked call (which compiles a new set), one timed call,
 * then repetitions worth ~target_ms unless that call is already slower than `give_up_ms`.
 * Returns ms per call or -1. */
static double measure(tuner *t, size_t m, size_t n, size_t k, double give_up_ms, char *why,
                      size_t wl) {
    if (checked_gemm(t, m, n, k, why, wl) < 0) return -1; /* compiles a new set */
    double first = run_gemm(t, m, n, k, 1, why, wl);
    if (first < 0) return first;
    if (give_up_ms > 0 && first > give_up_ms) return first;
    double target_ms = t->quick ? 5 : t->is_gpu ? 30 : 300;
    int reps = (int)(target_ms / (first > 1e-3 ? first : 1e-3));
    reps = reps < 2 ? 2 : reps > 20 ? 20 : reps;
    double best = first;
    for (int round = 0; round < 2; round++) { /* the better of two rounds */
        double ms = run_gemm(t, m, n, k, reps, why, wl);
        if (ms < 0) return ms;
        if (ms < best) best = ms;
        if (!t->is_gpu) break;
    }
    return best;
}

static double gflops(size_t m, size_t n, size_t k, double ms) {
    return ms > 0 ? 2.0 * (double)m * (double)n * (double)k / (ms * 1e6) : 0;
}

static bool override(tuner *t, const char *kernel, const long *v, int np,
                     const char *const *names) {
    size_t vals[MAXP];
    for (int i = 0; i < np; i++) vals[i] = (size_t)v[i];
    CLBlastStatusCode s = CLBlastOverrideParameters(t->device, kernel, CLBlastPrecisionSingle,
                                                    (size_t)np, (const char **)names, vals);
    if (s != CLBlastSuccess) {
        progress_end(t);
        fprintf(stderr, "CLBlastOverrideParameters(%s) failed: CLBlast status %d\n", kernel,
                (int)s);
    } else if (!strcmp(kernel, "Xgemm")) {
        t->gemmk1 = v[0] == 1; /* names[0] is GEMMK */
    }
    return s == CLBlastSuccess;
}

static bool set_switch(tuner *t, long size) {
    return override(t, "GemmRoutine", &size, 1, &oclml_clblast_switch_name);
}

/* ---- candidates ---- */

typedef struct cand {
    long v[MAXP];
    double score;
} cand;

typedef struct space {
    int np;
    const char *const *names;
    bool (*ok)(const long *, const oclml_clblast_limits *, char *, size_t);
    cand *list; /* ranked */
    size_t n, cap, next;
    cand *front; /* moves around the best, tried first */
    size_t n_front, cap_front;
    cand *seen; /* evaluated */
    size_t n_seen, cap_seen;
} space;

static void push(cand **arr, size_t *n, size_t *cap, const cand *c) {
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 256;
        cand *p = realloc(*arr, *cap * sizeof **arr);
        if (!p) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        *arr = p;
    }
    (*arr)[(*n)++] = *c;
}

static bool seen(const space *s, const long *v) {
    for (size_t i = 0; i < s->n_seen; i++)
        if (!memcmp(s->seen[i].v, v, sizeof s->seen[i].v)) return true;
    return false;
}

static bool xgemm_ok(const long *v, const oclml_clblast_limits *l, char *w, size_t n) {
    return oclml_clblast_xgemm_ok(v, l, w, n);
}
static bool direct_ok(const long *v, const oclml_clblast_limits *l, char *w, size_t n) {
    return oclml_clblast_direct_ok(v, l, w, n);
}

static double lg(long v) { return log2((double)(v > 0 ? v : 1)); }

/* How likely an Xgemm set is to be fast, from what tends to win on each kind of device:
 * GPUs 256-work-item groups, 8x8 outputs per work-item, A and B tiles in local memory, float4
 * loads; CPUs (PoCL) smaller groups, no local-memory staging, wide vectors. Higher is better. */
static double xgemm_score(const long *v, bool gpu) {
    long gemmk = v[0], kreg = v[1], kwi = v[3], mdima = v[4], mdimc = v[5], mwg = v[6],
         ndimb = v[7], ndimc = v[8], nwg = v[9], sa = v[10], sb = v[11], strm = v[12], strn = v[13],
         vwm = v[14], vwn = v[15];
    double wg = lg(mdimc * ndimc), outs = lg((mwg / mdimc) * (nwg / ndimc)), s = 0;
    if (gpu) {
        s -= fabs(wg - 8) + (wg < 6 ? 3 : 0);
        s -= fabs(outs - 6) * 1.2;
        s -= 1.5 * (!sa + !sb);
        s -= 0.4 * (fabs(lg(vwm) - 2) + fabs(lg(vwn) - 2));
        s -= 0.3 * ((mdima != mdimc) + (ndimb != ndimc)) + 0.2 * (strm + strn);
        s -= 0.5 * fabs(lg(mwg) - lg(nwg)) + 0.2 * (kwi != 2);
        s -= gemmk ? 2.5 + 0.3 * fabs(lg(kreg) - 2) : 0;
    } else {
        s -= 0.6 * fabs(wg - 6);
        s -= 0.8 * fabs(outs - 5);
        s -= 0.5 * (sa + sb);
        s -= 0.5 * (fabs(lg(vwm) - 3) + fabs(lg(vwn) - 2));
        s -= 0.2 * ((mdima != mdimc) + (ndimb != ndimc) + strm + strn + (kwi != 2));
        s -= 0.3 * fabs(lg(mwg) - lg(nwg));
        s -= gemmk ? 0.5 + 0.3 * fabs(lg(kreg) - 3) : 0;
    }
    return s;
}

static double direct_score(const long *v, bool gpu) {
    long kwid = v[0], mdimad = v[1], mdimcd = v[2], ndimbd = v[3], ndimcd = v[4], pada = v[5],
         padb = v[6], vwmd = v[7], vwnd = v[8], wgd = v[9];
    double wg = lg(mdimcd * ndimcd), outs = lg((wgd / mdimcd) * (wgd / ndimcd)), s = 0;
    if (gpu) {
        s -= fabs(wg - 8) + fabs(outs - 3) + 0.5 * fabs(lg(wgd) - 5);
        s -= 0.3 * (fabs(lg(vwmd) - 1) + fabs(lg(vwnd) - 1)) + 0.3 * (!pada + !padb);
    } else {
        s -= 0.6 * fabs(wg - 6) + 0.8 * fabs(outs - 4) + 0.5 * fabs(lg(wgd) - 5);
        s -= 0.4 * (fabs(lg(vwmd) - 2) + fabs(lg(vwnd) - 2));
    }
    s -= 0.3 * ((mdimad != mdimcd) + (ndimbd != ndimcd)) + 0.2 * (kwid != 2);
    return s;
}

static void add_ranked(space *s, const oclml_clblast_limits *lim, const long *v, double score) {
    if (!s->ok(v, lim, NULL, 0)) return;
    cand c;
    memset(&c, 0, sizeof c);
    memcpy(c.v, v, (size_t)s->np * sizeof(long));
    c.score = score;
    push(&s->list, &s->n, &s->cap, &c);
}

static int by_score(const void *a, const void *b) {
    double d = ((const cand *)b)->score - ((const cand *)a)->score;
    return d > 0 ? 1 : d < 0 ? -1 : 0;
}

/* Seeds: CLBlast 1.5.3's database entries for recent NVIDIA and AMD GPUs and for CPUs, and
 * its defaults (in its parameter order); the device's own kind first. */
static const long XGEMM_GPU_SEEDS[][MAXP] = {
    {0, 1, 32, 2, 16, 16, 64, 16, 16, 64, 1, 1, 0, 0, 4, 4},   /* NVIDIA default */
    {0, 1, 32, 2, 8, 8, 32, 16, 16, 64, 1, 1, 0, 0, 4, 4},     /* A100 */
    {0, 1, 32, 2, 16, 16, 64, 8, 8, 32, 1, 1, 0, 0, 4, 4},     /* V100 */
    {0, 1, 16, 2, 16, 16, 128, 32, 16, 128, 1, 1, 1, 1, 1, 2}, /* T4, SM7.5 */
    {0, 1, 32, 2, 8, 32, 128, 16, 8, 128, 1, 1, 1, 1, 2, 2},   /* TITAN RTX */
    {0, 1, 16, 2, 8, 16, 128, 8, 8, 128, 1, 1, 1, 1, 4, 8},    /* GTX TITAN X */
    {0, 1, 16, 2, 32, 16, 128, 32, 8, 128, 1, 1, 1, 0, 4, 1},  /* GTX 1070 */
    {0, 1, 16, 2, 8, 8, 128, 32, 8, 64, 1, 0, 1, 1, 4, 1},     /* RX 6800 XT */
    {0, 1, 16, 2, 16, 32, 128, 32, 8, 64, 1, 1, 1, 1, 4, 2},   /* R9 290X */
    {0, 1, 16, 2, 16, 16, 128, 16, 16, 128, 1, 1, 1, 1, 4, 4}, /* 8x8 per work-item */
    {0, 1, 16, 2, 16, 16, 128, 16, 16, 128, 1, 1, 0, 0, 4, 4}, /* the same, strided off */
    {0, 1, 32, 2, 16, 16, 128, 16, 16, 128, 1, 1, 1, 1, 4, 4}, /* the same, KWG 32 */
    {0, 1, 16, 2, 16, 16, 128, 16, 16, 128, 1, 1, 1, 1, 8, 8}, /* the same, float8 */
    {0, 1, 16, 2, 32, 16, 128, 16, 16, 64, 1, 1, 1, 1, 4, 4},  /* 8x4 */
    {0, 1, 32, 2, 8, 8, 32, 16, 16, 32, 1, 1, 0, 0, 4, 2},     /* CLBlast's default */
    {1, 4, 1, 1, 16, 16, 128, 16, 16, 128, 0, 0, 0, 0, 4, 4},  /* 2-D register tiling */
};
static const long XGEMM_CPU_SEEDS[][MAXP] = {
    {0, 1, 32, 2, 16, 16, 64, 8, 8, 64, 0, 0, 0, 0, 4, 4},   /* Intel CPU default */
    {1, 16, 1, 1, 2, 2, 64, 2, 2, 128, 0, 0, 0, 0, 8, 2},    /* i5-4590S */
    {1, 2, 1, 1, 16, 16, 64, 4, 4, 64, 0, 0, 0, 0, 1, 1},    /* i9-9980HK */
    {1, 1, 1, 1, 16, 16, 16, 8, 8, 64, 0, 0, 0, 0, 1, 1},    /* E5-2630 v4 */
    {0, 1, 16, 2, 8, 8, 128, 8, 8, 128, 1, 1, 1, 0, 1, 8},   /* i7-4790K */
    {0, 1, 32, 2, 32, 8, 128, 8, 8, 128, 1, 1, 1, 1, 2, 8},  /* i7-3770 */
    {0, 1, 16, 2, 8, 8, 128, 16, 8, 128, 0, 1, 1, 1, 1, 8},  /* i7-2670QM */
    {0, 1, 32, 2, 16, 8, 128, 16, 8, 64, 0, 0, 1, 0, 1, 2},  /* i7 920 */
    {0, 1, 32, 8, 32, 32, 64, 32, 16, 64, 1, 1, 1, 0, 2, 2}, /* i5-6200U */
    {0, 1, 32, 2, 16, 8, 32, 8, 32, 128, 1, 1, 1, 1, 1, 4},  /* E5-2630 v3 */
    {0, 1, 32, 2, 8, 8, 64, 8, 8, 64, 0, 0, 0, 0, 8, 8},     /* 8x8, float8 */
    {0, 1, 32, 2, 8, 8, 64, 8, 8, 64, 0, 0, 0, 0, 8, 4},
    {1, 8, 1, 1, 4, 4, 64, 4, 4, 64, 0, 0, 0, 0, 8, 8},
    {1, 8, 1, 1, 8, 8, 64, 8, 8, 64, 0, 0, 0, 0, 8, 8},
    {0, 1, 32, 2, 8, 8, 32, 16, 16, 32, 1, 1, 0, 0, 4, 2}, /* CLBlast's default */
};
static const long DIRECT_GPU_SEEDS[][OCLML_CLBLAST_DIRECT_N] = {
    {2, 8, 8, 8, 8, 1, 1, 4, 4, 32},     {2, 16, 16, 16, 16, 1, 1, 2, 2, 32},
    {2, 8, 8, 16, 16, 1, 1, 4, 2, 32},   {2, 16, 8, 32, 16, 1, 1, 1, 1, 32},
    {2, 8, 8, 32, 32, 1, 1, 2, 1, 32},   {8, 16, 16, 32, 16, 1, 1, 4, 1, 64},
    {16, 8, 8, 16, 16, 1, 1, 1, 1, 32},  {2, 16, 16, 16, 16, 1, 1, 4, 4, 64},
    {8, 16, 16, 16, 16, 1, 1, 4, 4, 64}, {2, 8, 8, 8, 8, 1, 1, 1, 1, 16},
};
static const long DIRECT_CPU_SEEDS[][OCLML_CLBLAST_DIRECT_N] = {
    {2, 8, 8, 8, 8, 1, 1, 4, 4, 32},     {2, 8, 8, 8, 8, 1, 1, 1, 1, 8},
    {2, 8, 8, 8, 8, 0, 0, 4, 4, 32},     {2, 8, 8, 8, 8, 0, 0, 8, 8, 64},
    {8, 8, 8, 8, 8, 0, 0, 4, 4, 32},     {2, 8, 8, 8, 8, 1, 1, 2, 2, 16},
    {2, 16, 16, 16, 16, 1, 1, 2, 2, 32},
};

static void seed(space *s, const oclml_clblast_limits *lim, const long *v) {
    if (!s->ok(v, lim, NULL, 0)) return;
    cand c;
    memset(&c, 0, sizeof c);
    memcpy(c.v, v, (size_t)s->np * sizeof(long));
    for (size_t i = 0; i < s->n_front; i++)
        if (!memcmp(s->front[i].v, c.v, sizeof c.v)) return;
    push(&s->front, &s->n_front, &s->cap_front, &c);
}

static void build_xgemm_space(space *s, const tuner *t) {
    memset(s, 0, sizeof *s);
    s->np = OCLML_CLBLAST_XGEMM_N;
    s->names = oclml_clblast_xgemm_names;
    s->ok = xgemm_ok;
    static const long w[] = {16, 32, 64, 128}, d[] = {8, 16, 32}, vw[] = {1, 2, 4, 8};
    long v[MAXP];
    v[0] = 0, v[1] = 1;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (long kwg = 16; kwg <= 32; kwg *= 2)
                for (long kwi = 2; kwi <= 8; kwi *= 4)
                    for (int mc = 0; mc < 3; mc++)
                        for (int nc = 0; nc < 3; nc++)
                            for (int ma = 0; ma < 3; ma++)
                                for (int nb = 0; nb < 3; nb++)
                                    for (int vm = 0; vm < 4; vm++)
                                        for (int vn = 0; vn < 4; vn++)
                                            for (int bits = 0; bits < 16; bits++) {
                                                v[2] = kwg, v[3] = kwi, v[4] = d[ma], v[5] = d[mc],
                                                v[6] = w[a], v[7] = d[nb], v[8] = d[nc],
                                                v[9] = w[b], v[10] = bits & 1,
                                                v[11] = bits >> 1 & 1, v[12] = bits >> 2 & 1,
                                                v[13] = bits >> 3 & 1, v[14] = vw[vm],
                                                v[15] = vw[vn];
                                                add_ranked(s, &t->lim, v,
                                                           xgemm_score(v, t->is_gpu));
                                            }
    /* GEMMK 1: 2-D register tiling (CLBlast's tuner variation 12). */
    static const long d1[] = {2, 4, 8, 16, 32};
    memset(v, 0, sizeof v);
    v[0] = 1, v[2] = 1, v[3] = 1;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int mc = 0; mc < 5; mc++)
                for (int nc = 0; nc < 5; nc++)
                    for (int vm = 0; vm < 4; vm++)
                        for (int vn = 0; vn < 4; vn++)
                            for (long kreg = 1; kreg <= 16; kreg *= 2) {
                                v[1] = kreg, v[4] = v[5] = d1[mc], v[6] = w[a];
                                v[7] = v[8] = d1[nc], v[9] = w[b], v[14] = vw[vm], v[15] = vw[vn];
                                add_ranked(s, &t->lim, v, xgemm_score(v, t->is_gpu));
                            }
    qsort(s->list, s->n, sizeof *s->list, by_score);
    /* Seeds go in reverse, since the front is taken from its end. */
    size_t ng = sizeof XGEMM_GPU_SEEDS / sizeof XGEMM_GPU_SEEDS[0];
    size_t nc = sizeof XGEMM_CPU_SEEDS / sizeof XGEMM_CPU_SEEDS[0];
    const long(*mine)[MAXP] = t->is_gpu ? XGEMM_GPU_SEEDS : XGEMM_CPU_SEEDS;
    const long(*other)[MAXP] = t->is_gpu ? XGEMM_CPU_SEEDS : XGEMM_GPU_SEEDS;
    size_t n_mine = t->is_gpu ? ng : nc, n_other = t->is_gpu ? nc : ng;
    if (!t->quick)
        for (size_t i = n_other; i-- > 0;) seed(s, &t->lim, other[i]);
    for (size_t i = n_mine; i-- > 0;) seed(s, &t->lim, mine[i]);
}

static void build_direct_space(space *s, const tuner *t) {
    memset(s, 0, sizeof *s);
    s->np = OCLML_CLBLAST_DIRECT_N;
    s->names = oclml_clblast_direct_names;
    s->ok = direct_ok;
    static const long wg[] = {8, 16, 32, 64}, d[] = {8, 16, 32}, vw[] = {1, 2, 4, 8},
                      kw[] = {2, 8, 16};
    long v[MAXP] = {0};
    for (int g = 0; g < 4; g++)
        for (int ma = 0; ma < 3; ma++)
            for (int mc = 0; mc < 3; mc++)
                for (int nb = 0; nb < 3; nb++)
                    for (int nc = 0; nc < 3; nc++)
                        for (int k = 0; k < 3; k++)
                            for (int vm = 0; vm < 4; vm++)
                                for (int vn = 0; vn < 4; vn++)
                                    for (int pad = 0; pad < 4; pad++) {
                                        v[0] = kw[k], v[1] = d[ma], v[2] = d[mc], v[3] = d[nb];
                                        v[4] = d[nc], v[5] = pad & 1, v[6] = pad >> 1;
                                        v[7] = vw[vm], v[8] = vw[vn], v[9] = wg[g];
                                        add_ranked(s, &t->lim, v, direct_score(v, t->is_gpu));
                                    }
    qsort(s->list, s->n, sizeof *s->list, by_score);
    const long(*mine)[OCLML_CLBLAST_DIRECT_N] = t->is_gpu ? DIRECT_GPU_SEEDS : DIRECT_CPU_SEEDS;
    size_t n_mine = t->is_gpu ? sizeof DIRECT_GPU_SEEDS / sizeof DIRECT_GPU_SEEDS[0]
                              : sizeof DIRECT_CPU_SEEDS / sizeof DIRECT_CPU_SEEDS[0];
    for (size_t i = n_mine; i-- > 0;) {
        long sv[MAXP] = {0};
        memcpy(sv, mine[i], sizeof mine[i]);
        seed(s, &t->lim, sv);
    }
}

/* The next candidate not evaluated yet: moves around the best first, then the ranked list. */
static bool next_cand(space *s, cand *out) {
    while (s->n_front > 0) {
        *out = s->front[--s->n_front];
        if (!seen(s, out->v)) return true;
    }
    while (s->next < s->n) {
        *out = s->list[s->next++];
        if (!seen(s, out->v)) return true;
    }
    return false;
}

/* Queues the sets one step from v: each parameter (or a coupled pair) halved or doubled. */
static void queue_moves(space *s, const tuner *t, const long *v) {
    static const int pairs_x[][2] = {{4, 5}, {7, 8}, {6, 9}, {14, 15}, {5, 8}, {10, 11}, {12, 13}};
    static const int pairs_d[][2] = {{1, 2}, {3, 4}, {7, 8}, {2, 4}, {5, 6}};
    bool x = s->np == OCLML_CLBLAST_XGEMM_N;
    const int(*pairs)[2] = x ? pairs_x : pairs_d;
    int n_pairs = x ? 7 : 5;
    for (int move = 0; move < 2 * (s->np + n_pairs); move++) {
        long m[MAXP];
        memcpy(m, v, sizeof m);
        int which = move / 2;
        bool up = move & 1;
        int i0 = which < s->np ? which : pairs[which - s->np][0];
        int i1 = which < s->np ? -1 : pairs[which - s->np][1];
        for (int j = 0; j < 2; j++) {
            int i = j ? i1 : i0;
            if (i < 0) continue;
            bool binary = x ? (i == 0 || (i >= 10 && i <= 13)) : (i == 5 || i == 6);
            if (binary)
                m[i] = !m[i];
            else
                m[i] = up ? m[i] * 2 : m[i] / 2;
        }
        if (x && m[0] != v[0]) continue; /* GEMMK changes too much else */
        if (!seen(s, m)) seed(s, &t->lim, m);
    }
}

typedef struct result {
    long v[MAXP];
    double ms;
    bool found;
} result;

/* Searches one kernel's space at (m, n, k) until `until` (seconds on the budget clock) or
 * max_evals; returns the best, with the top few in `top`. */
static result search(tuner *t, space *s, const char *kernel, size_t m, size_t n, size_t k,
                     double until, int max_evals, double default_ms, result *top, int n_top) {
    result best = {{0}, 0, false};
    for (int i = 0; i < n_top; i++) top[i].found = false;
    int evals = 0, failed = 0;
    cand c;
    while ((evals == 0 || now_s() - t->t0 < until) && evals < max_evals && next_cand(s, &c)) {
        push(&s->seen, &s->n_seen, &s->cap_seen, &c);
        evals++;
        progress(
            t, "%s %zux%zux%zu: candidate %d/%zu, best %.1f GFLOP/s (default %.1f), %.0f s left",
            kernel, m, n, k, evals, s->n + s->n_seen - s->next,
            best.found ? gflops(m, n, k, best.ms) : 0.0, gflops(m, n, k, default_ms), left_s(t));
        if (!override(t, kernel, c.v, s->np, s->names)) continue;
        char why[160] = "";
        double give_up = best.found ? 3 * best.ms : default_ms > 0 ? 5 * default_ms : 0;
        double ms = measure(t, m, n, k, give_up, why, sizeof why);
        if (t->verbose) {
            progress_end(t);
            fprintf(stderr, "  %s", kernel);
            for (int i = 0; i < s->np; i++) fprintf(stderr, "%s%ld", i ? ":" : " ", c.v[i]);
            if (ms < 0)
                fprintf(stderr, "  failed: %s\n", why);
            else
                fprintf(stderr, "  %.3f ms, %.1f GFLOP/s\n", ms, gflops(m, n, k, ms));
        }
        if (ms < 0) {
            failed++;
            continue;
        }
        for (int i = 0; i < n_top; i++)
            if (!top[i].found || ms < top[i].ms) {
                memmove(&top[i + 1], &top[i], (size_t)(n_top - i - 1) * sizeof *top);
                memcpy(top[i].v, c.v, sizeof c.v);
                top[i].ms = ms;
                top[i].found = true;
                break;
            }
        if (!best.found || ms < best.ms) {
            memcpy(best.v, c.v, sizeof c.v);
            best.ms = ms;
            best.found = true;
            queue_moves(s, t, c.v);
        }
    }
    progress_end(t);
    fprintf(stderr, "%s: %d candidates tried (%d failed to build, launch or check)\n", kernel,
            evals, failed);
    return best;
}

/* ---- writing the store ---- */

static void device_file_name(const char *device, char *out, size_t len) {
    /* The rule of lib/core/tune.c: anything but letters and digits becomes '-'. */
    size_t j = 0;
    for (const char *p = device; *p && j + 7 < len; p++)
        out[j++] = isalnum((unsigned char)*p) ? *p : '-';
    while (j > 0 && out[j - 1] == '-') j--;
    snprintf(out + j, len - j, ".jsonl");
}

static int mkdirs(const char *path) {
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0755) && errno != EEXIST ? -1 : 0;
}

typedef struct entry {
    const char *key;
    long v[MAXP];
    int n;
    bool set;
    char extra[512]; /* more JSON fields */
} entry;

/* Rewrites path: the lines of other keys kept, ours replaced by the entries that are set. */
static int write_store(const char *path, const entry *e, int ne) {
    char *old = NULL;
    FILE *f = fopen(path, "r");
    size_t len = 0;
    if (f) {
        fseek(f, 0, SEEK_END);
        long sz = ftell(f);
        fseek(f, 0, SEEK_SET);
        old = calloc((size_t)(sz > 0 ? sz : 0) + 1, 1);
        if (old) len = fread(old, 1, (size_t)(sz > 0 ? sz : 0), f);
        fclose(f);
        if (old) old[len] = '\0';
    }
    char tmp[2100];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    f = fopen(tmp, "w");
    if (!f) {
        free(old);
        return -1;
    }
    for (char *line = old; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        bool ours = false;
        for (int i = 0; i < ne; i++) {
            char pat[96];
            snprintf(pat, sizeof pat, "\"key\": \"%s\"", e[i].key);
            char pat2[96];
            snprintf(pat2, sizeof pat2, "\"key\":\"%s\"", e[i].key);
            if (strstr(line, pat) || strstr(line, pat2)) ours = true;
        }
        if (!ours && line[strspn(line, " \t\r")]) fprintf(f, "%s\n", line);
        line = nl ? nl + 1 : NULL;
    }
    free(old);
    for (int i = 0; i < ne; i++) {
        if (!e[i].set) continue;
        fprintf(f, "{\"key\": \"%s\", \"value\": \"", e[i].key);
        for (int j = 0; j < e[i].n; j++) fprintf(f, "%s%ld", j ? ":" : "", e[i].v[j]);
        fprintf(f, "\"%s}\n", e[i].extra);
    }
    if (fclose(f) || rename(tmp, path)) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* ---- main ---- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: oclml-tune [--device SELECTOR] [--budget SECONDS] [--quick] [--out FILE|DIR] "
            "[--verbose]\n"
            "  Searches CLBlast's single-precision GEMM parameters (Xgemm, XgemmDirect and the\n"
            "  switch between them) for one device and stores the winners where liboclml reads\n"
            "  them at context creation: <cache dir>/tuning/<device>.jsonl.\n"
            "  --device SELECTOR: gpu, cpu, P:D, or part of a platform or device name (default:\n"
            "                     $OCLML_DEVICE, else the first GPU, else the first device)\n"
            "  --budget SECONDS:  search time (default 120; 10 with --quick)\n"
            "  --quick:           tiny sizes, one candidate per kernel, no switch search (tests)\n"
            "  --out FILE|DIR:    write there instead; a directory gets <device>.jsonl (e.g. a\n"
            "                     source tree's tuning/, the files shipped per device)\n"
            "  --verbose:         one line per candidate\n");
}

int main(int argc, char **argv) {
    oclml_ctx_config opts;
    oclml_ctx_config_init(&opts);
    opts.kernel_path = oclml_tree_kernel_path();
    opts.profiling = 1;
    /* CLBlast's own parameters while measuring its defaults: no stored values applied. */
    opts.tuning = "clblast.xgemm=0:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0,"
                  "clblast.xgemm_direct=0:0:0:0:0:0:0:0:0:0,clblast.gemm_switch=0";
    tuner t;
    memset(&t, 0, sizeof t);
    t.budget = -1;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            opts.device = argv[++i];
        else if (!strcmp(argv[i], "--budget") && i + 1 < argc) {
            char *end;
            t.budget = strtod(argv[++i], &end);
            if (*end || !(t.budget > 0)) {
                fprintf(stderr, "oclml-tune: --budget needs a positive number of seconds\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--quick"))
            t.quick = true;
        else if (!strcmp(argv[i], "--verbose"))
            t.verbose = true;
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (t.budget < 0) t.budget = t.quick ? 10 : 120;
    t.t0 = now_s();

    char err[4096];
    oclml_ctx *ctx = NULL;
    oclml_status st = oclml_ctx_create(&ctx, &opts, err, sizeof err);
    if (st) {
        fprintf(stderr, "oclml-tune: no device: %s\n%s\n", oclml_status_name(st), err);
        return 1;
    }
    oclml_device_info info;
    oclml_ctx_device_info(ctx, &info);
    oclml_ctx_cl_objects(ctx, &t.context, &t.device, &t.queue);
    cl_device_type type = 0;
    size_t items[3] = {0, 0, 0};
    cl_ulong local = 0;
    clGetDeviceInfo(t.device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(t.device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof t.lim.max_work_group_size,
                    &t.lim.max_work_group_size, NULL);
    clGetDeviceInfo(t.device, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof items, items, NULL);
    clGetDeviceInfo(t.device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    t.lim.max_item[0] = items[0];
    t.lim.max_item[1] = items[1];
    t.lim.local_mem_bytes = (size_t)local;
    t.is_gpu = (type & CL_DEVICE_TYPE_GPU) != 0;

    char path[2100];
    struct stat st_out;
    if (out && !(stat(out, &st_out) == 0 && S_ISDIR(st_out.st_mode)))
        snprintf(path, sizeof path, "%s", out);
    else if (out) { /* a directory: the device's file in it */
        char name[200];
        device_file_name(info.device_name, name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", out, name);
    } else {
        oclml_cache_info ci;
        oclml_ctx_cache_info(ctx, &ci);
        if (!ci.enabled) {
            fprintf(stderr,
                    "oclml-tune: the cache directory is off (%s): give --out FILE or set "
                    "OCLML_CACHE_DIR\n",
                    ci.disabled_reason);
            return 1;
        }
        char name[200], dir[1100];
        device_file_name(info.device_name, name, sizeof name);
        snprintf(dir, sizeof dir, "%s/tuning", ci.dir);
        if (mkdirs(dir)) {
            fprintf(stderr, "oclml-tune: cannot create %s: %s\n", dir, strerror(errno));
            return 1;
        }
        snprintf(path, sizeof path, "%s/%s", dir, name);
    }
    fprintf(stderr,
            "oclml-tune: %s [%s], %s, work-groups up to %zu, %zu KiB local memory; budget %.0f "
            "s\n",
            info.device_name, info.platform_name, t.is_gpu ? "GPU" : "not a GPU",
            t.lim.max_work_group_size, t.lim.local_mem_bytes >> 10, t.budget);

    /* Buffers for the largest size, uniform in [-1, 1]. */
    t.cap_n = t.quick ? 256 : 2048;
    size_t cap = t.cap_n * t.cap_n;
    t.ha = malloc(cap * sizeof(float));
    t.hb = malloc(cap * sizeof(float));
    t.hc = malloc(cap * sizeof(float));
    if (!t.ha || !t.hb || !t.hc) {
        fprintf(stderr, "oclml-tune: out of host memory\n");
        return 1;
    }
    unsigned long long seed = 12345;
    for (size_t i = 0; i < cap; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        t.ha[i] = (float)((double)(seed >> 40) / (double)(1ULL << 24) * 2 - 1);
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        t.hb[i] = (float)((double)(seed >> 40) / (double)(1ULL << 24) * 2 - 1);
    }
    cl_int cerr;
    t.a = clCreateBuffer(t.context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, cap * sizeof(float),
                         t.ha, &cerr);
    if (t.a)
        t.b = clCreateBuffer(t.context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                             cap * sizeof(float), t.hb, &cerr);
    if (t.b) t.c = clCreateBuffer(t.context, CL_MEM_READ_WRITE, cap * sizeof(float), NULL, &cerr);
    if (!t.c) {
        fprintf(stderr, "oclml-tune: clCreateBuffer failed: %d\n", cerr);
        return 1;
    }

    /* Sizes: Xgemm at a large square (2048 where CLBlast's default takes under 0.1 s there,
     * else 1024 or 512), checked at half of it; XgemmDirect at two small squares. */
    char why[160] = "";
    size_t big = t.quick ? 128 : 2048;
    progress(&t, "timing CLBlast's own parameters...");
    double def_big = measure(&t, big, big, big, 0, why, sizeof why);
    while (!t.quick && def_big > 100 && big > 512) {
        big /= 2;
        def_big = measure(&t, big, big, big, 0, why, sizeof why);
    }
    if (def_big < 0) {
        progress_end(&t);
        fprintf(stderr, "oclml-tune: CLBlast's own GEMM fails on this device: %s\n", why);
        return 1;
    }
    size_t half = big / 2;
    size_t dsz[2] = {t.quick ? 32 : t.is_gpu ? 256 : 128, t.quick ? 64 : t.is_gpu ? 512 : 256};
    double def_half = measure(&t, half, half, half, 0, why, sizeof why);
    double def_d[2];
    for (int i = 0; i < 2; i++) def_d[i] = measure(&t, dsz[i], dsz[i], dsz[i], 0, why, sizeof why);
    progress_end(&t);

    /* The switch point's sizes: each kernel is timed over them right after its own search,
     * while its winner's program is still compiled (a program costs seconds on PoCL). */
    static const size_t SW_GPU[] = {64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048};
    static const size_t SW_CPU[] = {32, 64, 96, 128, 192, 256, 384, 512};
    static const size_t SW_QUICK[] = {16, 32, 64, 96};
    const size_t *sw = t.quick ? SW_QUICK : t.is_gpu ? SW_GPU : SW_CPU;
#define N_OF(a) (int)(sizeof a / sizeof a[0])
    int n_sw = t.quick ? N_OF(SW_QUICK) : t.is_gpu ? N_OF(SW_GPU) : N_OF(SW_CPU);
    double sw_time[2][N_OF(SW_GPU)]; /* [0] XgemmDirect, [1] Xgemm; SW_GPU is the longest */
    bool sw_ok[2] = {false, false};

    /* Xgemm until 55% of the budget, every GEMM on it; the best few again at both sizes, the
     * winner by the product of the two speeds. */
    /* --quick keeps one program for both searches (a program costs seconds on PoCL): the switch
     * between the sizes (128 on Xgemm, 32 and 64 on XgemmDirect), XgemmDirect's first candidate
     * set from the start, and no switch search. */
    const long x_switch = t.quick ? 100 : ALL_INDIRECT, d_switch = t.quick ? 100 : NO_INDIRECT;
    space xs, ds;
    build_xgemm_space(&xs, &t);
    build_direct_space(&ds, &t);
    if (t.quick && ds.n_front > 0)
        override(&t, "XgemmDirect", ds.front[ds.n_front - 1].v, OCLML_CLBLAST_DIRECT_N,
                 oclml_clblast_direct_names);
    if (!set_switch(&t, x_switch)) return 1;
    result xtop[4];
    result xbest = search(&t, &xs, "Xgemm", big, big, big, t.budget * 0.55, t.quick ? 1 : 1 << 30,
                          def_big, xtop, 4);
    double xbest_big = 0, xbest_half = 0, xscore = 0;
    for (int i = 0; i < 4 && xtop[i].found; i++) {
        progress(&t, "Xgemm: checking the best %d at %zu and %zu", i + 1, big, half);
        if (!override(&t, "Xgemm", xtop[i].v, OCLML_CLBLAST_XGEMM_N, oclml_clblast_xgemm_names))
            continue;
        double mb = measure(&t, big, big, big, 0, why, sizeof why);
        double mh = measure(&t, half, half, half, 0, why, sizeof why);
        if (mb < 0 || mh < 0) continue;
        double sc = gflops(big, big, big, mb) * gflops(half, half, half, mh);
        if (sc > xscore) xscore = sc, xbest = xtop[i], xbest_big = mb, xbest_half = mh;
    }
    progress_end(&t);
    bool x_set = xscore > 0 && gflops(big, big, big, xbest_big) > gflops(big, big, big, def_big);
    /* CLBlast's own values cannot be restored once overridden: where they were as fast (not
     * stored), the best set found stands in for them from here on. */
    if (xscore > 0)
        override(&t, "Xgemm", xbest.v, OCLML_CLBLAST_XGEMM_N, oclml_clblast_xgemm_names);
    if (xscore > 0 && !t.quick) {
        sw_ok[1] = true;
        for (int i = 0; i < n_sw && sw_ok[1]; i++) {
            progress(&t, "switch point: Xgemm at %zu", sw[i]);
            sw_time[1][i] = measure(&t, sw[i], sw[i], sw[i], 0, why, sizeof why);
            sw_ok[1] = sw_time[1][i] > 0;
        }
    }

    /* XgemmDirect until 90% of the budget, every GEMM on it: searched at the larger small size,
     * the best few again at both. */
    if (!set_switch(&t, d_switch)) return 1;
    result dtop[3];
    result dbest = search(&t, &ds, "XgemmDirect", dsz[1], dsz[1], dsz[1], t.budget * 0.9,
                          t.quick ? 1 : 1 << 30, def_d[1], dtop, 3);
    double d_ms[2] = {0, 0}, dscore = 0;
    for (int i = 0; i < 3 && dtop[i].found; i++) {
        progress(&t, "XgemmDirect: checking the best %d at %zu and %zu", i + 1, dsz[0], dsz[1]);
        if (!override(&t, "XgemmDirect", dtop[i].v, OCLML_CLBLAST_DIRECT_N,
                      oclml_clblast_direct_names))
            continue;
        double m0 = measure(&t, dsz[0], dsz[0], dsz[0], 0, why, sizeof why);
        double m1 = measure(&t, dsz[1], dsz[1], dsz[1], 0, why, sizeof why);
        if (m0 < 0 || m1 < 0) continue;
        double sc = gflops(dsz[0], dsz[0], dsz[0], m0) * gflops(dsz[1], dsz[1], dsz[1], m1);
        if (sc > dscore) dscore = sc, dbest = dtop[i], d_ms[0] = m0, d_ms[1] = m1;
    }
    progress_end(&t);
    bool d_set = dscore > 0 && dscore > gflops(dsz[0], dsz[0], dsz[0], def_d[0]) *
                                            gflops(dsz[1], dsz[1], dsz[1], def_d[1]);
    if (dscore > 0)
        override(&t, "XgemmDirect", dbest.v, OCLML_CLBLAST_DIRECT_N, oclml_clblast_direct_names);
    if (dscore > 0 && !t.quick) {
        sw_ok[0] = true;
        for (int i = 0; i < n_sw && sw_ok[0]; i++) {
            progress(&t, "switch point: XgemmDirect at %zu", sw[i]);
            sw_time[0][i] = measure(&t, sw[i], sw[i], sw[i], 0, why, sizeof why);
            sw_ok[0] = sw_time[0][i] > 0;
        }
    }
    progress_end(&t);

    /* The switch: the smallest size from which Xgemm is as fast as XgemmDirect (within 2%) at
     * every larger size; where Xgemm never caught up, just past the largest size timed (a guess
     * at twice that put 2048^3 on XgemmDirect on the H100, at 0.6x Xgemm's speed). */
    long sw_best = 0;
    if (sw_ok[0] && sw_ok[1]) {
        int first = n_sw;
        for (int i = n_sw - 1; i >= 0 && sw_time[1][i] <= sw_time[0][i] * 1.02; i--) first = i;
        sw_best = first == n_sw ? (long)sw[n_sw - 1] + 1 : (long)sw[first];
    }

    /* Final: everything as stored, against CLBlast's own (with --quick, the figures of the
     * searches, which saves compiling one more program). */
    double fin_big = xbest_big, fin_half = xbest_half, fin_d[2] = {d_ms[0], d_ms[1]};
    if (!t.quick && set_switch(&t, sw_best ? sw_best : ALL_INDIRECT)) {
        progress(&t, "timing the tuned parameters...");
        fin_big = measure(&t, big, big, big, 0, why, sizeof why);
        fin_half = measure(&t, half, half, half, 0, why, sizeof why);
        for (int i = 0; i < 2; i++)
            fin_d[i] = measure(&t, dsz[i], dsz[i], dsz[i], 0, why, sizeof why);
        progress_end(&t);
    }
    /* A kernel whose values are not stored runs on CLBlast's own: its figures are those. */
    if (!x_set) fin_big = def_big, fin_half = def_half;
    if (!d_set) fin_d[0] = def_d[0], fin_d[1] = def_d[1];

    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
    entry e[3];
    memset(e, 0, sizeof e);
    e[0].key = "clblast.xgemm", e[0].n = OCLML_CLBLAST_XGEMM_N, e[0].set = x_set;
    memcpy(e[0].v, xbest.v, sizeof xbest.v);
    snprintf(e[0].extra, sizeof e[0].extra,
             ", \"shape\": \"%zux%zux%zu\", \"gflops\": %.1f, \"default_gflops\": %.1f, "
             "\"device\": \"%s\", \"by\": \"oclml-tune\", \"clblast\": \"1.5.3\", \"date\": "
             "\"%s\"",
             big, big, big, gflops(big, big, big, xbest_big), gflops(big, big, big, def_big),
             info.device_name, date);
    e[1].key = "clblast.xgemm_direct", e[1].n = OCLML_CLBLAST_DIRECT_N, e[1].set = d_set;
    memcpy(e[1].v, dbest.v, sizeof dbest.v);
    snprintf(e[1].extra, sizeof e[1].extra,
             ", \"shape\": \"%zux%zux%zu\", \"gflops\": %.1f, \"default_gflops\": %.1f, "
             "\"device\": \"%s\", \"by\": \"oclml-tune\", \"clblast\": \"1.5.3\", \"date\": "
             "\"%s\"",
             dsz[1], dsz[1], dsz[1], gflops(dsz[1], dsz[1], dsz[1], d_ms[1]),
             gflops(dsz[1], dsz[1], dsz[1], def_d[1]), info.device_name, date);
    e[2].key = "clblast.gemm_switch", e[2].n = 1, e[2].set = sw_best > 0;
    e[2].v[0] = sw_best;
    snprintf(e[2].extra, sizeof e[2].extra,
             ", \"device\": \"%s\", \"by\": \"oclml-tune\", \"clblast\": \"1.5.3\", \"date\": "
             "\"%s\"",
             info.device_name, date);
    if (write_store(path, e, 3)) {
        fprintf(stderr, "oclml-tune: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }

    printf("CLBlast SGEMM on %s, row-major, no transposes (GFLOP/s):\n", info.device_name);
    printf("  %-18s %12s %12s %8s\n", "M=N=K", "CLBlast's own", "tuned", "ratio");
    const size_t sizes[4] = {big, half, dsz[1], dsz[0]};
    const double defs[4] = {def_big, def_half, def_d[1], def_d[0]};
    const double fins[4] = {fin_big, fin_half, fin_d[1], fin_d[0]};
    for (int i = 0; i < 4; i++) {
        if ((i == 2 && sizes[2] == sizes[1]) || (i == 3 && sizes[3] == sizes[1])) continue;
        double g0 = gflops(sizes[i], sizes[i], sizes[i], defs[i]);
        double g1 = gflops(sizes[i], sizes[i], sizes[i], fins[i]);
        printf("  %-18zu %12.1f %12.1f %8.2f\n", sizes[i], g0, g1, g0 > 0 ? g1 / g0 : 0);
    }
    for (int i = 0; i < 3; i++) {
        printf("  %-20s ", e[i].key);
        if (!e[i].set)
            printf("not stored (CLBlast's own %s)\n", i < 2 ? "values were as fast"
                                                      : t.quick
                                                          ? "switch: not searched with --quick"
                                                          : "switch kept");
        else
            for (int j = 0; j < e[i].n; j++)
                printf("%s%ld%s", j ? ":" : "", e[i].v[j], j + 1 == e[i].n ? "\n" : "");
    }
    if (sw_ok[0] && sw_ok[1]) {
        printf("  switch point (ms, XgemmDirect / Xgemm):");
        for (int i = 0; i < n_sw; i++)
            printf(" %zu: %.3f/%.3f", sw[i], sw_time[0][i], sw_time[1][i]);
        printf("\n");
    }
    printf("written to %s (%.0f s)\n", path, now_s() - t.t0);
    clReleaseMemObject(t.a);
    clReleaseMemObject(t.b);
    clReleaseMemObject(t.c);
    oclml_ctx_destroy(ctx);
    return 0;
}
