/* The data gradient of stride-1, dilation-1, one-group convolutions into few channels, computed
 * directly (cl/ops/conv_direct_dx.cl): an image model's first layer (3 colour channels of 5x5
 * taps from 32 output channels) leaves the GEMM paths products of 3 rows in tiles of 16 or 32,
 * and col2im folds 25 unfolded copies of the image. The same kernel, with the bias, is the
 * forward of a transposed convolution into an image's colour channels (a decoder's last layer).
 * Where: the tuning key conv.direct_dx (1 wherever it applies, 0 never); by default (-1) where
 * the products run on tensor cores: against the GEMM paths on the H100, 3 channels from 32 of
 * 5x5 taps run 2.8x faster, 3 from 16 of 3x3 3.4x, 1 from 32 on 28x28 planes 1.1x
 * (bench/DECISIONS.md, "Direct data gradient").
 * Applies to at most MOST_CHANNELS channels and MOST_TAPS taps a side, on devices with 256
 * work-items a group and the local memory the tile needs; by default only to planes of at least
 * AUTO_MIN_PLANE positions (the sizes timed). */
#include "ops/conv.h"
#include "ops/ops.h"

#include <stdio.h>

#define MOST_CHANNELS 4
#define MOST_TAPS 7
/* The kernel's tile (cl/ops/conv_direct_dx.cl): a work-group of THREADS work-items owns
 * TILE_ROWS x TILE_COLS positions and stages KC output channels' dy rows and weights. */
#define THREADS 256
#define TILE_ROWS 32
#define TILE_COLS 32
#define KC 4

static size_t local_bytes(const conv_shape *s) {
    return (size_t)KC * ((TILE_ROWS + s->R - 1) * (TILE_COLS + s->S - 1) + s->C * s->R * s->S) *
           sizeof(float);
}

/* The tiles covering one image's H x W plane: rows, columns. */
static size_t tile_rows(const conv_shape *s) { return (s->H + TILE_ROWS - 1) / TILE_ROWS; }
static size_t tile_cols(const conv_shape *s) { return (s->W + TILE_COLS - 1) / TILE_COLS; }

static bool shape_applies(const oclml_ctx *ctx, const conv_shape *s) {
    return s->groups == 1 && s->C <= MOST_CHANNELS && s->R <= MOST_TAPS && s->S <= MOST_TAPS &&
           s->sh == 1 && s->sw == 1 && s->dh == 1 && s->dw == 1 &&
           ctx->caps.max_work_group_size >= THREADS && local_bytes(s) <= ctx->caps.local_mem_bytes;
}

/* Work-groups a launch may have (one a tile of an image). */
#define MOST_GROUPS ((size_t)1 << 24)
/* Image planes auto takes at least: the timed ones were 28x28 and larger; smaller planes leave
 * most of a 32x32 tile's work-items idle. */
#define AUTO_MIN_PLANE (28 * 28)

bool oclml__conv_data_gradient_direct_applies(oclml_ctx *ctx, const conv_shape *s) {
    if (!shape_applies(ctx, s)) return false;
    if (tile_rows(s) * tile_cols(s) > MOST_GROUPS / s->N) return false;
    long forced = oclml__tune(ctx, OCLML__TUNE_CONV_DIRECT_DX, 0);
    if (forced >= 0) return forced > 0;
    return s->H * s->W >= AUTO_MIN_PLANE && oclml__tune(ctx, OCLML__TUNE_GEMM_OWN, 0) != 0 &&
           oclml__gemm_gather_fast(ctx);
}

static oclml__program_spec program_of(const conv_shape *s, char *defines, size_t len) {
    snprintf(defines, len, "-DDX_C=%zu -DDX_R=%zu -DDX_S=%zu", s->C, s->R, s->S);
    return (oclml__program_spec){"conv_direct_dx.cl", defines, "oclml_conv_dx_direct", 0};
}

oclml_status oclml__conv_data_gradient_direct(oclml_ctx *ctx, const conv_shape *s,
                                              const oclml_tensor *w, const oclml_tensor *dy,
                                              oclml_tensor *dx, const oclml_tensor *b) {
    char defines[64];
    const oclml__program_spec spec = program_of(s, defines, sizeof defines);
    cl_kernel k;
    oclml_status st = oclml__kernel(ctx, &spec, "oclml_conv_dx_direct", &k);
    if (st) return st;
    cl_mem ym = dy->mem, wm = w->mem, xm = dx->mem, bm = oclml__opt_mem(b);
    cl_ulong y_off = oclml__elem_offset(dy), w_off = oclml__elem_offset(w),
             x_off = oclml__elem_offset(dx), b_off = oclml__opt_offset(b);
    const size_t tiles_y = tile_rows(s), tiles_x = tile_cols(s);
    cl_uint has_bias = b != NULL, K = (cl_uint)s->K, H = (cl_uint)s->H, W = (cl_uint)s->W,
            P = (cl_uint)s->P, Q = (cl_uint)s->Q, ph = s->ph, pw = s->pw, ty = (cl_uint)tiles_y,
            tx = (cl_uint)tiles_x;
    oclml__arg args[] = {OCLML_ARG(ym),       OCLML_ARG(y_off), OCLML_ARG(wm), OCLML_ARG(w_off),
                         OCLML_ARG(xm),       OCLML_ARG(x_off), OCLML_ARG(bm), OCLML_ARG(b_off),
                         OCLML_ARG(has_bias), OCLML_ARG(K),     OCLML_ARG(H),  OCLML_ARG(W),
                         OCLML_ARG(P),        OCLML_ARG(Q),     OCLML_ARG(ph), OCLML_ARG(pw),
                         OCLML_ARG(ty),       OCLML_ARG(tx)};
    size_t local = THREADS, global = s->N * tiles_y * tiles_x * THREADS;
    return oclml__launch(ctx, k, args, sizeof args / sizeof args[0], 1, &global, &local, NULL);
}

void oclml__conv_describe_direct_dx(const conv_shape *s, char *text, size_t len) {
    snprintf(text, len, "direct (%dx%d tiles of %zu channels, %d output channels a chunk)",
             TILE_ROWS, TILE_COLS, s->C, KC);
}

void oclml__conv_direct_dx_warm(const conv_shape *s, const char *op, oclml__warm_list *list) {
    char defines[64];
    oclml__warm_add(list, op, "direct data gradient", program_of(s, defines, sizeof defines));
}
