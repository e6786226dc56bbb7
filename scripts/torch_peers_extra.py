#!/usr/bin/env python3
"""PyTorch peers for benchmark shapes that the shared peer script (torch_peers.py) lacks.

It prints JSON lines in that script's format (spec/BENCH.md), so that they join with
`oclml-bench --json` line by line. It runs on the GPU machine, after the shared peer:

    python3 scripts/torch_peers_extra.py --only attention,attention_bwd >> peer.jsonl

Groups:
  attention      SDPA forward, fp32 with TF32 off, at head dim 256 (B4 H16 L2048, causal and not)
  attention_bwd  forward and backward through autograd on the same shapes
  embedding      F.embedding and its backward (the sorted one autograd runs), fresh and added
                 to a tied weight's gradient, at GPT-2's 8192 tokens x 50257 x 768
  dropout        F.dropout at p 0.1, its backward (the stored mask), x + dropout(y): 16M and
                 8192 x 768 elements
  residual_layernorm  x + y then F.layer_norm, and its backward with the stream's gradient added
                 (GPT-2's pre-norm block), at 8192 x 768, 4096 x 1024, 16384 x 8192
The names and shapes are oclml-bench's (elementwise, layout and norm suites).
"""
import argparse
import json

import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
DEV = "cuda"
ATTN_SHAPES = ((4, 16, 16, 2048, 2048, 256),)  # B, query heads, key/value heads, Lq, Lk, head dim


def bench(fn, reps=50, warm=10):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2], ts[0], ts[-1]


def emit(op, shape, t, flops):
    med, lo, hi = t
    rec = {"op": op, "shape": shape, "impl": "torch", "device": torch.cuda.get_device_name(),
           "median_ms": round(med, 5), "min_ms": round(lo, 5), "max_ms": round(hi, 5),
           "gflops": round(flops / (med * 1e-3) / 1e9, 1)}
    print(json.dumps(rec), flush=True)


def emit_bytes(op, shape, t, nbytes):
    med, lo, hi = t
    rec = {"op": op, "shape": shape, "impl": "torch", "device": torch.cuda.get_device_name(),
           "median_ms": round(med, 5), "min_ms": round(lo, 5), "max_ms": round(hi, 5),
           "gbps": round(nbytes / (med * 1e-3) / 1e9, 1)}
    print(json.dumps(rec), flush=True)


def attn_flops(B, H, Lq, Lk, Dh, causal):
    return 4 * B * H * Lq * Lk * Dh / (2 if causal else 1)


def shape_name(B, H, Hkv, Lq, Dh, causal):
    return f"B{B},H{H},Hkv{Hkv},L{Lq},D{Dh},causal={int(causal)}"


def attention():
    for B, H, Hkv, Lq, Lk, Dh in ATTN_SHAPES:
        q = torch.randn(B, H, Lq, Dh, device=DEV)
        k = torch.randn(B, Hkv, Lk, Dh, device=DEV)
        v = torch.randn_like(k)
        for causal in (True, False):
            t = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                             enable_gqa=Hkv != H))
            emit("attention", shape_name(B, H, Hkv, Lq, Dh, causal), t,
                 attn_flops(B, H, Lq, Lk, Dh, causal))


def attention_bwd():
    """Forward + backward through autograd (counted as 3.5 times the forward, as PyTorch does)."""
    for B, H, Hkv, Lq, Lk, Dh in ATTN_SHAPES:
        q = torch.randn(B, H, Lq, Dh, device=DEV, requires_grad=True)
        k = torch.randn(B, Hkv, Lk, Dh, device=DEV, requires_grad=True)
        v = torch.randn(B, Hkv, Lk, Dh, device=DEV, requires_grad=True)
        do = torch.randn(B, H, Lq, Dh, device=DEV)
        for causal in (True, False):
            def step():
                F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                               enable_gqa=Hkv != H).backward(do)
            emit("attention_fwd_bwd", shape_name(B, H, Hkv, Lq, Dh, causal), bench(step, reps=20),
                 3.5 * attn_flops(B, H, Lq, Lk, Dh, causal))


def attention_dropout(B=8, H=12, L=1024, Dh=64, p=0.1):
    """SDPA with dropout on the probabilities at GPT-2 small's attention, causal."""
    q = torch.randn(B, H, L, Dh, device=DEV, requires_grad=True)
    k = torch.randn(B, H, L, Dh, device=DEV, requires_grad=True)
    v = torch.randn(B, H, L, Dh, device=DEV, requires_grad=True)
    do = torch.randn(B, H, L, Dh, device=DEV)
    shape = shape_name(B, H, H, L, Dh, True)
    flops = attn_flops(B, H, L, L, Dh, True)
    with torch.no_grad():
        emit("attention_dropout", shape,
             bench(lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)),
             flops)

    def step():
        F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True).backward(do)
    emit("attention_dropout_fwd_bwd", shape, bench(step, reps=20), 3.5 * flops)


def linear_dropout(shapes=((8192, 1024, 4096), (8192, 4096, 1024)), p=0.1):
    """F.dropout(F.gelu(F.linear(x, w, b)), p): forward, and forward + backward (dx, dw, db)."""
    for M, K, N in shapes:
        x = torch.rand(M, K, device=DEV) * 2 - 1
        w = ((torch.rand(N, K, device=DEV) * 2 - 1) / K ** 0.5).requires_grad_()
        b = ((torch.rand(N, device=DEV) * 2 - 1) / K ** 0.5).requires_grad_()
        x.requires_grad_()
        dy = torch.rand(M, N, device=DEV) * 2 - 1
        shape = f"M{M},in{K},out{N},gelu,dropout={p}"
        with torch.no_grad():
            emit("linear_dropout", shape,
                 bench(lambda: F.dropout(F.gelu(F.linear(x, w, b)), p)), 2 * M * N * K)

        def step():
            F.dropout(F.gelu(F.linear(x, w, b)), p).backward(dy)
        emit("linear_dropout_fwd_bwd", shape, bench(step, reps=20), 6 * M * N * K)


def embedding(N=8192, V=50257, D=768):
    shape = f"gpt2 N{N} V{V} D{D}"
    ids = torch.randint(0, V, (N,), device=DEV)
    table = torch.randn(V, D, device=DEV)
    dy = torch.randn(N, D, device=DEV)
    emit_bytes("embedding", shape, bench(lambda: F.embedding(ids, table)), 4 * N + 8 * N * D)
    # the backward PyTorch runs (embedding_dense_backward: sort, then segment sums), into a
    # fresh gradient, and added to an existing one as autograd accumulates a tied weight's
    grad = torch.ops.aten.embedding_dense_backward
    emit_bytes("embedding_bwd", shape, bench(lambda: grad(dy, ids, V, -1, False)),
         4 * N + 4 * N * D + 4 * V * D)
    acc = torch.randn(V, D, device=DEV)
    emit_bytes("embedding_bwd_acc", shape, bench(lambda: acc.add_(grad(dy, ids, V, -1, False))),
         4 * N + 4 * N * D + 8 * V * D)


def dropout():
    for n, shape in ((16 << 20, str(16 << 20)), (8192 * 768, "8192x768")):
        x = torch.randn(n, device=DEV)
        y = torch.randn(n, device=DEV)
        emit_bytes("dropout", shape, bench(lambda: F.dropout(x, 0.1, True)), 8 * n)
        # the backward multiplies by the mask the forward kept (native_dropout's)
        out, mask = torch.ops.aten.native_dropout(x, 0.1, True)
        emit_bytes("dropout_bwd", shape,
             bench(lambda: torch.ops.aten.native_dropout_backward(y, mask, 1 / 0.9)), 8 * n)
        emit_bytes("dropout_add", shape, bench(lambda: x + F.dropout(y, 0.1, True)), 12 * n)


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

        emit_bytes("residual_layernorm", shape, bench(fwd), 16 * n)
        r = (x + y).requires_grad_()
        gg = g.clone().requires_grad_()
        bb = b.clone().requires_grad_()
        out = F.layer_norm(r, (cols,), gg, bb, 1e-5)
        dout = torch.randn_like(out)
        dr = torch.randn_like(out)

        def bwd():
            dx, dg, db = torch.autograd.grad(out, (r, gg, bb), dout, retain_graph=True)
            return dx + dr, dg, db  # the stream's gradient added, as autograd accumulates it

        emit_bytes("residual_layernorm_bwd", shape, bench(bwd), 16 * n)


GROUPS = {"attention": attention, "attention_bwd": attention_bwd,
          "attention_dropout": attention_dropout, "linear_dropout": linear_dropout,
          "embedding": embedding,
          "dropout": dropout, "residual_layernorm": residual_layernorm}

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(GROUPS), help="comma-separated groups")
    for name in ap.parse_args().only.split(","):
        if name in GROUPS:
            GROUPS[name]()
