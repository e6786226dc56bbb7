#!/usr/bin/env python3
"""Golden vectors for liboclml's losses, made with torch.nn.functional and autograd.

Writes loss_golden.txt beside this script (or to the path given as the first argument): a header
comment, then per case a line "case NAME REDUCTION ROWS COLS EPS DELTA" and lines
"name count v v v ..." for x (the logits or input), t (class indices as floats, probabilities,
targets, or q's logits for kl), w (the class weights of xent_*_w), pw (bce_pw only), dloss (the upstream gradient: one value for
mean and sum, the loss's shape for none), loss, dx (the gradient of x) and dq (kl only: the
gradient of q's logits). Cases, each for reduction mean, sum and none:
  xent_idx   F.cross_entropy on class indices, ignore_index=-100 (row 1 ignored),
             label_smoothing EPS
  xent_prob  F.cross_entropy on class probabilities, label_smoothing EPS
  xent_idx_w, xent_prob_w  the same with class weights (weight=, written as "w" after t)
  mse        F.mse_loss
  huber      F.huber_loss(delta=DELTA)
  bce        F.binary_cross_entropy_with_logits
  bce_pw     the same with pos_weight (one per column)
  kl         KL(softmax(x) || softmax(q)) per row: F.kl_div(log_softmax(q), log_softmax(x),
             log_target=True, reduction="none").sum(-1), then mean or sum over the rows
fp32 on the CPU; printed with 9 significant digits (exact for fp32).
Run with a python3 that has torch:
    python3 tests/data/make_loss_golden.py [OUT]
"""
import os
import sys

import torch
import torch.nn.functional as F

ROWS, COLS = 5, 7
EPS, DELTA = 0.1, 0.7


def dump(f, name, t):
    v = t.detach().reshape(-1).tolist()
    f.write(f"{name} {len(v)} " + " ".join(f"{x:.9g}" for x in v) + "\n")


def reduce_rows(per_row, red):
    return per_row.mean() if red == "mean" else per_row.sum() if red == "sum" else per_row


def case(f, name, red, fn, x, t, pw=None, q=None, w=None):
    x = x.clone().requires_grad_(True)
    if q is not None:
        q = q.clone().requires_grad_(True)
    loss = fn(x, t if q is None else q)
    dloss = torch.rand(loss.shape) + 0.5
    loss.backward(dloss)
    f.write(f"case {name} {red} {ROWS} {COLS} {EPS} {DELTA}\n")
    dump(f, "x", x)
    dump(f, "t", t if q is None else q)
    if w is not None:
        dump(f, "w", w)
    if pw is not None:
        dump(f, "pw", pw)
    dump(f, "dloss", dloss)
    dump(f, "loss", loss)
    dump(f, "dx", x.grad)
    if q is not None:
        dump(f, "dq", q.grad)


def main():
    torch.manual_seed(20261123)
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "loss_golden.txt")
    with open(out, "w") as f:
        f.write(f"# torch {torch.__version__} loss golden vectors (make_loss_golden.py)\n")
        for red in ("mean", "sum", "none"):
            x = torch.randn(ROWS, COLS) * 2
            idx = torch.randint(0, COLS, (ROWS,))
            idx[1] = -100
            case(f, "xent_idx", red,
                 lambda a, t: F.cross_entropy(a, t.long(), ignore_index=-100, reduction=red,
                                              label_smoothing=EPS),
                 x, idx.float())
            probs = torch.softmax(torch.randn(ROWS, COLS), -1)
            case(f, "xent_prob", red,
                 lambda a, t: F.cross_entropy(a, t, reduction=red, label_smoothing=EPS), x, probs)
            cw = torch.rand(COLS) * 2 + 0.2
            case(f, "xent_idx_w", red,
                 lambda a, t: F.cross_entropy(a, t.long(), weight=cw, ignore_index=-100,
                                              reduction=red, label_smoothing=EPS),
                 x, idx.float(), w=cw)
            case(f, "xent_prob_w", red,
                 lambda a, t: F.cross_entropy(a, t, weight=cw, reduction=red,
                                              label_smoothing=EPS), x, probs, w=cw)
            y = torch.randn(ROWS, COLS)
            case(f, "mse", red, lambda a, t: F.mse_loss(a, t, reduction=red), x, y)
            case(f, "huber", red, lambda a, t: F.huber_loss(a, t, reduction=red, delta=DELTA), x, y)
            b = torch.rand(ROWS, COLS)
            case(f, "bce", red,
                 lambda a, t: F.binary_cross_entropy_with_logits(a, t, reduction=red), x, b)
            pw = torch.rand(COLS) * 3 + 0.2
            case(f, "bce_pw", red,
                 lambda a, t: F.binary_cross_entropy_with_logits(a, t, reduction=red,
                                                                 pos_weight=pw), x, b, pw=pw)
            q = torch.randn(ROWS, COLS) * 2
            case(f, "kl", red,
                 lambda a, qq: reduce_rows(
                     F.kl_div(F.log_softmax(qq, -1), F.log_softmax(a, -1), log_target=True,
                              reduction="none").sum(-1), red),
                 x, None, q=q)


if __name__ == "__main__":
    main()
