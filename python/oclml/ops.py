"""liboclml's ops as functions, named and defaulted as PyTorch names them where an op mirrors
one. Each returns new tensors unless given `out=` (and the like); inputs and outputs belong to
one Context; the C header's comment on each op says what it computes exactly (dtypes, NaN,
determinism). Backward functions return the gradients the forward's inputs need."""

from ._ffi import ffi, lib
from .errors import check, misuse
from .tensor import Tensor

NULL = ffi.NULL

_ACT = {None: lib.OCLML_ACT_NONE, "none": lib.OCLML_ACT_NONE, "relu": lib.OCLML_ACT_RELU,
        "gelu": lib.OCLML_ACT_GELU_ERF, "gelu_tanh": lib.OCLML_ACT_GELU_TANH,
        "silu": lib.OCLML_ACT_SILU, "tanh": lib.OCLML_ACT_TANH,
        "sigmoid": lib.OCLML_ACT_SIGMOID}
_UNARY = {"neg": lib.OCLML_NEG, "abs": lib.OCLML_ABS, "exp": lib.OCLML_EXP,
          "log": lib.OCLML_LOG, "sqrt": lib.OCLML_SQRT, "rsqrt": lib.OCLML_RSQRT,
          "reciprocal": lib.OCLML_RECIP, "relu": lib.OCLML_RELU, "sigmoid": lib.OCLML_SIGMOID,
          "tanh": lib.OCLML_TANH, "gelu": lib.OCLML_GELU_ERF, "gelu_tanh": lib.OCLML_GELU_TANH,
          "silu": lib.OCLML_SILU}
_BINARY = {"add": lib.OCLML_ADD, "sub": lib.OCLML_SUB, "mul": lib.OCLML_MUL,
           "div": lib.OCLML_DIV, "maximum": lib.OCLML_MAX, "minimum": lib.OCLML_MIN}
_REDUCE = {"sum": lib.OCLML_REDUCE_SUM, "amax": lib.OCLML_REDUCE_MAX,
           "mean": lib.OCLML_REDUCE_MEAN, "argmax": lib.OCLML_REDUCE_ARGMAX}
_LOSS_REDUCTION = {"mean": lib.OCLML_LOSS_MEAN, "sum": lib.OCLML_LOSS_SUM,
                   "none": lib.OCLML_LOSS_NONE}


def _p(t):
    return NULL if t is None else t.ptr


def _new(ctx, shape, dtype, out):
    return ctx.empty(shape, dtype) if out is None else out


def _act(name):
    if name not in _ACT:
        raise misuse("activation %r (one of %s)" % (name, ", ".join(str(k) for k in _ACT)))
    return _ACT[name]


def _last_dim(x, dim):
    if dim not in (-1, x.ndim - 1):
        raise misuse("the op runs over the last dimension (dim=-1), not dim=%d" % dim)


# ---- elementwise ---------------------------------------------------------------------------

def _unary(name, x, out=None):
    y = _new(x._ctx, x.shape, x.dtype, out)
    check(lib.oclml_unary(x._ctx.ptr, _UNARY[name], x.ptr, y.ptr), x._ctx._ptr)
    return y


def neg(x, out=None):
    return _unary("neg", x, out)


def abs(x, out=None):  # noqa: A001 (PyTorch's name)
    return _unary("abs", x, out)


def exp(x, out=None):
    return _unary("exp", x, out)


def log(x, out=None):
    return _unary("log", x, out)


def sqrt(x, out=None):
    return _unary("sqrt", x, out)


def rsqrt(x, out=None):
    return _unary("rsqrt", x, out)


def reciprocal(x, out=None):
    return _unary("reciprocal", x, out)


def relu(x, out=None):
    return _unary("relu", x, out)


def sigmoid(x, out=None):
    return _unary("sigmoid", x, out)


def tanh(x, out=None):
    return _unary("tanh", x, out)


def gelu(x, approximate="none", out=None):
    """F.gelu: the erf form, or approximate="tanh"."""
    return _unary("gelu_tanh" if approximate == "tanh" else "gelu", x, out)


def silu(x, out=None):
    return _unary("silu", x, out)


def pow(x, exponent, out=None):  # noqa: A001
    y = _new(x._ctx, x.shape, x.dtype, out)
    check(lib.oclml_pow(x._ctx.ptr, x.ptr, float(exponent), y.ptr), x._ctx._ptr)
    return y


def unary_backward(op, x, grad, out=None):
    """The gradient of a unary op ("relu", "gelu", "exp", ...) at x, times grad."""
    dx = _new(x._ctx, x.shape, x.dtype, out)
    check(lib.oclml_unary_backward(x._ctx.ptr, _UNARY[op], x.ptr, grad.ptr, dx.ptr),
          x._ctx._ptr)
    return dx


def pow_backward(x, exponent, grad, out=None):
    dx = _new(x._ctx, x.shape, x.dtype, out)
    check(lib.oclml_pow_backward(x._ctx.ptr, x.ptr, float(exponent), grad.ptr, dx.ptr),
          x._ctx._ptr)
    return dx


def _binary(name, a, b, out=None):
    y = _new(a._ctx, a.shape, a.dtype, out)
    if isinstance(b, Tensor):
        check(lib.oclml_binary(a._ctx.ptr, _BINARY[name], a.ptr, b.ptr, y.ptr), a._ctx._ptr)
    else:
        check(lib.oclml_binary_scalar(a._ctx.ptr, _BINARY[name], a.ptr, float(b), y.ptr),
              a._ctx._ptr)
    return y


def add(a, b, out=None):
    """a + b: b a tensor (a's shape, or broadcast as oclml_binary says) or a number."""
    return _binary("add", a, b, out)


def sub(a, b, out=None):
    return _binary("sub", a, b, out)


def mul(a, b, out=None):
    return _binary("mul", a, b, out)


def div(a, b, out=None):
    return _binary("div", a, b, out)


def maximum(a, b, out=None):
    return _binary("maximum", a, b, out)


def minimum(a, b, out=None):
    return _binary("minimum", a, b, out)


def fill_(x, value):
    return x.fill_(value)


def add_bias(x, bias, axis=-1, out=None):
    """x + bias broadcast along `axis` (bias has x.shape[axis] elements)."""
    y = _new(x._ctx, x.shape, x.dtype, out)
    check(lib.oclml_add_bias(x._ctx.ptr, x.ptr, bias.ptr, axis if axis >= 0 else x.ndim + axis,
                             y.ptr), x._ctx._ptr)
    return y


# ---- reductions ----------------------------------------------------------------------------

def _reduce(name, x, dim, keepdim, out):
    ctx = x._ctx
    if dim is None:
        y = _new(ctx, (1,), "float32", out)
        check(lib.oclml_reduce_all(ctx.ptr, _REDUCE[name], x.ptr, y.ptr), ctx._ptr)
        return y
    dims = [dim] if isinstance(dim, int) else list(dim)
    axes = sorted(d + x.ndim if d < 0 else d for d in dims)
    shape = [1 if i in axes else s for i, s in enumerate(x.shape)] if keepdim else \
        [s for i, s in enumerate(x.shape) if i not in axes] or [1]
    y = _new(ctx, shape, "float32", out)
    check(lib.oclml_reduce_axes(ctx.ptr, _REDUCE[name], x.ptr, ffi.new("int[]", axes),
                                len(axes), y.ptr), ctx._ptr)
    return y


def sum(x, dim=None, keepdim=False, out=None):  # noqa: A001
    """torch.sum: over every element (dim None: a [1] tensor) or the given dimensions."""
    return _reduce("sum", x, dim, keepdim, out)


def mean(x, dim=None, keepdim=False, out=None):
    return _reduce("mean", x, dim, keepdim, out)


def amax(x, dim=None, keepdim=False, out=None):
    return _reduce("amax", x, dim, keepdim, out)


def argmax(x, dim=-1, keepdim=False, out=None):
    """Indices (as floats) of the largest element along one dimension."""
    if dim is None:
        raise misuse("argmax takes one dimension")
    return _reduce("argmax", x, dim, keepdim, out)


# ---- layout --------------------------------------------------------------------------------

def permute(x, dims, out=None):
    dims = [d + x.ndim if d < 0 else d for d in dims]
    y = _new(x._ctx, [x.shape[d] for d in dims], x.dtype, out)
    check(lib.oclml_permute(x._ctx.ptr, x.ptr, ffi.new("int[]", dims), y.ptr), x._ctx._ptr)
    return y


def transpose(x, dim0, dim1, out=None):
    d0, d1 = (dim0 + x.ndim) % x.ndim, (dim1 + x.ndim) % x.ndim
    shape = list(x.shape)
    shape[d0], shape[d1] = shape[d1], shape[d0]
    y = _new(x._ctx, shape, x.dtype, out)
    check(lib.oclml_transpose_axes(x._ctx.ptr, x.ptr, d0, d1, y.ptr), x._ctx._ptr)
    return y


def cat(tensors, dim=0, out=None):
    """torch.cat of tensors of one dtype along dim."""
    tensors = list(tensors)
    if not tensors:
        raise misuse("cat of no tensors")
    x0 = tensors[0]
    d = dim + x0.ndim if dim < 0 else dim
    shape = list(x0.shape)
    shape[d] = 0
    for t in tensors:
        shape[d] += t.shape[d]
    y = _new(x0._ctx, shape, x0.dtype, out)
    ptrs = ffi.new("oclml_tensor *[]", [t.ptr for t in tensors])
    check(lib.oclml_concat(x0._ctx.ptr, ptrs, len(tensors), d, y.ptr), x0._ctx._ptr)
    return y


def split(x, split_size_or_sections, dim=0):
    """torch.split: pieces of split_size along dim (the last may be smaller), or the listed
    sizes."""
    d = dim + x.ndim if dim < 0 else dim
    n = x.shape[d]
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        sizes = [min(size, n - i) for i in range(0, n, size)]
    else:
        sizes = list(split_size_or_sections)
    outs = []
    for s in sizes:
        shape = list(x.shape)
        shape[d] = s
        outs.append(x._ctx.empty(shape, x.dtype))
    ptrs = ffi.new("oclml_tensor *[]", [t.ptr for t in outs])
    check(lib.oclml_split(x._ctx.ptr, x.ptr, d, ptrs, len(outs)), x._ctx._ptr)
    return tuple(outs)


# ---- products ------------------------------------------------------------------------------

def gemm(a, b, c=None, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, dtype=None):
    """C = alpha op(A) op(B) + beta C (3-D tensors: the batched product). A new C (dtype: A's
    unless given) when c is None."""
    ctx = a._ctx
    batched = a.ndim == 3 or b.ndim == 3
    m = a.shape[-1] if trans_a else a.shape[-2]
    n = b.shape[-2] if trans_b else b.shape[-1]
    if c is None:
        batch = a.shape[0] if a.ndim == 3 else b.shape[0]
        c = ctx.empty((batch, m, n) if batched else (m, n), dtype or a.dtype)
    ta = lib.OCLML_TRANS if trans_a else lib.OCLML_NO_TRANS
    tb = lib.OCLML_TRANS if trans_b else lib.OCLML_NO_TRANS
    f = lib.oclml_gemm_batched if batched else lib.oclml_gemm
    check(f(ctx.ptr, ta, tb, float(alpha), a.ptr, b.ptr, float(beta), c.ptr), ctx._ptr)
    return c


def matmul(a, b, out=None):
    """a @ b for 2-D or batched 3-D tensors."""
    return gemm(a, b, out)


def bmm(a, b, out=None):
    return gemm(a, b, out)


def linear(input, weight, bias=None, activation=None, out=None, pre=None):
    """F.linear (weight [out, in], nn.Linear's layout) with an activation fused ("relu",
    "gelu", "gelu_tanh", "silu", "tanh", "sigmoid"); `pre` receives the pre-activation the
    backward needs (activations other than relu and none)."""
    ctx = input._ctx
    y = _new(ctx, input.shape[:-1] + (weight.shape[0],), input.dtype, out)
    check(lib.oclml_linear(ctx.ptr, _act(activation), input.ptr, weight.ptr, _p(bias), y.ptr,
                           _p(pre)), ctx._ptr)
    return y


def linear_backward(input, weight, grad, saved=None, activation=None, need_input_grad=True,
                    bias=True, accumulate=False, dx=None, dw=None, db=None):
    """Gradients (dx, dw, db) of linear for grad = dL/dy. saved is what the activation's
    derivative reads: the forward's `pre` for gelu and silu, its output for relu, tanh and
    sigmoid, nothing without an activation. accumulate adds dw and db to the given ones."""
    ctx = input._ctx
    if need_input_grad and dx is None:
        dx = ctx.empty(input.shape, input.dtype)
    if dw is None:
        dw = ctx.empty(weight.shape, "float32")
    if bias and db is None:
        db = ctx.empty((weight.shape[0],), "float32")
    check(lib.oclml_linear_backward(ctx.ptr, _act(activation), input.ptr, weight.ptr,
                                    _p(saved), grad.ptr, _p(dx if need_input_grad else None),
                                    dw.ptr, _p(db if bias else None), 1 if accumulate else 0),
          ctx._ptr)
    return dx if need_input_grad else None, dw, db if bias else None


# ---- rows: softmax and norms ---------------------------------------------------------------

def softmax(input, dim=-1, out=None):
    _last_dim(input, dim)
    y = _new(input._ctx, input.shape, input.dtype, out)
    check(lib.oclml_softmax(input._ctx.ptr, input.ptr, y.ptr), input._ctx._ptr)
    return y


def log_softmax(input, dim=-1, out=None):
    _last_dim(input, dim)
    y = _new(input._ctx, input.shape, input.dtype, out)
    check(lib.oclml_log_softmax(input._ctx.ptr, input.ptr, y.ptr), input._ctx._ptr)
    return y


def softmax_backward(output, grad, out=None):
    """dx of softmax from its output y and dy."""
    dx = _new(output._ctx, output.shape, output.dtype, out)
    check(lib.oclml_softmax_backward(output._ctx.ptr, output.ptr, grad.ptr, dx.ptr),
          output._ctx._ptr)
    return dx


def log_softmax_backward(output, grad, out=None):
    dx = _new(output._ctx, output.shape, output.dtype, out)
    check(lib.oclml_log_softmax_backward(output._ctx.ptr, output.ptr, grad.ptr, dx.ptr),
          output._ctx._ptr)
    return dx


def _rows(x):
    return x.numel() // x.shape[-1] if x.shape[-1] else 0


def layer_norm(input, normalized_shape=None, weight=None, bias=None, eps=1e-5, out=None,
               return_stats=False):
    """F.layer_norm over the last dimension. return_stats: also (mean, rstd), [rows] fp32 each,
    which layer_norm_backward takes."""
    if normalized_shape is not None:
        ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if ns != input.shape[-1:]:
            raise misuse("normalized_shape must be the last dimension, %s" % (input.shape[-1:],))
    ctx = input._ctx
    y = _new(ctx, input.shape, input.dtype, out)
    mean_ = rstd = None
    if return_stats:
        mean_, rstd = ctx.empty((_rows(input),)), ctx.empty((_rows(input),))
    check(lib.oclml_layernorm(ctx.ptr, input.ptr, _p(weight), _p(bias), float(eps), y.ptr,
                              _p(mean_), _p(rstd)), ctx._ptr)
    return (y, mean_, rstd) if return_stats else y


def layer_norm_backward(input, grad, mean, rstd, weight=None, need_weight_grad=True):
    """(dx, dweight, dbias) of layer_norm (dweight and dbias None without a weight)."""
    ctx = input._ctx
    dx = ctx.empty(input.shape, input.dtype)
    dg = db = None
    if weight is not None and need_weight_grad:
        dg, db = ctx.empty(weight.shape), ctx.empty(weight.shape)
    check(lib.oclml_layernorm_backward(ctx.ptr, input.ptr, _p(weight), mean.ptr, rstd.ptr,
                                       grad.ptr, dx.ptr, _p(dg), _p(db)), ctx._ptr)
    return dx, dg, db


def rms_norm(input, normalized_shape=None, weight=None, eps=1e-6, out=None, return_stats=False):
    """RMSNorm over the last dimension; return_stats: also rstd ([rows] fp32)."""
    ctx = input._ctx
    y = _new(ctx, input.shape, input.dtype, out)
    rstd = ctx.empty((_rows(input),)) if return_stats else None
    check(lib.oclml_rmsnorm(ctx.ptr, input.ptr, _p(weight), float(eps), y.ptr, _p(rstd)),
          ctx._ptr)
    return (y, rstd) if return_stats else y


def rms_norm_backward(input, grad, rstd, weight=None):
    ctx = input._ctx
    dx = ctx.empty(input.shape, input.dtype)
    dg = ctx.empty(weight.shape) if weight is not None else None
    check(lib.oclml_rmsnorm_backward(ctx.ptr, input.ptr, _p(weight), rstd.ptr, grad.ptr,
                                     dx.ptr, _p(dg)), ctx._ptr)
    return dx, dg


# ---- losses --------------------------------------------------------------------------------

def _loss_params(reduction="mean", ignore_index=-100, label_smoothing=0.0, delta=1.0,
                 probabilities=False, weight=None, pos_weight=None):
    if reduction not in _LOSS_REDUCTION:
        raise misuse("reduction %r (mean, sum, none)" % (reduction,))
    p = ffi.new("oclml_loss_params *")
    lib.oclml_loss_params_init(p)
    p.reduction = _LOSS_REDUCTION[reduction]
    p.ignore_index = int(ignore_index)
    p.label_smoothing = float(label_smoothing)
    p.delta = float(delta)
    p.probabilities = 1 if probabilities else 0
    p.weight = _p(weight)
    p.pos_weight = _p(pos_weight)
    return p


def _loss(fn, params, a, b, reduction, grad, dloss):
    ctx = a._ctx
    shape = (1,) if reduction != "none" else (max(_rows(a), 1),)
    loss = ctx.empty(shape)
    g = ctx.empty(a.shape, a.dtype) if grad else None
    check(fn(ctx.ptr, params, a.ptr, b.ptr, _p(dloss), loss.ptr, _p(g)), ctx._ptr)
    return (loss, g) if grad else loss


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean",
                  label_smoothing=0.0, grad=False, dloss=None):
    """F.cross_entropy over the last dimension; target holds class indices (as floats) or, with
    input's shape, probabilities. grad=True: (loss, dinput), the gradient of the loss (times
    dloss, a [1] tensor, when given)."""
    probs = tuple(target.shape) == tuple(input.shape)
    p = _loss_params(reduction, ignore_index, label_smoothing, probabilities=probs,
                     weight=weight)
    return _loss(lib.oclml_cross_entropy, p, input, target, reduction, grad, dloss)


def mse_loss(input, target, reduction="mean", grad=False, dloss=None):
    p = _loss_params(reduction)
    ctx = input._ctx
    loss = ctx.empty((1,) if reduction != "none" else input.shape)
    g = ctx.empty(input.shape, input.dtype) if grad else None
    check(lib.oclml_mse_loss(ctx.ptr, p, input.ptr, target.ptr, _p(dloss), loss.ptr, _p(g)),
          ctx._ptr)
    return (loss, g) if grad else loss


def huber_loss(input, target, reduction="mean", delta=1.0, grad=False, dloss=None):
    p = _loss_params(reduction, delta=delta)
    ctx = input._ctx
    loss = ctx.empty((1,) if reduction != "none" else input.shape)
    g = ctx.empty(input.shape, input.dtype) if grad else None
    check(lib.oclml_huber_loss(ctx.ptr, p, input.ptr, target.ptr, _p(dloss), loss.ptr, _p(g)),
          ctx._ptr)
    return (loss, g) if grad else loss


def binary_cross_entropy_with_logits(input, target, reduction="mean", pos_weight=None,
                                     grad=False, dloss=None):
    p = _loss_params(reduction, pos_weight=pos_weight)
    ctx = input._ctx
    loss = ctx.empty((1,) if reduction != "none" else input.shape)
    g = ctx.empty(input.shape, input.dtype) if grad else None
    check(lib.oclml_bce_with_logits(ctx.ptr, p, input.ptr, target.ptr, _p(dloss), loss.ptr,
                                    _p(g)), ctx._ptr)
    return (loss, g) if grad else loss


def kl_div_logits(p_logits, q_logits, reduction="mean", grad=False, dloss=None):
    """KL(softmax(p) || softmax(q)) over the last dimension (oclml_kl_div_logits); grad=True:
    (loss, dp, dq)."""
    params = _loss_params(reduction)
    ctx = p_logits._ctx
    loss = ctx.empty((1,) if reduction != "none" else (max(_rows(p_logits), 1),))
    dp = ctx.empty(p_logits.shape) if grad else None
    dq = ctx.empty(q_logits.shape) if grad else None
    check(lib.oclml_kl_div_logits(ctx.ptr, params, p_logits.ptr, q_logits.ptr, _p(dloss),
                                  loss.ptr, _p(dp), _p(dq)), ctx._ptr)
    return (loss, dp, dq) if grad else loss


# ---- embedding and dropout -----------------------------------------------------------------

def embedding(input, weight, out=None):
    """F.embedding: rows of weight [V, D] by ids (integers stored as floats)."""
    y = _new(input._ctx, input.shape + (weight.shape[-1],), weight.dtype, out)
    check(lib.oclml_embedding(input._ctx.ptr, input.ptr, weight.ptr, y.ptr), input._ctx._ptr)
    return y


def embedding_backward(input, grad, num_embeddings, accumulate=False, out=None):
    """The table's gradient [V, D], summed per id deterministically."""
    ctx = input._ctx
    d = ctx.zeros((num_embeddings, grad.shape[-1])) if out is None else out
    check(lib.oclml_embedding_backward(ctx.ptr, input.ptr, grad.ptr, d.ptr,
                                       1 if accumulate else 0), ctx._ptr)
    return d


def _dropout_params(p, seed, offset):
    d = ffi.new("oclml_dropout_params *")
    lib.oclml_dropout_params_init(d)
    d.p, d.seed, d.offset = float(p), int(seed), int(offset)
    return d


def dropout(input, p=0.5, training=True, seed=0, offset=0, out=None):
    """F.dropout from the counter-based generator: (seed, offset) fix the mask, and
    dropout_backward regenerates it."""
    if not training or p == 0:
        return input
    y = _new(input._ctx, input.shape, input.dtype, out)
    check(lib.oclml_dropout(input._ctx.ptr, _dropout_params(p, seed, offset), input.ptr, y.ptr),
          input._ctx._ptr)
    return y


def dropout_backward(grad, p=0.5, seed=0, offset=0, out=None):
    dx = _new(grad._ctx, grad.shape, grad.dtype, out)
    check(lib.oclml_dropout_backward(grad._ctx.ptr, _dropout_params(p, seed, offset), grad.ptr,
                                     dx.ptr), grad._ctx._ptr)
    return dx


def dropout_counters(n):
    """How far a dropout of n elements advances the generator's offset."""
    return int(lib.oclml_dropout_counters(n))


# ---- attention -----------------------------------------------------------------------------

def _attention_params(is_causal, scale, layout, mask):
    a = ffi.new("oclml_attention_params *")
    lib.oclml_attention_params_init(a)
    if is_causal:
        a.causal = lib.OCLML_CAUSAL_TOP_LEFT
    a.scale = 0.0 if scale is None else float(scale)
    if layout not in ("bhld", "blhd"):
        raise misuse("layout 'bhld' ([B, H, L, D]) or 'blhd' ([B, L, H, D])")
    a.layout = lib.OCLML_ATTENTION_BHLD if layout == "bhld" else lib.OCLML_ATTENTION_BLHD
    a.mask = _p(mask)
    return a


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False,
                                 scale=None, layout="bhld", return_lse=False, out=None):
    """F.scaled_dot_product_attention in one pass (no L x L matrix): [B, H, L, D] tensors (or
    layout="blhd"); attn_mask additive ([Lq, Lk] or [B|1, H|1, Lq, Lk]); grouped-query heads
    where key and value have fewer. return_lse: also the rows' log-sum-exp [B, H, Lq] that the
    backward needs."""
    ctx = query._ctx
    params = _attention_params(is_causal, scale, layout, attn_mask)
    o = _new(ctx, query.shape, query.dtype, out)
    lse = None
    if return_lse:
        b, h, lq = (query.shape[0], query.shape[1], query.shape[2]) if layout == "bhld" else \
            (query.shape[0], query.shape[2], query.shape[1])
        lse = ctx.empty((b, h, lq))
    check(lib.oclml_attention(ctx.ptr, params, query.ptr, key.ptr, value.ptr, o.ptr, _p(lse)),
          ctx._ptr)
    return (o, lse) if return_lse else o


def scaled_dot_product_attention_backward(query, key, value, output, lse, grad,
                                          attn_mask=None, is_causal=False, scale=None,
                                          layout="bhld"):
    """(dq, dk, dv) of scaled_dot_product_attention (deterministic)."""
    ctx = query._ctx
    params = _attention_params(is_causal, scale, layout, attn_mask)
    dq, dk, dv = (ctx.empty(t.shape, t.dtype) for t in (query, key, value))
    check(lib.oclml_attention_backward(ctx.ptr, params, query.ptr, key.ptr, value.ptr,
                                       output.ptr, lse.ptr, grad.ptr, dq.ptr, dk.ptr, dv.ptr,
                                       NULL), ctx._ptr)
    return dq, dk, dv


def attention_plan(query, key, value, attn_mask=None, is_causal=False, scale=None,
                   layout="bhld"):
    """What scaled_dot_product_attention would run for these tensors, in words."""
    text = ffi.new("char[]", 1024)
    check(lib.oclml_attention_plan(query._ctx.ptr, _attention_params(is_causal, scale, layout,
                                                                     attn_mask),
                                   query.ptr, key.ptr, value.ptr, text, 1024), query._ctx._ptr)
    return ffi.string(text).decode()


# ---- convolution and pooling ---------------------------------------------------------------

def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _conv_params(stride, padding, dilation, groups, output_padding=0):
    c = ffi.new("oclml_conv2d_params *")
    lib.oclml_conv2d_params_init(c)
    c.stride = list(_pair(stride))
    c.pad_before = c.pad_after = list(_pair(padding))
    c.dilation = list(_pair(dilation))
    c.groups = int(groups)
    c.output_padding = list(_pair(output_padding))
    return c


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, out=None):
    """F.conv2d on NCHW (weight [K, C / groups, R, S])."""
    n, _, h, w = input.shape
    k, _, r, s = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    oh = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (s - 1) - 1) // sw + 1
    y = _new(input._ctx, (n, k, oh, ow), input.dtype, out)
    check(lib.oclml_conv2d(input._ctx.ptr, _conv_params(stride, padding, dilation, groups),
                           input.ptr, weight.ptr, _p(bias), y.ptr), input._ctx._ptr)
    return y


def conv2d_plan(input, weight, stride=1, padding=0, dilation=1, groups=1):
    """What conv2d would run for these tensors, in words."""
    text = ffi.new("char[]", 1024)
    check(lib.oclml_conv2d_plan(input._ctx.ptr, _conv_params(stride, padding, dilation, groups),
                                input.ptr, weight.ptr, text, 1024), input._ctx._ptr)
    return ffi.string(text).decode()


def conv2d_backward(input, weight, grad, stride=1, padding=0, dilation=1, groups=1, bias=True,
                    need_input_grad=True):
    """(dx, dw, db) of conv2d."""
    ctx = input._ctx
    dx = ctx.empty(input.shape, input.dtype) if need_input_grad else None
    dw = ctx.empty(weight.shape)
    db = ctx.empty((weight.shape[0],)) if bias else None
    check(lib.oclml_conv2d_backward(ctx.ptr, _conv_params(stride, padding, dilation, groups),
                                    input.ptr, weight.ptr, grad.ptr, _p(dx), dw.ptr, _p(db), 0),
          ctx._ptr)
    return dx, dw, db


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1, out=None):
    """F.conv_transpose2d on NCHW (weight [C, K / groups, R, S])."""
    n, _, h, w = input.shape
    _, kg, r, s = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    oph, opw = _pair(output_padding)
    oh = (h - 1) * sh - 2 * ph + dh * (r - 1) + oph + 1
    ow = (w - 1) * sw - 2 * pw + dw * (s - 1) + opw + 1
    y = _new(input._ctx, (n, kg * groups, oh, ow), input.dtype, out)
    check(lib.oclml_conv_transpose2d(input._ctx.ptr, _conv_params(stride, padding, dilation,
                                                                   groups, output_padding),
                                     input.ptr, weight.ptr, _p(bias), y.ptr), input._ctx._ptr)
    return y


def conv_transpose2d_backward(input, weight, grad, stride=1, padding=0, output_padding=0,
                              groups=1, dilation=1, bias=True, need_input_grad=True):
    """(dx, dw, db) of conv_transpose2d."""
    ctx = input._ctx
    dx = ctx.empty(input.shape, input.dtype) if need_input_grad else None
    dw = ctx.empty(weight.shape)
    db = ctx.empty((weight.shape[1] * groups,)) if bias else None
    check(lib.oclml_conv_transpose2d_backward(
        ctx.ptr, _conv_params(stride, padding, dilation, groups, output_padding), input.ptr,
        weight.ptr, grad.ptr, _p(dx), dw.ptr, _p(db), 0), ctx._ptr)
    return dx, dw, db


def _pool_params(kernel_size, stride, padding, ceil_mode, count_include_pad=True):
    p = ffi.new("oclml_pool2d_params *")
    lib.oclml_pool2d_params_init(p)
    p.kernel = list(_pair(kernel_size))
    p.stride = list(_pair(kernel_size if stride is None else stride))
    p.pad = list(_pair(padding))
    p.ceil_mode = 1 if ceil_mode else 0
    p.count_include_pad = 1 if count_include_pad else 0
    return p


def _pool_out(x, kernel_size, stride, padding, ceil_mode):
    (kh, kw), (ph, pw) = _pair(kernel_size), _pair(padding)
    sh, sw = _pair(kernel_size if stride is None else stride)

    def size(n, k, s, p):
        span = n + 2 * p - k
        o = (span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (o - 1) * s >= n + p:
            o -= 1
        return o

    n, c, h, w = x.shape
    return (n, c, size(h, kh, sh, ph), size(w, kw, sw, pw))


def max_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, activation=None,
               out=None):
    """F.max_pool2d on NCHW; activation ("relu", "silu", ...) applied before the pool in the
    same pass (the fused activation + pool)."""
    params = _pool_params(kernel_size, stride, padding, ceil_mode)
    y = _new(input._ctx, _pool_out(input, kernel_size, stride, padding, ceil_mode), input.dtype,
             out)
    if activation is None:
        st = lib.oclml_max_pool2d(input._ctx.ptr, params, input.ptr, y.ptr)
    else:
        st = lib.oclml_act_max_pool2d(input._ctx.ptr, params, _act(activation), input.ptr,
                                      y.ptr)
    check(st, input._ctx._ptr)
    return y


def max_pool2d_backward(input, grad, kernel_size, stride=None, padding=0, ceil_mode=False,
                        activation=None):
    params = _pool_params(kernel_size, stride, padding, ceil_mode)
    dx = input._ctx.empty(input.shape, input.dtype)
    if activation is None:
        st = lib.oclml_max_pool2d_backward(input._ctx.ptr, params, input.ptr, grad.ptr, dx.ptr)
    else:
        st = lib.oclml_act_max_pool2d_backward(input._ctx.ptr, params, _act(activation),
                                               input.ptr, grad.ptr, dx.ptr)
    check(st, input._ctx._ptr)
    return dx


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, out=None):
    params = _pool_params(kernel_size, stride, padding, ceil_mode, count_include_pad)
    y = _new(input._ctx, _pool_out(input, kernel_size, stride, padding, ceil_mode), input.dtype,
             out)
    check(lib.oclml_avg_pool2d(input._ctx.ptr, params, input.ptr, y.ptr), input._ctx._ptr)
    return y


def avg_pool2d_backward(grad, input_shape, kernel_size, stride=None, padding=0, ceil_mode=False,
                        count_include_pad=True):
    params = _pool_params(kernel_size, stride, padding, ceil_mode, count_include_pad)
    dx = grad._ctx.empty(input_shape, grad.dtype)
    check(lib.oclml_avg_pool2d_backward(grad._ctx.ptr, params, grad.ptr, dx.ptr), grad._ctx._ptr)
    return dx


__all__ = [n for n, v in list(globals().items())
           if callable(v) and not n.startswith("_") and getattr(v, "__module__", "") == __name__]
