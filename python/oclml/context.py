"""Context: one OpenCL device, its queue and program caches (oclml_ctx)."""

import weakref

from ._ffi import ffi, lib, string, tree_kernel_path
from .errors import check, error_for, misuse


class Context:
    """A device and its in-order queue. Ops enqueue and return at once; `finish()` waits,
    reading a tensor waits for what wrote it.

    device: "gpu", "cpu", "P:D" or part of a platform or device name (None: $OCLML_DEVICE,
    else the first GPU, else the first device). kernel_path, cache_dir, tuning ("key=value,
    ..."), build_options and profiling as `oclml_ctx_config` has them. Usable as a context
    manager; `close()` frees the context and every tensor still alive on it."""

    def __init__(self, device=None, *, kernel_path=None, cache_dir=None, tuning=None,
                 build_options=None, profiling=False, _wrap=None):
        cfg = ffi.new("oclml_ctx_config *")
        lib.oclml_ctx_config_init(cfg)
        keep = []  # the C strings must live through the call

        def cstr(s):
            if s is None:
                return ffi.NULL
            b = ffi.new("char[]", s.encode())
            keep.append(b)
            return b

        cfg.device = cstr(device)
        cfg.kernel_path = cstr(kernel_path if kernel_path is not None else tree_kernel_path())
        cfg.cache_dir = cstr(cache_dir)
        cfg.tuning = cstr(tuning)
        cfg.build_options = cstr(build_options)
        cfg.profiling = 1 if profiling else 0
        out = ffi.new("oclml_ctx **")
        err = ffi.new("char[]", 4096)
        if _wrap is None:
            st = lib.oclml_ctx_create(out, cfg, err, 4096)
        else:
            cl_ctx, device_id, queue = _wrap
            st = lib.oclml_ctx_wrap(out, cl_ctx, device_id, queue, cfg, err, 4096)
        if st:
            raise error_for(st, ffi.string(err).decode(errors="replace"))
        self._ptr = out[0]
        self._tensors = weakref.WeakSet()  # tensors made on this context, to free at close
        self._owners = weakref.WeakSet()  # arenas and optimizers, closed first
        self._pyopencl = None  # what a wrapped context keeps alive

    # -- lifetime --------------------------------------------------------------------------
    @property
    def ptr(self):
        if self._ptr is None:
            raise misuse("the context is closed")
        return self._ptr

    @property
    def closed(self):
        return self._ptr is None

    def close(self):
        """Frees the context, after the optimizers, arenas and tensors still alive on it."""
        if self._ptr is None:
            return
        for o in list(self._owners):
            o.close()
        live = list(self._tensors)
        for t in sorted(live, key=lambda t: t._base is None):  # views before their bases
            t.free()
        st = lib.oclml_ctx_destroy(self._ptr)
        self._ptr = None
        check(st)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        if self._ptr is None:
            return "<oclml.Context closed>"
        info = self.device_info
        return "<oclml.Context %s (%s)>" % (info["device_name"], info["platform_name"])

    # -- the device -------------------------------------------------------------------------
    def finish(self):
        """Waits until every op enqueued on the context has finished."""
        check(lib.oclml_ctx_finish(self.ptr), self._ptr)

    @property
    def device_info(self):
        """The device: names, versions, compute units, memory, how it was selected."""
        info = ffi.new("oclml_device_info *")
        check(lib.oclml_ctx_device_info(self.ptr, info), self._ptr)
        out = {}
        for name in ("platform_name", "platform_version", "device_name", "device_version",
                     "driver_version", "selected_by"):
            out[name] = ffi.string(getattr(info, name)).decode(errors="replace")
        for name in ("is_gpu", "compute_units", "max_work_group_size", "local_mem_bytes",
                     "global_mem_bytes", "max_alloc_bytes", "clock_mhz"):
            out[name] = int(getattr(info, name))
        out["is_gpu"] = bool(out["is_gpu"])
        return out

    @property
    def last_error(self):
        return string(lib.oclml_ctx_last_error(self.ptr))

    def tuning(self):
        """The tuning table: {key: (value, source, help)}."""
        table = {}

        @ffi.callback("void(void *, const char *, const char *, const char *, const char *)")
        def each(user, key, value, source, help_):
            table[string(key)] = (string(value), string(source), string(help_))

        check(lib.oclml_ctx_tuning(self.ptr, each, ffi.NULL), self._ptr)
        return table

    def prewarm(self, ops=None, threads=0):
        """Compiles up front the kernel variants that the listed ops (a list or a comma-separated
        string; None: all) would pick on this device."""
        if isinstance(ops, (list, tuple)):
            ops = ",".join(ops)
        check(lib.oclml_ctx_prewarm(self.ptr, (ops or "").encode(), threads, ffi.NULL,
                                    ffi.NULL), self._ptr)

    def memory(self):
        """(bytes held now, peak bytes) of the library's device memory on this context."""
        now, peak = ffi.new("size_t *"), ffi.new("size_t *")
        check(lib.oclml_ctx_memory(self.ptr, now, peak), self._ptr)
        return int(now[0]), int(peak[0])

    # -- tensors ----------------------------------------------------------------------------
    def empty(self, shape, dtype="float32"):
        """An uninitialised tensor."""
        from .tensor import Tensor

        return Tensor._create(self, shape, dtype)

    def zeros(self, shape, dtype="float32"):
        return self.full(shape, 0.0, dtype)

    def full(self, shape, value, dtype="float32"):
        t = self.empty(shape, dtype)
        t.fill_(value)
        return t

    def tensor(self, array, dtype=None):
        """A tensor holding a copy of a NumPy array (or anything np.asarray takes); dtype
        (float32, bfloat16, float16) defaults to float16 for float16 arrays, else float32."""
        from .tensor import Tensor

        return Tensor.from_numpy(self, array, dtype)

    # -- PyOpenCL ---------------------------------------------------------------------------
    @classmethod
    def from_pyopencl(cls, queue, **kwargs):
        """A context over a PyOpenCL queue (in order) and its context and device, without
        copies: liboclml's ops then run on that queue, in order with PyOpenCL's work."""
        from .interop import wrap_queue

        return wrap_queue(cls, queue, **kwargs)


def version():
    return string(lib.oclml_version_string())
