"""One context for the suite (the device $OCLML_DEVICE selects: PoCL in CI), random inputs
per test."""

import zlib

import numpy as np
import pytest

import oclml


@pytest.fixture(scope="session")
def ctx():
    c = oclml.Context()
    yield c
    c.close()


@pytest.fixture
def rng(request):
    """A generator seeded by the test's name (crc32: the same inputs every run, so a failure
    can be reproduced; hash() of a string changes per process)."""
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def close(a, b, rtol=1e-5, atol=1e-6):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
