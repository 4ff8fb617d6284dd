#!/usr/bin/python3
"""bench/gpt_train/ref_torch.py — PyTorch's side of the GPT benchmark: nanoGPT's model
(bench/gpt_torch.py), AdamW (weight decay 0.1 on every parameter, as the ct side), random byte
tokens already in memory, STEPS steps after 3 warm-up steps, THREADS threads.
  ref_torch.py STEPS THREADS [n_layer n_head n_embd block batch]
Prints `tokens_per_s=<x> loss=<y> params=<n>`."""
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gpt_torch import GPT  # noqa: E402

a = [int(v) for v in sys.argv[1:]] + [4, 4, 128, 64, 16][len(sys.argv) - 3:]
steps, threads, n_layer, n_head, n_embd, block, batch = a[:7]
torch.set_num_threads(threads)
torch.manual_seed(0)
model = GPT(n_layer, n_head, n_embd, block, 256)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
data = [(torch.randint(0, 256, (batch, block)), torch.randint(0, 256, (batch * block,)))
        for _ in range(8)]
for step in range(steps + 3):
    if step == 3:
        t0 = time.perf_counter()
    x, y = data[step % 8]
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x).view(-1, 256), y)
    loss.backward()
    opt.step()
dt = time.perf_counter() - t0
params = sum(p.numel() for p in model.parameters())
print("tokens_per_s=%.1f loss=%.4f params=%d" % (steps * batch * block / dt, loss.item(), params))
