#!/usr/bin/env python3
"""Benchmark results: one JSON-lines file per (device, suite) in bench/results, ours and the
PyTorch peer from the same run side by side; markdown tables for RESULTS.md; plots.

  scripts/results.py store DEVICE OURS.jsonl [PEER.jsonl] [--coldstart FILE] [--date DATE]
      replaces bench/results/DEVICE-SUITE.jsonl for every suite the files hold
  scripts/results.py tables [DEVICE]     markdown tables of the stored files (stdout)
  scripts/results.py plots OUTDIR        one PNG per (device, suite) with gnuplot

Figures: GB/s for memory-bound ops, GFLOP/s for GEMM, microseconds for latency-bound ones (GRU
step, RSSM rollout); the limit is the copy bandwidth or the FMA rate measured in the same run.
"""
import json
import re
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")

SUITES = {
    "copy": "copy",
    "gemm": "gemm", "gemm_batched": "gemm", "linear": "linear", "linear_fwd_bwd": "linear",
    "linear_dropout": "linear", "linear_dropout_fwd_bwd": "linear",
    "conv2d": "conv", "conv2d_fwd_bwd": "conv", "conv2d_bwd_data": "conv",
    "conv2d_bwd_weight": "conv", "maxpool2d": "conv", "maxpool2d_bwd": "conv",
    "silu_maxpool2d": "conv", "silu_maxpool2d_bwd": "conv",
    "attention": "attention", "attention_fwd_bwd": "attention", "attention_decode": "attention",
    "attention_dropout": "attention", "attention_dropout_fwd_bwd": "attention",
    "train_step": "train",
    "dropout": "transformer", "dropout_bwd": "transformer", "dropout_add": "transformer",
    "embedding": "transformer", "embedding_bwd": "transformer", "embedding_bwd_acc": "transformer",
    "residual_layernorm": "transformer", "residual_layernorm_bwd": "transformer",
    "residual_layernorm_dropout": "transformer", "residual_layernorm_dropout_bwd": "transformer",
    "residual_rmsnorm": "transformer", "residual_rmsnorm_bwd": "transformer",
    "softmax": "softmax", "log_softmax": "softmax", "softmax_bwd": "softmax",
    "layernorm": "norm", "rmsnorm": "norm", "layernorm_bwd": "norm", "rmsnorm_bwd": "norm",
    "add": "elementwise", "bias_add": "elementwise", "gelu": "elementwise",
    "gelu_bwd": "elementwise", "relu": "elementwise", "silu_bwd": "elementwise",
    "sum": "elementwise", "max": "elementwise",
    "gru_step": "gru", "rssm_rollout": "rssm",
    "col_sum": "layout", "conv_bias_grad": "layout", "transpose2d": "layout",
    "nchw_to_nhwc": "layout", "nhwc_to_nchw": "layout", "add_bias_nchw": "layout",
    "adam": "optim", "adamw": "optim", "adamw_clip": "optim",
    "cross_entropy": "loss", "cross_entropy_fwd_bwd": "loss", "kl_div_logits_fwd_bwd": "loss",
    "mse_loss_fwd_bwd": "loss",
}


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def suite_of(row):
    if row.get("suite") == "coldstart":
        return "coldstart"
    # Data parallelism (oclml-bench-dp, torch_ddp.py): whatever the model's precision.
    if row["op"] in ("train_step_dp", "allreduce"):
        return "dp"
    # Mixed precision (oclml-bench bf16, torch_peers.py bf16, the bf16 training step): one
    # suite of its own, so that the fp32 suites keep their figures.
    if re.search(r"\b(bf16|fp16)\b", row.get("shape", "")):
        return "bf16"
    return SUITES.get(row["op"], "other")


def store(device, ours, peer=None, coldstart=None, date=None):
    rows = [dict(r, impl=r.get("impl", "oclml")) for r in read_lines(ours)]
    if peer:
        rows += [dict(r, impl=r.get("impl", "torch")) for r in read_lines(peer)]
    if coldstart:
        rows += read_lines(coldstart)
    if date:
        rows = [dict(r, date=r.get("date", date)) for r in rows]
    by_suite = {}
    for r in rows:
        by_suite.setdefault(suite_of(r), []).append(r)
    os.makedirs(RESULTS, exist_ok=True)
    for suite, items in sorted(by_suite.items()):
        path = os.path.join(RESULTS, "%s-%s.jsonl" % (device, suite))
        with open(path, "w") as f:
            for r in items:
                f.write(json.dumps(r, sort_keys=False) + "\n")
        print("wrote %s (%d lines)" % (os.path.relpath(path, ROOT), len(items)))


def stored():
    """{(device, suite): rows} of bench/results."""
    out = {}
    for name in sorted(os.listdir(RESULTS)):
        if name.endswith(".jsonl") and "-" in name:
            device, suite = name[:-6].rsplit("-", 1)
            out[(device, suite)] = read_lines(os.path.join(RESULTS, name))
    return out


def figure(row):
    """(value, unit, higher is better) of a result line."""
    if "gflops" in row and row["op"].startswith("gemm"):
        return row["gflops"], "GFLOP/s", True
    if "gbps" in row and row["op"] not in ("gru_step", "rssm_rollout"):
        return row["gbps"], "GB/s", True
    return row["median_ms"] * 1e3, "us", False


def limit_of(rows):
    copy = [r for r in rows if r["op"] == "copy" and r.get("impl") == "oclml"]
    return copy[0]["gbps"] if copy else None


def joined(rows):
    """[(op, shape, variant, ours, peer)] with the peer's best variant beside ours."""
    ours = [r for r in rows if r.get("impl") == "oclml"]
    peers = {}
    for r in rows:
        if r.get("impl") not in (None, "oclml"):
            key = (r["op"], r["shape"])
            best = peers.get(key)
            if best is None or r["median_ms"] < best["median_ms"]:
                peers[key] = r
    return [(r["op"], r["shape"], r.get("variant", ""), r, peers.get((r["op"], r["shape"])))
            for r in ours]


def dp_table(dev, rows):
    """Data parallelism: each model's step alone and at N ranks, ours and DDP's; the allreduce
    path's bus bandwidth."""
    print("\n### %s, dp %s\n" % (dev, rows[0].get("date", "") if rows else ""))
    print("| step | impl | wire | 1 GPU ms | GPUs | N GPUs ms | weak scaling | exposed ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["op"] != "train_step_dp" or (r["gpus"] == 1 and r.get("impl") == "oclml-mpi"):
            continue
        alone = [a for a in rows if a["op"] == r["op"] and a["shape"] == r["shape"] and
                 a["gpus"] == 1 and a.get("impl") == r.get("impl")]
        one = alone[0]["median_ms"] if alone else r["median_ms"]
        many = r["gpus"] > 1
        print("| %s | %s | %s | %.2f | %d | %s | %s | %s |" % (
            r["shape"], r.get("impl"), r.get("wire", "-"), one, r["gpus"],
            "%.2f" % r["median_ms"] if many else "-",
            "%.3f" % r["weak_scaling"] if many else "-",
            "%.1f" % r["exposed_ms"] if "exposed_ms" in r else "-"))
    ar = [r for r in rows if r["op"] == "allreduce"]
    if ar:
        print("\n| allreduce | ranks | ms | bus GB/s |")
        print("|---|---|---|---|")
        for r in ar:
            print("| %s | %d | %.2f | %.1f |" % (r["shape"], r["gpus"], r["median_ms"],
                                                 r["busbw_gbps"]))


def tables(device=None):
    for (dev, suite), rows in stored().items():
        if device and dev != device:
            continue
        if suite == "coldstart":
            # Ops re-timed after a change keep their own run's date: the header lists the runs.
            dates = sorted(set(r.get("date", "") for r in rows))
            print("\n### %s, %s %s\n" % (dev, suite, ", ".join(dates)))
            print("| op | context ms | first call, empty caches, ms | with liboclml's disk cache, ms |")
            print("|---|---|---|---|")
            for r in rows:
                disk = r.get("first_ms_disk_cache")
                print("| %s | %.0f | %.1f | %s |" % (r["op"], r["ctx_ms"], r["first_ms_cold"],
                                                     "-" if disk is None else "%.1f" % disk))
            continue
        if suite == "dp":
            dp_table(dev, rows)
            continue
        pairs = joined(rows)
        if not pairs:
            continue
        date = rows[0].get("date", "")
        print("\n### %s, %s %s\n" % (dev, suite, date))
        # Where one shape ran on several paths (GEMM: own kernels, CLBlast alone), say which.
        keys = [(op, shape) for op, shape, _, _, _ in pairs]
        paths = len(set(keys)) < len(keys)
        print("| op | shape |%s liboclml | PyTorch | ratio | of limit | max rel err |" %
              (" path |" if paths else ""))
        print("|---|---|%s---|---|---|---|---|" % ("---|" if paths else ""))
        for op, shape, variant, o, p in pairs:
            if paths:
                shape = "%s | %s" % (shape, variant.split(":")[0])
            v, unit, higher = figure(o)
            pv = figure(p)[0] if p else None
            ratio = "-" if pv is None else "%.2fx" % ((v / pv) if higher else (pv / v))
            frac = o.get("limit_fraction")
            err = o.get("max_rel_err")
            print("| %s | %s | %.1f %s | %s | %s | %s | %s |" % (
                op, shape, v, unit, "-" if pv is None else "%.1f" % pv, ratio,
                "-" if frac is None else "%.0f%%" % (100 * frac),
                "-" if err is None or err < 0 else "%.1e" % err))


def plots(outdir):
    os.makedirs(outdir, exist_ok=True)
    for (dev, suite), rows in stored().items():
        pairs = joined(rows) if suite != "coldstart" else []
        if not pairs:
            continue
        unit = figure(pairs[0][3])[1]
        limit = limit_of(stored().get((dev, "copy"), [])) if unit == "GB/s" else None
        with tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False) as dat:
            for op, shape, _, o, p in pairs:
                v = figure(o)[0]
                pv = figure(p)[0] if p else 0
                dat.write('"%s %s" %g %g\n' % (op, shape, v, pv))
        png = os.path.join(outdir, "%s-%s.png" % (dev, suite))
        script = "\n".join([
            ("set terminal pngcairo noenhanced size 1200,600 font ',10'" if has_cairo()
             else "set terminal png noenhanced size 1200,600"),
            "set output '%s'" % png,
            "set title '%s: %s, liboclml vs PyTorch (%s%s)%s'" % (
                dev, suite, unit, ", higher is better" if unit != "us" else ", lower is better",
                "; red dashes: copy bandwidth %.0f GB/s, the same run" % limit if limit else ""),
            "set style data histograms", "set style histogram cluster gap 1",
            "set style fill solid 0.8 border -1", "set boxwidth 0.9",
            "set xtics rotate by -35 left", "set bmargin 10", "set rmargin 8",
            "set key top right horizontal", "set grid ytics", "set offsets 0, 0, graph 0.15, 0",
            "set ylabel '%s'" % unit, "set yrange [0:*]",
            ("set arrow from graph 0, first %g to graph 1, first %g nohead dt 2 lw 2 lc rgb 'red'"
             % (limit, limit)) if limit else "",
            "plot '%s' using 2:xtic(1) title 'liboclml', '' using 3 title 'PyTorch'" % dat.name,
        ])
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
        os.unlink(dat.name)
        print("wrote", os.path.relpath(png, ROOT))


def has_cairo():
    out = subprocess.run(["gnuplot", "-e", "set terminal"], capture_output=True, text=True)
    return "pngcairo" in out.stdout + out.stderr


def main(argv):
    if len(argv) >= 3 and argv[0] == "store":
        opts = {}
        for flag in ("--coldstart", "--date"):
            if flag in argv:
                i = argv.index(flag)
                opts[flag] = argv[i + 1]
                argv = argv[:i] + argv[i + 2:]
        store(argv[1], argv[2], argv[3] if len(argv) > 3 else None, opts.get("--coldstart"),
              opts.get("--date"))
    elif argv and argv[0] == "tables":
        tables(argv[1] if len(argv) > 1 else None)
    elif len(argv) == 2 and argv[0] == "plots":
        plots(argv[1])
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
