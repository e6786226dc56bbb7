"""Every op against a NumPy reference in double precision (fresh random inputs, odd sizes), and
each backward against the reference's gradient."""

import math

import numpy as np
import pytest

import oclml
from conftest import close

F = np.float32


def t(ctx, a, dtype=None):
    return ctx.tensor(np.asarray(a, F), dtype)


def gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


UNARY = {
    "neg": (oclml.neg, lambda x: -x, lambda x: -np.ones_like(x)),
    "abs": (oclml.abs, np.abs, np.sign),
    "exp": (oclml.exp, np.exp, np.exp),
    "log": (oclml.log, np.log, lambda x: 1 / x),
    "sqrt": (oclml.sqrt, np.sqrt, lambda x: 0.5 / np.sqrt(x)),
    "rsqrt": (oclml.rsqrt, lambda x: 1 / np.sqrt(x), lambda x: -0.5 * x ** -1.5),
    "reciprocal": (oclml.reciprocal, lambda x: 1 / x, lambda x: -1 / x ** 2),
    "relu": (oclml.relu, lambda x: np.maximum(x, 0), lambda x: (x > 0).astype(float)),
    "sigmoid": (oclml.sigmoid, lambda x: 1 / (1 + np.exp(-x)),
                lambda x: np.exp(-x) / (1 + np.exp(-x)) ** 2),
    "tanh": (oclml.tanh, np.tanh, lambda x: 1 - np.tanh(x) ** 2),
    "gelu": (oclml.gelu, gelu, None),
    "silu": (oclml.silu, lambda x: x / (1 + np.exp(-x)), None),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_and_its_backward(ctx, rng, name):
    fn, ref, dref = UNARY[name]
    x = rng.uniform(0.2, 2.0, (3, 37)) if name in ("log", "sqrt", "rsqrt", "reciprocal") else \
        rng.standard_normal((3, 37))
    close(fn(t(ctx, x)).numpy(), ref(x), rtol=2e-5, atol=2e-6)
    g = rng.standard_normal(x.shape)
    if dref is None:  # central differences of the reference
        h = 1e-4
        d = (ref(x + h) - ref(x - h)) / (2 * h)
    else:
        d = dref(x)
    close(oclml.unary_backward(name, t(ctx, x), t(ctx, g)).numpy(), g * d, rtol=1e-4,
          atol=1e-5)


def test_pow(ctx, rng):
    x = rng.uniform(0.5, 2, 29)
    close(oclml.pow(t(ctx, x), 2.5).numpy(), x ** 2.5, rtol=1e-5)
    g = rng.standard_normal(29)
    close(oclml.pow_backward(t(ctx, x), 2.5, t(ctx, g)).numpy(), g * 2.5 * x ** 1.5, rtol=1e-5)


@pytest.mark.parametrize("name,ref", [("add", np.add), ("sub", np.subtract),
                                      ("mul", np.multiply), ("div", np.divide),
                                      ("maximum", np.maximum), ("minimum", np.minimum)])
def test_binary_tensor_and_scalar(ctx, rng, name, ref):
    a, b = rng.standard_normal((5, 13)), rng.uniform(0.5, 2, (5, 13))
    fn = getattr(oclml, name)
    close(fn(t(ctx, a), t(ctx, b)).numpy(), ref(a, b), rtol=1e-6)
    close(fn(t(ctx, a), 1.5).numpy(), ref(a, 1.5), rtol=1e-6)


def test_operators(ctx, rng):
    a, b = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))
    x, y = t(ctx, a), t(ctx, b)
    close((x + y).numpy(), a + b)
    close((x - 2).numpy(), a - 2)
    close((x * y).numpy(), a * b)
    close((-x).numpy(), -a)
    m = rng.standard_normal((6, 3))
    close((x @ t(ctx, m)).numpy(), a @ m, rtol=1e-5)


def test_reductions(ctx, rng):
    x = rng.standard_normal((3, 4, 5))
    tx = t(ctx, x)
    close(oclml.sum(tx).numpy(), [x.sum()], rtol=1e-5)
    close(oclml.sum(tx, dim=-1).numpy(), x.sum(-1), rtol=1e-5)
    close(oclml.mean(tx, dim=(0, 2)).numpy(), x.mean((0, 2)), rtol=1e-5)
    close(oclml.mean(tx, dim=1, keepdim=True).numpy(), x.mean(1, keepdims=True), rtol=1e-5)
    close(oclml.amax(tx, dim=0).numpy(), x.max(0))
    close(oclml.argmax(tx, dim=-1).numpy(), x.argmax(-1))


def test_layout(ctx, rng):
    x = rng.standard_normal((2, 3, 4))
    tx = t(ctx, x)
    close(oclml.permute(tx, (2, 0, 1)).numpy(), x.transpose(2, 0, 1))
    close(oclml.transpose(tx, 0, -1).numpy(), x.swapaxes(0, 2))
    y = rng.standard_normal((2, 5, 4))
    close(oclml.cat([tx, t(ctx, y)], dim=1).numpy(), np.concatenate([x, y], 1))
    parts = oclml.split(t(ctx, np.concatenate([x, y], 1)), [3, 5], dim=1)
    close(parts[0].numpy(), x)
    close(parts[1].numpy(), y)
    b = rng.standard_normal(3)
    close(oclml.add_bias(tx, t(ctx, b), axis=1).numpy(), x + b[None, :, None])


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_gemm(ctx, rng, ta, tb):
    a, b, c = rng.standard_normal((17, 9)), rng.standard_normal((9, 13)), rng.standard_normal(
        (17, 13))
    A, B = (a.T.copy() if ta else a), (b.T.copy() if tb else b)
    out = oclml.gemm(t(ctx, A), t(ctx, B), t(ctx, c), alpha=0.5, beta=2.0, trans_a=ta,
                     trans_b=tb)
    close(out.numpy(), 0.5 * a @ b + 2 * c, rtol=1e-5, atol=1e-5)


def test_batched_matmul(ctx, rng):
    a, b = rng.standard_normal((3, 5, 7)), rng.standard_normal((3, 7, 4))
    close(oclml.bmm(t(ctx, a), t(ctx, b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("act", [None, "relu", "gelu", "gelu_tanh", "silu", "tanh", "sigmoid"])
def test_linear_and_backward(ctx, rng, act):
    x, w, b = rng.standard_normal((11, 7)), rng.standard_normal((5, 7)), rng.standard_normal(5)
    z = x @ w.T + b
    f = {None: lambda z: z, "relu": lambda z: np.maximum(z, 0), "gelu": gelu,
         "gelu_tanh": lambda z: 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) *
                                                        (z + 0.044715 * z ** 3))),
         "silu": lambda z: z / (1 + np.exp(-z)), "tanh": np.tanh,
         "sigmoid": lambda z: 1 / (1 + np.exp(-z))}[act]
    tx, tw, tb = t(ctx, x), t(ctx, w), t(ctx, b)
    pre = ctx.empty(z.shape)
    y = oclml.linear(tx, tw, tb, activation=act, pre=pre)
    close(y.numpy(), f(z), rtol=2e-5, atol=2e-5)
    g = rng.standard_normal(z.shape)
    h = 1e-4
    if act == "relu":  # differences straddle the kink where z is within h of 0
        dz = g * (z > 0)
    else:
        dz = g * (f(z + h) - f(z - h)) / (2 * h)
    saved = y if act in ("relu", "tanh", "sigmoid") else pre
    dx, dw, db = oclml.linear_backward(tx, tw, t(ctx, g), saved=saved, activation=act)
    close(dx.numpy(), dz @ w, rtol=1e-3, atol=1e-4)
    close(dw.numpy(), dz.T @ x, rtol=1e-3, atol=1e-4)
    close(db.numpy(), dz.sum(0), rtol=1e-3, atol=1e-4)


def softmax_ref(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_softmax_family(ctx, rng):
    x = rng.standard_normal((6, 133)) * 3
    y = softmax_ref(x)
    ty = oclml.softmax(t(ctx, x))
    close(ty.numpy(), y, rtol=1e-5, atol=1e-7)
    close(oclml.log_softmax(t(ctx, x)).numpy(), np.log(y), rtol=1e-5, atol=1e-5)
    g = rng.standard_normal(x.shape)
    close(oclml.softmax_backward(ty, t(ctx, g)).numpy(),
          y * (g - (g * y).sum(-1, keepdims=True)), rtol=1e-4, atol=1e-6)
    lsy = oclml.log_softmax(t(ctx, x))
    close(oclml.log_softmax_backward(lsy, t(ctx, g)).numpy(),
          g - y * g.sum(-1, keepdims=True), rtol=1e-4, atol=1e-5)
    with pytest.raises(oclml.InvalidArgument):
        oclml.softmax(t(ctx, x), dim=0)


def test_layer_norm_and_backward(ctx, rng):
    x, gm, bt = rng.standard_normal((5, 47)), rng.standard_normal(47), rng.standard_normal(47)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    rs = 1 / np.sqrt(var + 1e-5)
    xh = (x - mu) * rs
    y, m, r = oclml.layer_norm(t(ctx, x), 47, t(ctx, gm), t(ctx, bt), return_stats=True)
    close(y.numpy(), xh * gm + bt, rtol=1e-4, atol=1e-5)
    close(m.numpy(), mu[:, 0], rtol=1e-5, atol=1e-6)
    g = rng.standard_normal(x.shape)
    dxh = g * gm
    dx = rs * (dxh - dxh.mean(-1, keepdims=True) - xh * (dxh * xh).mean(-1, keepdims=True))
    tdx, tdg, tdb = oclml.layer_norm_backward(t(ctx, x), t(ctx, g), m, r, t(ctx, gm))
    close(tdx.numpy(), dx, rtol=1e-3, atol=1e-4)
    close(tdg.numpy(), (g * xh).sum(0), rtol=1e-4, atol=1e-4)
    close(tdb.numpy(), g.sum(0), rtol=1e-4, atol=1e-4)
    close(oclml.layer_norm(t(ctx, x)).numpy(), xh, rtol=1e-4, atol=1e-5)


def test_rms_norm_and_backward(ctx, rng):
    x, gm = rng.standard_normal((4, 33)), rng.standard_normal(33)
    rs = 1 / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6)
    y, r = oclml.rms_norm(t(ctx, x), weight=t(ctx, gm), return_stats=True)
    close(y.numpy(), x * rs * gm, rtol=1e-4, atol=1e-5)
    g = rng.standard_normal(x.shape)
    dxh = g * gm
    dx = rs * (dxh - x * rs * (dxh * x * rs).mean(-1, keepdims=True))
    tdx, tdg = oclml.rms_norm_backward(t(ctx, x), t(ctx, g), r, t(ctx, gm))
    close(tdx.numpy(), dx, rtol=1e-3, atol=1e-4)
    close(tdg.numpy(), (g * x * rs).sum(0), rtol=1e-4, atol=1e-4)


def test_cross_entropy(ctx, rng):
    x = rng.standard_normal((9, 31))
    y = rng.integers(0, 31, 9).astype(F)
    y[4] = -100  # ignored
    p = softmax_ref(x)
    keep = y != -100
    nll = -np.log(p[np.arange(9), y.astype(int).clip(0)])
    loss, g = oclml.cross_entropy(t(ctx, x), t(ctx, y), grad=True)
    close(loss.numpy(), [nll[keep].mean()], rtol=1e-5)
    onehot = np.zeros_like(x)
    onehot[np.arange(9), y.astype(int).clip(0)] = 1
    ref = (p - onehot) * keep[:, None] / keep.sum()
    close(g.numpy(), ref, rtol=1e-4, atol=1e-6)
    ls = oclml.cross_entropy(t(ctx, x), t(ctx, y), reduction="none", label_smoothing=0.1)
    smooth = -(0.9 * np.log(p[np.arange(9), y.astype(int).clip(0)]) +
               0.1 * np.log(p).mean(-1))
    close(ls.numpy()[keep], smooth[keep], rtol=1e-4)


def test_regression_losses(ctx, rng):
    a, b = rng.standard_normal((6, 7)), rng.standard_normal((6, 7))
    loss, g = oclml.mse_loss(t(ctx, a), t(ctx, b), grad=True)
    close(loss.numpy(), [((a - b) ** 2).mean()], rtol=1e-5)
    close(g.numpy(), 2 * (a - b) / a.size, rtol=1e-5)
    d = a - b
    hub = np.where(np.abs(d) < 0.5, 0.5 * d ** 2, 0.5 * (np.abs(d) - 0.25))
    close(oclml.huber_loss(t(ctx, a), t(ctx, b), delta=0.5).numpy(), [hub.mean()], rtol=1e-5)
    tgt = rng.uniform(0, 1, a.shape)
    bce = np.maximum(a, 0) - a * tgt + np.log1p(np.exp(-np.abs(a)))
    close(oclml.binary_cross_entropy_with_logits(t(ctx, a), t(ctx, tgt)).numpy(), [bce.mean()],
          rtol=1e-5)


def test_kl_div_logits(ctx, rng):
    p, q = rng.standard_normal((5, 12)), rng.standard_normal((5, 12))
    sp, sq = softmax_ref(p), softmax_ref(q)
    kl = (sp * (np.log(sp) - np.log(sq))).sum(-1)
    loss = oclml.kl_div_logits(t(ctx, p), t(ctx, q), reduction="none")
    close(loss.numpy(), kl, rtol=1e-4, atol=1e-6)


def test_embedding_and_backward(ctx, rng):
    table = rng.standard_normal((10, 6))
    ids = np.array([[3, 3, 0], [9, 1, 3]], F)
    close(oclml.embedding(t(ctx, ids), t(ctx, table)).numpy(), table[ids.astype(int)])
    g = rng.standard_normal((2, 3, 6))
    ref = np.zeros_like(table)
    np.add.at(ref, ids.astype(int).ravel(), g.reshape(-1, 6))
    close(oclml.embedding_backward(t(ctx, ids), t(ctx, g), 10).numpy(), ref, rtol=1e-5)


def test_dropout_regenerates_its_mask(ctx, rng):
    x = rng.uniform(1, 2, (64, 65))
    y = oclml.dropout(t(ctx, x), p=0.25, seed=7, offset=3).numpy()
    kept = y != 0
    assert 0.65 < kept.mean() < 0.85
    close(y[kept], x[kept] / 0.75, rtol=1e-6)
    g = rng.standard_normal(x.shape)
    dx = oclml.dropout_backward(t(ctx, g), p=0.25, seed=7, offset=3).numpy()
    close(dx, np.where(kept, g / 0.75, 0), rtol=1e-6)
    assert oclml.dropout(t(ctx, x), p=0.25, training=False).numpy() is not None
    assert oclml.dropout_counters(x.size) > 0


def attention_ref(q, k, v, causal):
    s = q @ k.swapaxes(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        lq, lk = s.shape[-2:]
        s = np.where(np.tril(np.ones((lq, lk), bool)), s, -np.inf)
    p = softmax_ref(s)
    return p @ v, p, s


@pytest.mark.parametrize("causal", [False, True])
def test_attention_and_backward(ctx, rng, causal):
    q, k, v = (rng.standard_normal((2, 3, 9, 8)) for _ in range(3))
    o, p, s = attention_ref(q, k, v, causal)
    to, lse = oclml.scaled_dot_product_attention(t(ctx, q), t(ctx, k), t(ctx, v),
                                                 is_causal=causal, return_lse=True)
    close(to.numpy(), o, rtol=1e-4, atol=1e-5)
    g = rng.standard_normal(o.shape)
    dp = g @ v.swapaxes(-1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    dq = ds @ k / math.sqrt(8)
    dk = ds.swapaxes(-1, -2) @ q / math.sqrt(8)
    dv = p.swapaxes(-1, -2) @ g
    tdq, tdk, tdv = oclml.scaled_dot_product_attention_backward(
        t(ctx, q), t(ctx, k), t(ctx, v), to, lse, t(ctx, g), is_causal=causal)
    for got, want in ((tdq, dq), (tdk, dk), (tdv, dv)):
        close(got.numpy(), want, rtol=1e-3, atol=1e-4)


def conv_ref(x, w, b, stride, pad):
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - r) // stride + 1, (wd + 2 * pad - s) // stride + 1
    y = np.zeros((n, k, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride:i * stride + r, j * stride:j * stride + s]
            y[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3]))
    return y + b[None, :, None, None]


def test_conv2d_and_backward(ctx, rng):
    x, w, b = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3, 3, 3)), \
        rng.standard_normal(4)
    y = conv_ref(x, w, b, 2, 1)
    ty = oclml.conv2d(t(ctx, x), t(ctx, w), t(ctx, b), stride=2, padding=1)
    close(ty.numpy(), y, rtol=1e-4, atol=1e-4)
    g = rng.standard_normal(y.shape)
    dx, dw, db = oclml.conv2d_backward(t(ctx, x), t(ctx, w), t(ctx, g), stride=2, padding=1)
    h = 1e-3  # the reference's gradients by its linearity: dL/dw = sum over outputs
    dw_ref = np.zeros_like(w)
    for idx in np.ndindex(*w.shape):
        e = np.zeros_like(w)
        e[idx] = 1
        dw_ref[idx] = (g * (conv_ref(x, e, np.zeros(4), 2, 1))).sum()
    close(dw.numpy(), dw_ref, rtol=1e-3, atol=1e-3)
    close(db.numpy(), g.sum((0, 2, 3)), rtol=1e-4, atol=1e-4)
    xr = x.copy()
    xr[1, 2, 3, 4] += h
    fd = (g * (conv_ref(xr, w, b, 2, 1) - y)).sum() / h
    assert abs(dx.numpy()[1, 2, 3, 4] - fd) < 1e-2 * max(1, abs(fd))


def test_pooling(ctx, rng):
    x = rng.standard_normal((2, 3, 6, 8))
    mx = x.reshape(2, 3, 3, 2, 4, 2).max((3, 5))
    close(oclml.max_pool2d(t(ctx, x), 2).numpy(), mx)
    av = x.reshape(2, 3, 3, 2, 4, 2).mean((3, 5))
    close(oclml.avg_pool2d(t(ctx, x), 2).numpy(), av, rtol=1e-5)
    sx = x / (1 + np.exp(-x))
    close(oclml.max_pool2d(t(ctx, x), 2, activation="silu").numpy(),
          sx.reshape(2, 3, 3, 2, 4, 2).max((3, 5)), rtol=1e-5, atol=1e-6)
    g = rng.standard_normal(mx.shape)
    dx = oclml.max_pool2d_backward(t(ctx, x), t(ctx, g), 2).numpy()
    assert np.isclose(dx.sum(), g.sum(), rtol=1e-5)
    assert ((dx != 0).sum((2, 3)) == 12).all()


def test_gru_cell_and_sequence(ctx, rng):
    B, I, D = 3, 5, 4
    x, h = rng.standard_normal((B, I)), rng.standard_normal((B, D))
    wih, whh = rng.standard_normal((3 * D, I)) * 0.3, rng.standard_normal((3 * D, D)) * 0.3
    bih, bhh = rng.standard_normal(3 * D), rng.standard_normal(3 * D)

    def cell(x, h):
        gi, gh = x @ wih.T + bih, h @ whh.T + bhh
        sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
        r, z = sig(gi[:, :D] + gh[:, :D]), sig(gi[:, D:2 * D] + gh[:, D:2 * D])
        n = np.tanh(gi[:, 2 * D:] + r * gh[:, 2 * D:])
        return (1 - z) * n + z * h

    args = [t(ctx, a) for a in (wih, whh, bih, bhh)]
    close(oclml.gru_cell(t(ctx, x), t(ctx, h), *args).numpy(), cell(x, h), rtol=1e-4,
          atol=1e-5)
    xs = rng.standard_normal((4, B, I))
    hs, hh = [], h
    for s in range(4):
        hh = cell(xs[s], hh)
        hs.append(hh)
    close(oclml.gru_sequence(t(ctx, xs), t(ctx, h), *args).numpy(), np.stack(hs), rtol=1e-4,
          atol=1e-5)


def test_adamw_step_matches_torch_formula(ctx, rng):
    arena = oclml.Arena(ctx, [(4, 3), (5,)])
    p0 = [rng.standard_normal(s) for s in ((4, 3), (5,))]
    g = [rng.standard_normal(s) for s in ((4, 3), (5,))]
    for i in range(2):
        arena.params[i].write(p0[i])
        arena.grads[i].write(g[i])
    opt = oclml.Optimizer(arena, "adamw", lr=0.01, weight_decay=0.1)
    opt.step()
    for i in range(2):
        m, v = 0.1 * g[i], 0.001 * g[i] ** 2
        mh, vh = m / 0.1, v / 0.001
        want = p0[i] * (1 - 0.01 * 0.1) - 0.01 * mh / (np.sqrt(vh) + 1e-8)
        close(arena.params[i].numpy(), want, rtol=1e-5, atol=1e-6)
    assert opt.scalars()["step"] == 1
    opt.lr = 0.5
    assert abs(opt.lr - 0.5) < 1e-7
    arena.zero_grad()
    assert all(not gr.numpy().any() for gr in arena.grads)
    with pytest.raises(oclml.InvalidConfig):
        oclml.Optimizer(arena, "adam", lr=-1)
    arena.close()
    assert arena.params[0].freed
