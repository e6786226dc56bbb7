#!/usr/bin/env python3
"""Golden steps for liboclml's optimizers, made with torch.optim (and timm's LaProp formulas).

Writes optim_golden.txt beside this script (or to the path given as the first argument): a
header comment, then per case a line
    case NAME KIND lr momentum dampening nesterov beta1 beta2 eps weight_decay amsgrad maximize
         max_grad_norm steps ntensors
(KIND is the oclml_optim_kind value: 0 SGD, 1 Adam, 2 AdamW, 3 LaProp), a line
"shapes ndim d0 .. ndim d0 .." and lines "name count v v v ..." for p0 (every tensor's initial
values, concatenated), then per step g (the gradients given to that step) and p (the
parameters after it). Each step is torch.nn.utils.clip_grad_norm_ (when max_grad_norm > 0) and
optimizer.step(). Computed in float64 on the CPU from fp32-representable inputs, so the file
holds torch.optim's formulas with no fp32 rounding; printed with 17 significant digits.
Run with a python3 that has torch:
    python3 tests/data/make_optim_golden.py [OUT]
"""
import os
import sys

import torch

SHAPES = [(3, 5), (7,), (1,), (2, 3, 2)]
STEPS = 3

# name, kind, lr, momentum, dampening, nesterov, betas, eps, weight_decay, amsgrad, maximize,
# max_grad_norm
CASES = [
    ("sgd", 0, 0.1, 0.0, 0.0, 0, (0.9, 0.999), 1e-8, 0.0, 0, 0, 0.0),
    ("sgd_momentum_dampening", 0, 0.1, 0.9, 0.1, 0, (0.9, 0.999), 1e-8, 0.0, 0, 0, 0.0),
    ("sgd_nesterov_wd", 0, 0.05, 0.8, 0.0, 1, (0.9, 0.999), 1e-8, 0.01, 0, 0, 0.0),
    ("sgd_maximize_wd", 0, 0.1, 0.5, 0.0, 0, (0.9, 0.999), 1e-8, 0.1, 0, 1, 0.0),
    ("adam", 1, 0.01, 0.0, 0.0, 0, (0.9, 0.999), 1e-8, 0.0, 0, 0, 0.0),
    ("adam_wd_amsgrad", 1, 0.01, 0.0, 0.0, 0, (0.8, 0.99), 1e-6, 0.1, 1, 0, 0.0),
    ("adam_maximize", 1, 0.02, 0.0, 0.0, 0, (0.9, 0.999), 1e-8, 0.0, 0, 1, 0.0),
    ("adamw", 2, 0.01, 0.0, 0.0, 0, (0.9, 0.999), 1e-8, 0.1, 0, 0, 0.0),
    ("adamw_amsgrad_clip", 2, 0.01, 0.0, 0.0, 0, (0.9, 0.95), 1e-8, 0.05, 1, 0, 0.5),
    ("sgd_momentum_clip", 0, 0.1, 0.9, 0.0, 0, (0.9, 0.999), 1e-8, 0.0, 0, 0, 1.0),
    ("laprop", 3, 0.01, 0.0, 0.0, 0, (0.9, 0.999), 1e-15, 0.0, 0, 0, 0.0),
    ("laprop_wd", 3, 0.02, 0.0, 0.0, 0, (0.8, 0.99), 1e-8, 0.1, 0, 0, 0.0),
]


class LaProp(torch.optim.Optimizer):
    """timm's LaProp (timm/optim/laprop.py, without caution), as liboclml implements it."""

    def __init__(self, params, lr, betas, eps, weight_decay):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                grad = p.grad
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_lr_1"] = 0.0
                    state["exp_avg_lr_2"] = 0.0
                    state["exp_avg_sq"] = torch.zeros_like(p)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                beta1, beta2 = group["betas"]
                state["step"] += 1
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                state["exp_avg_lr_1"] = state["exp_avg_lr_1"] * beta1 + (1 - beta1) * group["lr"]
                state["exp_avg_lr_2"] = state["exp_avg_lr_2"] * beta2 + (1 - beta2)
                bias_correction1 = state["exp_avg_lr_1"] / group["lr"] if group["lr"] != 0.0 else 1.0
                bias_correction2 = state["exp_avg_lr_2"]
                step_size = 1 / bias_correction1
                denom = exp_avg_sq.div(bias_correction2).sqrt_().add_(group["eps"])
                exp_avg.mul_(beta1).add_(grad / denom, alpha=group["lr"] * (1 - beta1))
                p.add_(exp_avg, alpha=-step_size)
                if group["weight_decay"] != 0:
                    p.add_(p, alpha=-(group["lr"] * group["weight_decay"]))


def f32(x):
    """x rounded to fp32 and back: the hyper-parameters liboclml sees."""
    return float(torch.tensor(x, dtype=torch.float32).item())


def dump(f, name, ts):
    v = torch.cat([t.detach().reshape(-1) for t in ts]).tolist()
    f.write(f"{name} {len(v)} " + " ".join(f"{x:.17g}" for x in v) + "\n")


def make(case):
    name, kind, lr, mom, damp, nest, betas, eps, wd, ams, maxi, clip = case
    lr, mom, damp, eps, wd, clip = map(f32, (lr, mom, damp, eps, wd, clip))
    betas = tuple(map(f32, betas))
    ps = [torch.nn.Parameter(torch.randn(s).float().double()) for s in SHAPES]
    if kind == 0:
        opt = torch.optim.SGD(ps, lr=lr, momentum=mom, dampening=damp, nesterov=bool(nest),
                              weight_decay=wd, maximize=bool(maxi))
    elif kind in (1, 2):
        cls = torch.optim.Adam if kind == 1 else torch.optim.AdamW
        opt = cls(ps, lr=lr, betas=betas, eps=eps, weight_decay=wd, amsgrad=bool(ams),
                  maximize=bool(maxi), foreach=False)
    else:
        opt = LaProp(ps, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    return name, kind, (lr, mom, damp, nest, betas, eps, wd, ams, maxi, clip), ps, opt


def main():
    torch.manual_seed(20261123)
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "optim_golden.txt")
    with open(out, "w") as f:
        f.write(f"# torch {torch.__version__} torch.optim golden steps (make_optim_golden.py)\n")
        for case in CASES:
            name, kind, hp, ps, opt = make(case)
            lr, mom, damp, nest, betas, eps, wd, ams, maxi, clip = hp
            f.write(f"case {name} {kind} {lr:.17g} {mom:.17g} {damp:.17g} {nest} {betas[0]:.17g} "
                    f"{betas[1]:.17g} {eps:.17g} {wd:.17g} {ams} {maxi} {clip:.17g} {STEPS} "
                    f"{len(SHAPES)}\n")
            f.write("shapes " + " ".join(f"{len(s)} " + " ".join(map(str, s)) for s in SHAPES)
                    + "\n")
            dump(f, "p0", ps)
            for _ in range(STEPS):
                for p in ps:
                    p.grad = torch.randn(p.shape).float().double()
                dump(f, "g", [p.grad for p in ps])
                if clip > 0:
                    torch.nn.utils.clip_grad_norm_(ps, clip)
                opt.step()
                dump(f, "p", ps)


if __name__ == "__main__":
    main()
