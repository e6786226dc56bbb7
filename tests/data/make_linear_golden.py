#!/usr/bin/env python3
"""Golden vectors for liboclml's linear layer, made with torch.nn.Linear and autograd.

Writes linear_golden.txt beside this script (or to the path given as the first argument): a
header comment, then per activation a line "case ACT NAME rows in out" (ACT is the
oclml_activation value) and lines "name count v v v ..." for x, w, b, dy (the inputs), y =
act(x W^T + b), and the gradients dx, dw, db of y.backward(dy). fp32 on the CPU (the values do
not depend on the device); printed with 9 significant digits (exact for fp32).
Run with a python3 that has torch:
    python3 tests/data/make_linear_golden.py [OUT]
"""
import os
import sys

import torch
import torch.nn.functional as F

# In the order of oclml_activation.
ACTS = [
    ("none", lambda z: z),
    ("relu", F.relu),
    ("gelu_erf", F.gelu),
    ("gelu_tanh", lambda z: F.gelu(z, approximate="tanh")),
    ("silu", F.silu),
    ("tanh", torch.tanh),
    ("sigmoid", torch.sigmoid),
]
ROWS, IN, OUT = 3, 5, 4


def dump(f, name, t):
    v = t.detach().reshape(-1).tolist()
    f.write(f"{name} {len(v)} " + " ".join(f"{x:.9g}" for x in v) + "\n")


def main():
    torch.manual_seed(20261123)
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "linear_golden.txt")
    with open(out, "w") as f:
        f.write(f"# torch {torch.__version__} nn.Linear golden vectors (make_linear_golden.py)\n")
        for act, (name, fn) in enumerate(ACTS):
            lin = torch.nn.Linear(IN, OUT).float()
            x = torch.randn(ROWS, IN, requires_grad=True)
            dy = torch.randn(ROWS, OUT)
            y = fn(lin(x))
            y.backward(dy)
            f.write(f"case {act} {name} {ROWS} {IN} {OUT}\n")
            dump(f, "x", x)
            dump(f, "w", lin.weight)
            dump(f, "b", lin.bias)
            dump(f, "dy", dy)
            dump(f, "y", y)
            dump(f, "dx", x.grad)
            dump(f, "dw", lin.weight.grad)
            dump(f, "db", lin.bias.grad)


if __name__ == "__main__":
    main()
