#!/usr/bin/python3
"""tests/optim/bench_optim.py — PyTorch 1.13's optimizer step time on one parameter of N floats,
best of foreach=False/True (its best case), 1 thread by default (torch.set_num_threads from
CT_BENCH_THREADS). Prints "kind N us_per_step", as bench_optim.c does."""
import os
import sys
import time

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000000
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 50
torch.set_num_threads(int(os.environ.get("CT_BENCH_THREADS", "1")))
p = torch.nn.Parameter(torch.arange(n, dtype=torch.float32) % 17 * 0.01)
p.grad = torch.arange(n, dtype=torch.float32) % 13 * 0.001 - 0.006
makers = {
    "sgd_momentum": lambda fe: torch.optim.SGD([p], lr=0.01, momentum=0.9, foreach=fe),
    "adam": lambda fe: torch.optim.Adam([p], foreach=fe),
    "adamw": lambda fe: torch.optim.AdamW([p], foreach=fe),
}
for kind, mk in makers.items():
    best = 1e30
    for fe in (False, True):
        o = mk(fe)
        for _ in range(3):
            o.step()
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(iters):
                o.step()
            best = min(best, (time.perf_counter() - t0) / iters)
    print("%s %d %.1f" % (kind, n, best * 1e6))
