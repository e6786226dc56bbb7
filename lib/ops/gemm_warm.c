/* The GEMM ops' warm lists: the products prewarm builds, and for checks of the kernels every
 * epilogue and operand form the ops give a product (gemm_plan.c plans each one). */
#include "ops/gemm.h"
#include "ops/ops.h"

#include <stdio.h>

/* A buffer that the warm lists name and never touch: a planner reads only whether there is
 * one (a bias, the pre-activation output). */
static char placeholder;
#define PLACEHOLDER_BUFFER ((cl_mem)(void *)&placeholder)

/* For checks of the kernels (oclml__warm_list.every_shape): the sizes of the common list with
 * each epilogue and operand form the ops give a product: both operands transposed with a bias
 * per row (the convolutions'), the pre-activation output with a bias and GELU (linear layers'),
 * B gathered from an image as a convolution's forward and data gradient read it (3x3 taps of
 * 32x32 planes) and segmented as its weight gradient does, A lower-banded (a causal attention's
 * dS). */
static void every_epilogue_and_operand(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    static const size_t sizes[][3] = {
        {1024, 1024, 1024}, {4096, 4096, 4096}, {16, 4096, 4096}, {8192, 4096, 1024}};
    const oclml__gather image = {.H = 32,
                                 .W = 32,
                                 .R = 3,
                                 .S = 3,
                                 .Q = 32,
                                 .sh = 1,
                                 .sw = 1,
                                 .ph = 1,
                                 .pw = 1,
                                 .dh = 1,
                                 .dw = 1};
    oclml__gather flipped = image, segmented = image;
    flipped.flip = 1;
    segmented.segment = 1024;
    segmented.a_seg = segmented.b_seg = 64 * 1024;
    enum { FORMS = 5 };
    static const char *const what[FORMS] = {"both transposed, bias per row",
                                            "pre-activation, bias, GELU", "B gathered",
                                            "B gathered, taps flipped", "A lower-banded"};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const size_t m = sizes[i][0], n = sizes[i][1], k = sizes[i][2];
        const oclml__gemm_desc plain = oclml__gemm_desc_dense(m, n, k);
        oclml__gemm_desc d[FORMS] = {plain, plain, plain, plain, plain};
        d[0].trans_a = d[0].trans_b = true;
        d[0].a.ld = m, d[0].b.ld = k;
        d[0].bias = PLACEHOLDER_BUFFER, d[0].bias_per_row = true;
        d[1].trans_a = true, d[1].a.ld = m;
        d[1].bias = PLACEHOLDER_BUFFER, d[1].act = OCLML_ACT_GELU_ERF;
        d[1].pre = (oclml__matrix){PLACEHOLDER_BUFFER, 0, n, 0};
        d[2].gather_b = &image, d[2].bias = PLACEHOLDER_BUFFER, d[2].bias_per_row = true;
        d[3].gather_b = &flipped;
        d[4].a_lower = true;
        for (size_t j = 0; j < FORMS; j++) oclml__gemm_warm_desc(ctx, op, what[j], &d[j], list);
    }
    const oclml__gemm_desc weight_gradient = {.trans_b = true,
                                              .m = 64,
                                              .n = 576,
                                              .k = 8 * 1024,
                                              .batch = 1,
                                              .alpha = 1.0f,
                                              .a = {NULL, 0, 1024, 0},
                                              .c = {NULL, 0, 576, 0},
                                              .gather_b = &segmented};
    oclml__gemm_warm_desc(ctx, op, "B gathered and segmented", &weight_gradient, list);
    /* For the kernels' checks, one size of oclml_linear_dropout's epilogue form: dropout after
     * ReLU with a bias and the pre-activation (its own warm list names a GELU product). */
    static const oclml_dropout_params drop = {sizeof drop, 0.5f, 0, 0};
    oclml__gemm_desc dropped = oclml__gemm_desc_dense(1024, 1024, 1024);
    dropped.trans_b = true, dropped.b.ld = dropped.k;
    dropped.bias = PLACEHOLDER_BUFFER, dropped.act = OCLML_ACT_RELU;
    dropped.pre = (oclml__matrix){PLACEHOLDER_BUFFER, 0, dropped.n, 0};
    dropped.drop = &drop, dropped.drop_ld = dropped.n;
    oclml__gemm_warm_desc(ctx, op, "pre-activation, bias, ReLU, dropout", &dropped, list);
}

/* Prewarm: the kernels that square products and linear layers (weights transposed, with and
 * without a GELU epilogue) of common sizes plan onto. */
void oclml__gemm_warm(oclml_ctx *ctx, const char *op, oclml__warm_list *list) {
    static const struct {
        size_t m, n, k;
        bool tb;
        oclml_activation act;
    } shapes[] = {{1024, 1024, 1024, false, OCLML_ACT_NONE},
                  {4096, 4096, 4096, false, OCLML_ACT_NONE},
                  {16, 4096, 4096, false, OCLML_ACT_NONE},
                  {8192, 4096, 1024, true, OCLML_ACT_GELU_ERF}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        oclml__gemm_desc d = oclml__gemm_desc_dense(shapes[i].m, shapes[i].n, shapes[i].k);
        d.trans_b = shapes[i].tb;
        d.act = shapes[i].act;
        if (d.trans_b) d.b.ld = d.k;
        char what[96];
        snprintf(what, sizeof what, "%zux%zux%zu%s", d.m, d.n, d.k, d.act ? " gelu" : "");
        oclml__gemm_warm_desc(ctx, op, what, &d, list);
    }
    if (list->every_shape) every_epilogue_and_operand(ctx, op, list);
    /* The GEMM ops' 16-bit products; a 16-bit linear layer's epilogue programs build on first
     * use. */
    if (!strncmp(op, "gemm", 4)) oclml__gemm_lp_warm(ctx, op, list);
}
