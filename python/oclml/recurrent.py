"""The recurrent ops of RSSM.md: the GRU step (PyTorch's layout, or Cho's), its backward and a
sequence op; the RSSM ensemble rollout in one call; the training-history encoder."""

from ._ffi import ffi, lib
from .errors import check, misuse
from .ops import _p

NULL = ffi.NULL
_VARIANT = {"torch": lib.OCLML_GRU_TORCH, "cho": lib.OCLML_GRU_CHO}


def _variant(v):
    if v not in _VARIANT:
        raise misuse("variant 'torch' or 'cho', not %r" % (v,))
    return _VARIANT[v]


def gru_cell(input, hx, weight_ih, weight_hh, bias_ih=None, bias_hh=None, variant="torch",
             out=None):
    """nn.GRUCell's step (variant "torch"; "cho": the reset gate on h before the product)."""
    h = input._ctx.empty(hx.shape, hx.dtype) if out is None else out
    check(lib.oclml_gru_step(input._ctx.ptr, _variant(variant), input.ptr, hx.ptr,
                             weight_ih.ptr, weight_hh.ptr, _p(bias_ih), _p(bias_hh), h.ptr),
          input._ctx._ptr)
    return h


def gru_cell_backward(input, hx, weight_ih, weight_hh, grad, bias_ih=None, bias_hh=None,
                      variant="torch"):
    """(dx, dh, dw_ih, dw_hh, db_ih, db_hh) of gru_cell for grad = dL/dh_new."""
    ctx = input._ctx
    outs = [ctx.empty(input.shape), ctx.empty(hx.shape), ctx.empty(weight_ih.shape),
            ctx.empty(weight_hh.shape)]
    outs += [ctx.empty(b.shape) if b is not None else None for b in (bias_ih, bias_hh)]
    check(lib.oclml_gru_step_backward(ctx.ptr, _variant(variant), input.ptr, hx.ptr,
                                      weight_ih.ptr, weight_hh.ptr, _p(bias_ih), _p(bias_hh),
                                      grad.ptr, *[_p(o) for o in outs]), ctx._ptr)
    return tuple(outs)


def gru_sequence(input, h0, weight_ih, weight_hh, bias_ih=None, bias_hh=None, variant="torch",
                 out=None):
    """GRU steps over a sequence [T, B, I] from h0 [B, D]: every step's state [T, B, D]."""
    hs = input._ctx.empty((input.shape[0],) + h0.shape, h0.dtype) if out is None else out
    check(lib.oclml_gru_sequence(input._ctx.ptr, _variant(variant), input.ptr, h0.ptr,
                                 weight_ih.ptr, weight_hh.ptr, _p(bias_ih), _p(bias_hh), hs.ptr),
          input._ctx._ptr)
    return hs


_WEIGHTS = ("w_ih", "w_hh", "b_ih", "b_hh", "w_p", "b_p", "w_y", "b_y")
_START = ("h", "z", "f", "y0")
_OUTPUTS = ("y", "entropy", "hnorm", "h_final", "z_final", "f_final", "y_mean", "y_std",
            "deltas", "variance", "smoothness", "total_entropy")


def rssm_rollout(weights, start, outputs, steps, groups, classes, feedback, unimix=0.01,
                 mode="mean", seed=0, step_offset=0, variant="torch"):
    """The RSSM ensemble rollout (RSSM.md) in one call: weights and start are dicts of tensors
    named as oclml_rssm_weights and oclml_rssm_state, outputs a dict of the tensors wanted
    (oclml_rssm_outputs' names; the shapes are the header's). mode "mean" or "sample"."""
    first = next(iter(weights.values()))
    ctx = first._ctx
    cfg = ffi.new("oclml_rssm_params *")
    lib.oclml_rssm_params_init(cfg)
    cfg.variant = _variant(variant)
    cfg.steps, cfg.groups, cfg.classes, cfg.feedback = steps, groups, classes, feedback
    cfg.unimix = float(unimix)
    cfg.mode = lib.OCLML_RSSM_MEAN if mode == "mean" else lib.OCLML_RSSM_SAMPLE
    cfg.seed, cfg.step_offset = int(seed), int(step_offset)
    w, s, o = (ffi.new("oclml_rssm_weights *"), ffi.new("oclml_rssm_state *"),
               ffi.new("oclml_rssm_outputs *"))
    for struct, names, given in ((w, _WEIGHTS, weights), (s, _START, start),
                                 (o, _OUTPUTS, outputs)):
        unknown = set(given) - set(names)
        if unknown:
            raise misuse("unknown names %s (known: %s)" % (sorted(unknown), ", ".join(names)))
        for name in names:
            setattr(struct, name, _p(given.get(name)))
    check(lib.oclml_rssm_rollout(ctx.ptr, cfg, w, s, o), ctx._ptr)
    return outputs


def history_encode(series, lengths=None):
    """Features [B, 64] of loss and gradient-norm histories series [B, 2, N] (RSSM.md)."""
    f = series._ctx.empty((series.shape[0], 64))
    check(lib.oclml_history_encode(series._ctx.ptr, series.ptr, _p(lengths), f.ptr),
          series._ctx._ptr)
    return f


__all__ = ["gru_cell", "gru_cell_backward", "gru_sequence", "rssm_rollout", "history_encode"]
