"""One context for the suite (the device $OCLML_DEVICE selects: PoCL in CI), fresh random
inputs per test."""

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
    return np.random.default_rng(abs(hash(request.node.name)) % (2 ** 32))


def close(a, b, rtol=1e-5, atol=1e-6):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
