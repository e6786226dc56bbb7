#!/usr/bin/env python3
"""PyTorch's loss curve for examples/train_gpt --tiny --fixed: the same GPT (separate query,
key and value projections, tied LM head, GELU-tanh MLP, pre-norm blocks), from exactly the
weights and batch the example makes (examples/train_common.h's generator, reproduced here bit
for bit, in gpt_model.c's order and scales), AdamW with weight decay on the matrices only,
betas (0.9, 0.95), clipping by the global norm at 1.0, nanoGPT's warm-up and cosine schedule,
float32 on the CPU. Writes one loss a line:

    python3 examples/train_gpt_golden.py [STEPS] > tests/data/train_gpt_golden.txt

`train_gpt --tiny --fixed --steps 20 --golden FILE` compares its curve within 1e-4 relative.
"""
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F

from train_golden import Rng

torch.backends.cuda.matmul.allow_tf32 = False

# gpt_config_tiny()
V, CONTEXT, L, H, C, B, T = 256, 32, 2, 4, 64, 4, 32
LR, MIN_LR, WARMUP, STEPS_SCHEDULE, WD, CLIP, SEED = 1e-3, 1e-4, 10, 2000, 0.1, 1.0, 2024


def params():
    rng = Rng(SEED)
    u = np.float32(0.02) * np.sqrt(np.float32(3.0))
    u_proj = u / np.sqrt(np.float32(2.0 * L))
    wte = rng.fill((V, C), u)
    wpe = rng.fill((CONTEXT, C), u)
    layers = []
    for _ in range(L):
        w = {}
        for name, shape, b in (("q", (C, C), u), ("k", (C, C), u), ("v", (C, C), u),
                               ("o", (C, C), u_proj), ("fc", (4 * C, C), u),
                               ("proj", (C, 4 * C), u_proj)):
            w["w" + name] = rng.fill(shape, b)
        layers.append(w)
    for w in layers:
        w["ln1g"], w["ln1b"] = torch.ones(C), torch.zeros(C)
        for name in ("q", "k", "v", "o"):
            w["b" + name] = torch.zeros(C)
        w["ln2g"], w["ln2b"] = torch.ones(C), torch.zeros(C)
        w["bfc"], w["bproj"] = torch.zeros(4 * C), torch.zeros(C)
    return wte, wpe, layers, torch.ones(C), torch.zeros(C)


def batch():
    """train_gpt's first batch: B sequences of T + 1 random tokens (token_below)."""
    rng = Rng(SEED + 1)
    k = []
    for _ in range(B * (T + 1)):
        rng.s = (rng.s + 0x9E3779B97F4A7C15) & ((1 << 64) - 1)
        z = rng.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
        z ^= z >> 31
        k.append(((z >> 40) * V) >> 24)
    tok = torch.tensor(k, dtype=torch.long).reshape(B, T + 1)
    return tok[:, :T], tok[:, 1:]


def forward(wte, wpe, layers, lnfg, lnfb, idx, targets):
    D = C // H
    x = wte[idx] + wpe[:T]
    for w in layers:
        h = F.layer_norm(x, (C,), w["ln1g"], w["ln1b"], 1e-5)
        q, k, v = (F.linear(h, w["w" + n], w["b" + n]).view(B, T, H, D).transpose(1, 2)
                   for n in ("q", "k", "v"))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + F.linear(y.transpose(1, 2).reshape(B, T, C), w["wo"], w["bo"])
        h = F.layer_norm(x, (C,), w["ln2g"], w["ln2b"], 1e-5)
        a = F.gelu(F.linear(h, w["wfc"], w["bfc"]), approximate="tanh")
        x = x + F.linear(a, w["wproj"], w["bproj"])
    x = F.layer_norm(x, (C,), lnfg, lnfb, 1e-5)
    return F.cross_entropy(F.linear(x, wte).view(-1, V), targets.reshape(-1))


def schedule(step):
    if step < WARMUP:
        return LR * (step + 1) / (WARMUP + 1)
    ratio = (step - WARMUP) / (STEPS_SCHEDULE - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    wte, wpe, layers, lnfg, lnfb = params()
    decay = [wte, wpe] + [w[k] for w in layers for k in ("wq", "wk", "wv", "wo", "wfc", "wproj")]
    no_decay = [w[k] for w in layers for k in ("ln1g", "ln1b", "bq", "bk", "bv", "bo", "ln2g",
                                              "ln2b", "bfc", "bproj")] + [lnfg, lnfb]
    for p in decay + no_decay:
        p.requires_grad_()
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95), eps=1e-8)
    idx, targets = batch()
    for step in range(steps):
        loss = forward(wte, wpe, layers, lnfg, lnfb, idx, targets)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(decay + no_decay, CLIP)
        for group in opt.param_groups:
            group["lr"] = schedule(step)
        opt.step()
        print(f"{loss.item():.7f}")


if __name__ == "__main__":
    main()
