"""The fused transformer ops, transposed convolution, average-pool backward and the recurrent
ops against NumPy."""

import numpy as np

import oclml
from conftest import close
from test_ops import conv_ref, t


def ln(r, g, b, eps=1e-5):
    mu, var = r.mean(-1, keepdims=True), r.var(-1, keepdims=True)
    return (r - mu) / np.sqrt(var + eps) * g + b


def test_dropout_add(ctx, rng):
    x, y = rng.standard_normal((8, 33)), rng.uniform(1, 2, (8, 33))
    close(oclml.dropout_add(t(ctx, x), t(ctx, y)).numpy(), x + y, rtol=1e-6)
    r = oclml.dropout_add(t(ctx, x), t(ctx, y), p=0.5, seed=3).numpy()
    d = oclml.dropout(t(ctx, y), p=0.5, seed=3).numpy()
    close(r, x + d, rtol=1e-6, atol=1e-6)


def test_residual_layer_norm_and_backward(ctx, rng):
    x, y = rng.standard_normal((5, 40)), rng.standard_normal((5, 40))
    g, b = rng.standard_normal(40), rng.standard_normal(40)
    r, out, mean, rstd = oclml.residual_layer_norm(t(ctx, x), t(ctx, y), t(ctx, g), t(ctx, b))
    close(r.numpy(), x + y, rtol=1e-6)
    close(out.numpy(), ln(x + y, g, b), rtol=1e-4, atol=1e-5)
    go = rng.standard_normal(x.shape)
    # the plain layer norm's backward of r is the reference
    dx_ref, dg_ref, db_ref = oclml.layer_norm_backward(t(ctx, x + y), t(ctx, go), mean, rstd,
                                                      t(ctx, g))
    dx, dy, dg, db = oclml.residual_layer_norm_backward(r, t(ctx, go), mean, rstd, t(ctx, g))
    close(dx.numpy(), dx_ref.numpy(), rtol=1e-5, atol=1e-6)
    close(dy.numpy(), dx_ref.numpy(), rtol=1e-5, atol=1e-6)
    close(dg.numpy(), dg_ref.numpy(), rtol=1e-5, atol=1e-6)
    close(db.numpy(), go.sum(0), rtol=1e-4, atol=1e-5)


def test_residual_rms_norm(ctx, rng):
    x, y, g = rng.standard_normal((3, 24)), rng.standard_normal((3, 24)), rng.standard_normal(24)
    r, out, rstd = oclml.residual_rms_norm(t(ctx, x), t(ctx, y), t(ctx, g))
    s = x + y
    close(out.numpy(), s / np.sqrt((s ** 2).mean(-1, keepdims=True) + 1e-6) * g, rtol=1e-4,
          atol=1e-5)
    go = rng.standard_normal(x.shape)
    dx, dy, dg = oclml.residual_rms_norm_backward(r, t(ctx, go), rstd, t(ctx, g))
    ref = oclml.rms_norm_backward(t(ctx, s), t(ctx, go), rstd, t(ctx, g))
    close(dx.numpy(), ref[0].numpy(), rtol=1e-5, atol=1e-6)
    close(dg.numpy(), ref[1].numpy(), rtol=1e-5, atol=1e-6)


def test_linear_dropout(ctx, rng):
    x, w, b = rng.standard_normal((9, 6)), rng.standard_normal((7, 6)), rng.standard_normal(7)
    y = oclml.linear_dropout(t(ctx, x), t(ctx, w), t(ctx, b), activation="relu", p=0.3, seed=11)
    plain = np.maximum(x @ w.T + b, 0)
    got = y.numpy()
    kept = got != 0
    close(got[kept], plain[kept] / 0.7, rtol=1e-5, atol=1e-5)
    g = rng.standard_normal(plain.shape)
    dx, dw, db = oclml.linear_dropout_backward(t(ctx, x), t(ctx, w), t(ctx, g), pre=y,
                                               activation="relu", p=0.3, seed=11)
    dz = np.where(kept, g / 0.7, 0)
    close(dx.numpy(), dz @ w, rtol=1e-4, atol=1e-5)
    close(dw.numpy(), dz.T @ x, rtol=1e-4, atol=1e-5)


def test_conv_transpose2d_is_conv2d_adjoint(ctx, rng):
    x, w = rng.standard_normal((2, 4, 3, 5)), rng.standard_normal((4, 3, 3, 3))
    y = oclml.conv_transpose2d(t(ctx, x), t(ctx, w), stride=2, padding=1).numpy()
    # <conv_transpose(x), u> = <x, conv(u)> with the same weights (K = 4 outputs of conv)
    u = rng.standard_normal(y.shape)
    lhs = (y * u).sum()
    rhs = (x * conv_ref(u, w, np.zeros(4), 2, 1)).sum()
    assert abs(lhs - rhs) < 1e-3 * max(1.0, abs(lhs))
    g = rng.standard_normal(y.shape)
    dx, dw, db = oclml.conv_transpose2d_backward(t(ctx, x), t(ctx, w), t(ctx, g), stride=2,
                                                 padding=1)
    close(dx.numpy(), conv_ref(g, w, np.zeros(4), 2, 1), rtol=1e-4, atol=1e-4)
    close(db.numpy(), g.sum((0, 2, 3)), rtol=1e-4, atol=1e-4)


def test_avg_pool2d_backward(ctx, rng):
    g = rng.standard_normal((2, 3, 3, 4))
    dx = oclml.avg_pool2d_backward(t(ctx, g), (2, 3, 6, 8), 2).numpy()
    close(dx, np.repeat(np.repeat(g, 2, 2), 2, 3) / 4, rtol=1e-6)


def test_gru_cell_backward_by_differences(ctx, rng):
    B, I, D = 2, 3, 4
    x, h = rng.standard_normal((B, I)), rng.standard_normal((B, D))
    wih, whh = rng.standard_normal((3 * D, I)) * 0.4, rng.standard_normal((3 * D, D)) * 0.4
    bih, bhh = rng.standard_normal(3 * D), rng.standard_normal(3 * D)
    g = rng.standard_normal((B, D))
    ws = [t(ctx, a) for a in (wih, whh)]
    dx, dh, dwih, dwhh, dbih, dbhh = oclml.gru_cell_backward(t(ctx, x), t(ctx, h), *ws,
                                                             t(ctx, g), t(ctx, bih),
                                                             t(ctx, bhh))

    def loss(xx, hh):
        y = oclml.gru_cell(t(ctx, xx), t(ctx, hh), *ws, t(ctx, bih), t(ctx, bhh)).numpy()
        return float((y.astype(np.float64) * g).sum())

    eps = 1e-2
    for (arr, grad) in ((x, dx), (h, dh)):
        for idx in [(0, 0), (1, arr.shape[1] - 1)]:
            p, m = arr.copy(), arr.copy()
            p[idx] += eps
            m[idx] -= eps
            fd = (loss(p, h) - loss(m, h)) / (2 * eps) if arr is x else \
                (loss(x, p) - loss(x, m)) / (2 * eps)
            assert abs(grad.numpy()[idx] - fd) < 2e-2 * max(1.0, abs(fd))
    assert dwih.shape == (3 * D, I) and np.isfinite(dbhh.numpy()).all()


def test_history_encode(ctx, rng):
    series = rng.standard_normal((2, 2, 40))
    f = oclml.history_encode(t(ctx, series)).numpy()
    assert f.shape == (2, 64)
    # series 0, window "all" (index 3): mean, std, min, max, last
    base = (0 * 4 + 3) * 8
    s = series[1, 0]
    close(f[1, base:base + 5], [s.mean(), s.std(), s.min(), s.max(), s[-1]], rtol=1e-4,
          atol=1e-5)


def test_rssm_rollout_runs_and_summarises(ctx, rng):
    E, D, G, C, F, T = 3, 16, 2, 4, 5, 6
    S = G * C
    w = {"w_ih": rng.standard_normal((E, 3 * D, S + F)) * 0.2,
         "w_hh": rng.standard_normal((E, 3 * D, D)) * 0.2,
         "w_p": rng.standard_normal((E, S, D)) * 0.2, "b_p": rng.standard_normal((E, S)) * 0.1,
         "w_y": rng.standard_normal((E, D + S)) * 0.2, "b_y": rng.standard_normal(E) * 0.1}
    start = {"h": np.zeros((E, D)), "z": np.zeros((E, S)), "f": rng.standard_normal(F)}
    out = {"y": ctx.empty((E, T)), "y_mean": ctx.empty((T,)), "y_std": ctx.empty((T,)),
           "h_final": ctx.empty((E, D))}
    oclml.rssm_rollout({k: t(ctx, v) for k, v in w.items()},
                       {k: t(ctx, v) for k, v in start.items()}, out, steps=T, groups=G,
                       classes=C, feedback=F)
    y = out["y"].numpy()
    assert np.isfinite(y).all()
    close(out["y_mean"].numpy(), y.mean(0), rtol=1e-4, atol=1e-5)
    close(out["y_std"].numpy(), y.std(0), rtol=1e-3, atol=1e-5)
    again = {"y": ctx.empty((E, T))}
    oclml.rssm_rollout({k: t(ctx, v) for k, v in w.items()},
                       {k: t(ctx, v) for k, v in start.items()}, again, steps=T, groups=G,
                       classes=C, feedback=F)
    np.testing.assert_array_equal(again["y"].numpy(), y)
