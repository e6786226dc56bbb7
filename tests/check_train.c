/* Training end to end: runs the examples (examples/train_mlp, examples/train_cnn, built in the
 * build tree) at small sizes and checks their loss curves: the MLP's against a double-precision
 * trainer written here (forward, MSE, backward and AdamW by their formulas, from the same
 * generator), the CNN's fall, and both against PyTorch's golden curves when tests/data holds
 * them (examples/train_golden.py writes them). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../examples/train_common.h"

/* Runs an example from the build tree with args; fills losses (up to max); returns its exit
 * status. */
static int run_example(const char *name, const char *tune, const char *args, double *losses,
                       int max, int *n) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s%s%s%s/examples/%s %s 2>&1", tune ? "OCLML_TUNE='" : "",
             tune ? tune : "", tune ? "' " : "", getenv("OCLML_TEST_BUILDDIR"), name, args);
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "cannot run %s", cmd);
    char line[512];
    *n = 0;
    while (fgets(line, sizeof line, p)) {
        int step;
        double loss;
        if (sscanf(line, "step %d loss %lf", &step, &loss) == 2 && *n < max)
            losses[(*n)++] = loss;
        else if (!strstr(line, "step"))
            fprintf(stderr, "%s: %s", name, line);
    }
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* ---- the MLP trained in double ---- */

static double gelu(double z) { return 0.5 * z * erfc(-z / sqrt(2.0)); }
static double d_gelu(double z) {
    return 0.5 * erfc(-z / sqrt(2.0)) + z * exp(-0.5 * z * z) / sqrt(2.0 * M_PI);
}

typedef struct dlayer {
    size_t in, out;
    double *w, *b, *dw, *db, *mw, *vw, *mb, *vb;
} dlayer;

/* y = x W^T + b for rows of x. */
static void dense(const dlayer *l, const double *x, size_t B, double *y) {
    for (size_t i = 0; i < B; i++)
        for (size_t j = 0; j < l->out; j++) {
            double s = l->b[j];
            for (size_t p = 0; p < l->in; p++) s += x[i * l->in + p] * l->w[j * l->in + p];
            y[i * l->out + j] = s;
        }
}

/* dW = dy^T x, db = sum dy, dx = dy W (dx may be NULL). */
static void dense_back(dlayer *l, const double *x, const double *dy, size_t B, double *dx) {
    for (size_t j = 0; j < l->out; j++) {
        l->db[j] = 0;
        for (size_t p = 0; p < l->in; p++) l->dw[j * l->in + p] = 0;
    }
    for (size_t i = 0; i < B; i++)
        for (size_t j = 0; j < l->out; j++) {
            double g = dy[i * l->out + j];
            l->db[j] += g;
            for (size_t p = 0; p < l->in; p++) l->dw[j * l->in + p] += g * x[i * l->in + p];
        }
    if (dx)
        for (size_t i = 0; i < B; i++)
            for (size_t p = 0; p < l->in; p++) {
                double s = 0;
                for (size_t j = 0; j < l->out; j++) s += dy[i * l->out + j] * l->w[j * l->in + p];
                dx[i * l->in + p] = s;
            }
}

/* torch.optim.AdamW's defaults: lr 1e-3, betas 0.9, 0.999, eps 1e-8, weight decay 1e-2. */
static void adamw(double *p, const double *g, double *m, double *v, size_t n, int t) {
    const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 1e-2;
    double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
    for (size_t i = 0; i < n; i++) {
        p[i] *= 1 - lr * wd;
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        p[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
    }
}

static double *zeros(size_t n) {
    double *d = calloc(n, sizeof *d);
    ck_assert_ptr_nonnull(d);
    return d;
}

/* The loss curve of examples/train_mlp's model and data, in double. */
static void mlp_reference(size_t B, size_t I, size_t H, size_t O, int steps, double *curve) {
    const size_t dims[4] = {I, H, H, O};
    train_rng rng = {1234};
    dlayer L[3];
    for (int l = 0; l < 3; l++) {
        size_t in = dims[l], out = dims[l + 1];
        L[l] = (dlayer){in,
                        out,
                        zeros(in * out),
                        zeros(out),
                        zeros(in * out),
                        zeros(out),
                        zeros(in * out),
                        zeros(in * out),
                        zeros(out),
                        zeros(out)};
        float *w = malloc(in * out * sizeof *w), *b = malloc(out * sizeof *b);
        float bound = 1.0f / sqrtf((float)in);
        train_fill(&rng, w, in * out, bound);
        train_fill(&rng, b, out, bound);
        for (size_t i = 0; i < in * out; i++) L[l].w[i] = w[i];
        for (size_t i = 0; i < out; i++) L[l].b[i] = b[i];
        free(w);
        free(b);
    }
    float *x = malloc(B * I * sizeof *x), *teacher = malloc(I * O * sizeof *teacher);
    train_fill(&rng, x, B * I, 1.0f);
    train_fill(&rng, teacher, I * O, 0.25f);
    double *xd = zeros(B * I), *t = zeros(B * O);
    for (size_t i = 0; i < B * I; i++) xd[i] = x[i];
    for (size_t i = 0; i < B; i++) /* the example's targets, computed as it does (float) */
        for (size_t j = 0; j < O; j++) {
            float sum = 0.0f;
            for (size_t p = 0; p < I; p++) sum += x[i * I + p] * teacher[p * O + j];
            t[i * O + j] = tanhf(sum);
        }
    double *z1 = zeros(B * H), *a1 = zeros(B * H), *z2 = zeros(B * H), *a2 = zeros(B * H),
           *y = zeros(B * O), *dy = zeros(B * O), *da = zeros(B * H), *db = zeros(B * H);
    for (int s = 0; s < steps; s++) {
        dense(&L[0], xd, B, z1);
        for (size_t i = 0; i < B * H; i++) a1[i] = gelu(z1[i]);
        dense(&L[1], a1, B, z2);
        for (size_t i = 0; i < B * H; i++) a2[i] = gelu(z2[i]);
        dense(&L[2], a2, B, y);
        double loss = 0;
        for (size_t i = 0; i < B * O; i++) {
            double d = y[i] - t[i];
            loss += d * d;
            dy[i] = 2 * d / (double)(B * O);
        }
        curve[s] = loss / (double)(B * O);
        dense_back(&L[2], a2, dy, B, da);
        for (size_t i = 0; i < B * H; i++) da[i] *= d_gelu(z2[i]);
        dense_back(&L[1], a1, da, B, db);
        for (size_t i = 0; i < B * H; i++) db[i] *= d_gelu(z1[i]);
        dense_back(&L[0], xd, db, B, NULL);
        for (int l = 0; l < 3; l++) {
            adamw(L[l].w, L[l].dw, L[l].mw, L[l].vw, L[l].in * L[l].out, s + 1);
            adamw(L[l].b, L[l].db, L[l].mb, L[l].vb, L[l].out, s + 1);
        }
    }
    for (int l = 0; l < 3; l++) {
        double *all[] = {L[l].w, L[l].b, L[l].dw, L[l].db, L[l].mw, L[l].vw, L[l].mb, L[l].vb};
        for (int i = 0; i < 8; i++) free(all[i]);
    }
    double *tmp[] = {xd, t, z1, a1, z2, a2, y, dy, da, db};
    for (int i = 0; i < 10; i++) free(tmp[i]);
    free(x);
    free(teacher);
}

START_TEST(mlp_matches_double_trainer) {
    double got[20], want[20];
    int n;
    int rc = run_example("train_mlp", NULL, "--steps 20 --batch 48 --in 16 --hidden 64 --out 16",
                         got, 20, &n);
    ck_assert_int_eq(n, 20);
    /* 20 steps at this size need not halve the loss (status 1); a failed call is status 3. */
    ck_assert_msg(rc == 0 || rc == 1, "train_mlp exited %d", rc);
    mlp_reference(48, 16, 64, 16, 20, want);
    for (int s = 0; s < 20; s++)
        ck_assert_msg(fabs(got[s] - want[s]) <= 1e-4 * want[s] + 1e-7,
                      "step %d: loss %.7g, double trainer %.7g", s, got[s], want[s]);
}
END_TEST

/* The MLP in mixed precision (--bf16, --fp16: activations and products in 16 bits, fp32 master
 * weights through the arena's copy) follows the double trainer's fp32 curve within the dtype's
 * band, and is not the fp32 run: somewhere it differs by more than fp32 rounding. */
START_TEST(mlp_mixed_precision) {
    double got[20], want[20];
    int n;
    const char *flag = _i ? "--fp16" : "--bf16";
    const double band = _i ? 4e-3 : 2e-2;
    char args[160];
    snprintf(args, sizeof args, "--steps 20 --batch 48 --in 16 --hidden 64 --out 16 %s", flag);
    int rc = run_example("train_mlp", NULL, args, got, 20, &n);
    ck_assert_int_eq(n, 20);
    ck_assert_msg(rc == 0 || rc == 1, "train_mlp %s exited %d", flag, rc);
    mlp_reference(48, 16, 64, 16, 20, want);
    double most = 0;
    for (int s = 0; s < 20; s++) {
        const double rel = fabs(got[s] - want[s]) / want[s];
        ck_assert_msg(rel <= band, "%s step %d: loss %.7g, double trainer %.7g", flag, s, got[s],
                      want[s]);
        most = fmax(most, rel);
    }
    ck_assert_msg(most > 1e-6, "%s: the curve is the fp32 one (%.2g at most)", flag, most);
    ck_assert_msg(got[19] < got[0], "%s: loss %g -> %g", flag, got[0], got[19]);
}
END_TEST

/* The CNN in mixed precision (convolutions and pooling on 16-bit feature maps, fp32 logits and
 * master weights) follows the fp32 run's curve within the dtype's band, and is not it. */
START_TEST(cnn_mixed_precision) {
    double got[30], want[30];
    int n, m;
    const char *flag = _i ? "--fp16" : "--bf16";
    char args[96];
    snprintf(args, sizeof args, "--steps 30 --images 64 %s", flag);
    int rc = run_example("train_cnn", NULL, args, got, 30, &n);
    ck_assert_msg(rc == 0 || rc == 1, "train_cnn %s exited %d", flag, rc);
    rc = run_example("train_cnn", NULL, "--steps 30 --images 64", want, 30, &m);
    ck_assert_int_eq(n, 30);
    ck_assert_int_eq(m, 30);
    double most = 0;
    for (int s = 0; s < 30; s++) {
        const double rel = fabs(got[s] - want[s]) / want[s];
        ck_assert_msg(rel <= (_i ? 4e-3 : 2e-2), "%s step %d: loss %.7g, fp32 %.7g", flag, s,
                      got[s], want[s]);
        most = fmax(most, rel);
    }
    ck_assert_msg(most > 1e-6, "%s: the curve is the fp32 one", flag);
    ck_assert_msg(got[29] < got[0], "%s: loss %g -> %g", flag, got[0], got[29]);
}
END_TEST

START_TEST(cnn_trains) {
    double got[50];
    int n;
    int rc = run_example("train_cnn", NULL, "--steps 50 --images 64", got, 50, &n);
    ck_assert_int_eq(n, 50);
    ck_assert_msg(rc == 0, "train_cnn exited %d (loss %g -> %g)", rc, got[0], got[49]);
    ck_assert_msg(fabs(got[0] - log(10.0)) < 0.05, "initial loss %g, ln 10 expected", got[0]);
}
END_TEST

/* PyTorch's curves at the examples' default sizes, where the golden files exist; the CNN also
 * with its convolutions as implicit GEMMs (GPUs' default), here on the FMA tiles. */
START_TEST(golden_curves) {
    const char *name = _i ? "train_cnn" : "train_mlp", *tune = _i == 2 ? "conv.implicit=1" : NULL;
    char path[1024], args[1200];
    snprintf(path, sizeof path, "%s/tests/data/%s_golden.txt", getenv("OCLML_TEST_SRCDIR"), name);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "%s: no golden file yet (examples/train_golden.py writes it): skipped\n",
                name);
        return;
    }
    snprintf(args, sizeof args, "--golden %s", path);
    double got[50];
    int n;
    ck_assert_int_eq(run_example(name, tune, args, got, 50, &n), 0);
}
END_TEST

/* ---- GPT (examples/train_gpt, its tiny size) ---- */

/* PyTorch's first 20 losses on the fixed batch from the same weights (train_gpt_golden.py). */
START_TEST(gpt_matches_pytorch) {
    char path[1024], args[1200];
    snprintf(path, sizeof path, "%s/tests/data/train_gpt_golden.txt", getenv("OCLML_TEST_SRCDIR"));
    ck_assert_msg(access(path, R_OK) == 0, "%s missing (examples/train_gpt_golden.py writes it)",
                  path);
    snprintf(args, sizeof args, "--tiny --fixed --steps 20 --golden %s", path);
    double got[20];
    int n;
    ck_assert_int_eq(run_example("train_gpt", NULL, args, got, 20, &n), 0);
    ck_assert_int_eq(n, 20);
    ck_assert_msg(fabs(got[0] - log(256.0)) < 0.1, "initial loss %g, about ln 256 expected",
                  got[0]);
}
END_TEST

/* A byte-level model on a real text (README.md) drives its loss down and samples text. */
START_TEST(gpt_learns_text) {
    char args[1200];
    snprintf(args, sizeof args, "--tiny --data %s/README.md --steps 60 --every 10 --sample 32",
             getenv("OCLML_TEST_SRCDIR"));
    double got[60];
    int n;
    int rc = run_example("train_gpt", NULL, args, got, 60, &n);
    ck_assert_msg(rc == 0, "train_gpt exited %d", rc);
    ck_assert_int_eq(n, 6);
    ck_assert_msg(got[5] < got[0] - 0.5, "loss %g -> %g: it should fall by more", got[0], got[5]);
}
END_TEST

/* A checkpoint taken after 3 steps and loaded into a fresh process continues exactly: its next
 * loss is bit for bit the fourth of an uninterrupted run (parameters, AdamW's moments, the step
 * count and with it the learning rate). */
START_TEST(gpt_checkpoint_resumes) {
    char ck[1024], args[2200];
    snprintf(ck, sizeof ck, "%s/gpt-checkpoint.bin", getenv("OCLML_TEST_TMP"));
    double whole[4], part[3], resumed[1];
    int n;
    ck_assert_int_le(run_example("train_gpt", NULL, "--tiny --fixed --steps 4", whole, 4, &n), 1);
    ck_assert_int_eq(n, 4);
    snprintf(args, sizeof args, "--tiny --fixed --steps 3 --save %s", ck);
    ck_assert_int_le(run_example("train_gpt", NULL, args, part, 3, &n), 1);
    snprintf(args, sizeof args, "--tiny --fixed --steps 1 --load %s", ck);
    ck_assert_int_le(run_example("train_gpt", NULL, args, resumed, 1, &n), 1);
    ck_assert_int_eq(n, 1);
    ck_assert_msg(resumed[0] == whole[3], "resumed loss %.9g, uninterrupted %.9g", resumed[0],
                  whole[3]);
    remove(ck);
}
END_TEST

/* Dropout (--dropout): two runs give the same losses bit for bit, and the loss falls; a run
 * without it other losses; and p = 1e-9 (a draw drops only where its uniform is exactly 0, one in
 * 2^24: none of this run's, whose masks the seed and the steps fix) the undropped run's losses,
 * although the residual branches' gradients then take buffers of their own, which must carry
 * what the stream's carried. */
static void gpt_run(const char *args, double losses[4]) {
    int n = 0;
    const int rc = run_example("train_gpt", NULL, args, losses, 4, &n);
    ck_assert_msg(rc == 0, "train_gpt %s exited %d", args, rc);
    ck_assert_msg(n == 4, "train_gpt %s printed %d losses", args, n);
}

START_TEST(gpt_dropout) {
    double a[4], b[4], none[4], tiny[4];
    const char *base = "--tiny --fixed --steps 4";
    char args[256];
    snprintf(args, sizeof args, "%s --dropout 0.2", base);
    gpt_run(args, a);
    gpt_run(args, b);
    gpt_run(base, none);
    snprintf(args, sizeof args, "%s --dropout 1e-9", base);
    gpt_run(args, tiny);
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(a[i] == b[i], "step %d: %.9g then %.9g with the same masks", i, a[i], b[i]);
        ck_assert_msg(tiny[i] == none[i], "step %d: %.9g with p = 1e-9, %.9g without dropout", i,
                      tiny[i], none[i]);
    }
    ck_assert_msg(a[3] != none[3], "dropout 0.2 left the losses as they were (%.9g)", a[3]);
    ck_assert_msg(a[3] < a[0], "loss %g -> %g with dropout: it should fall", a[0], a[3]);
}
END_TEST

/* GPT in mixed precision (--bf16, --fp16: the products and attention on 16-bit activations and
 * the arena's copy of the weights; norms, residual stream, logits and master weights fp32)
 * follows the fp32 curve within the dtype's band, is not it, and learns; and so with dropout. */
START_TEST(gpt_mixed_precision) {
    double lp[4], fp32[4];
    const char *flag = _i ? "--fp16 --dropout 0.1" : "--bf16";
    char args[160];
    snprintf(args, sizeof args, "--tiny --fixed --steps 4 %s", flag);
    gpt_run(args, lp);
    gpt_run(_i ? "--tiny --fixed --steps 4 --dropout 0.1" : "--tiny --fixed --steps 4", fp32);
    double most = 0;
    for (int s = 0; s < 4; s++) {
        const double rel = fabs(lp[s] - fp32[s]) / fp32[s];
        ck_assert_msg(rel <= (_i ? 4e-3 : 2e-2), "%s step %d: loss %.9g, fp32 %.9g", flag, s, lp[s],
                      fp32[s]);
        most = fmax(most, rel);
    }
    ck_assert_msg(most > 1e-8, "%s: the curve is the fp32 one", flag);
    ck_assert_msg(lp[3] < lp[0], "%s: loss %g -> %g", flag, lp[0], lp[3]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("train");
    TCase *tc = tcase_create("train");
    tcase_add_test(tc, mlp_matches_double_trainer);
    tcase_add_loop_test(tc, mlp_mixed_precision, 0, 2);
    /* The CNN in fp16 (the bf16 run's kernels with the other dtype; fp16's loss scaling is the
     * MLP's and the GPT's): swept. */
    tcase_add_loop_test(tc, cnn_mixed_precision, 0, test_tier(1, 2));
    tcase_add_test(tc, cnn_trains);
    /* The CNN's implicit GEMMs on FMA tiles, a pairing no device takes by default (a GPU's run
     * on its tensor cores, check_conv's quick tier): swept. */
    tcase_add_loop_test(tc, golden_curves, 0, test_tier(2, 3));
    tcase_add_test(tc, gpt_matches_pytorch);
    tcase_add_test(tc, gpt_learns_text);
    tcase_add_test(tc, gpt_checkpoint_resumes);
    tcase_add_test(tc, gpt_dropout);
    tcase_add_loop_test(tc, gpt_mixed_precision, 0, 2);
    suite_add_tcase(s, tc);
    return test_main(s);
}
