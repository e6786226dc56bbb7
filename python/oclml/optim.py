"""Parameters in an arena and the optimizers over it (oclml_arena, oclml_optim), with
torch.optim's semantics."""

import weakref

from ._ffi import ffi, lib
from .errors import check, misuse
from .tensor import Tensor, dtype_code

_KINDS = {"sgd": lib.OCLML_OPTIM_SGD, "adam": lib.OCLML_OPTIM_ADAM,
          "adamw": lib.OCLML_OPTIM_ADAMW, "laprop": lib.OCLML_OPTIM_LAPROP}


class Arena:
    """A model's parameters and their gradients in two flat device buffers (zeros at first).
    `params[i]` and `grads[i]` are tensors over them, valid until `close()` (or the context's
    close); optimizers over the arena close with it."""

    def __init__(self, ctx, shapes):
        shapes = [tuple(s) if not isinstance(s, int) else (s,) for s in shapes]
        arr = ffi.new("oclml_arena_shape[]", len(shapes))
        for i, s in enumerate(shapes):
            if not 1 <= len(s) <= 4:
                raise misuse("a parameter of 1 to 4 dimensions, not %s" % (list(s),))
            arr[i].ndim = len(s)
            for d, n in enumerate(s):
                arr[i].shape[d] = int(n)
        out = ffi.new("oclml_arena **")
        check(lib.oclml_arena_create(ctx.ptr, len(shapes), arr, out), ctx._ptr)
        self._ctx, self._ptr = ctx, out[0]
        self._optimizers = weakref.WeakSet()
        self._views = []
        ctx._owners.add(self)
        self.params = [self._view(lib.oclml_arena_param, i) for i in range(len(shapes))]
        self.grads = [self._view(lib.oclml_arena_grad, i) for i in range(len(shapes))]
        self.copies = None

    def _view(self, fn, *args):
        out = ffi.new("oclml_tensor **")
        check(fn(self.ptr, *args, out), self._ctx._ptr)
        t = Tensor._borrow(self._ctx, out[0], self)
        self._views.append(t)
        return t

    @property
    def ptr(self):
        if self._ptr is None:
            raise misuse("the arena is closed")
        return self._ptr

    def __len__(self):
        return len(self.params)

    def flat(self, grads=False):
        """The whole parameter (or gradient) buffer as one 1-D tensor, padding included."""
        return self._view(lib.oclml_arena_flat, 1 if grads else 0)

    def info(self):
        """(tensors, elements, elements with the padding)."""
        n, numel, padded = ffi.new("size_t *"), ffi.new("size_t *"), ffi.new("size_t *")
        check(lib.oclml_arena_info(self.ptr, n, numel, padded), self._ctx._ptr)
        return int(n[0]), int(numel[0]), int(padded[0])

    def offset(self, i):
        off = ffi.new("size_t *")
        check(lib.oclml_arena_offset(self.ptr, i, off), self._ctx._ptr)
        return int(off[0])

    def zero_grad(self):
        check(lib.oclml_arena_zero_grad(self.ptr), self._ctx._ptr)

    def create_copies(self, dtype="bfloat16"):
        """A 16-bit copy of the parameters (mixed precision), kept in step by every optimizer
        step: `copies[i]` is what a forward reads."""
        check(lib.oclml_arena_copy_create(self.ptr, dtype_code(dtype)), self._ctx._ptr)
        self.copies = [self._view(lib.oclml_arena_copy, i) for i in range(len(self.params))]
        return self.copies

    def sync_copies(self):
        check(lib.oclml_arena_copy_sync(self.ptr), self._ctx._ptr)

    def close(self):
        if self._ptr is None:
            return
        for o in list(self._optimizers):
            o.close()
        for t in self._views:
            t._ptr = None
        ptr, self._ptr = self._ptr, None
        if self._ctx._ptr is not None:
            check(lib.oclml_arena_destroy(ptr))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Optimizer:
    """An optimizer over arena tensors [first, first + count) (count 0: to the end): kind
    "sgd", "adam", "adamw" or "laprop", torch.optim's defaults for what is not given. One
    `step()` is one launch (two with clipping: max_grad_norm > 0)."""

    def __init__(self, arena, kind="adamw", lr=None, betas=None, eps=None, weight_decay=None,
                 momentum=None, dampening=None, nesterov=False, amsgrad=False, maximize=False,
                 max_grad_norm=0.0, skip_nonfinite=False, first=0, count=0, decay_tensors=0):
        if kind not in _KINDS:
            raise misuse("optimizer %r (%s)" % (kind, ", ".join(_KINDS)))
        c = ffi.new("oclml_optim_config *")
        check(lib.oclml_optim_config_init(c, _KINDS[kind]))
        if lr is not None:
            c.lr = lr
        if betas is not None:
            c.beta1, c.beta2 = betas
        for name, v in (("eps", eps), ("weight_decay", weight_decay), ("momentum", momentum),
                        ("dampening", dampening)):
            if v is not None:
                setattr(c, name, v)
        c.nesterov, c.amsgrad, c.maximize = int(nesterov), int(amsgrad), int(maximize)
        c.max_grad_norm = float(max_grad_norm)
        c.skip_nonfinite = int(skip_nonfinite)
        c.first, c.count, c.decay_tensors = first, count, decay_tensors
        out = ffi.new("oclml_optim **")
        ctx = arena._ctx
        check(lib.oclml_optim_create(ctx.ptr, arena.ptr, c, out), ctx._ptr)
        self._ctx, self._arena, self._ptr = ctx, arena, out[0]
        self._views = []
        arena._optimizers.add(self)

    @property
    def ptr(self):
        if self._ptr is None:
            raise misuse("the optimizer is closed")
        return self._ptr

    def step(self):
        check(lib.oclml_optim_step(self.ptr), self._ctx._ptr)

    @property
    def lr(self):
        return self.scalars()["lr"]

    @lr.setter
    def lr(self, value):
        check(lib.oclml_optim_set_lr(self.ptr, float(value)), self._ctx._ptr)

    def scalars(self):
        """lr, grad_scale, grad_norm (the last clipping's), step, skipped, found_inf (waits)."""
        s = ffi.new("oclml_optim_scalars_info *")
        check(lib.oclml_optim_scalars(self.ptr, s), self._ctx._ptr)
        return {"lr": s.lr, "grad_scale": s.grad_scale, "grad_norm": s.grad_norm,
                "step": s.step, "skipped": s.skipped, "found_inf": bool(s.found_inf)}

    def set_grad_scale(self, scale):
        check(lib.oclml_optim_set_grad_scale(self.ptr, float(scale)), self._ctx._ptr)

    def grad_scale_tensor(self):
        """The gradient scale as a [1] device tensor (a loss's dloss), owned by the optimizer."""
        out = ffi.new("oclml_tensor **")
        check(lib.oclml_optim_grad_scale_tensor(self.ptr, out), self._ctx._ptr)
        self._views.append(Tensor._borrow(self._ctx, out[0], self))
        return self._views[-1]

    def set_step(self, step):
        check(lib.oclml_optim_set_step(self.ptr, int(step)), self._ctx._ptr)

    def state(self, which):
        """State buffer `which` (0: exp_avg or momentum, 1: exp_avg_sq, 2: max_exp_avg_sq) as a
        flat tensor owned by the optimizer, for checkpoints."""
        out = ffi.new("oclml_tensor **")
        check(lib.oclml_optim_state(self.ptr, int(which), out), self._ctx._ptr)
        self._views.append(Tensor._borrow(self._ctx, out[0], self))
        return self._views[-1]

    def close(self):
        """Frees the optimizer; its state and scale tensors end with it."""
        if self._ptr is None:
            return
        for t in self._views:
            t._ptr = None
        ptr, self._ptr = self._ptr, None
        if self._ctx._ptr is not None:
            check(lib.oclml_optim_destroy(ptr))

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
