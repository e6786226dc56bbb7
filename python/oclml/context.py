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

    def backend_error(self):
        """The OpenCL or CLBlast code behind the last OCLML_ERR_OPENCL / OCLML_ERR_CLBLAST."""
        code = ffi.new("int *")
        check(lib.oclml_ctx_backend_error(self.ptr, code), self._ptr)
        return int(code[0])

    def cl_objects(self):
        """(cl_context, cl_device_id, cl_command_queue) as ints (borrowed), for OpenCL code."""
        c, d, q = ffi.new("cl_context *"), ffi.new("cl_device_id *"), ffi.new(
            "cl_command_queue *")
        check(lib.oclml_ctx_cl_objects(self.ptr, c, d, q), self._ptr)
        return tuple(int(ffi.cast("uintptr_t", p[0])) for p in (c, d, q))

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

    def reset_peak_memory(self):
        check(lib.oclml_ctx_reset_peak_memory(self.ptr), self._ptr)

    def trim_scratch(self):
        """Frees the pooled scratch buffers no op is using."""
        check(lib.oclml_ctx_trim_scratch(self.ptr), self._ptr)

    @property
    def device_caps(self):
        """The capabilities the planners use (warp width, TF32 tensor cores, ...)."""
        c = ffi.new("oclml_device_caps *")
        check(lib.oclml_ctx_device_caps(self.ptr, c), self._ptr)
        return {n: int(getattr(c, n)) for n in (
            "is_gpu", "compute_units", "max_work_group_size", "local_mem_bytes", "simd_width",
            "fp64", "fp16", "nv_cc_major", "nv_cc_minor", "register_cap_option", "inline_ptx",
            "mma_tf32")}

    @property
    def cache_info(self):
        """The program caches: the disk cache's directory and size, hits, builds."""
        c = ffi.new("oclml_cache_info *")
        check(lib.oclml_ctx_cache_info(self.ptr, c), self._ptr)
        out = {n: int(getattr(c, n)) for n in (
            "enabled", "entries", "bytes", "max_bytes", "memory_hits", "disk_hits",
            "disk_misses", "disk_evictions", "builds")}
        out["dir"] = ffi.string(c.dir).decode(errors="replace")
        out["disabled_reason"] = ffi.string(c.disabled_reason).decode(errors="replace")
        return out

    @property
    def math_mode(self):
        """"fp32" (default) or "tf32" (the products' inputs rounded to TF32)."""
        m = ffi.new("oclml_math_mode *")
        check(lib.oclml_ctx_math_mode(self.ptr, m), self._ptr)
        return "tf32" if m[0] == lib.OCLML_MATH_TF32 else "fp32"

    @math_mode.setter
    def math_mode(self, mode):
        if mode not in ("fp32", "tf32"):
            raise misuse("math mode 'fp32' or 'tf32'")
        check(lib.oclml_ctx_set_math_mode(
            self.ptr, lib.OCLML_MATH_TF32 if mode == "tf32" else lib.OCLML_MATH_FP32), self._ptr)

    def profile(self):
        """Device time of what runs inside a `with` block (a context created with profiling=True):
        `with ctx.profile() as p: ...; p.ms`."""
        return _Profile(self)

    def fma_gflops(self):
        """The device's measured fp32 FMA rate (a probe kernel; blocks)."""
        g = ffi.new("double *")
        check(lib.oclml_probe_fma_gflops(self.ptr, g), self._ptr)
        return float(g[0])

    def build_file(self, file, options=""):
        """Builds every kernel of one kernel file; the milliseconds it took."""
        ms = ffi.new("double *")
        check(lib.oclml_ctx_build_file(self.ptr, file.encode(), options.encode(), ms), self._ptr)
        return float(ms[0])

    def gemm_plan(self, m, n, k, batch=1, trans_a=False, trans_b=False, dtype="float32",
                  out_dtype=None):
        """What oclml_gemm would run for the shape, in words."""
        from .tensor import dtype_code

        text = ffi.new("char[]", 1024)
        check(lib.oclml_gemm_plan_dtype(self.ptr, int(trans_a), int(trans_b), m, n, k, batch,
                                        dtype_code(dtype), dtype_code(out_dtype or dtype), text,
                                        1024), self._ptr)
        return ffi.string(text).decode()

    def kernel_files(self):
        """{kernel file: directory} of the kernel sources on the search path."""
        files = {}

        @ffi.callback("void(void *, const char *, const char *)")
        def each(user, name, directory):
            files[string(name)] = string(directory)

        check(lib.oclml_ctx_kernel_files(self.ptr, each, ffi.NULL), self._ptr)
        return files

    def clblast_tuning(self):
        """(whether tuned CLBlast parameters are in force, what each kernel runs with)."""
        active = ffi.new("int *")
        text = ffi.new("char[]", 4096)
        check(lib.oclml_ctx_clblast_tuning(self.ptr, active, text, 4096), self._ptr)
        return bool(active[0]), ffi.string(text).decode()

    def op_variant(self, op, rows, cols):
        """The kernel variant a row op ("softmax", "layernorm", ...) picks for the shape."""
        text = ffi.new("char[]", 1024)
        check(lib.oclml_op_variant(self.ptr, op.encode(), rows, cols, text, 1024), self._ptr)
        return ffi.string(text).decode()

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


class _Profile:
    def __init__(self, ctx):
        self._ctx, self.ms = ctx, None

    def __enter__(self):
        check(lib.oclml_ctx_profile_begin(self._ctx.ptr), self._ctx._ptr)
        return self

    def __exit__(self, *exc):
        ms = ffi.new("double *")
        st = lib.oclml_ctx_profile_end(self._ctx.ptr, ms)
        if exc[0] is None:
            check(st, self._ctx._ptr)
        self.ms = float(ms[0])


def ops_list():
    """The library's ops: [{name, kernel_file, tunables, summary}] in its op list's order."""
    out = []

    @ffi.callback("void(void *, const oclml_op_desc *)")
    def each(user, d):
        out.append({"name": string(d.name), "kernel_file": string(d.kernel_file),
                    "tunables": string(d.tunables), "summary": string(d.summary)})

    check(lib.oclml_ops_list(each, ffi.NULL))
    return out


def tuning_key_for_developers(key):
    """Whether a tuning key is for developers (a kernel internal or a test hook)."""
    out = ffi.new("int *")
    check(lib.oclml_tuning_key_for_developers(key.encode(), out))
    return bool(out[0])


def device_match(selector=None, nth=0):
    """(how many devices the selector matches, the "P:D" of match nth % count)."""
    count = ffi.new("unsigned *")
    pd = ffi.new("char[]", 32)
    check(lib.oclml_device_match(selector.encode() if selector else ffi.NULL, nth, count, pd,
                                 32))
    return int(count[0]), ffi.string(pd).decode()


def version():
    return string(lib.oclml_version_string())
