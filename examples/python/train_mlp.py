#!/usr/bin/env python3
"""examples/train_mlp in Python: the same MLP regression (in -> hidden -> hidden -> out, GELU,
MSE against tanh(x T) of a random teacher, full batch, AdamW), the same weights and data from
the same generator (examples/train_common.h's splitmix64), every op through the oclml package,
so its loss curve is the C example's.
    usage: train_mlp.py [--steps N] [--batch B] [--in I] [--hidden H] [--out O]
"""

import argparse

import numpy as np

import oclml

GOLDEN, M1, M2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


class Generator:
    """splitmix64, as train_common.h: uniform floats in [-1, 1) with 24 random bits."""

    def __init__(self, seed):
        self.state = seed

    def uniform(self, n):
        with np.errstate(over="ignore"):
            z = np.uint64(self.state) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(GOLDEN)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(M1)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(M2)
            z ^= z >> np.uint64(31)
        self.state = (self.state + n * GOLDEN) % (1 << 64)
        return (z >> np.uint64(40)).astype(np.float32) / np.float32(8388608.0) - np.float32(1.0)

    def fill(self, n, bound):
        return self.uniform(n) * np.float32(bound)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--in", dest="inp", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--out", type=int, default=64)
    a = ap.parse_args()
    B, dims = a.batch, [a.inp, a.hidden, a.hidden, a.out]
    with oclml.Context() as ctx:
        arena = oclml.Arena(ctx, [s for l in range(3) for s in ((dims[l + 1], dims[l]),
                                                                  (dims[l + 1],))])
        rng = Generator(1234)
        for l in range(3):
            bound = np.float32(1.0) / np.sqrt(np.float32(dims[l]))
            arena.params[2 * l].write(rng.fill(dims[l] * dims[l + 1], bound))
            arena.params[2 * l + 1].write(rng.fill(dims[l + 1], bound))
        x = ctx.tensor(rng.fill(B * dims[0], 1.0).reshape(B, dims[0]))
        teacher = ctx.tensor(rng.fill(dims[0] * dims[3], 0.25).reshape(dims[0], dims[3]))
        target = oclml.tanh(oclml.matmul(x, teacher))
        w, b, dw, db = arena.params[0::2], arena.params[1::2], arena.grads[0::2], arena.grads[1::2]
        z1, a1, z2, a2 = (ctx.empty((B, dims[1])) for _ in range(4))
        y, da1, da2 = ctx.empty((B, dims[3])), ctx.empty((B, dims[1])), ctx.empty((B, dims[1]))
        opt = oclml.Optimizer(arena, "adamw")
        curve = []
        for s in range(a.steps):
            oclml.linear(x, w[0], b[0], activation="gelu", out=a1, pre=z1)
            oclml.linear(a1, w[1], b[1], activation="gelu", out=a2, pre=z2)
            oclml.linear(a2, w[2], b[2], out=y)
            loss, dy = oclml.mse_loss(y, target, grad=True)
            oclml.linear_backward(a2, w[2], dy, dx=da2, dw=dw[2], db=db[2])
            oclml.linear_backward(a1, w[1], da2, saved=z2, activation="gelu", dx=da1, dw=dw[1],
                                  db=db[1])
            oclml.linear_backward(x, w[0], da1, saved=z1, activation="gelu",
                                  need_input_grad=False, dw=dw[0], db=db[0])
            opt.step()
            curve.append(float(loss.numpy()[0]))
            print("step %3d  loss %.6f" % (s, curve[-1]))
        return 0 if curve[-1] < 0.5 * curve[0] else 1


if __name__ == "__main__":
    raise SystemExit(main())
