#!/usr/bin/env python3
"""Golden vectors for liboclml's GRU step, made with torch.nn.GRUCell (Debian's python3-torch).

Writes gru_golden.txt beside this script: per case a header line "case B I D bias", then lines
"name count v v v ..." for x, h, w_ih, w_hh, b_ih, b_hh (omitted when bias is 0) and h_new, the
GRUCell output. Values are printed with 9 significant digits (exact for fp32).
Run with the python3 that has torch (Debian: /usr/bin/python3 after apt-get install python3-torch):
    /usr/bin/python3 tests/data/make_gru_golden.py
"""
import os
import torch

CASES = [(1, 5, 7, 1), (3, 16, 33, 1), (4, 64, 96, 1), (2, 9, 1, 0), (5, 1, 40, 1), (40, 12, 20, 1)]


def dump(f, name, t):
    v = t.detach().reshape(-1).tolist()
    f.write(f"{name} {len(v)} " + " ".join(f"{x:.9g}" for x in v) + "\n")


def main():
    torch.manual_seed(20261122)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gru_golden.txt")
    with open(out, "w") as f:
        f.write(f"# torch {torch.__version__} GRUCell golden vectors (make_gru_golden.py)\n")
        for B, I, D, bias in CASES:
            cell = torch.nn.GRUCell(I, D, bias=bool(bias)).float()
            x = torch.randn(B, I)
            h = torch.randn(B, D)
            with torch.no_grad():
                y = cell(x, h)
            f.write(f"case {B} {I} {D} {bias}\n")
            dump(f, "x", x)
            dump(f, "h", h)
            dump(f, "w_ih", cell.weight_ih)
            dump(f, "w_hh", cell.weight_hh)
            if bias:
                dump(f, "b_ih", cell.bias_ih)
                dump(f, "b_hh", cell.bias_hh)
            dump(f, "h_new", y)


if __name__ == "__main__":
    main()
