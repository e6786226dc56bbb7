/* Trains a GPT-2 model on the device (gpt_model.c: every op of forward, loss, backward and the
 * AdamW step through liboclml), printing the loss and tokens/s, and at the end a sample of text.
 *
 * Sizes: --small (GPT-2 small, 124M, batch 8 x 1024, for GPUs) or --tiny (2 layers, width 64,
 * batch 4 x 32: the default, minutes on PoCL), each overridable (--layers, --width, --heads,
 * --batch, --seq, --vocab, --lr, --warmup); --dropout P drops attention's probabilities and
 * both residual branches in training steps (off by default); --bf16 or --fp16 trains in mixed
 * precision (gpt_model.h; a golden file then is autocast's curve, matched within 2e-2). Data: --data FILE trains a
 * byte-level model (vocabulary 256) on random windows of the file; without it, random tokens of
 * the vocabulary (the benchmark's data). --fixed repeats the first batch every step
 * (examples/train_gpt_golden.py trains PyTorch on the same batch from the same weights; --golden
 * FILE compares the curves).
 *   usage: train_gpt [--tiny|--small] [--data FILE] [--steps N] [--fixed] [--golden FILE]
 *                    [--sample N] [--save FILE] [--load FILE] [--every K] [options above]
 * Under `mpirun -np N` (built with MPI) N processes share each batch (train_dp.h: --batch is
 * the global batch), rank 0 prints the loss of the global batch, and the run ends by checking
 * that all hold the same weights.
 * Exit status: 0 when the loss fell (the last five steps' mean under the first step's) and matched
 * the golden file within 1e-4 relative when one is given, 1 otherwise, 2 usage, 3 a failed call. */
#include "gpt_model.h"
#include "train_common.h"
#include "train_dp.h"

#include <time.h>

typedef struct options {
    gpt_config c;
    const char *data, *golden, *save, *load;
    int steps, fixed, every;
    size_t sample;
    oclml_dtype dtype;
} options;

/* A token below n from the generator: its 24 random bits scaled (train_gpt_golden.py's too). */
static uint32_t token_below(train_rng *r, uint32_t n) {
    uint32_t bits = (uint32_t)((train_uniform(r) + 1.0f) * 8388608.0f);
    return (uint32_t)(((uint64_t)bits * n) >> 24);
}

typedef struct corpus {
    unsigned char *bytes; /* NULL: random tokens */
    size_t len;
} corpus;

static int read_corpus(const char *path, corpus *c, size_t need) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot read %s\n", path);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    c->bytes = len > 0 ? malloc((size_t)len) : NULL;
    if (!c->bytes || fread(c->bytes, 1, (size_t)len, f) != (size_t)len || (size_t)len < need) {
        fprintf(stderr, "%s: need at least %zu bytes\n", path, need);
        fclose(f);
        return 2;
    }
    fclose(f);
    c->len = (size_t)len;
    return 0;
}

/* B sequences of T + 1 tokens: random windows of the corpus, or random tokens. */
static void next_batch(const corpus *c, const gpt_config *g, train_rng *r, uint32_t *tok) {
    size_t W = g->seq + 1;
    for (size_t b = 0; b < g->batch; b++) {
        if (c->bytes) {
            size_t at = token_below(r, (uint32_t)(c->len - W + 1));
            for (size_t t = 0; t < W; t++) tok[b * W + t] = c->bytes[at + t];
        } else {
            for (size_t t = 0; t < W; t++) tok[b * W + t] = token_below(r, (uint32_t)g->vocab);
        }
    }
}

static int descending(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Continues a prompt by n tokens, each drawn from the softmax of the logits at temperature 0.8
 * over the 40 likeliest tokens; prints bytes (the byte-level model) or token ids. */
static void sample_text(gpt_model *m, const gpt_config *g, const uint32_t *prompt, size_t len,
                        size_t n, int bytes) {
    uint32_t *tok = calloc(g->batch * (g->seq + 1), sizeof *tok);
    float *logits = malloc(g->vocab * sizeof *logits), *sorted = malloc(g->vocab * sizeof *sorted);
    uint32_t *ctx = malloc((len + n) * sizeof *ctx);
    if (!tok || !logits || !sorted || !ctx) exit(3);
    memcpy(ctx, prompt, len * sizeof *ctx);
    train_rng r = {99};
    printf("sample: ");
    for (size_t i = 0; i < len; i++) bytes ? putchar((int)ctx[i]) : printf("%u ", ctx[i]);
    printf("|");
    for (size_t k = 0; k < n; k++, len++) {
        size_t start = len > g->seq ? len - g->seq : 0, used = len - start;
        for (size_t t = 0; t < used; t++) tok[t] = ctx[start + t];
        TRAIN_CHECK(gpt_set_batch(m, tok));
        TRAIN_CHECK(gpt_forward(m));
        TRAIN_CHECK(gpt_logits_at(m, used - 1, logits));
        /* The 40 likeliest: those at or above the 40th largest logit. */
        memcpy(sorted, logits, g->vocab * sizeof *sorted);
        qsort(sorted, g->vocab, sizeof *sorted, descending);
        float floor = sorted[g->vocab < 40 ? g->vocab - 1 : 39], top = sorted[0];
        double sum = 0, u = (train_uniform(&r) + 1.0) / 2;
        for (size_t v = 0; v < g->vocab; v++)
            if (logits[v] >= floor) sum += exp((logits[v] - top) / 0.8);
        uint32_t pick = 0;
        for (size_t v = 0; v < g->vocab; v++) {
            if (logits[v] < floor) continue;
            pick = (uint32_t)v;
            u -= exp((logits[v] - top) / 0.8) / sum;
            if (u <= 0) break;
        }
        ctx[len] = pick;
        bytes ? putchar((int)pick) : printf("%u ", pick);
        fflush(stdout);
    }
    printf("\n");
    free(tok);
    free(logits);
    free(sorted);
    free(ctx);
}

static int usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--tiny|--small] [--data FILE] [--steps N] [--fixed] [--golden FILE]\n"
            "          [--sample N] [--save FILE] [--load FILE] [--every K] [--layers L]\n"
            "          [--width C] [--heads H] [--batch B] [--seq T] [--vocab V] [--lr X]\n"
            "          [--warmup N] [--dropout P] [--bf16|--fp16]\n",
            argv0);
    return 2;
}

static int parse(int argc, char **argv, options *o) {
    *o = (options){.c = gpt_config_tiny(), .steps = 50, .every = 1, .sample = 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--tiny") || !strcmp(a, "--small")) {
            o->c = a[2] == 't' ? gpt_config_tiny() : gpt_config_small();
            continue;
        }
        if (!strcmp(a, "--fixed")) {
            o->fixed = 1;
            continue;
        }
        if (!strcmp(a, "--bf16") || !strcmp(a, "--fp16")) {
            o->dtype = a[2] == 'b' ? OCLML_BFLOAT16 : OCLML_FLOAT16;
            continue;
        }
        if (!v) return usage(argv[0]);
        i++;
        if (!strcmp(a, "--data"))
            o->data = v;
        else if (!strcmp(a, "--golden"))
            o->golden = v;
        else if (!strcmp(a, "--save"))
            o->save = v;
        else if (!strcmp(a, "--load"))
            o->load = v;
        else if (!strcmp(a, "--steps"))
            o->steps = atoi(v);
        else if (!strcmp(a, "--every"))
            o->every = atoi(v);
        else if (!strcmp(a, "--sample"))
            o->sample = (size_t)atol(v);
        else if (!strcmp(a, "--layers"))
            o->c.layers = (size_t)atol(v);
        else if (!strcmp(a, "--width"))
            o->c.width = (size_t)atol(v);
        else if (!strcmp(a, "--heads"))
            o->c.heads = (size_t)atol(v);
        else if (!strcmp(a, "--batch"))
            o->c.batch = (size_t)atol(v);
        else if (!strcmp(a, "--seq"))
            o->c.seq = o->c.context = (size_t)atol(v);
        else if (!strcmp(a, "--vocab"))
            o->c.vocab = (size_t)atol(v);
        else if (!strcmp(a, "--lr"))
            o->c.lr = (float)atof(v), o->c.min_lr = o->c.lr / 10;
        else if (!strcmp(a, "--warmup"))
            o->c.warmup = (size_t)atol(v);
        else if (!strcmp(a, "--dropout"))
            o->c.dropout = (float)atof(v);
        else
            return usage(argv[0]);
    }
    if (o->data) o->c.vocab = 256;
    o->c.dtype = o->dtype;
    if (o->steps < 1 || o->every < 1) return usage(argv[0]);
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    char err[4096];
    oclml_ctx *ctx;
    train_dp dp;
    if (train_dp_begin(&dp, &argc, &argv, &ctx, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 3;
    }
    options o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
    const gpt_config *g = &o.c; /* the global batch */
    if (g->batch % (size_t)dp.ranks) return usage(argv[0]);
    corpus data = {0};
    if (o.data && (rc = read_corpus(o.data, &data, g->seq + 2))) return rc;
    /* This process's model trains on its sequences of each global batch. */
    gpt_config local = *g;
    local.batch = g->batch / (size_t)dp.ranks;
    const size_t mine = (size_t)dp.rank * local.batch * (g->seq + 1);
    gpt_model *m;
    TRAIN_CHECK(gpt_create(ctx, &local, &m));
    if (o.load) TRAIN_CHECK(gpt_load(m, o.load));
    size_t *order = malloc(gpt_tensors(m) * sizeof *order);
    if (!order) return 3;
    /* Gathering every rank's ids and stream gradient for the token embedding's lookup (instead
     * of exchanging the table's gradient at the end) pays while the gathered rows are fewer
     * than twice the table's: an all-reduce moves about twice the table a rank. */
    if ((size_t)dp.ranks * local.batch * local.seq >= 2 * local.vocab) dp.par.gather = NULL;
    gpt_set_parallel(m, &dp.par); /* first: the order depends on it */
    gpt_grad_order(m, order);
    TRAIN_CHECK(train_dp_attach(&dp, ctx, gpt_arena(m), order));
    free(order);
    if (dp.rank) freopen("/dev/null", "w", stdout); /* rank 0 speaks for all */
    printf("GPT: %zu layers, width %zu, %zu heads, vocabulary %zu, batch %zu x %zu: %zu "
           "parameters\n",
           g->layers, g->width, g->heads, g->vocab, g->batch, g->seq, gpt_parameters(m));
    uint32_t *tok = malloc(g->batch * (g->seq + 1) * sizeof *tok);
    float *curve = malloc((size_t)o.steps * sizeof *curve);
    if (!tok || !curve) return 3;
    train_rng rng = {g->seed + 1};
    next_batch(&data, g, &rng, tok);
    double t0 = now_s(), tp = t0;
    for (int s = 0; s < o.steps; s++) {
        if (s && !o.fixed) next_batch(&data, g, &rng, tok);
        TRAIN_CHECK(gpt_set_batch(m, tok + mine));
        TRAIN_CHECK(gpt_step(m));
        TRAIN_CHECK(gpt_loss(m, &curve[s]));
        curve[s] = train_dp_mean(&dp, curve[s]);
        if ((s + 1) % o.every == 0 || s + 1 == o.steps) {
            double t = now_s();
            printf("step %4d  loss %.9g  %.0f tokens/s\n", s, curve[s],
                   (double)(g->batch * g->seq) * o.every / (t - tp));
            fflush(stdout);
            tp = t;
        }
    }
    double elapsed = now_s() - t0;
    if (!train_dp_identical(&dp, gpt_arena(m))) {
        fprintf(stderr, "rank %d: the processes' weights differ\n", dp.rank);
        rc = 1;
    }
    printf("%d steps in %.1f s: %.0f tokens/s\n", o.steps, elapsed,
           (double)(g->batch * g->seq) * o.steps / elapsed);
    int tail = o.steps < 5 ? o.steps : 5;
    double last = 0;
    for (int s = o.steps - tail; s < o.steps; s++) last += curve[s] / tail;
    if (last >= curve[0]) {
        fprintf(stderr, "the loss did not fall\n");
        rc = 1;
    }
    if (o.golden)
        rc |= train_compare_golden(o.golden, curve, o.steps, o.dtype == OCLML_FLOAT32 ? 1e-4 : 2e-2)
                  ? 1
                  : 0;
    if (o.save && !dp.rank) TRAIN_CHECK(gpt_save(m, o.save));
    train_dp_detach(&dp);
    if (o.sample && !dp.rank) {
        size_t len = g->seq < 16 ? g->seq / 2 : 16;
        sample_text(m, g, tok, len ? len : 1, o.sample, data.bytes != NULL);
    }
    gpt_destroy(m);
    oclml_ctx_destroy(ctx);
    train_dp_end(&dp);
    free(tok);
    free(curve);
    free(data.bytes);
    return rc;
}
