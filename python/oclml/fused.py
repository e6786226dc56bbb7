"""The transformer's fused ops: the residual add with dropout on its branch, fused with
layernorm or RMSnorm, and the linear layer with dropout in its epilogue (one pass each, as the C
header describes). Dropout's mask comes from (p, seed, offset) and the backward regenerates it."""

from ._ffi import ffi, lib
from .errors import check
from .ops import _act, _dropout_params, _p, _rows

NULL = ffi.NULL


def _drop(p, seed, offset):
    return _dropout_params(p, seed, offset) if p else NULL


def dropout_add(x, y, p=0.0, seed=0, offset=0, out=None):
    """x + dropout(y) (the residual stream and its branch)."""
    r = x._ctx.empty(x.shape, x.dtype) if out is None else out
    check(lib.oclml_dropout_add(x._ctx.ptr, _dropout_params(p, seed, offset), x.ptr, y.ptr,
                                r.ptr), x._ctx._ptr)
    return r


def residual_layer_norm(x, y, weight=None, bias=None, eps=1e-5, p=0.0, seed=0, offset=0):
    """r = x + dropout(y), out = layer_norm(r): (r, out, mean, rstd)."""
    ctx = x._ctx
    r, o = ctx.empty(x.shape, x.dtype), ctx.empty(x.shape, x.dtype)
    mean, rstd = ctx.empty((_rows(x),)), ctx.empty((_rows(x),))
    check(lib.oclml_residual_layernorm(ctx.ptr, _drop(p, seed, offset), x.ptr, y.ptr,
                                       _p(weight), _p(bias), float(eps), r.ptr, o.ptr,
                                       mean.ptr, rstd.ptr), ctx._ptr)
    return r, o, mean, rstd


def residual_layer_norm_backward(r, grad_out, mean, rstd, weight=None, grad_r=None, p=0.0,
                                 seed=0, offset=0):
    """(dx, dy, dweight, dbias) of residual_layer_norm for dL/dout (and dL/dr where the stream
    is read further)."""
    ctx = r._ctx
    dx, dy = ctx.empty(r.shape, r.dtype), ctx.empty(r.shape, r.dtype)
    dg = ctx.empty(weight.shape) if weight is not None else None
    db = ctx.empty(weight.shape) if weight is not None else None
    check(lib.oclml_residual_layernorm_backward(ctx.ptr, _drop(p, seed, offset), r.ptr,
                                                _p(weight), mean.ptr, rstd.ptr, grad_out.ptr,
                                                _p(grad_r), dx.ptr, dy.ptr, _p(dg), _p(db)),
          ctx._ptr)
    return dx, dy, dg, db


def residual_rms_norm(x, y, weight=None, eps=1e-6, p=0.0, seed=0, offset=0):
    """r = x + dropout(y), out = rms_norm(r): (r, out, rstd)."""
    ctx = x._ctx
    r, o, rstd = ctx.empty(x.shape, x.dtype), ctx.empty(x.shape, x.dtype), ctx.empty((_rows(x),))
    check(lib.oclml_residual_rmsnorm(ctx.ptr, _drop(p, seed, offset), x.ptr, y.ptr, _p(weight),
                                     float(eps), r.ptr, o.ptr, rstd.ptr), ctx._ptr)
    return r, o, rstd


def residual_rms_norm_backward(r, grad_out, rstd, weight=None, grad_r=None, p=0.0, seed=0,
                               offset=0):
    """(dx, dy, dweight) of residual_rms_norm."""
    ctx = r._ctx
    dx, dy = ctx.empty(r.shape, r.dtype), ctx.empty(r.shape, r.dtype)
    dg = ctx.empty(weight.shape) if weight is not None else None
    check(lib.oclml_residual_rmsnorm_backward(ctx.ptr, _drop(p, seed, offset), r.ptr,
                                              _p(weight), rstd.ptr, grad_out.ptr, _p(grad_r),
                                              dx.ptr, dy.ptr, _p(dg)), ctx._ptr)
    return dx, dy, dg


def linear_dropout(input, weight, bias=None, activation=None, p=0.0, seed=0, offset=0,
                   pre=None):
    """dropout(act(x W^T + b)) in the product's epilogue; pre as linear's."""
    ctx = input._ctx
    y = ctx.empty(input.shape[:-1] + (weight.shape[0],), input.dtype)
    check(lib.oclml_linear_dropout(ctx.ptr, _act(activation), _dropout_params(p, seed, offset),
                                   input.ptr, weight.ptr, _p(bias), y.ptr, _p(pre)), ctx._ptr)
    return y


def linear_dropout_backward(input, weight, grad, pre=None, activation=None, p=0.0, seed=0,
                            offset=0, bias=True):
    """(dx, dw, db) of linear_dropout (pre: the forward's, where the activation needs it)."""
    ctx = input._ctx
    dx, dw = ctx.empty(input.shape, input.dtype), ctx.empty(weight.shape)
    db = ctx.empty((weight.shape[0],)) if bias else None
    check(lib.oclml_linear_dropout_backward(ctx.ptr, _act(activation),
                                            _dropout_params(p, seed, offset), input.ptr,
                                            weight.ptr, _p(pre), grad.ptr, dx.ptr, dw.ptr,
                                            _p(db), 0), ctx._ptr)
    return dx, dw, db


__all__ = ["dropout_add", "residual_layer_norm", "residual_layer_norm_backward",
           "residual_rms_norm", "residual_rms_norm_backward", "linear_dropout",
           "linear_dropout_backward"]
