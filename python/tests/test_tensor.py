"""Contexts, tensors and errors: NumPy in and out, dtypes, views, freeing, closed contexts,
tensors of another context, and what an error carries."""

import gc

import numpy as np
import pytest

import oclml
from conftest import close


def test_context_describes_its_device(ctx):
    info = ctx.device_info
    assert info["device_name"] and info["compute_units"] >= 1
    assert "oclml.Context" in repr(ctx)
    assert oclml.version() == oclml.__version__
    tuning = ctx.tuning()
    assert tuning and all(len(v) == 3 for v in tuning.values())
    now, peak = ctx.memory()
    assert peak >= now >= 0


def test_roundtrip_fp32_odd_shapes(ctx, rng):
    for shape in [(1,), (7,), (3, 5), (2, 3, 5), (2, 1, 3, 7)]:
        a = rng.standard_normal(shape).astype(np.float32)
        t = ctx.tensor(a)
        assert t.shape == shape and t.dtype == "float32" and t.numel() == a.size
        np.testing.assert_array_equal(t.numpy(), a)


def test_bf16_rounds_and_fp16_keeps_bits(ctx, rng):
    a = rng.standard_normal((4, 9)).astype(np.float32)
    b = ctx.tensor(a, dtype="bfloat16")
    assert b.dtype == "bfloat16"
    close(b.numpy(), a, rtol=2 ** -8, atol=0)
    h = rng.standard_normal(11).astype(np.float16)
    t = ctx.tensor(h)
    assert t.dtype == "float16" and t.numpy().dtype == np.float16
    np.testing.assert_array_equal(t.numpy(), h)
    close(t.to("float32").numpy(), h.astype(np.float32), rtol=0, atol=0)


def test_nan_survives(ctx):
    a = np.array([1.0, np.nan, -np.inf, 3.0], np.float32)
    np.testing.assert_array_equal(ctx.tensor(a).numpy(), a)


def test_views_share_memory(ctx, rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    t = ctx.tensor(a)
    v = t.reshape(2, -1)
    assert v.shape == (2, 12)
    np.testing.assert_array_equal(v.numpy(), a.reshape(2, 12))
    row = t[2]
    np.testing.assert_array_equal(row.numpy(), a[2])
    rows = t[1:3]
    rows.fill_(5.0)
    a[1:3] = 5.0
    np.testing.assert_array_equal(t.numpy(), a)
    with pytest.raises(oclml.InvalidArgument):
        t.reshape(5, 5)
    with pytest.raises(IndexError):
        t[4]


def test_free_is_idempotent_and_guards_use(ctx):
    t = ctx.zeros((3, 3))
    t.free()
    t.free()
    assert t.freed
    with pytest.raises(oclml.InvalidArgument, match="freed"):
        t.numpy()
    with pytest.raises(oclml.InvalidArgument):
        oclml.softmax(t)
    with ctx.zeros(4) as u:
        assert u.numpy().sum() == 0
    assert u.freed


def test_closed_context_frees_its_tensors():
    c = oclml.Context()
    t = c.tensor(np.ones(5, np.float32))
    v = t.reshape(5, 1)
    a = oclml.Arena(c, [(2, 3)])
    p = a.params[0]
    c.close()
    c.close()
    for x in (t, v, p):
        assert x.freed
        with pytest.raises(oclml.InvalidArgument):
            x.numpy()
    with pytest.raises(oclml.InvalidArgument, match="closed"):
        c.empty(3)


def test_garbage_collection_in_any_order():
    c = oclml.Context()
    ts = [c.tensor(np.full(8, i, np.float32)) for i in range(10)]
    views = [t.reshape(2, 4) for t in ts]
    del ts
    gc.collect()
    assert views[3].numpy()[0, 0] == 3
    del c  # the views keep their tensors, the tensors their context
    gc.collect()
    assert views[7].numpy().sum() == 56
    del views
    gc.collect()


def test_another_contexts_tensor_is_refused(ctx):
    other = oclml.Context()
    try:
        x = ctx.tensor(np.ones((2, 3), np.float32))
        y = other.empty((2, 3))
        y.fill_(7)
        with pytest.raises(oclml.ContextMismatch):
            oclml.softmax(x, out=y)
        np.testing.assert_array_equal(y.numpy(), 7)  # nothing touched
    finally:
        other.close()


def test_errors_carry_the_status_and_the_text(ctx):
    x = ctx.tensor(np.ones((2, 3), np.float32))
    y = ctx.empty((3, 2))
    y.fill_(1.5)
    with pytest.raises(oclml.InvalidShape) as e:
        oclml.softmax(x, out=y)
    assert e.value.name == "OCLML_ERR_INVALID_SHAPE" and e.value.status == -7003
    assert "shape" in e.value.text
    assert isinstance(e.value, ValueError) and isinstance(e.value, oclml.Error)
    np.testing.assert_array_equal(y.numpy(), 1.5)
    with pytest.raises(oclml.InvalidArgument):
        ctx.empty((2, 3), dtype="int8")
    with pytest.raises(oclml.DeviceNotFound):
        oclml.Context(device="no such device anywhere")
    with pytest.raises(oclml.InvalidArgument):
        oclml.Context(tuning="no.such.key=1")


def test_wrong_dtype_is_refused(ctx):
    h = ctx.empty((2, 4), "float16")
    w = ctx.empty((3, 4))
    with pytest.raises(oclml.DtypeError):
        oclml.linear(h, w)


def test_introspection(ctx):
    caps = ctx.device_caps
    assert caps["compute_units"] >= 1 and caps["simd_width"] >= 1
    cache = ctx.cache_info
    assert cache["builds"] + cache["memory_hits"] + cache["disk_hits"] >= 1
    assert "softmax" in [o["name"] for o in oclml.ops_list()]
    count, pd = oclml.device_match(None)
    assert count >= 1 and ":" in pd
    assert ctx.gemm_plan(64, 64, 64)
    assert ctx.op_variant("softmax", 8, 100)
    assert ctx.math_mode == "fp32"
    ctx.math_mode = "tf32"
    assert ctx.math_mode == "tf32"
    ctx.math_mode = "fp32"
    with pytest.raises(oclml.InvalidArgument):
        ctx.math_mode = "fp8"
    ctx.reset_peak_memory()
    ctx.trim_scratch()
    assert "softmax.cl" in ctx.kernel_files()
    assert all(ctx.cl_objects()) and ctx.backend_error() == 0
    active, text = ctx.clblast_tuning()
    assert isinstance(active, bool) and text
    key = next(iter(ctx.tuning()))
    assert oclml.tuning_key_for_developers(key) in (True, False)
    with pytest.raises(oclml.InvalidArgument):
        oclml.tuning_key_for_developers("no.such.key")
    q = ctx.tensor(np.ones((1, 2, 8, 16), np.float32))
    assert oclml.attention_plan(q, q, q)
    x, w = ctx.tensor(np.ones((1, 3, 8, 8), np.float32)), ctx.tensor(np.ones((4, 3, 3, 3)))
    assert oclml.conv2d_plan(x, w, padding=1)


def test_profile_needs_a_profiling_context(ctx):
    with pytest.raises(oclml.Unsupported):
        with ctx.profile():
            pass
    with oclml.Context(profiling=True) as pc:
        x = pc.tensor(np.ones((64, 64), np.float32))
        with pc.profile() as p:
            oclml.softmax(x)
        assert p.ms is not None and p.ms >= 0


def test_optimizer_state_for_checkpoints(ctx, rng):
    arena = oclml.Arena(ctx, [(3, 4)])
    arena.grads[0].write(rng.standard_normal((3, 4)))
    opt = oclml.Optimizer(arena, "adam", lr=0.1)
    opt.step()
    m = opt.state(0).numpy()
    np.testing.assert_allclose(m[:12].reshape(3, 4), 0.1 * arena.grads[0].numpy(), rtol=1e-6)
    opt.set_step(5)
    assert opt.scalars()["step"] == 5
    opt.set_grad_scale(4.0)
    scale = opt.grad_scale_tensor()
    assert scale.numpy()[0] == 4.0
    arena.close()  # closes the optimizer, whose tensors end with it
    assert scale.freed
    with pytest.raises(oclml.InvalidArgument):
        opt.step()
