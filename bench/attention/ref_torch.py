"""bench/attention/ref_torch.py — PyTorch's causal self-attention as nanoGPT writes it without
flash attention (PyTorch 1.13 has no scaled_dot_product_attention): q k^T scaled, the causal
mask filled with -inf, softmax, times v, on one layer of bench/gpt_train's GPT with q, k and v
split from one (B, T, 3C) tensor, forward and backward, a fresh qkv each step (made outside the
timing), no dropout.
    ref_torch.py STEPS THREADS [B T n_head n_embd]
Prints `ms=<median of forward + backward> fwd_ms=<median forward>`, as attention_bench does."""
import math
import statistics
import sys
import time

import torch


def main():
    a = [int(x) for x in sys.argv[1:]]
    steps, threads = a[0] if len(a) > 0 else 40, a[1] if len(a) > 1 else 1
    B, T, H, C = a[2:6] + [16, 128, 4, 128][len(a[2:6]):]
    torch.set_num_threads(threads)
    hs = C // H
    mask = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    g = torch.Generator().manual_seed(1)
    data = torch.rand(B, T, 3 * C, generator=g) * 2 - 1
    grad = torch.rand(B, T, C, generator=g) * 2 - 1
    all_ms, fwd_ms = [], []
    for step in range(-3, steps):
        qkv = data.clone().requires_grad_(True)
        t0 = time.perf_counter()
        q, k, v = qkv.split(C, dim=2)
        q = q.view(B, T, H, hs).transpose(1, 2)
        k = k.view(B, T, H, hs).transpose(1, 2)
        v = v.view(B, T, H, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(mask == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        t1 = time.perf_counter()
        y.backward(grad)
        t2 = time.perf_counter()
        if step >= 0:
            all_ms.append((t2 - t0) * 1e3)
            fwd_ms.append((t1 - t0) * 1e3)
    print("ms=%.3f fwd_ms=%.3f" % (statistics.median(all_ms), statistics.median(fwd_ms)))


main()
