"""bench/gpu_train/ref_torch.py — PyTorch's side of bench/gpu_train: the same models, batch,
data (8 random batches already on the GPU) and optimizer as gpu_bench.c.

  ref_torch.py CONFIG BATCH STEPS SIZE MODE [PRECISION]
CONFIG: resnet9 (base width SIZE) | mlp (SIZE unused), Adam (lr 1e-3) | gpt: GPT-2 124M's shape
(bench/gpt_torch.py's nanoGPT model with sdpa=True: F.scaled_dot_product_attention(is_causal=
True), torch's flash kernel; 12 layers, 12 heads, n_embd 768, vocab 50257, the output layer tied
to the token embedding) on SIZE tokens a row, random tokens, AdamW (lr 1e-3, weight decay 0.1 on
every parameter, as gpu_bench). MODE: eager | compile; PRECISION: f32 (default) | bf16 (forward
and loss under torch.autocast("cuda", bfloat16), as gpu_bench's bf16: ct_autocast_push).
Times STEPS steps after 5 warm-up steps (compile: after the compiling ones), reads the loss once
at the end, and prints `[tokens_per_s=<t>] samples_per_s=<x> peak_alloc_mb=<y> loss=<l>` (torch's
caching allocator's peak; tokens_per_s for gpt). f32, TF32 off: ct's matrix products and
convolutions are plain f32. Not a test.
"""
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gpt_torch import GPT  # noqa: E402
from resnet9_torch import resnet9  # noqa: E402

cfg, batch, steps, width, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), sys.argv[5]
prec = sys.argv[6] if len(sys.argv) > 6 else "f32"
if prec not in ("f32", "bf16"):
    sys.exit("ref_torch.py: precision %r: f32 or bf16" % prec)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True  # torch's best case
torch.manual_seed(0)
dev = torch.device("cuda")


VOCAB = 50257
if cfg == "resnet9":
    model = resnet9(width)
    data = [(torch.rand(batch, 3, 32, 32, device=dev) * 2 - 1,
             torch.randint(0, 10, (batch,), device=dev)) for _ in range(8)]
elif cfg == "gpt":  # width: the tokens a row (block size)
    model = GPT(12, 12, 768, width, VOCAB, sdpa=True)
    data = [(torch.randint(0, VOCAB, (batch, width), device=dev),
             torch.randint(0, VOCAB, (batch * width,), device=dev)) for _ in range(8)]
else:
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                          nn.Linear(128, 10))
    data = [(torch.rand(batch, 784, device=dev) * 2 - 1,
             torch.randint(0, 10, (batch,), device=dev)) for _ in range(8)]
model = model.to(dev).train()
if cfg == "gpt":
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
else:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
fwd = torch.compile(model) if mode == "compile" else model


def step(i):
    x, y = data[i % len(data)]
    opt.zero_grad(set_to_none=False)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=prec == "bf16"):
        out = fwd(x)  # (B, classes), or the GPT's (B, T, vocab) against (B*T) targets
        loss = F.cross_entropy(out.view(-1, out.size(-1)), y)
    loss.backward()
    opt.step()
    return loss


for i in range(5):
    step(i)
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
t0 = time.perf_counter()
for i in range(steps):
    loss = step(i + 5)
last = loss.item()
dt = time.perf_counter() - t0
if cfg == "gpt":
    print("tokens_per_s=%.1f " % (steps * batch * width / dt), end="")
print("samples_per_s=%.1f peak_alloc_mb=%.1f loss=%.4f" %
      (steps * batch / dt, torch.cuda.max_memory_allocated() / 1048576.0, last))
