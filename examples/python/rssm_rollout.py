#!/usr/bin/env python3
"""examples/rssm_rollout in Python: an RSSM ensemble (RSSM.md) with random weights imagines a
trajectory in one call; prints the ensemble's mean prediction and its spread per step and each
member's metrics, and with --plot FILE draws every member's trajectory and the mean +- std band
(matplotlib, where installed).
    usage: rssm_rollout.py [--members E] [--steps T] [--plot FILE]
"""

import argparse

import numpy as np

import oclml


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--plot")
    a = ap.parse_args()
    E, D, G, C, F, K, T = a.members, 64, 8, 8, 16, 4, a.steps
    S = G * C
    rng = np.random.default_rng(42)
    shapes = {"w_ih": ((E, 3 * D, F + S), 0.11), "w_hh": ((E, 3 * D, D), 0.125),
              "b_ih": ((E, 3 * D), 0.125), "b_hh": ((E, 3 * D), 0.125),
              "w_p": ((E, S, D), 0.25), "b_p": ((E, S), 0.5), "w_y": ((E, D + S), 0.09),
              "b_y": ((E,), 0.5)}
    with oclml.Context() as ctx:
        weights = {k: ctx.tensor(rng.uniform(-1, 1, s) * scale)
                   for k, (s, scale) in shapes.items()}
        start = {"h": ctx.zeros((E, D)), "z": ctx.zeros((E, S)), "f": ctx.zeros((E, F))}
        out = {"y": ctx.empty((E, T)), "y_mean": ctx.empty((T,)), "y_std": ctx.empty((T,)),
               "variance": ctx.empty((E,)), "smoothness": ctx.empty((E,)),
               "total_entropy": ctx.empty((E,))}
        oclml.rssm_rollout(weights, start, out, steps=T, groups=G, classes=C, feedback=K)
        y, mean, std = out["y"].numpy(), out["y_mean"].numpy(), out["y_std"].numpy()
        print("RSSM ensemble of %d members, D %d, %dx%d latent, %d steps on %s\n" %
              (E, D, G, C, T, ctx.device_info["device_name"]))
        print(" step   mean y   +- std")
        for t in range(T):
            print(" %4d %8.4f %8.4f" % (t + 1, mean[t], std[t]))
        print("\n member  variance  smoothness  total entropy")
        v, sm, te = (out[k].numpy() for k in ("variance", "smoothness", "total_entropy"))
        for e in range(E):
            print(" %6d %9.5f %11.5f %14.3f" % (e, v[e], sm[e], te[e]))
        if a.plot:
            try:
                import matplotlib

                matplotlib.use("Agg")
                import matplotlib.pyplot as plt
            except ImportError:
                print("matplotlib is not installed: no plot")
                return 0
            steps = np.arange(1, T + 1)
            for e in range(E):
                plt.plot(steps, y[e], lw=1, alpha=0.7, label="member %d" % e)
            plt.fill_between(steps, mean - std, mean + std, alpha=0.2, label="mean +- std")
            plt.plot(steps, mean, "k", lw=2, label="mean")
            plt.xlabel("step")
            plt.ylabel("prediction y")
            plt.legend(fontsize=7)
            plt.savefig(a.plot, dpi=120)
            print("plot: %s" % a.plot)
        return 0 if np.isfinite(y).all() else 1


if __name__ == "__main__":
    raise SystemExit(main())
