#!/usr/bin/env python3
"""PyTorch's loss curves for examples/train_mlp and examples/train_cnn at their default sizes,
from exactly the weights and data the examples make (examples/train_common.h's generator,
reproduced here bit for bit), in float32 with TF32 off. Writes one loss a line:

    python3 examples/train_golden.py OUTDIR     # OUTDIR/train_mlp_golden.txt, train_cnn_golden.txt

The examples compare their curves with these files (--golden) within 1e-3 relative, and
tests/check_train runs them so when tests/data holds the files.
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
M64 = (1 << 64) - 1


class Rng:
    """splitmix64; uniform float32 in [-1, 1) from 24 bits, as train_uniform()."""

    def __init__(self, seed):
        self.s = seed

    def uniform(self, n):
        out = np.empty(n, dtype=np.float32)
        for i in range(n):
            self.s = (self.s + 0x9E3779B97F4A7C15) & M64
            z = self.s
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            z ^= z >> 31
            out[i] = np.float32(z >> 40) / np.float32(8388608.0) - np.float32(1.0)
        return out

    def fill(self, shape, bound):
        n = int(np.prod(shape))
        return torch.from_numpy(self.uniform(n) * np.float32(bound)).reshape(shape)


def bound(fan_in):
    return np.float32(1.0) / np.sqrt(np.float32(fan_in))


def mlp(dev, steps=50, B=256, I=64, H=256, O=64):
    rng = Rng(1234)
    dims = [I, H, H, O]
    params = []
    for l in range(3):
        params.append(rng.fill((dims[l + 1], dims[l]), bound(dims[l])))
        params.append(rng.fill((dims[l + 1],), bound(dims[l])))
    x = rng.fill((B, I), 1.0)
    teacher = rng.fill((I, O), 0.25)
    t = torch.tanh(x @ teacher)
    params = [p.to(dev).requires_grad_() for p in params]
    x, t = x.to(dev), t.to(dev)
    opt = torch.optim.AdamW(params)
    losses = []
    for _ in range(steps):
        h = F.gelu(F.linear(x, params[0], params[1]))
        h = F.gelu(F.linear(h, params[2], params[3]))
        loss = F.mse_loss(F.linear(h, params[4], params[5]), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def cnn(dev, steps=50, N=128):
    rng = Rng(4321)
    side, c0, c1, c2, classes = 16, 3, 8, 16, 10
    flat = c2 * (side // 4) ** 2
    shapes = [(c1, c0, 5, 5), (c1,), (c2, c1, 5, 5), (c2,), (classes, flat), (classes,)]
    fan = [c0 * 25, c1 * 25, flat]
    params = [rng.fill(s, bound(fan[i // 2])) for i, s in enumerate(shapes)]
    img = rng.fill((N, c0, side, side), 1.0)
    teacher = rng.fill((c0 * side * side, classes), 1.0)
    scores = img.reshape(N, -1).double() @ teacher.double()
    labels = scores.argmax(dim=1)
    params = [p.to(dev).requires_grad_() for p in params]
    img, labels = img.to(dev), labels.to(dev)
    opt = torch.optim.AdamW(params)
    losses = []
    for _ in range(steps):
        h = F.max_pool2d(F.silu(F.conv2d(img, params[0], params[1], padding=2)), 2)
        h = F.max_pool2d(F.silu(F.conv2d(h, params[2], params[3], padding=2)), 2)
        loss = F.cross_entropy(F.linear(h.flatten(1), params[4], params[5]), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    for name, fn in (("train_mlp", mlp), ("train_cnn", cnn)):
        path = os.path.join(out, name + "_golden.txt")
        with open(path, "w") as f:
            for v in fn(dev):
                f.write("%.9g\n" % v)
        print("wrote", path)


if __name__ == "__main__":
    main()
