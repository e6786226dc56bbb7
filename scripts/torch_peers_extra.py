#!/usr/bin/env python3
"""PyTorch peers for benchmark shapes that the shared peer script (torch_peers.py) lacks.

It prints JSON lines in that script's format (spec/BENCH.md), so that they join with
`oclml-bench --json` line by line. It runs on the GPU machine, after the shared peer:

    python3 scripts/torch_peers_extra.py --only attention,attention_bwd >> peer.jsonl

Groups:
  attention      SDPA forward, fp32 with TF32 off, at head dim 256 (B4 H16 L2048, causal and not)
  attention_bwd  forward and backward through autograd on the same shapes
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


GROUPS = {"attention": attention, "attention_bwd": attention_bwd}

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(GROUPS), help="comma-separated groups")
    for name in ap.parse_args().only.split(","):
        if name in GROUPS:
            GROUPS[name]()
