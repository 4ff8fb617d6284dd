#!/usr/bin/python3
"""bench/train_throughput/ref_torch.py — PyTorch's side of the training-throughput benchmark.

  ref_torch.py CONFIG STEPS THREADS     CONFIG: cnn | mlp | resnet9 | tiny
Trains the same model as ct (same batch, optimizer) for STEPS steps after 5 warm-up steps, on
data already in memory as pre-normalised batches (torch's best case: no DataLoader overhead),
and prints `samples_per_s=<x> peak_rss_kb=<y>`. Fashion-MNIST for cnn/mlp, random 3x32x32 for
resnet9, random 64-feature rows for tiny (as the ct side does).
"""
import gzip
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from resnet9_torch import resnet9  # noqa: E402

cfg, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
torch.manual_seed(0)


def fashion(batch):
    d = "/usr/share/datasets/fashion-mnist/"
    with gzip.open(d + "train-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(d + "train-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    n = (len(x) // batch) * batch
    x = (torch.from_numpy(x[:n].astype(np.float32)) / 255.0 - 0.2860) / 0.3530
    y = torch.from_numpy(y[:n].astype(np.int64))
    perm = torch.randperm(n)
    return list(zip(x[perm].split(batch), y[perm].split(batch)))


if cfg == "cnn":
    batch = 64
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))
    data = fashion(batch)
elif cfg == "mlp":
    batch = 64
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                          nn.ReLU(), nn.Linear(128, 10))
    data = fashion(batch)
elif cfg == "resnet9":
    batch = 32
    model = resnet9(16)
    data = [(torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))) for _ in range(50)]
else:  # tiny
    batch = 32
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                          nn.Linear(64, 10))
    data = [(torch.randn(batch, 64), torch.randint(0, 10, (batch,))) for _ in range(50)]

opt = torch.optim.Adam(model.parameters(), lr=1e-3)
model.train()


def step(i):
    x, y = data[i % len(data)]
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()


for i in range(5):
    step(i)
t0 = time.perf_counter()
for i in range(steps):
    step(i + 5)
dt = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("samples_per_s=%.1f peak_rss_kb=%d" % (steps * batch / dt, rss))
