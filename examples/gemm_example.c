/* A minimal liboclml program: C = A * B on the default device.
 * Build against an installed liboclml:  cc gemm_example.c $(pkg-config --cflags --libs oclml) */
#include <oclml.h>
#include <stdio.h>

int main(void) {
    char err[4096];
    oclml_ctx *ctx;
    if (oclml_ctx_create(&ctx, NULL, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const size_t shape[2] = {2, 2};
    const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
    float c[4];
    oclml_tensor *ta = NULL, *tb = NULL, *tc = NULL;
    oclml_status st = oclml_tensor_create(ctx, 2, shape, &ta);
    if (!st) st = oclml_tensor_create(ctx, 2, shape, &tb);
    if (!st) st = oclml_tensor_create(ctx, 2, shape, &tc);
    if (!st) st = oclml_tensor_write(ta, a, 4);
    if (!st) st = oclml_tensor_write(tb, b, 4);
    if (!st) st = oclml_gemm(ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, ta, tb, 0.0f, tc);
    if (!st) st = oclml_tensor_read(tc, c, 4);
    if (st)
        fprintf(stderr, "%s: %s\n", oclml_status_name(st), oclml_ctx_last_error(ctx));
    else
        printf("[[%g %g] [%g %g]]  (expected [[19 22] [43 50]])\n", c[0], c[1], c[2], c[3]);
    oclml_tensor *all[3] = {ta, tb, tc};
    for (int i = 0; i < 3; i++)
        if (all[i]) oclml_tensor_destroy(all[i]);
    oclml_ctx_destroy(ctx); /* after its tensors: it drains the queue */
    return st ? 1 : 0;
}
