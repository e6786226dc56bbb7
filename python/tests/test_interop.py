"""PyOpenCL interop: a context over PyOpenCL's queue, tensors over its arrays and back, no
copies, work of both in order on one queue."""

import numpy as np
import pytest

import oclml
from conftest import close

cl = pytest.importorskip("pyopencl")
cla = pytest.importorskip("pyopencl.array")


@pytest.fixture(scope="module")
def queue(ctx):
    name = ctx.device_info["device_name"]
    for p in cl.get_platforms():
        for d in p.get_devices():
            if d.name == name:
                return cl.CommandQueue(cl.Context([d]))
    pytest.skip("PyOpenCL does not see the test device %s" % name)


def test_ops_on_pyopencl_memory(queue, rng):
    with oclml.Context.from_pyopencl(queue) as wctx:
        a = rng.standard_normal((5, 33)).astype(np.float32)
        arr = cla.to_device(queue, a)
        x = oclml.Tensor.from_pyopencl(wctx, arr)
        y = oclml.softmax(x)
        e = np.exp(a - a.max(-1, keepdims=True))
        close(y.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
        # PyOpenCL writes, liboclml reads the same memory, in queue order
        arr *= 2
        close(oclml.softmax(x).to_pyopencl(queue).get(),
              np.exp(2 * a - 2 * a.max(-1, keepdims=True)) /
              np.exp(2 * a - 2 * a.max(-1, keepdims=True)).sum(-1, keepdims=True),
              rtol=1e-5, atol=1e-7)
        # liboclml writes, PyOpenCL reads
        z = wctx.zeros((2, 3))
        z.fill_(4.0)
        np.testing.assert_array_equal(z.to_pyopencl(queue).get(), 4.0)
        row = x[1]
        np.testing.assert_array_equal(row.to_pyopencl(queue).get(), 2 * a[1])


def test_buffer_needs_a_shape(queue):
    with oclml.Context.from_pyopencl(queue) as wctx:
        buf = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, 64)
        with pytest.raises(oclml.InvalidArgument):
            oclml.Tensor.from_pyopencl(wctx, buf)
        t = oclml.Tensor.from_pyopencl(wctx, buf, shape=(4, 4))
        t.fill_(1.0)
        assert t.numpy().sum() == 16
