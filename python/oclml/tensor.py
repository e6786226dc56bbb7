"""Tensor: a row-major device array of up to 4 dimensions, fp32, bf16 or fp16 (oclml_tensor)."""

import numpy as np

from ._ffi import ffi, lib
from .errors import check, misuse

DTYPES = {"float32": lib.OCLML_FLOAT32, "bfloat16": lib.OCLML_BFLOAT16,
          "float16": lib.OCLML_FLOAT16}
_NAMES = {v: k for k, v in DTYPES.items()}


def dtype_code(dtype):
    """The library's dtype for a name ("float32", "bfloat16", "float16", or "bf16", "fp16",
    "fp32"), a NumPy dtype (float32, float16) or a code."""
    if isinstance(dtype, int):
        if dtype in _NAMES:
            return dtype
    else:
        name = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(str(dtype),
                                                                             str(dtype))
        if name in DTYPES:
            return DTYPES[name]
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
        if name in ("float32", "float16"):
            return DTYPES[name]
    raise misuse("unknown dtype %r (float32, bfloat16, float16)" % (dtype,))


class Tensor:
    """A device tensor owned by a Context. `numpy()` reads it (waiting for what writes it);
    `free()` (or leaving a `with` block) releases it; using it afterwards, or after its context
    closed, raises oclml.InvalidArgument without reaching the library."""

    __slots__ = ("_ptr", "_ctx", "_shape", "_dtype", "_base", "_borrowed", "__weakref__")

    def __init__(self, ctx, ptr, shape, dtype, base=None, borrowed=False):
        self._ctx = ctx
        self._ptr = ptr
        self._shape = tuple(int(s) for s in shape)
        self._dtype = dtype
        self._base = base
        self._borrowed = borrowed
        ctx._tensors.add(self)

    @classmethod
    def _create(cls, ctx, shape, dtype="float32"):
        shape = _shape_of(shape)
        code = dtype_code(dtype)
        out = ffi.new("oclml_tensor **")
        check(lib.oclml_tensor_create_dtype(ctx.ptr, code, len(shape),
                                            ffi.new("size_t[]", shape), out), ctx._ptr)
        return cls(ctx, out[0], shape, code)

    @classmethod
    def from_numpy(cls, ctx, array, dtype=None):
        a = np.asarray(array)
        if dtype is None:
            dtype = "float16" if a.dtype == np.float16 else "float32"
        code = dtype_code(dtype)
        t = cls._create(ctx, a.shape if a.ndim else (1,), code)
        try:
            t.write(a)
        except Exception:
            t.free()
            raise
        return t

    @classmethod
    def _borrow(cls, ctx, ptr, owner):
        """A tensor the library owns (an arena's view): never destroyed from Python."""
        nd = ffi.new("int *")
        shape = ffi.new("size_t[4]")
        check(lib.oclml_tensor_shape(ptr, nd, shape))
        code = ffi.new("oclml_dtype *")
        check(lib.oclml_tensor_dtype(ptr, code))
        return cls(ctx, ptr, [shape[i] for i in range(nd[0])], int(code[0]), base=owner,
                   borrowed=True)

    # -- lifetime --------------------------------------------------------------------------
    @property
    def ptr(self):
        if self._ptr is None:
            raise misuse("the tensor was freed (or its context or arena closed)")
        if self._ctx._ptr is None:
            raise misuse("the tensor's context is closed")
        return self._ptr

    @property
    def freed(self):
        return self._ptr is None or self._ctx._ptr is None

    def free(self):
        """Releases the tensor now (idempotent)."""
        if self._ptr is None:
            return
        ptr, self._ptr = self._ptr, None
        if not self._borrowed and self._ctx._ptr is not None:
            check(lib.oclml_tensor_destroy(ptr))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass

    # -- what it is -------------------------------------------------------------------------
    @property
    def shape(self):
        return self._shape

    @property
    def ndim(self):
        return len(self._shape)

    @property
    def dtype(self):
        """"float32", "bfloat16" or "float16"."""
        return _NAMES[self._dtype]

    @property
    def context(self):
        return self._ctx

    def numel(self):
        n = 1
        for s in self._shape:
            n *= s
        return n

    def __len__(self):
        return self._shape[0]

    def __repr__(self):
        state = " freed" if self.freed else ""
        return "<oclml.Tensor %s %s%s>" % (list(self._shape), self.dtype, state)

    # -- data -------------------------------------------------------------------------------
    def numpy(self):
        """A NumPy copy (waits for the ops that write it): float32 for fp32 and bf16 tensors
        (NumPy has no bfloat16), float16 for fp16."""
        n = self.numel()
        if self._dtype == lib.OCLML_FLOAT16:
            out = np.empty(self._shape, np.float16)
            check(lib.oclml_tensor_read_raw(self.ptr, ffi.from_buffer(out), n), self._ctx._ptr)
        else:
            out = np.empty(self._shape, np.float32)
            check(lib.oclml_tensor_read(self.ptr, ffi.cast("float *", ffi.from_buffer(out)), n),
                  self._ctx._ptr)
        return out

    def write(self, array):
        """Copies an array of the tensor's element count into it (rounded to its dtype)."""
        a = np.asarray(array)
        if a.size != self.numel():
            raise misuse("%d values for a tensor of %d" % (a.size, self.numel()))
        if self._dtype == lib.OCLML_FLOAT16 and a.dtype == np.float16:
            a = np.ascontiguousarray(a)
            check(lib.oclml_tensor_write_raw(self.ptr, ffi.from_buffer(a), a.size),
                  self._ctx._ptr)
        else:
            a = np.ascontiguousarray(a, dtype=np.float32)
            check(lib.oclml_tensor_write(self.ptr, ffi.cast("float *", ffi.from_buffer(a)),
                                         a.size), self._ctx._ptr)
        return self

    def fill_(self, value):
        check(lib.oclml_fill(self._ctx.ptr, self.ptr, float(value)), self._ctx._ptr)
        return self

    def copy_(self, src):
        """Copies src (same shape and dtype) into this tensor on the device."""
        check(lib.oclml_copy(self._ctx.ptr, src.ptr, self.ptr), self._ctx._ptr)
        return self

    def to(self, dtype):
        """A new tensor converted to dtype on the device (oclml_cast)."""
        out = Tensor._create(self._ctx, self._shape, dtype)
        check(lib.oclml_cast(self._ctx.ptr, self.ptr, out.ptr), self._ctx._ptr)
        return out

    def buffer(self):
        """(cl_mem as an int, offset in bytes) of the tensor's storage."""
        mem = ffi.new("cl_mem *")
        off = ffi.new("size_t *")
        check(lib.oclml_tensor_buffer(self.ptr, mem, off), self._ctx._ptr)
        return int(ffi.cast("uintptr_t", mem[0])), int(off[0])

    # -- views ------------------------------------------------------------------------------
    def _view(self, shape, offset_elements=0):
        mem = ffi.new("cl_mem *")
        off = ffi.new("size_t *")
        check(lib.oclml_tensor_buffer(self.ptr, mem, off), self._ctx._ptr)
        size = lib.oclml_dtype_size(self._dtype)
        out = ffi.new("oclml_tensor **")
        check(lib.oclml_tensor_wrap_dtype(self._ctx.ptr, self._dtype, mem[0],
                                          off[0] + offset_elements * size, len(shape),
                                          ffi.new("size_t[]", shape), out), self._ctx._ptr)
        return Tensor(self._ctx, out[0], shape, self._dtype, base=self)

    def reshape(self, *shape):
        """A view of the same elements in another shape (one dimension may be -1)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = list(shape)
        n = self.numel()
        if shape.count(-1) == 1:
            rest = 1
            for s in shape:
                rest *= s if s != -1 else 1
            shape[shape.index(-1)] = n // rest if rest else 0
        shape = _shape_of(shape)
        m = 1
        for s in shape:
            m *= s
        if m != n:
            raise misuse("cannot view %d elements as %s" % (n, list(shape)))
        return self._view(shape)

    view = reshape

    def __getitem__(self, index):
        """Rows of the first dimension (an int or a step-1 slice) as a view."""
        rows = self._shape[0]
        per = self.numel() // rows if rows else 0
        if isinstance(index, int):
            i = index + rows if index < 0 else index
            if not 0 <= i < rows:
                raise IndexError(index)
            shape = self._shape[1:] or (1,)
            return self._view(shape, i * per)
        if isinstance(index, slice):
            start, stop, step = index.indices(rows)
            if step != 1 or stop <= start:
                raise misuse("only non-empty step-1 slices of the first dimension")
            return self._view((stop - start,) + self._shape[1:], start * per)
        raise misuse("index with an int or a slice of the first dimension")

    # -- PyOpenCL ---------------------------------------------------------------------------
    def to_pyopencl(self, queue):
        """A pyopencl.array.Array over the same device memory (no copy; uint16 for bf16)."""
        from .interop import to_array

        return to_array(self, queue)

    @classmethod
    def from_pyopencl(cls, ctx, array, dtype=None, shape=None):
        """A tensor over a PyOpenCL Array's (or Buffer's) memory, without a copy."""
        from .interop import wrap_array

        return wrap_array(cls, ctx, array, dtype, shape)

    # -- arithmetic sugar -------------------------------------------------------------------
    def __add__(self, other):
        from . import ops

        return ops.add(self, other)

    def __sub__(self, other):
        from . import ops

        return ops.sub(self, other)

    def __mul__(self, other):
        from . import ops

        return ops.mul(self, other)

    def __truediv__(self, other):
        from . import ops

        return ops.div(self, other)

    def __neg__(self):
        from . import ops

        return ops.neg(self)

    def __matmul__(self, other):
        from . import ops

        return ops.matmul(self, other)


def _shape_of(shape):
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(s) for s in shape)
    if not 1 <= len(shape) <= 4 or any(s < 0 for s in shape):
        raise misuse("a shape of 1 to 4 non-negative sizes, not %s" % (list(shape),))
    return shape
