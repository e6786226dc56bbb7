"""The C library through cffi's ABI mode: no compiled extension, so nothing to build against
Python's headers. The declarations are include/oclml.h itself, preprocessed (_cdef.h, written
by python/gen_cdef.sh; `make check` fails when it falls behind the header)."""

import glob
import os

import cffi

ffi = cffi.FFI()
_HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_HERE, "_cdef.h")) as _f:
    ffi.cdef(_f.read())


def _candidates():
    """Where the shared library may be, in order: $OCLML_LIBRARY; the path `make install` wrote
    into _config.py; a build tree (the package run from the source tree, or the tests' build
    directory); the dynamic linker's search."""
    env = os.environ.get("OCLML_LIBRARY")
    if env:
        return [env]
    found = []
    try:
        from . import _config  # written by make install

        found.append(_config.LIBRARY)
    except ImportError:
        pass
    for top in (os.environ.get("OCLML_TEST_BUILDDIR"), os.path.join(_HERE, "..", "..")):
        if top:
            found += sorted(glob.glob(os.path.join(top, ".libs", "liboclml.so.[0-9]*")), key=len)
    found.append("liboclml.so")
    return found


def _load():
    errors = []
    for path in _candidates():
        try:
            return ffi.dlopen(path), path
        except OSError as e:
            errors.append("%s: %s" % (path, e))
    raise ImportError("liboclml not found (set OCLML_LIBRARY to its path):\n  " +
                      "\n  ".join(errors))


lib, LIBRARY_PATH = _load()


def tree_kernel_path():
    """The source tree's kernels when the package runs from it (python/oclml beside cl/), else
    None: an installed library finds its own."""
    cl = os.path.normpath(os.path.join(_HERE, "..", "..", "cl"))
    return cl if os.path.isdir(os.path.join(cl, "ops")) else None


def string(p):
    return ffi.string(p).decode() if p != ffi.NULL else ""
