#!/usr/bin/python3
"""The reference for bench/ddp_throughput: PyTorch 1.13 DistributedDataParallel (gloo, CPU),
2 processes started by torch.multiprocessing.spawn, one thread each (what each of ct's two
replicas gets), training the Fashion-MNIST CNN of examples/fashion_mnist_model.h (conv32-BN-
ReLU-pool, conv64-BN-ReLU-pool, fc128, dropout 0.25, fc10) with Adam lr 1e-3, batch 64 per
rank, DistributedSampler over the first LIMIT training images, for 2 epochs.

  ref_torch.py LIMIT   prints `epoch E: samples_per_s=<all ranks' samples / slowest rank's
                       seconds in that epoch's training loop>` for each epoch, like ct's trainer.
"""
import gzip
import os
import socket
import sys
import time

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def load(limit):
    with gzip.open(os.path.join(DATA, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(DATA, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (x[:limit].astype(np.float32) / 255.0 - 0.2860) / 0.3530
    return x, y[:limit].astype(np.int64)


def worker(rank, world, limit, epochs):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x, y = load(limit)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    sampler = torch.utils.data.distributed.DistributedSampler(
        torch.utils.data.TensorDataset(x, y), num_replicas=world, rank=rank, shuffle=True, seed=0)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)))
        dist.barrier()
        t0 = time.monotonic()
        samples = 0
        for b in range(0, len(idx), 64):
            sel = idx[b:b + 64]
            opt.zero_grad()
            loss = loss_fn(ddp(x[sel]), y[sel])
            loss.backward()
            opt.step()
            samples += len(sel)
        secs = torch.tensor([time.monotonic() - t0], dtype=torch.float64)
        n = torch.tensor([samples], dtype=torch.float64)
        dist.all_reduce(secs, op=dist.ReduceOp.MAX)
        dist.all_reduce(n)
        if rank == 0:
            print("epoch %d: samples_per_s=%.1f" % (epoch + 1, n.item() / secs.item()), flush=True)
    dist.destroy_process_group()


def main():
    import torch.multiprocessing as mp
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    s.close()
    mp.spawn(worker, args=(2, limit, 2), nprocs=2, join=True)


if __name__ == "__main__":
    main()
