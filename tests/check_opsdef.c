/* The per-op lists against the op list (lib/ops/ops.def), without a device: every op declared
 * in the public header, with a warm planner (or documented as building no kernel) whose programs
 * come from the op's kernel files on every device profile; every tuning family an op names has
 * keys and every key's family is read by an op; each key's identifier spells the key; the key
 * lists oclml_ops_list gives follow the families; the developers' keys are the ones ops.def
 * marks. (The cold-start runners are made from ops.def: an op without one does not compile.) */
#include "testutil.h"

#include "device_profiles.h"
#include "ops/ops.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

typedef struct op_copy {
    char name[64], files[160], keys[1024];
} op_copy;

typedef struct op_copies {
    op_copy op[128];
    size_t n;
} op_copies;

static void copy_op(void *user, const oclml_op_desc *d) {
    op_copies *c = user;
    ck_assert_uint_lt(c->n, 128);
    op_copy *o = &c->op[c->n++];
    ck_assert_uint_lt(strlen(d->tunables), sizeof o->keys);
    snprintf(o->name, sizeof o->name, "%s", d->name);
    snprintf(o->files, sizeof o->files, "%s", d->kernel_file);
    snprintf(o->keys, sizeof o->keys, "%s", d->tunables);
}

static op_copies ops;

static void list_ops(void) {
    ops.n = 0;
    ASSERT_OK(oclml_ops_list(copy_op, &ops));
    ck_assert_uint_gt(ops.n, 50);
}

/* Whether word (n bytes) is one of the words of list (separated by any of seps). */
static bool has_word(const char *list, const char *seps, const char *word, size_t n) {
    for (const char *s = list; *s;) {
        s += strspn(s, seps);
        const size_t len = strcspn(s, seps);
        if (len == n && len && !strncmp(s, word, n)) return true;
        s += len;
    }
    return false;
}

START_TEST(every_op_is_declared_in_the_header) {
    char path[1024];
    const char *src = getenv("OCLML_TEST_SRCDIR");
    snprintf(path, sizeof path, "%s/include/oclml.h", src ? src : ".");
    FILE *f = fopen(path, "r");
    ck_assert_msg(f, "cannot read %s", path);
    static char header[1 << 20];
    const size_t n = fread(header, 1, sizeof header - 1, f);
    fclose(f);
    ck_assert_uint_lt(n, sizeof header - 1);
    header[n] = '\0';
    list_ops();
    for (size_t i = 0; i < ops.n; i++) {
        char decl[128];
        snprintf(decl, sizeof decl, "OCLML_API oclml_status oclml_%s(", ops.op[i].name);
        ck_assert_msg(strstr(header, decl), "ops.def's %s has no %s... in include/oclml.h",
                      ops.op[i].name, decl);
    }
}
END_TEST

START_TEST(every_op_has_a_warm_planner_over_its_files) {
    list_ops();
    for (size_t i = 0; i < ops.n; i++) {
        const op_copy *o = &ops.op[i];
        bool found;
        oclml__warm_fn *warm = oclml__op_warm(o->name, strlen(o->name), &found);
        ck_assert(found);
        /* NULL is ops.def's way of saying the op builds no kernel: then it names no file. */
        ck_assert_msg((warm != NULL) == (o->files[0] != '\0'),
                      "%s: a warm planner and kernel files go together (NULL and \"\" for an op "
                      "that builds no kernel)",
                      o->name);
        if (!warm) continue;
        size_t programs = 0;
        for (const device_profile *p = device_profiles; p->name; p++)
            for (int every = 0; every < 2; every++) {
                oclml_ctx *ctx = device_profile_ctx(p->name, NULL);
                ck_assert_ptr_nonnull(ctx);
                oclml__warm_list list = {.every_shape = every};
                ASSERT_OK(oclml__warm_collect(ctx, o->name, &list));
                ck_assert(!list.out_of_memory);
                ck_assert_msg(!list.too_long_op, "%s on %s: a program's text exceeds a warm item",
                              o->name, p->name);
                for (size_t k = 0; k < list.n; k++) {
                    const char *file = list.items[k].file;
                    ck_assert_msg(has_word(o->files, " ", file, strlen(file)),
                                  "%s on %s builds %s, not among its kernel files in ops.def (%s)",
                                  o->name, p->name, file, o->files);
                }
                programs += list.n;
                free(list.items);
                device_profile_free(ctx);
            }
        ck_assert_msg(programs > 0, "%s's warm planner lists no program on any device", o->name);
    }
}
END_TEST

START_TEST(tuning_families_and_keys_agree) {
    list_ops();
    size_t keys = 0;
    for (size_t k = 0; oclml__tunables[k].key; k++, keys++) {
        const oclml__tunable *t = &oclml__tunables[k];
        bool read = !strcmp(t->family, "core");
        for (size_t i = 0; oclml__op_families(i); i++)
            read |= has_word(oclml__op_families(i), " ", t->family, strlen(t->family));
        ck_assert_msg(read, "no op of ops.def names the family of %s (%s)", t->key, t->family);
        /* The op's key list holds the key exactly where the op names its family. */
        for (size_t i = 0; oclml__op_families(i); i++)
            ck_assert_int_eq(has_word(ops.op[i].keys, ",", t->key, strlen(t->key)),
                             has_word(oclml__op_families(i), " ", t->family, strlen(t->family)));
    }
    ck_assert_uint_eq(keys, OCLML__N_TUNABLES);
    for (size_t i = 0; oclml__op_families(i); i++) {
        ck_assert_str_eq(oclml__op_name(i), ops.op[i].name);
        const char *f = oclml__op_families(i);
        for (const char *s = f; *s;) {
            s += strspn(s, " ");
            const size_t n = strcspn(s, " ");
            bool has_keys = false;
            for (size_t k = 0; n && oclml__tunables[k].key; k++)
                has_keys |= strlen(oclml__tunables[k].family) == n &&
                            !strncmp(oclml__tunables[k].family, s, n);
            ck_assert_msg(!n || has_keys, "%s names the family '%.*s', which has no keys",
                          ops.op[i].name, (int)n, s);
            s += n;
        }
    }
    /* Spot checks of the lists users read. */
    for (size_t i = 0; i < ops.n; i++) {
        if (!strcmp(ops.op[i].name, "gemm"))
            ck_assert(has_word(ops.op[i].keys, ",", "clblast.xgemm", 13) &&
                      has_word(ops.op[i].keys, ",", "gemm.own", 8));
        if (!strcmp(ops.op[i].name, "linear"))
            ck_assert(!strstr(ops.op[i].keys, "clblast.") && strstr(ops.op[i].keys, "gemm.mma"));
        if (!strcmp(ops.op[i].name, "conv2d_backward"))
            ck_assert(has_word(ops.op[i].keys, ",", "conv.direct_dw", 14));
        if (!strcmp(ops.op[i].name, "softmax")) ck_assert_str_eq(ops.op[i].keys, "");
    }
}
END_TEST

/* OCLML__TUNE_<ID> names the key: the key with '.' as '_', in capitals; and the table's order
 * is the enum's. */
static const struct {
    oclml__tune_key key;
    const char *id, *text;
    bool developers;
} IDS[] = {
#define OCLML_OP(...)
#define OCLML_TUNABLE(family, id, key, audience, ...) \
    {OCLML__TUNE_##id, #id, #key, sizeof #audience == sizeof "dev"},
#include "ops/ops.def"
#undef OCLML_OP
#undef OCLML_TUNABLE
};

START_TEST(tuning_key_identifiers_spell_the_keys) {
    ck_assert_uint_eq(sizeof IDS / sizeof IDS[0], OCLML__N_TUNABLES);
    for (size_t i = 0; i < OCLML__N_TUNABLES; i++) {
        ck_assert_uint_eq(IDS[i].key, i);
        ck_assert_str_eq(oclml__tunables[IDS[i].key].key, IDS[i].text);
        char spelled[64];
        size_t n = 0;
        for (const char *p = IDS[i].text; *p && n + 1 < sizeof spelled; p++)
            spelled[n++] = *p == '.' ? '_' : (char)toupper((unsigned char)*p);
        spelled[n] = '\0';
        ck_assert_str_eq(IDS[i].id, spelled);
        int dev = -1;
        ASSERT_OK(oclml_tuning_key_for_developers(IDS[i].text, &dev));
        ck_assert_int_eq(dev, IDS[i].developers);
        ck_assert_int_eq(oclml__tunables[i].developers, IDS[i].developers);
    }
    /* A few judged by hand, so that a flipped column shows. */
    int dev = -1;
    ASSERT_OK(oclml_tuning_key_for_developers("gemm.own", &dev));
    ck_assert_int_eq(dev, 0);
    ASSERT_OK(oclml_tuning_key_for_developers("attention.vec_fragments", &dev));
    ck_assert_int_eq(dev, 1);
    ASSERT_OK(oclml_tuning_key_for_developers("clblast.xgemm", &dev));
    ck_assert_int_eq(dev, 0);
    dev = 7;
    ck_assert_int_eq(oclml_tuning_key_for_developers("gemm.owns", &dev),
                     OCLML_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(oclml_tuning_key_for_developers("", &dev), OCLML_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(dev, 7);
    ck_assert_int_eq(oclml_tuning_key_for_developers(NULL, &dev), OCLML_ERR_NULL_POINTER);
    ck_assert_int_eq(oclml_tuning_key_for_developers("gemm.own", NULL), OCLML_ERR_NULL_POINTER);
}
END_TEST

int main(void) {
    Suite *s = suite_create("opsdef");
    TCase *tc = tcase_create("opsdef");
    tcase_add_test(tc, every_op_is_declared_in_the_header);
    tcase_add_test(tc, every_op_has_a_warm_planner_over_its_files);
    tcase_add_test(tc, tuning_families_and_keys_agree);
    tcase_add_test(tc, tuning_key_identifiers_spell_the_keys);
    suite_add_tcase(s, tc);
    return test_main(s);
}
