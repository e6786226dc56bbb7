#!/bin/sh
# The Python package's pytest suite (python/tests) against the build tree's library, on the test
# device; skipped (exit 77, shown as SKIP) where python3 lacks NumPy, cffi or pytest. First,
# the package's copy of the C declarations (python/oclml/_cdef.h) must be what
# python/gen_cdef.sh makes of include/oclml.h now: a header change without it fails here.
set -u
src=${OCLML_TEST_SRCDIR:-.}
build=${OCLML_TEST_BUILDDIR:-.}
py=${OCLML_PYTHON:-python3}
if [ "$py" = ":" ] || ! "$py" -c "import numpy, cffi, pytest" 2>/dev/null; then
    echo "python3 with numpy, cffi and pytest not found: the Python tests are skipped"
    exit 77
fi
tmp=${OCLML_TEST_TMP:-/tmp}/cdef.$$
"$src/python/gen_cdef.sh" "$src" "$build" "${OCLML_CC:-cc}" > "$tmp" || exit 1
if ! cmp -s "$tmp" "$src/python/oclml/_cdef.h"; then
    echo "python/oclml/_cdef.h is stale: run python/gen_cdef.sh . . > python/oclml/_cdef.h"
    diff "$src/python/oclml/_cdef.h" "$tmp" | head -20
    rm -f "$tmp"
    exit 1
fi
rm -f "$tmp"
# The package from the source tree, the library from the build tree (python/oclml/_ffi.py).
PYTHONPATH="$src/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1 \
    exec "$py" -m pytest -q -p no:cacheprovider "$src/python/tests"
