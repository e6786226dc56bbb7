"""PyOpenCL interop: a Context over a PyOpenCL queue, tensors over PyOpenCL memory and back,
with no copies, so liboclml's ops and PyOpenCL (or pyclblast) code share one in-order queue."""

import numpy as np

from ._ffi import ffi
from .errors import misuse
from .tensor import dtype_code

_NP = {0: np.float32, 1: np.uint16, 2: np.float16}  # bf16 as its 16-bit words


def wrap_queue(cls, queue, **kwargs):
    import pyopencl as cl

    if queue.properties & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE:
        raise misuse("liboclml needs an in-order queue")
    objs = (ffi.cast("cl_context", queue.context.int_ptr),
            ffi.cast("cl_device_id", queue.device.int_ptr),
            ffi.cast("cl_command_queue", queue.int_ptr))
    ctx = cls(_wrap=objs, **kwargs)
    ctx._pyopencl = queue  # the library retains them; keep PyOpenCL's objects alive too
    return ctx


def wrap_array(cls, ctx, array, dtype=None, shape=None):
    from ._ffi import lib
    from .errors import check

    try:  # a pyopencl.array.Array
        mem, offset = array.base_data, array.offset
        shape = tuple(array.shape) if shape is None else tuple(shape)
        if dtype is None:
            dtype = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16",
                     np.dtype(np.uint16): "bfloat16"}.get(array.dtype)
            if dtype is None:
                raise misuse("an array of float32, float16 or uint16 (bf16 words)")
        if not array.flags.c_contiguous:
            raise misuse("a C-contiguous array")
    except AttributeError:  # a pyopencl Buffer
        mem, offset = array, 0
        if shape is None:
            raise misuse("a Buffer needs shape=")
        dtype = dtype or "float32"
    code = dtype_code(dtype)
    out = ffi.new("oclml_tensor **")
    check(lib.oclml_tensor_wrap_dtype(ctx.ptr, code, ffi.cast("cl_mem", mem.int_ptr), offset,
                                      len(shape), ffi.new("size_t[]", shape), out), ctx._ptr)
    t = cls(ctx, out[0], shape, code)
    t._base = array  # keeps PyOpenCL's memory alive while the tensor lives
    return t


def to_array(tensor, queue):
    import pyopencl as cl
    import pyopencl.array as cla

    mem_int, offset = tensor.buffer()
    mem = cl.MemoryObject.from_int_ptr(mem_int, retain=True)
    return cla.Array(queue, tensor.shape, _NP[tensor._dtype], data=mem, offset=offset)
