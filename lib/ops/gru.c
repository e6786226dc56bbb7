/* GRU step, sequence and step backward (cl/ops/gru.cl): fused kernels for small batches, one tiled
 * GEMM with the gates in its epilogue for large TORCH batches (cl/ops/gru_tiled.cl), GEMMs through
 * CLBlast for the backward. */
#include "ops/ops.h"

#include "../../cl/include/gru_abi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FILE_CL "gru.cl"

/* The fused step's program (both variants: CHO adds the r * h pass) and the backward's. */
static const oclml__program_spec FUSED = {FILE_CL, NULL, "oclml_gru_step_fused oclml_gru_cho_r", 0};
static const oclml__program_spec BACKWARD = {
    FILE_CL, NULL, "oclml_gru_bwd_r oclml_gru_bwd_gates oclml_gru_bwd_cho_r", 0};
/* From this batch size on, TORCH steps take the tiled kernel: the fused kernel re-reads the
 * weights for every block of batch rows. Below it the fused kernel wins: on the H100 at B64 I64
 * D256 it takes 27 us against 67-99 us for CLBlast's GEMMs. */
#define TILED_MIN_BATCH 128

typedef struct gru_args {
    const oclml_tensor *x, *h, *w_ih, *w_hh, *b_ih, *b_hh;
    oclml_tensor *h_new;
    size_t B, I, D;
} gru_args;

static oclml_status check_2d(oclml_ctx *ctx, const oclml_tensor *t, const char *name, size_t r,
                             size_t c) {
    return oclml__check_shape(ctx, t, name, 2, r, c, 0);
}

static oclml_status check_gru(oclml_ctx *ctx, oclml_gru_variant v, gru_args *a) {
    oclml_status st = oclml__check_ctx(ctx);
    if (st) return st;
    if (v != OCLML_GRU_TORCH && v != OCLML_GRU_CHO)
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "unknown GRU variant %d", (int)v);
    st = oclml__check_tensor(ctx, a->x, "x");
    if (!st) st = oclml__check_tensor(ctx, a->h, "h");
    if (st) return st;
    if (a->x->ndim != 2 || a->h->ndim != 2)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "x must be [B x I] and h [B x D]");
    a->B = a->x->shape[0];
    a->I = a->x->shape[1];
    a->D = a->h->shape[1];
    if (a->h->shape[0] != a->B)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "x has %zu rows, h has %zu", a->B,
                           a->h->shape[0]);
    if (a->B > 0xFFFFFFFFu || a->I > 0xFFFFFFFFu || a->D > 0x55555555u)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE, "GRU sizes exceed 32-bit indexing");
    st = check_2d(ctx, a->w_ih, "w_ih", 3 * a->D, a->I);
    if (!st) st = check_2d(ctx, a->w_hh, "w_hh", 3 * a->D, a->D);
    if (!st && a->b_ih) st = oclml__check_numel(ctx, a->b_ih, "b_ih", 3 * a->D);
    if (!st && a->b_hh) st = oclml__check_numel(ctx, a->b_hh, "b_hh", 3 * a->D);
    if (!st) st = check_2d(ctx, a->h_new, "h_new", a->B, a->D);
    if (st) return st;
    if (oclml__overlap(a->h_new, a->h) || oclml__overlap(a->h_new, a->x))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT,
                           "h_new must not overlap h or x (every unit reads all of h)");
    return OCLML_SUCCESS;
}

/* The kernels' bias flags (gru_abi.h). */
static cl_uint bias_flags(const oclml_tensor *b_ih, const oclml_tensor *b_hh) {
    return (b_ih ? GRU_B_IH : 0u) | (b_hh ? GRU_B_HH : 0u);
}

/* Segment width and batch rows per work-group for the fused kernels. */
static void fused_shape(const oclml_ctx *ctx, const gru_args *a, cl_uint *S, cl_uint *BB) {
    *S = ctx->caps.is_gpu ? 32 : 1;
    size_t want = (size_t)ctx->caps.compute_units * 16;
    size_t bb = a->B * a->D / want;
    *BB = (cl_uint)(bb < 1 ? 1 : bb > 16 ? 16 : bb);
}

static oclml_status step_fused(oclml_ctx *ctx, oclml_gru_variant v, const gru_args *a) {
    cl_uint S, BB, flags = bias_flags(a->b_ih, a->b_hh), cho = v == OCLML_GRU_CHO;
    cl_uint B = (cl_uint)a->B, I = (cl_uint)a->I, D = (cl_uint)a->D;
    fused_shape(ctx, a, &S, &BB);
    size_t groups_b = (a->B + BB - 1) / BB;
    cl_mem hvec = a->h->mem, rh = NULL;
    cl_ulong hvo = oclml__opt_offset(a->h);
    oclml_status st = OCLML_SUCCESS;
    cl_mem x = a->x->mem, h = a->h->mem, wi = a->w_ih->mem, wh = a->w_hh->mem,
           bi = oclml__opt_mem(a->b_ih), bh = oclml__opt_mem(a->b_hh);
    cl_ulong xo = oclml__opt_offset(a->x), ho = oclml__opt_offset(a->h),
             wio = oclml__opt_offset(a->w_ih), who = oclml__opt_offset(a->w_hh),
             bio = oclml__opt_offset(a->b_ih), bho = oclml__opt_offset(a->b_hh);
    if (cho) {
        cl_kernel kr;
        st = oclml__kernel(ctx, &FUSED, "oclml_gru_cho_r", &kr);
        if (!st) st = oclml__scratch_get(ctx, a->B * a->D * sizeof(float), &rh);
        if (st) return st;
        oclml__arg ar[] = {
            OCLML_ARG(x),  OCLML_ARG(xo),    OCLML_ARG(h),  OCLML_ARG(ho),
            OCLML_ARG(wi), OCLML_ARG(wio),   OCLML_ARG(wh), OCLML_ARG(who),
            OCLML_ARG(bi), OCLML_ARG(bio),   OCLML_ARG(bh), OCLML_ARG(bho),
            OCLML_ARG(rh), OCLML_ARG(flags), OCLML_ARG(B),  OCLML_ARG(I),
            OCLML_ARG(D),  OCLML_ARG(S),     OCLML_ARG(BB), OCLML_LOCAL(S * sizeof(float))};
        size_t gl[2] = {a->D * S, groups_b}, lo[2] = {S, 1};
        st = oclml__launch(ctx, kr, ar, 20, 2, gl, lo, NULL);
        hvec = rh;
        hvo = 0;
    }
    cl_kernel k;
    if (!st) st = oclml__kernel(ctx, &FUSED, "oclml_gru_step_fused", &k);
    if (!st) {
        cl_mem hn = a->h_new->mem;
        cl_ulong hno = oclml__opt_offset(a->h_new);
        oclml__arg args[] = {
            OCLML_ARG(x),   OCLML_ARG(xo),    OCLML_ARG(h),
            OCLML_ARG(ho),  OCLML_ARG(hvec),  OCLML_ARG(hvo),
            OCLML_ARG(wi),  OCLML_ARG(wio),   OCLML_ARG(wh),
            OCLML_ARG(who), OCLML_ARG(bi),    OCLML_ARG(bio),
            OCLML_ARG(bh),  OCLML_ARG(bho),   OCLML_ARG(hn),
            OCLML_ARG(hno), OCLML_ARG(flags), OCLML_ARG(cho),
            OCLML_ARG(B),   OCLML_ARG(I),     OCLML_ARG(D),
            OCLML_ARG(S),   OCLML_ARG(BB),    OCLML_LOCAL((3 * S + 8) * sizeof(float))};
        size_t gl[2] = {a->D * 3 * S, groups_b}, lo[2] = {3 * S, 1};
        st = oclml__launch(ctx, k, args, 24, 2, gl, lo, NULL);
    }
    if (rh) oclml__scratch_put(ctx, rh);
    return st;
}

/* A tensor view of a scratch buffer, for calling the GEMM op internally. */
static oclml_tensor view2(oclml_ctx *ctx, cl_mem m, size_t r, size_t c) {
    oclml_tensor t;
    memset(&t, 0, sizeof t);
    t.ctx = ctx;
    t.mem = m;
    t.ndim = 2;
    t.shape[0] = r;
    t.shape[1] = c;
    t.numel = r * c;
    t.dtype = OCLML_FLOAT32;
    t.elem_bytes = sizeof(float);
    return t;
}

/* The tiled kernel's shape (cl/ops/gru_tiled.cl): wm x wn warps per K-group, each mt x nt blocks of
 * 16 rows x 8 units, ksplit K-groups. */
typedef struct tile_shape {
    unsigned wm, wn, mt, nt, ksplit;
} tile_shape;

static size_t tile_items(const tile_shape *s) { return 32u * s->wm * s->wn * s->ksplit; }
static size_t tile_rows(const tile_shape *s) { return 16u * s->wm * s->mt; }
static size_t tile_units(const tile_shape *s) { return 8u * s->wn * s->nt; }

/* Work-groups along D units, along B rows, and in all. */
static size_t tile_groups_d(const tile_shape *s, size_t D) {
    return (D + tile_units(s) - 1) / tile_units(s);
}
static size_t tile_groups_b(const tile_shape *s, size_t B) {
    return (B + tile_rows(s) - 1) / tile_rows(s);
}
static size_t tile_count(const tile_shape *s, size_t B, size_t D) {
    return tile_groups_d(s, D) * tile_groups_b(s, B);
}

/* One chunk of rows (32 columns per K-group, rows padded by 4), or the K-groups' hand-over. */
static size_t tile_local_bytes(const tile_shape *s) {
    size_t chunk = (tile_rows(s) + 3 * tile_units(s)) * (32 * s->ksplit + 4);
    size_t hand = s->ksplit > 1 ? (size_t)16 * s->mt * s->nt * 32 * s->wm * s->wn : 0;
    return (chunk > hand ? chunk : hand) * sizeof(float);
}

static bool tile_fits(const oclml_ctx *ctx, const tile_shape *s) {
    return tile_items(s) <= ctx->caps.max_work_group_size &&
           tile_local_bytes(s) <= ctx->caps.local_mem_bytes;
}

/* The tuning key gru.tile = wm:wn:mt:nt:ksplit sets the shape (tuning on a new device; a shape
 * the device cannot run or the kernel cannot tile is ignored). Otherwise, on
 * tensor cores: 64 x 16 tiles (warps of 32 x 8; on the H100 every shape from 32 x 16 to 128 x 32
 * and cp.async staging measured within 49-66 us at B4096, this one the fastest, with few
 * registers), with FMAs: 64 x 32 (fewer reads per FMA). Where the tiles would leave the compute
 * units less than two work-groups each, a second K-group doubles the warps (B256 D1024: 48.6
 * against 51.8 us); and where 64 x 32 tiles then fill between half and all of the compute units
 * once, those (16 warps, one work-group a unit: no unit runs two while others run one, and each
 * staged row serves twice the units; B256 D1024 46.8 against 48.6-49.3 us). */
static tile_shape choose_tile(const oclml_ctx *ctx, const gru_args *a, bool mma) {
    tile_shape s = {2, 2, 2, mma ? 1 : 2, 1};
    tile_shape e = {(unsigned)oclml__tune(ctx, OCLML__TUNE_GRU_TILE, 0),
                    (unsigned)oclml__tune(ctx, OCLML__TUNE_GRU_TILE, 1),
                    (unsigned)oclml__tune(ctx, OCLML__TUNE_GRU_TILE, 2),
                    (unsigned)oclml__tune(ctx, OCLML__TUNE_GRU_TILE, 3),
                    (unsigned)oclml__tune(ctx, OCLML__TUNE_GRU_TILE, 4)};
    if (e.wm && e.wn && e.mt && e.nt && (e.ksplit == 1 || e.ksplit == 2) && 4 * e.mt % e.wn == 0 &&
        6 * e.nt % e.wm == 0 && tile_fits(ctx, &e))
        return e;
    size_t cus = ctx->caps.compute_units ? ctx->caps.compute_units : 1;
    if (ctx->caps.is_gpu && tile_count(&s, a->B, a->D) < 2 * cus) {
        s.ksplit = 2;
        tile_shape wide = s;
        wide.wn *= 2;
        size_t n = tile_count(&wide, a->B, a->D);
        if (mma && 2 * n > cus && n <= cus && tile_fits(ctx, &wide)) s = wide;
    }
    if (!tile_fits(ctx, &s)) s.ksplit = 1;
    return s;
}

/* Whether the tiled step runs on TF32 tensor cores: where the device has them, unless the tuning
 * key gru.mma is 0. */
static bool use_mma(oclml_ctx *ctx) {
    return oclml__tune(ctx, OCLML__TUNE_GRU_MMA, 0) != 0 && ctx->caps.is_gpu &&
           oclml__caps_mma(ctx);
}

/* The tiled step's program for a tile shape. */
typedef struct tiled_variant {
    char defines[160];
    oclml__program_spec spec;
} tiled_variant;

static void tiled_variant_init(tiled_variant *v, const tile_shape *ts, bool vec4, bool mma) {
    snprintf(
        v->defines, sizeof v->defines,
        "-DTILE_WM=%u -DTILE_WN=%u -DTILE_MT=%u -DTILE_NT=%u -DTILE_KSPLIT=%u -DTILE_VEC4=%d%s",
        ts->wm, ts->wn, ts->mt, ts->nt, ts->ksplit, vec4, mma ? " -DTILE_MMA=1" : "");
    /* Four accumulator sets and the staged float4 a work-item: the default cap of 64 registers
     * would spill them (a work-group of up to 256 fits 255 each). */
    v->spec = (oclml__program_spec){"gru_tiled.cl", v->defines, "oclml_gru_step_tiled", 255};
}

/* The tiled step for TORCH batches from TILED_MIN_BATCH on: tensor cores (3xTF32, fp32
 * accuracy) where the device has TF32 mma.sync, FMAs elsewhere (and with gru.mma = 0).
 * Returns OCLML_ERR_UNSUPPORTED where the device cannot run its work-groups (the caller then
 * takes the fused kernel). */
static oclml_status step_tiled(oclml_ctx *ctx, const gru_args *a) {
    bool mma = use_mma(ctx);
    tile_shape ts = choose_tile(ctx, a, mma);
    if (!tile_fits(ctx, &ts)) return OCLML_ERR_UNSUPPORTED;
    cl_uint flags = bias_flags(a->b_ih, a->b_hh), B = (cl_uint)a->B, I = (cl_uint)a->I,
            D = (cl_uint)a->D;
    cl_mem x = a->x->mem, h = a->h->mem, wi = a->w_ih->mem, wh = a->w_hh->mem,
           bi = oclml__opt_mem(a->b_ih), bh = oclml__opt_mem(a->b_hh), hn = a->h_new->mem;
    cl_ulong xo = oclml__opt_offset(a->x), ho = oclml__opt_offset(a->h),
             wio = oclml__opt_offset(a->w_ih), who = oclml__opt_offset(a->w_hh),
             bio = oclml__opt_offset(a->b_ih), bho = oclml__opt_offset(a->b_hh),
             hno = oclml__opt_offset(a->h_new);
    /* float4 loads need every row start 16-byte aligned. */
    bool vec4 = a->I % 4 == 0 && a->D % 4 == 0 && xo % 4 == 0 && ho % 4 == 0 && wio % 4 == 0 &&
                who % 4 == 0;
    tiled_variant v;
    tiled_variant_init(&v, &ts, vec4, mma);
    cl_kernel k;
    oclml_status st = oclml__kernel(ctx, &v.spec, "oclml_gru_step_tiled", &k);
    if (st) return st;
    oclml__arg args[] = {OCLML_ARG(x),
                         OCLML_ARG(xo),
                         OCLML_ARG(h),
                         OCLML_ARG(ho),
                         OCLML_ARG(wi),
                         OCLML_ARG(wio),
                         OCLML_ARG(wh),
                         OCLML_ARG(who),
                         OCLML_ARG(bi),
                         OCLML_ARG(bio),
                         OCLML_ARG(bh),
                         OCLML_ARG(bho),
                         OCLML_ARG(hn),
                         OCLML_ARG(hno),
                         OCLML_ARG(flags),
                         OCLML_ARG(B),
                         OCLML_ARG(I),
                         OCLML_ARG(D),
                         OCLML_LOCAL(tile_local_bytes(&ts))};
    size_t local[2] = {tile_items(&ts), 1};
    size_t global[2] = {tile_groups_d(&ts, a->D) * local[0], tile_groups_b(&ts, a->B)};
    return oclml__launch(ctx, k, args, 19, 2, global, local, NULL);
}

/* One step: the tiled kernel for large TORCH batches, the fused kernels otherwise. */
static oclml_status step(oclml_ctx *ctx, oclml_gru_variant v, const gru_args *a) {
    if (v == OCLML_GRU_TORCH && a->B >= TILED_MIN_BATCH) {
        oclml_status st = step_tiled(ctx, a);
        if (st != OCLML_ERR_UNSUPPORTED) return st;
    }
    return step_fused(ctx, v, a);
}

oclml_status oclml_gru_step(oclml_ctx *ctx, oclml_gru_variant variant, const oclml_tensor *x,
                            const oclml_tensor *h, const oclml_tensor *w_ih,
                            const oclml_tensor *w_hh, const oclml_tensor *b_ih,
                            const oclml_tensor *b_hh, oclml_tensor *h_new) {
    gru_args a = {x, h, w_ih, w_hh, b_ih, b_hh, h_new, 0, 0, 0};
    oclml_status st = check_gru(ctx, variant, &a);
    if (st) return st;
    return step(ctx, variant, &a);
}

/* A [rows x cols] view at an element offset of a tensor's buffer (for one step of a sequence). */
static oclml_tensor view_at(const oclml_tensor *t, size_t elem_off, size_t r, size_t c) {
    oclml_tensor v = view2(t->ctx, t->mem, r, c);
    v.offset_bytes = t->offset_bytes + elem_off * sizeof(float);
    return v;
}

oclml_status oclml_gru_sequence(oclml_ctx *ctx, oclml_gru_variant variant, const oclml_tensor *x,
                                const oclml_tensor *h0, const oclml_tensor *w_ih,
                                const oclml_tensor *w_hh, const oclml_tensor *b_ih,
                                const oclml_tensor *b_hh, oclml_tensor *hs) {
    oclml_status st = oclml__check_ctx(ctx);
    if (!st) st = oclml__check_tensor(ctx, x, "x");
    if (!st) st = oclml__check_tensor(ctx, h0, "h0");
    if (!st) st = oclml__check_tensor(ctx, hs, "hs");
    if (st) return st;
    if (x->ndim != 3 || h0->ndim != 2 || hs->ndim != 3)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "x must be [T x B x I], h0 [B x D], hs [T x B x D]");
    size_t T = x->shape[0], B = x->shape[1], I = x->shape[2], D = h0->shape[1];
    if (hs->shape[0] != T || hs->shape[1] != B || hs->shape[2] != D || h0->shape[0] != B)
        return oclml__fail(ctx, OCLML_ERR_INVALID_SHAPE,
                           "hs must be [%zu x %zu x %zu] and h0 [%zu x %zu]", T, B, D, B, D);
    /* Validate everything once, on step 0's views. */
    oclml_tensor x0 = view_at(x, 0, B, I), out0 = view_at(hs, 0, B, D);
    gru_args a = {&x0, h0, w_ih, w_hh, b_ih, b_hh, &out0, 0, 0, 0};
    st = check_gru(ctx, variant, &a);
    if (st) return st;
    if (oclml__overlap(hs, x) || oclml__overlap(hs, h0))
        return oclml__fail(ctx, OCLML_ERR_INVALID_ARGUMENT, "hs must not overlap x or h0");
    /* Each step's kernel reads its x directly: the tiled one folds the input projection into
     * its K loop, so a separate GEMM over all steps' inputs would only add traffic. */
    for (size_t t = 0; t < T && !st; t++) {
        oclml_tensor xt = view_at(x, t * B * I, B, I), ht = view_at(hs, t * B * D, B, D);
        oclml_tensor hprev = t ? view_at(hs, (t - 1) * B * D, B, D) : *h0;
        gru_args s = {&xt, &hprev, w_ih, w_hh, b_ih, b_hh, &ht, B, I, D};
        st = step(ctx, variant, &s);
    }
    return st;
}

/* ---- backward of one step ---- */

static oclml_status elementwise_launch(oclml_ctx *ctx, const char *name, const oclml__arg *args,
                                       unsigned nargs, size_t n) {
    cl_kernel k;
    oclml_status st = oclml__kernel(ctx, &BACKWARD, name, &k);
    if (st) return st;
    size_t local = ctx->caps.max_work_group_size < 256 ? ctx->caps.max_work_group_size : 256;
    size_t global = (n + local - 1) / local * local;
    return oclml__launch(ctx, k, args, nargs, 1, &global, &local, NULL);
}

/* A view of rows [r0, r0 + r) of a 2-D tensor. */
static oclml_tensor rows_of(const oclml_tensor *t, size_t r0, size_t r) {
    return view_at(t, r0 * t->shape[1], r, t->shape[1]);
}

static oclml_status gru_step_backward_run(
    oclml_ctx *ctx, oclml_gru_variant variant, const oclml_tensor *x, const oclml_tensor *h,
    const oclml_tensor *w_ih, const oclml_tensor *w_hh, const oclml_tensor *b_ih,
    const oclml_tensor *b_hh, const oclml_tensor *dh_new, oclml_tensor *dx, oclml_tensor *dh,
    oclml_tensor *dw_ih, oclml_tensor *dw_hh, oclml_tensor *db_ih, oclml_tensor *db_hh) {
    /* Shapes as the forward; dh_new in h_new's place. */
    gru_args a = {x, h, w_ih, w_hh, b_ih, b_hh, (oclml_tensor *)dh_new, 0, 0, 0};
    oclml_status st = check_gru(ctx, variant, &a);
    if (st) return st;
    size_t B = a.B, I = a.I, D = a.D;
    if (dx) st = check_2d(ctx, dx, "dx", B, I);
    if (!st && dh) st = check_2d(ctx, dh, "dh", B, D);
    if (!st && dw_ih) st = check_2d(ctx, dw_ih, "dw_ih", 3 * D, I);
    if (!st && dw_hh) st = check_2d(ctx, dw_hh, "dw_hh", 3 * D, D);
    if (!st && db_ih) st = oclml__check_numel(ctx, db_ih, "db_ih", 3 * D);
    if (!st && db_hh) st = oclml__check_numel(ctx, db_hh, "db_hh", 3 * D);
    if (st) return st;
    bool cho = variant == OCLML_GRU_CHO;
    /* Scratch: gx, gh, dgi, dgh [B x 3D]; dan, dh_acc, (CHO) r, rh, ghn, drh [B x D]; ones [B]. */
    cl_mem m[11] = {NULL};
    size_t big = B * 3 * D * sizeof(float), small = B * D * sizeof(float);
    /* The four CHO buffers (r, r*h, its projection, its gradient) only for CHO. */
    for (int i = 0; i < (cho ? 10 : 6) && !st; i++)
        st = oclml__scratch_get(ctx, i < 4 ? big : small, &m[i]);
    if (!st && (db_ih || db_hh)) st = oclml__scratch_get(ctx, B * sizeof(float), &m[10]);
    oclml_tensor gx = view2(ctx, m[0], B, 3 * D), gh = view2(ctx, m[1], B, 3 * D),
                 dgi = view2(ctx, m[2], B, 3 * D), dgh = view2(ctx, m[3], B, 3 * D),
                 dan = view2(ctx, m[4], B, D), dhacc = view2(ctx, m[5], B, D),
                 rh = view2(ctx, m[7], B, D), ghn = view2(ctx, m[8], B, D),
                 drh = view2(ctx, m[9], B, D), ones = view2(ctx, m[10], B, 1);
    oclml_tensor w_hn = rows_of(w_hh, 2 * D, D);
    cl_uint flags = bias_flags(b_ih, b_hh), ucho = cho, uB = (cl_uint)B, uD = (cl_uint)D;
    cl_mem bi = oclml__opt_mem(b_ih), bh = oclml__opt_mem(b_hh);
    cl_ulong bio = oclml__opt_offset(b_ih), bho = oclml__opt_offset(b_hh),
             ho = oclml__opt_offset(h), dho = oclml__opt_offset(dh_new);
    /* Forward pre-activations. */
    if (!st) st = oclml_gemm(ctx, OCLML_NO_TRANS, OCLML_TRANS, 1.0f, x, w_ih, 0.0f, &gx);
    if (!st) st = oclml_gemm(ctx, OCLML_NO_TRANS, OCLML_TRANS, 1.0f, h, w_hh, 0.0f, &gh);
    if (!st && cho) {
        oclml__arg ar[] = {OCLML_ARG(m[0]), OCLML_ARG(m[1]), OCLML_ARG(bi),     OCLML_ARG(bio),
                           OCLML_ARG(bh),   OCLML_ARG(bho),  OCLML_ARG(h->mem), OCLML_ARG(ho),
                           OCLML_ARG(m[6]), OCLML_ARG(m[7]), OCLML_ARG(flags),  OCLML_ARG(uB),
                           OCLML_ARG(uD)};
        st = elementwise_launch(ctx, "oclml_gru_bwd_r", ar, 13, B * D);
        if (!st) st = oclml_gemm(ctx, OCLML_NO_TRANS, OCLML_TRANS, 1.0f, &rh, &w_hn, 0.0f, &ghn);
    }
    if (!st) {
        oclml__arg ag[] = {
            OCLML_ARG(m[0]), OCLML_ARG(m[1]),        OCLML_ARG(m[8]), OCLML_ARG(bi),
            OCLML_ARG(bio),  OCLML_ARG(bh),          OCLML_ARG(bho),  OCLML_ARG(h->mem),
            OCLML_ARG(ho),   OCLML_ARG(dh_new->mem), OCLML_ARG(dho),  OCLML_ARG(m[2]),
            OCLML_ARG(m[3]), OCLML_ARG(m[4]),        OCLML_ARG(m[5]), OCLML_ARG(flags),
            OCLML_ARG(ucho), OCLML_ARG(uB),          OCLML_ARG(uD)};
        st = elementwise_launch(ctx, "oclml_gru_bwd_gates", ag, 19, B * D);
    }
    if (!st && cho) { /* d(r h) = da_n W_hn, then da_r and r's share of dh */
        st = oclml_gemm(ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, &dan, &w_hn, 0.0f, &drh);
        oclml__arg ac[] = {OCLML_ARG(m[9]), OCLML_ARG(m[6]), OCLML_ARG(h->mem),
                           OCLML_ARG(ho),   OCLML_ARG(m[2]), OCLML_ARG(m[3]),
                           OCLML_ARG(m[5]), OCLML_ARG(uB),   OCLML_ARG(uD)};
        if (!st) st = elementwise_launch(ctx, "oclml_gru_bwd_cho_r", ac, 9, B * D);
    }
    /* Input and state gradients. */
    if (!st && dx) st = oclml_gemm(ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, &dgi, w_ih, 0.0f, dx);
    if (!st && dh) {
        st = oclml_copy(ctx, &dhacc, dh);
        if (!st) st = oclml_gemm(ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, &dgh, w_hh, 1.0f, dh);
    }
    /* Parameter gradients (overwritten). */
    if (!st && dw_ih) st = oclml_gemm(ctx, OCLML_TRANS, OCLML_NO_TRANS, 1.0f, &dgi, x, 0.0f, dw_ih);
    if (!st && dw_hh) {
        st = oclml_gemm(ctx, OCLML_TRANS, OCLML_NO_TRANS, 1.0f, &dgh, h, 0.0f, dw_hh);
        oclml_tensor dw_hn = rows_of(dw_hh, 2 * D, D);
        if (!st && cho)
            st = oclml_gemm(ctx, OCLML_TRANS, OCLML_NO_TRANS, 1.0f, &dan, &rh, 0.0f, &dw_hn);
    }
    if (!st && (db_ih || db_hh)) st = oclml_fill(ctx, &ones, 1.0f);
    if (!st && db_ih) {
        oclml_tensor out = view_at(db_ih, 0, 3 * D, 1);
        st = oclml_gemm(ctx, OCLML_TRANS, OCLML_NO_TRANS, 1.0f, &dgi, &ones, 0.0f, &out);
    }
    if (!st && db_hh) {
        oclml_tensor out = view_at(db_hh, 0, 3 * D, 1);
        st = oclml_gemm(ctx, OCLML_TRANS, OCLML_NO_TRANS, 1.0f, &dgh, &ones, 0.0f, &out);
        if (!st && cho) { /* db_hn: the n gate's hidden bias gradient is sum of da_n */
            oclml_tensor out_n = view_at(db_hh, 2 * D, D, 1);
            st = oclml_gemm(ctx, OCLML_TRANS, OCLML_NO_TRANS, 1.0f, &dan, &ones, 0.0f, &out_n);
        }
    }
    for (int i = 0; i < 11; i++)
        if (m[i]) oclml__scratch_put(ctx, m[i]);
    return st;
}

oclml_status oclml_gru_step_backward(oclml_ctx *ctx, oclml_gru_variant variant,
                                     const oclml_tensor *x, const oclml_tensor *h,
                                     const oclml_tensor *w_ih, const oclml_tensor *w_hh,
                                     const oclml_tensor *b_ih, const oclml_tensor *b_hh,
                                     const oclml_tensor *dh_new, oclml_tensor *dx, oclml_tensor *dh,
                                     oclml_tensor *dw_ih, oclml_tensor *dw_hh, oclml_tensor *db_ih,
                                     oclml_tensor *db_hh) {
    uint64_t key = oclml__rehearsal_key(0, "gru_step_backward", 17);
    key = oclml__rehearsal_key(key, &variant, sizeof variant);
    key = oclml__rehearsal_key_tensor(key, x);
    key = oclml__rehearsal_key_tensor(key, h);
    key = oclml__rehearsal_key_tensor(key, w_ih);
    key = oclml__rehearsal_key_tensor(key, w_hh);
    key = oclml__rehearsal_key_tensor(key, b_ih);
    key = oclml__rehearsal_key_tensor(key, b_hh);
    key = oclml__rehearsal_key_tensor(key, dh_new);
    key = oclml__rehearsal_key_tensor(key, dx);
    key = oclml__rehearsal_key_tensor(key, dh);
    key = oclml__rehearsal_key_tensor(key, dw_ih);
    key = oclml__rehearsal_key_tensor(key, dw_hh);
    key = oclml__rehearsal_key_tensor(key, db_ih);
    key = oclml__rehearsal_key_tensor(key, db_hh);
    OCLML__REHEARSED(ctx, key,
                     gru_step_backward_run(ctx, variant, x, h, w_ih, w_hh, b_ih, b_hh, dh_new, dx,
                                           dh, dw_ih, dw_hh, db_ih, db_hh));
}

/* ---- the op list's planner: the fused kernels, and the tiled step for batches of 256 and
 * 4096 at hidden sizes 256 and 1024 (float4 rows) ---- */
void oclml__gru_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    if (strstr(op, "backward")) {
        oclml__warm_add(list, op, "backward", BACKWARD);
        return;
    }
    oclml__warm_add(list, op, "fused (batches below 128)", FUSED);
    bool mma = use_mma(ctx);
    static const size_t shapes[][3] = {{256, 256, 1024}, {4096, 64, 256}, {512, 256, 256}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        gru_args a = {.B = shapes[i][0], .I = shapes[i][1], .D = shapes[i][2]};
        tile_shape ts = choose_tile(ctx, &a, mma);
        if (!tile_fits(ctx, &ts)) continue;
        tiled_variant v;
        tiled_variant_init(&v, &ts, true, mma);
        char what[96];
        snprintf(what, sizeof what, "tiled %s, B%zu D%zu", mma ? "TF32 tensor cores" : "FMA", a.B,
                 a.D);
        oclml__warm_add(list, op, what, v.spec);
    }
}
