"""Errors: every failed call raises an `Error` subclass named after its status, carrying the
status code and name and the library's last-error text (a failed kernel build's log
included)."""

from ._ffi import ffi, lib, string


class Error(Exception):
    """A liboclml call failed. `status` is the code, `name` its symbolic name
    (OCLML_ERR_...), `text` what the library said."""

    def __init__(self, status, text=""):
        self.status = int(status)
        self.name = string(lib.oclml_status_name(self.status))
        self.text = text or string(lib.oclml_status_str(self.status))
        super().__init__("%s: %s" % (self.name, self.text))


class InvalidArgument(Error, ValueError):
    pass


class NullPointer(InvalidArgument):
    pass


class InvalidShape(Error, ValueError):
    pass


class BufferTooSmall(Error, ValueError):
    pass


class SizeOverflow(Error, OverflowError):
    pass


class OutOfMemory(Error, MemoryError):
    pass


class NoDevice(Error, RuntimeError):
    pass


class DeviceNotFound(Error, LookupError):
    pass


class KernelNotFound(Error, FileNotFoundError):
    pass


class BuildFailed(Error, RuntimeError):
    pass


class OpenCLError(Error, RuntimeError):
    pass


class CLBlastError(Error, RuntimeError):
    pass


class IOFailed(Error, OSError):
    pass


class Unsupported(Error, NotImplementedError):
    pass


class ContextMismatch(Error, ValueError):
    pass


class InvalidConfig(Error, ValueError):
    pass


class DtypeError(Error, TypeError):
    pass


class PeerFailed(Error, RuntimeError):
    pass


class Timeout(Error, TimeoutError):
    pass


_BY_NAME = {
    "OCLML_ERR_INVALID_ARGUMENT": InvalidArgument,
    "OCLML_ERR_NULL_POINTER": NullPointer,
    "OCLML_ERR_INVALID_SHAPE": InvalidShape,
    "OCLML_ERR_BUFFER_TOO_SMALL": BufferTooSmall,
    "OCLML_ERR_SIZE_OVERFLOW": SizeOverflow,
    "OCLML_ERR_OUT_OF_MEMORY": OutOfMemory,
    "OCLML_ERR_NO_DEVICE": NoDevice,
    "OCLML_ERR_DEVICE_NOT_FOUND": DeviceNotFound,
    "OCLML_ERR_KERNEL_NOT_FOUND": KernelNotFound,
    "OCLML_ERR_BUILD_FAILED": BuildFailed,
    "OCLML_ERR_OPENCL": OpenCLError,
    "OCLML_ERR_CLBLAST": CLBlastError,
    "OCLML_ERR_IO": IOFailed,
    "OCLML_ERR_UNSUPPORTED": Unsupported,
    "OCLML_ERR_CONTEXT_MISMATCH": ContextMismatch,
    "OCLML_ERR_INVALID_CONFIG": InvalidConfig,
    "OCLML_ERR_DTYPE": DtypeError,
    "OCLML_ERR_PEER": PeerFailed,
    "OCLML_ERR_TIMEOUT": Timeout,
}


def error_for(status, text=""):
    name = string(lib.oclml_status_name(int(status)))
    return _BY_NAME.get(name, Error)(status, text)


def check(status, ctx_ptr=None):
    """Raises for a failed status, with the context's last-error text where there is one."""
    if status:
        text = ""
        if ctx_ptr is not None and ctx_ptr != ffi.NULL:
            buf = ffi.new("char[]", 8192)
            lib.oclml_ctx_last_error_copy(ctx_ptr, buf, 8192)
            text = ffi.string(buf).decode(errors="replace")
        raise error_for(status, text)


def misuse(text):
    """A Python-side refusal (a freed tensor, a closed context): nothing reached the library."""
    return InvalidArgument(lib.OCLML_ERR_INVALID_ARGUMENT, text)
