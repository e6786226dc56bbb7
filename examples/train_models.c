/* The training examples' models (train_models.h): setup from the shared generator, and one
 * training step as a sequence of liboclml calls. */
#include "train_models.h"

#include "train_common.h"

#define TRY(expr)                             \
    do {                                      \
        if (st == OCLML_SUCCESS) st = (expr); \
    } while (0)

/* A tensor of the given shape and dtype (uninitialised, or from host data, rounded to the
 * dtype); NULL after a failure. */
static oclml_tensor *make_of(oclml_ctx *ctx, oclml_status *st, oclml_dtype dtype, int nd,
                             const size_t *shape, const float *data) {
    oclml_tensor *t = NULL;
    if (*st) return NULL;
    *st = oclml_tensor_create_dtype(ctx, dtype, nd, shape, &t);
    if (!*st && data) {
        size_t n = 1;
        for (int i = 0; i < nd; i++) n *= shape[i];
        *st = oclml_tensor_write(t, data, n);
    }
    return t;
}

static oclml_tensor *make(oclml_ctx *ctx, oclml_status *st, int nd, const size_t *shape,
                          const float *data) {
    return make_of(ctx, st, OCLML_FLOAT32, nd, shape, data);
}

/* Writes PyTorch's default init (U(+-1/sqrt(fan_in))) into an arena parameter of n elements. */
static oclml_status init_param(train_rng *rng, oclml_tensor *p, size_t n, size_t fan_in) {
    float *v = malloc(n * sizeof *v);
    if (!v) return OCLML_ERR_OUT_OF_MEMORY;
    train_fill(rng, v, n, 1.0f / sqrtf((float)fan_in));
    oclml_status st = oclml_tensor_write(p, v, n);
    free(v);
    return st;
}

static void destroy_all(oclml_tensor **t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t[i]) oclml_tensor_destroy(t[i]);
}

/* ---- MLP ---- */

enum {
    MLP_X,
    MLP_T,
    MLP_Z1,
    MLP_A1,
    MLP_Z2,
    MLP_A2,
    MLP_Y,
    MLP_DY,
    MLP_DA2,
    MLP_DA1,
    MLP_LOSS,
    MLP_TENSORS
};

struct train_mlp {
    oclml_tensor *dloss; /* the loss scale (fp16: train_scale_start), or NULL */
    oclml_ctx *ctx;
    oclml_arena *arena;
    oclml_optim *opt;
    oclml_tensor *w[3], *b[3], *dw[3], *db[3]; /* arena views (mixed precision: the copies) */
    oclml_tensor *t[MLP_TENSORS];
    train_parallel par;
};

oclml_status train_mlp_create(oclml_ctx *ctx, size_t global_B, const size_t dims[4],
                              oclml_dtype dtype, const train_parallel *par, train_mlp **out) {
    if (par && par->parts > 1 && (global_B % par->parts || par->part >= par->parts))
        return OCLML_ERR_INVALID_ARGUMENT;
    train_mlp *m = calloc(1, sizeof *m);
    if (!m) return OCLML_ERR_OUT_OF_MEMORY;
    m->ctx = ctx;
    if (par) m->par = *par;
    /* This process's rows of the global batch (all of them in one process). */
    const size_t B = train_local_rows(par, global_B), first = train_first_row(par, global_B);
    oclml_status st = OCLML_SUCCESS;
    oclml_arena_shape shapes[6];
    for (int l = 0; l < 3; l++) {
        shapes[2 * l] = (oclml_arena_shape){2, {dims[l + 1], dims[l]}};
        shapes[2 * l + 1] = (oclml_arena_shape){1, {dims[l + 1]}};
    }
    TRY(oclml_arena_create(ctx, 6, shapes, &m->arena));
    train_rng rng = {1234};
    for (int l = 0; l < 3 && !st; l++) {
        TRY(oclml_arena_param(m->arena, 2 * (size_t)l, &m->w[l]));
        TRY(oclml_arena_param(m->arena, 2 * (size_t)l + 1, &m->b[l]));
        TRY(oclml_arena_grad(m->arena, 2 * (size_t)l, &m->dw[l]));
        TRY(oclml_arena_grad(m->arena, 2 * (size_t)l + 1, &m->db[l]));
        TRY(init_param(&rng, m->w[l], dims[l] * dims[l + 1], dims[l]));
        TRY(init_param(&rng, m->b[l], dims[l + 1], dims[l]));
    }
    /* Mixed precision: the layers read the 16-bit copies, made from the initial weights. */
    if (dtype != OCLML_FLOAT32) {
        TRY(oclml_arena_copy_create(m->arena, dtype));
        for (int l = 0; l < 3 && !st; l++) {
            TRY(oclml_arena_copy(m->arena, 2 * (size_t)l, &m->w[l]));
            TRY(oclml_arena_copy(m->arena, 2 * (size_t)l + 1, &m->b[l]));
        }
    }
    /* Data: x uniform in [-1, 1), target tanh(x T) with T uniform in [-0.25, 0.25), computed on
     * the device (train_golden.py computes it with torch on the CPU: the same to ~1e-7). */
    size_t I = dims[0], H = dims[1], O = dims[3];
    float *all_x = malloc(global_B * I * sizeof *all_x), *teacher = malloc(I * O * sizeof *teacher);
    if (!all_x || !teacher) st = OCLML_ERR_OUT_OF_MEMORY;
    if (!st) {
        train_fill(&rng, all_x, global_B * I, 1.0f);
        train_fill(&rng, teacher, I * O, 0.25f);
    }
    const float *x = all_x + first * I;
    size_t xs[2] = {B, I}, hs[2] = {B, H}, os[2] = {B, O}, ts[2] = {I, O}, one[1] = {1};
    m->t[MLP_X] = make_of(ctx, &st, dtype, 2, xs, x);
    m->t[MLP_T] = make(ctx, &st, 2, os, NULL);
    for (int i = MLP_Z1; i <= MLP_A2; i++) m->t[i] = make_of(ctx, &st, dtype, 2, hs, NULL);
    m->t[MLP_Y] = make(ctx, &st, 2, os, NULL);
    m->t[MLP_DY] = make(ctx, &st, 2, os, NULL);
    m->t[MLP_DA2] = make_of(ctx, &st, dtype, 2, hs, NULL);
    m->t[MLP_DA1] = make_of(ctx, &st, dtype, 2, hs, NULL);
    m->t[MLP_LOSS] = make(ctx, &st, 1, one, NULL);
    /* The target from the fp32 data, whatever the training dtype. */
    oclml_tensor *tt = make(ctx, &st, 2, ts, teacher), *x32 = make(ctx, &st, 2, xs, x);
    TRY(oclml_gemm(ctx, OCLML_NO_TRANS, OCLML_NO_TRANS, 1.0f, x32, tt, 0.0f, m->t[MLP_T]));
    TRY(oclml_unary(ctx, OCLML_TANH, m->t[MLP_T], m->t[MLP_T]));
    TRY(oclml_ctx_finish(ctx));
    if (tt) oclml_tensor_destroy(tt);
    if (x32) oclml_tensor_destroy(x32);
    free(all_x);
    free(teacher);
    oclml_optim_config cfg;
    TRY(oclml_optim_config_init(&cfg, OCLML_OPTIM_ADAMW));
    train_scale_config(&cfg, dtype);
    TRY(oclml_optim_create(ctx, m->arena, &cfg, &m->opt));
    TRY(train_scale_start(m->opt, dtype, &m->dloss));
    if (st) {
        train_mlp_destroy(m);
        return st;
    }
    *out = m;
    return OCLML_SUCCESS;
}

oclml_status train_mlp_step(train_mlp *m) {
    oclml_ctx *ctx = m->ctx;
    oclml_tensor **t = m->t;
    oclml_status st = OCLML_SUCCESS;
    TRY(oclml_linear(ctx, OCLML_ACT_GELU_ERF, t[MLP_X], m->w[0], m->b[0], t[MLP_A1], t[MLP_Z1]));
    TRY(oclml_linear(ctx, OCLML_ACT_GELU_ERF, t[MLP_A1], m->w[1], m->b[1], t[MLP_A2], t[MLP_Z2]));
    TRY(oclml_linear(ctx, OCLML_ACT_NONE, t[MLP_A2], m->w[2], m->b[2], t[MLP_Y], NULL));
    TRY(oclml_mse_loss(ctx, NULL, t[MLP_Y], t[MLP_T], m->dloss, t[MLP_LOSS], t[MLP_DY]));
    /* Each layer's weight and bias gradients (arena tensors 2l, 2l + 1) are final after its
     * backward. */
    TRY(oclml_linear_backward(ctx, OCLML_ACT_NONE, t[MLP_A2], m->w[2], NULL, t[MLP_DY], t[MLP_DA2],
                              m->dw[2], m->db[2], 0));
    TRY(train_grads_ready(&m->par, 4, 2));
    TRY(oclml_linear_backward(ctx, OCLML_ACT_GELU_ERF, t[MLP_A1], m->w[1], t[MLP_Z2], t[MLP_DA2],
                              t[MLP_DA1], m->dw[1], m->db[1], 0));
    TRY(train_grads_ready(&m->par, 2, 2));
    TRY(oclml_linear_backward(ctx, OCLML_ACT_GELU_ERF, t[MLP_X], m->w[0], t[MLP_Z1], t[MLP_DA1],
                              NULL, m->dw[0], m->db[0], 0));
    TRY(train_grads_ready(&m->par, 0, 2));
    TRY(train_before_step(&m->par));
    TRY(oclml_optim_step(m->opt));
    return st;
}

oclml_status train_mlp_loss(train_mlp *m, float *loss) {
    return oclml_tensor_read(m->t[MLP_LOSS], loss, 1);
}

oclml_arena *train_mlp_arena(const train_mlp *m) { return m->arena; }

train_parallel *train_mlp_parallel(train_mlp *m) { return &m->par; }

void train_mlp_destroy(train_mlp *m) {
    if (!m) return;
    destroy_all(m->t, MLP_TENSORS);
    if (m->opt) oclml_optim_destroy(m->opt);
    if (m->arena) oclml_arena_destroy(m->arena);
    free(m);
}

/* ---- CNN ---- */

/* Per conv layer: its output (the pre-activation), SiLU and max-pool fused into the pooled output
 * (oclml_act_max_pool2d: SiLU(out) is never stored), and their gradients. */
enum { CONV_OUT, CONV_POOL, CONV_DOUT, CONV_DPOOL, CONV_TENSORS };
enum { CNN_X, CNN_LABELS, CNN_LOGITS, CNN_DLOGITS, CNN_LOSS, CNN_FLAT, CNN_DFLAT, CNN_TENSORS };

struct train_cnn {
    oclml_tensor *dloss; /* the loss scale (fp16: train_scale_start), or NULL */
    oclml_ctx *ctx;
    int n_conv;
    oclml_arena *arena;
    oclml_optim *opt;
    /* arena views: the parameters the layers read (mixed precision: the copies), the gradients */
    oclml_tensor *p[2 * TRAIN_CNN_MAX_CONV + 2], *g[2 * TRAIN_CNN_MAX_CONV + 2];
    oclml_tensor *layer[TRAIN_CNN_MAX_CONV][CONV_TENSORS];
    oclml_tensor *t[CNN_TENSORS];
    oclml_conv2d_params conv;
    oclml_pool2d_params pool;
    train_parallel par;
};

oclml_status train_cnn_create(oclml_ctx *ctx, size_t global_N, size_t side, int n_conv,
                              const size_t *channels, size_t classes, oclml_dtype dtype,
                              const train_parallel *par, train_cnn **out) {
    if (n_conv < 1 || n_conv > TRAIN_CNN_MAX_CONV || side % ((size_t)1 << n_conv))
        return OCLML_ERR_INVALID_ARGUMENT;
    if (par && par->parts > 1 && (global_N % par->parts || par->part >= par->parts))
        return OCLML_ERR_INVALID_ARGUMENT;
    train_cnn *m = calloc(1, sizeof *m);
    if (!m) return OCLML_ERR_OUT_OF_MEMORY;
    m->ctx = ctx;
    if (par) m->par = *par;
    const size_t N = train_local_rows(par, global_N), first = train_first_row(par, global_N);
    m->n_conv = n_conv;
    oclml_status st = OCLML_SUCCESS;
    size_t ch[TRAIN_CNN_MAX_CONV + 1] = {3}, sides[TRAIN_CNN_MAX_CONV + 1] = {side};
    for (int l = 0; l < n_conv; l++) ch[l + 1] = channels[l], sides[l + 1] = sides[l] / 2;
    size_t flat = ch[n_conv] * sides[n_conv] * sides[n_conv];
    oclml_arena_shape shapes[2 * TRAIN_CNN_MAX_CONV + 2];
    for (int l = 0; l < n_conv; l++) {
        shapes[2 * l] = (oclml_arena_shape){4, {ch[l + 1], ch[l], 5, 5}};
        shapes[2 * l + 1] = (oclml_arena_shape){1, {ch[l + 1]}};
    }
    shapes[2 * n_conv] = (oclml_arena_shape){2, {classes, flat}};
    shapes[2 * n_conv + 1] = (oclml_arena_shape){1, {classes}};
    size_t n_params = 2 * (size_t)n_conv + 2;
    TRY(oclml_arena_create(ctx, n_params, shapes, &m->arena));
    train_rng rng = {4321};
    for (size_t i = 0; i < n_params && !st; i++) {
        TRY(oclml_arena_param(m->arena, i, &m->p[i]));
        TRY(oclml_arena_grad(m->arena, i, &m->g[i]));
        size_t n = 1, fan_in = i / 2 < (size_t)n_conv ? ch[i / 2] * 25 : flat;
        for (int d = 0; d < shapes[i].ndim; d++) n *= shapes[i].shape[d];
        TRY(init_param(&rng, m->p[i], n, fan_in));
    }
    if (dtype != OCLML_FLOAT32) {
        TRY(oclml_arena_copy_create(m->arena, dtype));
        for (size_t i = 0; i < n_params; i++) TRY(oclml_arena_copy(m->arena, i, &m->p[i]));
    }
    /* Images uniform in [-1, 1); labels: argmax of a random teacher's outputs, in double. */
    size_t npix = 3 * side * side;
    float *all_img = malloc(global_N * npix * sizeof *all_img),
          *teacher = malloc(npix * classes * sizeof *teacher), *labels = malloc(N * sizeof *labels);
    if (!all_img || !teacher || !labels) st = OCLML_ERR_OUT_OF_MEMORY;
    const float *img = all_img ? all_img + first * npix : NULL;
    if (!st) {
        train_fill(&rng, all_img, global_N * npix, 1.0f);
        train_fill(&rng, teacher, npix * classes, 1.0f);
        for (size_t n = 0; n < N; n++) {
            double best = -INFINITY;
            for (size_t c = 0; c < classes; c++) {
                double s = 0;
                for (size_t p = 0; p < npix; p++)
                    s += (double)img[n * npix + p] * teacher[p * classes + c];
                if (s > best) best = s, labels[n] = (float)c;
            }
        }
    }
    size_t xs[4] = {N, 3, side, side}, ls[2] = {N, classes}, ns[1] = {N}, one[1] = {1},
           fs[2] = {N, flat};
    m->t[CNN_X] = make_of(ctx, &st, dtype, 4, xs, img);
    m->t[CNN_LABELS] = make(ctx, &st, 1, ns, labels);
    m->t[CNN_LOGITS] = make(ctx, &st, 2, ls, NULL);
    m->t[CNN_DLOGITS] = make(ctx, &st, 2, ls, NULL);
    m->t[CNN_LOSS] = make(ctx, &st, 1, one, NULL);
    free(all_img);
    free(teacher);
    free(labels);
    for (int l = 0; l < n_conv; l++) {
        size_t full[4] = {N, ch[l + 1], sides[l], sides[l]},
               half[4] = {N, ch[l + 1], sides[l + 1], sides[l + 1]};
        for (int k = 0; k < CONV_TENSORS; k++)
            m->layer[l][k] =
                make_of(ctx, &st, dtype, 4, k == CONV_POOL || k == CONV_DPOOL ? half : full, NULL);
    }
    /* The last pooled output and its gradient, flattened for the head (views). */
    m->t[CNN_FLAT] = train_view(ctx, &st, m->layer[n_conv - 1][CONV_POOL], 2, fs);
    m->t[CNN_DFLAT] = train_view(ctx, &st, m->layer[n_conv - 1][CONV_DPOOL], 2, fs);
    oclml_conv2d_params_init(&m->conv);
    for (int i = 0; i < 2; i++) m->conv.pad_before[i] = m->conv.pad_after[i] = 2;
    oclml_pool2d_params_init(&m->pool);
    oclml_optim_config cfg;
    TRY(oclml_optim_config_init(&cfg, OCLML_OPTIM_ADAMW));
    train_scale_config(&cfg, dtype);
    TRY(oclml_optim_create(ctx, m->arena, &cfg, &m->opt));
    TRY(train_scale_start(m->opt, dtype, &m->dloss));
    if (st) {
        train_cnn_destroy(m);
        return st;
    }
    *out = m;
    return OCLML_SUCCESS;
}

oclml_status train_cnn_step(train_cnn *m) {
    oclml_ctx *ctx = m->ctx;
    oclml_status st = OCLML_SUCCESS;
    int L = m->n_conv;
    oclml_tensor *in = m->t[CNN_X];
    for (int l = 0; l < L; l++) {
        oclml_tensor **y = m->layer[l];
        TRY(oclml_conv2d(ctx, &m->conv, in, m->p[2 * l], m->p[2 * l + 1], y[CONV_OUT]));
        TRY(oclml_act_max_pool2d(ctx, &m->pool, OCLML_ACT_SILU, y[CONV_OUT], y[CONV_POOL]));
        in = y[CONV_POOL];
    }
    TRY(oclml_linear(ctx, OCLML_ACT_NONE, m->t[CNN_FLAT], m->p[2 * L], m->p[2 * L + 1],
                     m->t[CNN_LOGITS], NULL));
    TRY(oclml_cross_entropy(ctx, NULL, m->t[CNN_LOGITS], m->t[CNN_LABELS], m->dloss, m->t[CNN_LOSS],
                            m->t[CNN_DLOGITS]));
    TRY(oclml_linear_backward(ctx, OCLML_ACT_NONE, m->t[CNN_FLAT], m->p[2 * L], NULL,
                              m->t[CNN_DLOGITS], m->t[CNN_DFLAT], m->g[2 * L], m->g[2 * L + 1], 0));
    TRY(train_grads_ready(&m->par, 2 * (size_t)L, 2));
    for (int l = L - 1; l >= 0; l--) {
        oclml_tensor **y = m->layer[l];
        TRY(oclml_act_max_pool2d_backward(ctx, &m->pool, OCLML_ACT_SILU, y[CONV_OUT], y[CONV_DPOOL],
                                          y[CONV_DOUT]));
        oclml_tensor *x = l ? m->layer[l - 1][CONV_POOL] : m->t[CNN_X];
        oclml_tensor *dx = l ? m->layer[l - 1][CONV_DPOOL] : NULL;
        TRY(oclml_conv2d_backward(ctx, &m->conv, x, m->p[2 * l], y[CONV_DOUT], dx, m->g[2 * l],
                                  m->g[2 * l + 1], 0));
        TRY(train_grads_ready(&m->par, 2 * (size_t)l, 2));
    }
    TRY(train_before_step(&m->par));
    TRY(oclml_optim_step(m->opt));
    return st;
}

oclml_status train_cnn_loss(train_cnn *m, float *loss) {
    return oclml_tensor_read(m->t[CNN_LOSS], loss, 1);
}

oclml_arena *train_cnn_arena(const train_cnn *m) { return m->arena; }

train_parallel *train_cnn_parallel(train_cnn *m) { return &m->par; }

void train_cnn_destroy(train_cnn *m) {
    if (!m) return;
    destroy_all(m->t, CNN_TENSORS);
    for (int l = 0; l < m->n_conv; l++) destroy_all(m->layer[l], CONV_TENSORS);
    if (m->opt) oclml_optim_destroy(m->opt);
    if (m->arena) oclml_arena_destroy(m->arena);
    free(m);
}
