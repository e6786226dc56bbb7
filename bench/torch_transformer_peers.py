#!/usr/bin/env python3
"""PyTorch's times for the transformer ops liboclml added beside GPT-2 (the shared torch_peers.py
has none): embedding lookup and its backward, dropout, its backward and the residual add with
dropout, and the residual add followed by layer_norm with its backward, on the shapes and op
names oclml-bench reports (elementwise, layout and norm suites), as JSON lines in BENCH.md's
format. fp32, TF32 off, CUDA events, median of 20 after 3 warm-up runs.

    python3 bench/torch_transformer_peers.py > peers.jsonl
"""
import json
import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
DEV = "cuda"


def timed(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2], ts[0], ts[-1]


def emit(op, shape, t, nbytes):
    med, lo, hi = t
    print(json.dumps({"op": op, "shape": shape, "impl": "torch",
                      "device": torch.cuda.get_device_name(), "median_ms": round(med, 5),
                      "min_ms": round(lo, 5), "max_ms": round(hi, 5),
                      "gbps": round(nbytes / (med * 1e-3) / 1e9, 1)}), flush=True)


def embedding(N=8192, V=50257, D=768):
    shape = f"gpt2 N{N} V{V} D{D}"
    ids = torch.randint(0, V, (N,), device=DEV)
    table = torch.randn(V, D, device=DEV)
    dy = torch.randn(N, D, device=DEV)
    emit("embedding", shape, timed(lambda: F.embedding(ids, table)), 4 * N + 8 * N * D)
    # the backward PyTorch runs (embedding_dense_backward: sort, then segment sums), into a
    # fresh gradient, and added to an existing one as autograd accumulates a tied weight's
    grad = torch.ops.aten.embedding_dense_backward
    emit("embedding_bwd", shape, timed(lambda: grad(dy, ids, V, -1, False)),
         4 * N + 4 * N * D + 4 * V * D)
    acc = torch.randn(V, D, device=DEV)
    emit("embedding_bwd_acc", shape, timed(lambda: acc.add_(grad(dy, ids, V, -1, False))),
         4 * N + 4 * N * D + 8 * V * D)


def dropout():
    for n, shape in ((16 << 20, str(16 << 20)), (8192 * 768, "8192x768")):
        x = torch.randn(n, device=DEV)
        y = torch.randn(n, device=DEV)
        emit("dropout", shape, timed(lambda: F.dropout(x, 0.1, True)), 8 * n)
        # the backward multiplies by the mask the forward kept (native_dropout's)
        out, mask = torch.ops.aten.native_dropout(x, 0.1, True)
        emit("dropout_bwd", shape,
             timed(lambda: torch.ops.aten.native_dropout_backward(y, mask, 1 / 0.9)), 8 * n)
        emit("dropout_add", shape, timed(lambda: x + F.dropout(y, 0.1, True)), 12 * n)


def residual_layernorm(shapes=((8192, 768), (4096, 1024), (16384, 8192))):
    for rows, cols in shapes:
        shape = f"{rows}x{cols}"
        x = torch.randn(rows, cols, device=DEV)
        y = torch.randn(rows, cols, device=DEV)
        g = torch.randn(cols, device=DEV)
        b = torch.randn(cols, device=DEV)
        n = rows * cols

        def fwd():
            r = x + y
            return r, F.layer_norm(r, (cols,), g, b, 1e-5)

        emit("residual_layernorm", shape, timed(fwd), 16 * n)
        r = (x + y).requires_grad_()
        gg = g.clone().requires_grad_()
        bb = b.clone().requires_grad_()
        out = F.layer_norm(r, (cols,), gg, bb, 1e-5)
        dout = torch.randn_like(out)
        dr = torch.randn_like(out)

        def bwd():
            dx, dg, db = torch.autograd.grad(out, (r, gg, bb), dout, retain_graph=True)
            return dx + dr, dg, db  # the stream's gradient added, as autograd accumulates it

        emit("residual_layernorm_bwd", shape, timed(bwd), 16 * n)


if __name__ == "__main__":
    embedding()
    dropout()
    residual_layernorm()
