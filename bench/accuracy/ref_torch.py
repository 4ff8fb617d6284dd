#!/usr/bin/python3
"""The reference for bench/accuracy: PyTorch 1.13 DistributedDataParallel (gloo, CPU), 2
processes started by torch.multiprocessing.spawn, one thread each, training the Fashion-MNIST
CNN of examples/fashion_mnist_model.h with ct's recipe (bench/accuracy/run.sh): AdamW (lr LR,
weight decay 1e-2), batch 64 per rank, cross entropy with label smoothing 0.1, per-step
warmup + cosine (SequentialLR of LinearLR(0.1 -> 1, WARMUP steps) and CosineAnnealingLR to 0
over the rest of EPOCHS epochs: what ct's "warmup_cosine" is), training images flipped
left-right with probability 0.5, DistributedSampler. After
every epoch both ranks test their half of the 10000 test images; it stops at the first epoch
whose test accuracy reaches TARGET.

  ref_torch.py TARGET [EPOCHS [LR [WARMUP]]]
  prints `epoch E: test_accuracy=<a> time=<s>` per epoch and, when reached,
  `reached: test_accuracy=<a> epochs=<e> wall_s=<seconds since this script started, process
  start-up and the evaluations included>`.
"""
import gzip
import os
import socket
import sys
import time

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def load(train):
    pre = "train" if train else "t10k"
    with gzip.open(os.path.join(DATA, pre + "-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(DATA, pre + "-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (x.astype(np.float32) / 255.0 - 0.2860) / 0.3530
    return x, y.astype(np.int64)


def augment(torch, xb, gen):
    """xb (N,1,28,28) with each image flipped left-right with probability 0.5."""
    flip = torch.rand(xb.shape[0], generator=gen) < 0.5
    return torch.where(flip[:, None, None, None], xb.flip(-1), xb)


def worker(rank, world, target, epochs, lr, warmup, t_start):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x, y = load(True)
    xt, yt = load(False)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    lo, hi = len(xt) * rank // world, len(xt) * (rank + 1) // world
    xt, yt = torch.from_numpy(xt[lo:hi]), torch.from_numpy(yt[lo:hi])
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=lr, weight_decay=1e-2)
    sampler = torch.utils.data.distributed.DistributedSampler(
        torch.utils.data.TensorDataset(x, y), num_replicas=world, rank=rank, shuffle=True, seed=0)
    steps = epochs * ((len(sampler) + 63) // 64)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [
        torch.optim.lr_scheduler.LinearLR(opt, 0.1, 1.0, warmup),
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps - warmup)], [warmup])
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    gen = torch.Generator()
    gen.manual_seed(1 + rank)
    for epoch in range(epochs):
        t0 = time.monotonic()
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)))
        ddp.train()
        for b in range(0, len(idx), 64):
            sel = idx[b:b + 64]
            opt.zero_grad()
            loss_fn(ddp(augment(torch, x[sel], gen)), y[sel]).backward()
            opt.step()
            sched.step()
        ddp.eval()
        with torch.no_grad():
            hits = sum(int((model(xt[i:i + 500]).argmax(1) == yt[i:i + 500]).sum())
                       for i in range(0, len(xt), 500))
        c = torch.tensor([hits, len(xt)], dtype=torch.float64)
        dist.all_reduce(c)
        acc = c[0].item() / c[1].item()
        if rank == 0:
            print("epoch %d: test_accuracy=%.4f time=%.1f" % (epoch + 1, acc,
                                                              time.monotonic() - t0), flush=True)
        if acc >= target:
            if rank == 0:
                print("reached: test_accuracy=%.4f epochs=%d wall_s=%.1f" %
                      (acc, epoch + 1, time.monotonic() - t_start), flush=True)
            break
    # both ranks tear down together (bench/gpt_train/ref_ddp_text.py's rank 0 once hung in
    # destroy_process_group after its peer had left)
    dist.barrier()
    dist.destroy_process_group()


def main():
    t_start = time.monotonic()  # CLOCK_MONOTONIC: the same clock in the spawned processes
    import torch.multiprocessing as mp
    target = float(sys.argv[1]) if len(sys.argv) > 1 else 0.91
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    lr = float(sys.argv[3]) if len(sys.argv) > 3 else 2e-3
    warmup = int(sys.argv[4]) if len(sys.argv) > 4 else 200
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    s.close()
    mp.spawn(worker, args=(2, target, epochs, lr, warmup, t_start), nprocs=2, join=True)


if __name__ == "__main__":
    main()
