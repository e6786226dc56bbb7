"""The CPU peer: PyTorch on the CPU, for oclml-bench on a CPU device (PoCL), the same op names and
shapes, one JSON line per result in spec/BENCH.md's format ("impl": "torch", "device": the CPU).

    python3 scripts/torch_peers_cpu.py [--threads N] [--only rows,elementwise,gemm]
        [--sizes 4096x1024,256x1024] [--elements 16777216,4194304]
        [--products 1x4096x4096] > peers.jsonl

rows: row ops as oclml-bench's softmax and norm suites name them: softmax, log_softmax,
softmax_bwd, layernorm, rmsnorm, layernorm_bwd, rmsnorm_bwd (the backwards with the parameter
gradients, as autograd runs them) at --sizes (default: the issue's 4096 x 1024 and the bench's
quick shapes, 256 x 1024 and 64 x 40000).
elementwise: as oclml-bench's elementwise and copy suites name them, at --elements (default: the
issue's 16M and the bench's quick 4M): copy, add, bias_add (rows of 1024), gelu (tanh), gelu_bwd,
relu, silu_bwd, sum, max; dropout, dropout_bwd (the stored mask, as PyTorch's backward reads it)
and dropout_add at p 0.1.
gemm: C = A B in fp32 (no transposes, as oclml-bench's gemm suite) at --products M x N x K
(default: 1024^3, a GEMV 1 x 4096 x 4096 and 64 x 4096 x 4096), with GFLOP/s.
Timed by wall clock, the median of the repetitions.
"""
import argparse, json, os, platform, time
import torch
import torch.nn.functional as F


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def bench(fn, reps=30, warm=5):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    return ts[len(ts) // 2], ts[0], ts[-1]


def emit(op, shape, t, amount, rate="gbps"):
    """One result line; amount: the bytes moved (gbps) or the flops done (gflops)."""
    med, lo, hi = t
    print(json.dumps({"op": op, "shape": shape, "impl": "torch", "device": DEVICE,
                      "threads": torch.get_num_threads(), "median_ms": round(med, 5),
                      "min_ms": round(lo, 5), "max_ms": round(hi, 5),
                      rate: round(amount / (med * 1e-3) / 1e9, 1)}), flush=True)


def gemm(m, n, k):
    a, b = torch.randn(m, k), torch.randn(k, n)
    c = torch.empty(m, n)
    emit("gemm", f"{m}x{n}x{k}", bench(lambda: torch.mm(a, b, out=c)), 2 * m * n * k, "gflops")


def rows(r, c):
    shape = f"{r}x{c}"
    x = torch.randn(r, c)
    y = torch.empty_like(x)
    emit("softmax", shape, bench(lambda: torch.softmax(x, -1, out=y)), 8 * r * c)
    emit("log_softmax", shape, bench(lambda: torch.log_softmax(x, -1, out=y)), 8 * r * c)
    p = torch.softmax(x, -1)
    dy = torch.randn_like(x)
    emit("softmax_bwd", shape,
         bench(lambda: torch.ops.aten._softmax_backward_data(dy, p, -1, torch.float32)), 12 * r * c)
    w = torch.randn(c)
    b = torch.randn(c)
    emit("layernorm", shape, bench(lambda: F.layer_norm(x, (c,), w, b, 1e-5)), 8 * r * c)
    emit("rmsnorm", shape, bench(lambda: F.rms_norm(x, (c,), w, 1e-5)), 8 * r * c)
    mean = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
    emit("layernorm_bwd", shape, bench(lambda: torch.ops.aten.native_layer_norm_backward(
        dy, x, (c,), mean, rstd, w, b, [True, True, True])), 12 * r * c)
    xr = x.clone().requires_grad_(True)
    wr = w.clone().requires_grad_(True)
    out = F.rms_norm(xr, (c,), wr, 1e-5)
    emit("rmsnorm_bwd", shape,
         bench(lambda: torch.autograd.grad(out, (xr, wr), dy, retain_graph=True)), 12 * r * c)


def elementwise(n):
    shape = f"{n}"
    a = torch.randn(n) * 4
    b = torch.randn(n)
    y = torch.empty_like(a)
    emit("copy", shape, bench(lambda: y.copy_(a)), 8 * n)
    emit("add", shape, bench(lambda: torch.add(a, b, out=y)), 12 * n)
    a2, y2, bias = a.view(-1, 1024), y.view(-1, 1024), torch.randn(1024)
    emit("bias_add", shape, bench(lambda: torch.add(a2, bias, out=y2)), 8 * n)
    emit("gelu", shape, bench(lambda: F.gelu(a, approximate="tanh")), 8 * n)
    emit("gelu_bwd", shape,
         bench(lambda: torch.ops.aten.gelu_backward(b, a, approximate="tanh")), 12 * n)
    emit("relu", shape, bench(lambda: torch.relu(a)), 8 * n)
    emit("silu_bwd", shape, bench(lambda: torch.ops.aten.silu_backward(b, a)), 12 * n)
    emit("sum", shape, bench(lambda: a.sum()), 4 * n)
    emit("max", shape, bench(lambda: a.max()), 4 * n)
    emit("dropout", shape, bench(lambda: torch.ops.aten.native_dropout(a, 0.1, True)), 8 * n)
    _, mask = torch.ops.aten.native_dropout(a, 0.1, True)
    emit("dropout_bwd", shape,
         bench(lambda: torch.ops.aten.native_dropout_backward(b, mask, 1 / 0.9)), 9 * n)
    emit("dropout_add", shape, bench(lambda: a + F.dropout(b, 0.1, True)), 12 * n)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--only", default="rows,elementwise")
    ap.add_argument("--sizes", default="4096x1024,256x1024,64x40000")
    ap.add_argument("--elements", default="16777216,4194304")
    ap.add_argument("--products", default="1024x1024x1024,1x4096x4096,64x4096x4096")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    DEVICE = cpu_name()
    groups = a.only.split(",")
    for s in a.sizes.split(",") if "rows" in groups else []:
        r, c = (int(v) for v in s.split("x"))
        rows(r, c)
    for s in a.elements.split(",") if "elementwise" in groups else []:
        elementwise(int(s))
    for s in a.products.split(",") if "gemm" in groups else []:
        gemm(*(int(v) for v in s.split("x")))
