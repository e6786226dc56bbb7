/* Tensors: create, round trip, wrap with offset, shape validation, scratch trimming. */
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

START_TEST(round_trip_every_rank) {
    const size_t shapes[4][4] = {{1}, {7, 13}, {2, 3, 5}, {3, 1, 4, 129}};
    for (int r = 0; r < 4; r++) {
        size_t n = 1;
        for (int i = 0; i <= r; i++) n *= shapes[r][i];
        float *in = test_floats(n), *out = test_floats(n);
        test_random(in, n, -100, 100);
        oclml_tensor *t = test_tensor_from(r + 1, shapes[r], in);
        test_read(t, out, n);
        ck_assert_msg(memcmp(in, out, n * sizeof *in) == 0, "rank %d round trip differs", r + 1);
        int nd;
        size_t sh[OCLML_MAX_DIMS], count;
        ASSERT_OK(oclml_tensor_shape(t, &nd, sh));
        ASSERT_OK(oclml_tensor_numel(t, &count));
        ck_assert_int_eq(nd, r + 1);
        ck_assert_uint_eq(count, n);
        for (int i = 0; i <= r; i++) ck_assert_uint_eq(sh[i], shapes[r][i]);
        cl_mem m;
        ASSERT_STATUS(oclml_tensor_shape(t, NULL, sh), OCLML_ERR_NULL_POINTER);
        ASSERT_STATUS(oclml_tensor_shape(NULL, &nd, sh), OCLML_ERR_NULL_POINTER);
        ASSERT_STATUS(oclml_tensor_numel(t, NULL), OCLML_ERR_NULL_POINTER);
        ASSERT_STATUS(oclml_tensor_buffer(t, &m, NULL), OCLML_ERR_NULL_POINTER);
        ASSERT_OK(oclml_tensor_destroy(t));
        free(in);
        free(out);
    }
}
END_TEST

START_TEST(bad_shapes_rejected) {
    oclml_tensor *t = (oclml_tensor *)1;
    size_t zero[2] = {3, 0}, huge[2] = {SIZE_MAX / 2, 4}, big[1] = {SIZE_MAX / 2},
           over[1] = {((size_t)1 << 62) / 5};
    size_t ok[1] = {4};
    ASSERT_STATUS(oclml_tensor_create(T, 0, ok, &t), OCLML_ERR_INVALID_SHAPE);
    ck_assert_ptr_null(t);
    ASSERT_STATUS(oclml_tensor_create(T, 5, ok, &t), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_tensor_create(T, 2, zero, &t), OCLML_ERR_INVALID_SHAPE);
    ck_assert_ptr_nonnull(strstr(oclml_ctx_last_error(T), "dimension 1"));
    ASSERT_STATUS(oclml_tensor_create(T, 2, huge, &t), OCLML_ERR_SIZE_OVERFLOW);
    ASSERT_STATUS(oclml_tensor_create(T, 1, big, &t), OCLML_ERR_SIZE_OVERFLOW);
    ASSERT_STATUS(oclml_tensor_create(T, 1, over, &t), OCLML_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(oclml_ctx_last_error(T), "largest allocation"));
    ASSERT_STATUS(oclml_tensor_create(T, 1, NULL, &t), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_tensor_create(T, 1, ok, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_tensor_create(NULL, 1, ok, &t), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_tensor_destroy(NULL), OCLML_ERR_NULL_POINTER);
}
END_TEST

START_TEST(transfers_validate_count) {
    size_t shape[1] = {10};
    float buf[11];
    test_random(buf, 11, 0, 1);
    oclml_tensor *t = test_tensor(1, shape);
    ASSERT_STATUS(oclml_tensor_write(t, buf, 11), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_tensor_read(t, buf, 9), OCLML_ERR_INVALID_SHAPE);
    ASSERT_STATUS(oclml_tensor_write(t, NULL, 10), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_tensor_read(NULL, buf, 10), OCLML_ERR_NULL_POINTER);
    /* The failed write touched nothing: the tensor still holds its NaN poison. */
    float out[10];
    test_read(t, out, 10);
    for (int i = 0; i < 10; i++) ck_assert(out[i] != out[i]);
    oclml_tensor_destroy(t);
}
END_TEST

START_TEST(wrap_with_offset) {
    cl_context clctx;
    cl_command_queue q;
    oclml_ctx_cl_objects(T, &clctx, NULL, &q);
    cl_int err;
    float base[100];
    test_random(base, 100, -1, 1);
    cl_mem buf =
        clCreateBuffer(clctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof base, base, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    size_t shape[2] = {3, 10};
    oclml_tensor *t;
    ASSERT_OK(oclml_tensor_wrap(T, buf, 40 * sizeof(float), 2, shape, &t));
    float part[30];
    test_read(t, part, 30);
    ck_assert(memcmp(part, base + 40, sizeof part) == 0);
    float fresh[30];
    test_random(fresh, 30, 5, 6);
    ASSERT_OK(oclml_tensor_write(t, fresh, 30));
    float all[100];
    clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof all, all, 0, NULL, NULL);
    ck_assert(memcmp(all, base, 40 * sizeof(float)) == 0);
    ck_assert(memcmp(all + 40, fresh, sizeof fresh) == 0);
    ck_assert(memcmp(all + 70, base + 70, 30 * sizeof(float)) == 0);
    cl_mem got;
    size_t off;
    ASSERT_OK(oclml_tensor_buffer(t, &got, &off));
    ck_assert(got == buf);
    ck_assert_uint_eq(off, 160);
    ASSERT_OK(oclml_tensor_destroy(t));

    size_t too_big[1] = {61};
    oclml_tensor *u = NULL;
    ASSERT_STATUS(oclml_tensor_wrap(T, buf, 40 * sizeof(float), 1, too_big, &u),
                  OCLML_ERR_BUFFER_TOO_SMALL);
    ASSERT_STATUS(oclml_tensor_wrap(T, buf, 2, 1, shape, &u), OCLML_ERR_INVALID_ARGUMENT);
    ASSERT_STATUS(oclml_tensor_wrap(T, NULL, 0, 1, shape, &u), OCLML_ERR_NULL_POINTER);
    ck_assert_ptr_null(u);
    /* The caller still owns the buffer: the tensor released only its own reference. */
    ck_assert_int_eq(clReleaseMemObject(buf), CL_SUCCESS);
}
END_TEST

START_TEST(tensor_of_other_context_rejected) {
    oclml_ctx *other = test_ctx_new(NULL);
    size_t shape[1] = {8};
    oclml_tensor *mine = test_tensor(1, shape), *theirs;
    ASSERT_OK(oclml_tensor_create(other, 1, shape, &theirs));
    ASSERT_STATUS(oclml_copy(T, theirs, mine), OCLML_ERR_CONTEXT_MISMATCH);
    ck_assert_ptr_nonnull(strstr(oclml_ctx_last_error(T), "another context"));
    oclml_tensor_destroy(theirs);
    oclml_tensor_destroy(mine);
    oclml_ctx_destroy(other);
    ASSERT_OK(oclml_ctx_trim_scratch(T));
    ASSERT_STATUS(oclml_ctx_trim_scratch(NULL), OCLML_ERR_NULL_POINTER);
}
END_TEST

/* The device bytes the library holds: tensors it creates (not wrapped ones), scratch, an arena
 * and its optimizer; the peak, and its reset. */
START_TEST(device_memory_counted) {
    size_t base, now, peak;
    ASSERT_OK(oclml_ctx_memory(T, &base, NULL));
    const size_t shape[2] = {100, 37};
    oclml_tensor *a = test_tensor(2, shape);
    ASSERT_OK(oclml_ctx_memory(T, &now, &peak));
    ck_assert_uint_eq(now, base + 100 * 37 * 4);
    ck_assert_uint_ge(peak, now);
    cl_mem buf;
    size_t off;
    oclml_tensor *w = NULL;
    ASSERT_OK(oclml_tensor_buffer(a, &buf, &off));
    ASSERT_OK(oclml_tensor_wrap(T, buf, 0, 2, shape, &w));
    ASSERT_OK(oclml_ctx_memory(T, &now, NULL));
    ck_assert_uint_eq(now, base + 100 * 37 * 4); /* a wrap allocates nothing */
    ASSERT_OK(oclml_tensor_destroy(w));
    ASSERT_OK(oclml_tensor_destroy(a));
    ASSERT_OK(oclml_ctx_memory(T, &now, &peak));
    ck_assert_uint_eq(now, base);
    ck_assert_uint_eq(peak, base + 100 * 37 * 4);
    ASSERT_OK(oclml_ctx_reset_peak_memory(T));
    ASSERT_OK(oclml_ctx_memory(T, NULL, &peak));
    ck_assert_uint_eq(peak, base);
    /* An arena and an AdamW over it: parameters, gradients, two moments and its own scalars. */
    const oclml_arena_shape shapes[1] = {{1, {1000}}};
    oclml_arena *arena;
    oclml_optim *opt;
    oclml_optim_config c;
    ASSERT_OK(oclml_arena_create(T, 1, shapes, &arena));
    ASSERT_OK(oclml_optim_config_init(&c, OCLML_OPTIM_ADAMW));
    ASSERT_OK(oclml_optim_create(T, arena, &c, &opt));
    ASSERT_OK(oclml_ctx_memory(T, &now, NULL));
    ck_assert_uint_ge(now, base + 4 * 1000 * 4);
    ASSERT_OK(oclml_optim_destroy(opt));
    ASSERT_OK(oclml_arena_destroy(arena));
    ASSERT_OK(oclml_ctx_memory(T, &now, NULL));
    ck_assert_uint_eq(now, base);
    /* Scratch from an op stays pooled until trimmed. */
    const size_t big[1] = {1 << 20}, one[1] = {1};
    oclml_tensor *x = test_tensor(1, big), *y = test_tensor(1, one);
    ASSERT_OK(oclml_ctx_reset_peak_memory(T));
    ASSERT_OK(oclml_fill(T, x, 1.0f));
    ASSERT_OK(oclml_reduce_all(T, OCLML_REDUCE_SUM, x, y));
    ASSERT_OK(oclml_ctx_finish(T));
    ASSERT_OK(oclml_tensor_destroy(x));
    ASSERT_OK(oclml_tensor_destroy(y));
    ASSERT_OK(oclml_ctx_trim_scratch(T));
    ASSERT_OK(oclml_ctx_memory(T, &now, &peak));
    ck_assert_uint_eq(now, base);
    ck_assert_uint_ge(peak, base + (4u << 20) + 4);
    ASSERT_STATUS(oclml_ctx_memory(NULL, &now, NULL), OCLML_ERR_NULL_POINTER);
    ASSERT_STATUS(oclml_ctx_reset_peak_memory(NULL), OCLML_ERR_NULL_POINTER);
}
END_TEST

int main(void) {
    Suite *s = suite_create("tensor");
    TCase *tc = tcase_create("tensor");
    tcase_add_checked_fixture(tc, test_setup, test_teardown);
    tcase_add_test(tc, round_trip_every_rank);
    tcase_add_test(tc, bad_shapes_rejected);
    tcase_add_test(tc, transfers_validate_count);
    tcase_add_test(tc, wrap_with_offset);
    tcase_add_test(tc, tensor_of_other_context_rejected);
    tcase_add_test(tc, device_memory_counted);
    suite_add_tcase(s, tc);
    return test_main(s);
}
