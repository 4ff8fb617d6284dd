#!/usr/bin/python3
"""The reference for bench/ddp_throughput: PyTorch 1.13 on the CPU, the same models, data and
optimizer (Adam lr 1e-3) as ct's examples/trainer_fashion_mnist.

  ref_torch.py LIMIT [MODEL [MODE [THREADS_OR_K [BATCH [EPOCHS]]]]]
    MODEL cnn (default): the Fashion-MNIST CNN of examples/fashion_mnist_model.h (conv32-BN-
          ReLU-pool, conv64-BN-ReLU-pool, fc128, dropout 0.25, fc10) on the 28x28 images;
          tiny: the MLP 64-128-64-10 on the images downsampled to 8x8 as ct's
          fmnist_downsample8 does (the central 24x24 averaged over 3x3 blocks)
    MODE  ddp (default): DistributedDataParallel (gloo), 2 processes started by
          torch.multiprocessing.spawn, one thread each (what each of ct's two replicas gets),
          DistributedSampler over the first LIMIT training images, BATCH (default 64) per rank;
          THREADS_OR_K = k > 1 accumulates k batches per optimizer step under ddp.no_sync()
          (the loss divided by k: the gradient of one batch of k*BATCH)
          single: one process with THREADS_OR_K threads, batch BATCH (default 128, the global
          batch of 2 ranks of 64), shuffled the same way
  With REF_BIND_CPUS=1 (run.sh's default) each ddp rank binds all its threads to one CPU of
  its own, as ct's trainer binds its replicas (trainer_opts.no_cpu_binding); 0: unbound.
  prints `epoch E: samples_per_s=<all ranks' samples / slowest rank's seconds in that epoch's
  training loop>` for each of EPOCHS (default 2) epochs, like ct's trainer.
"""
import gzip
import os
import socket
import sys
import time

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def load(limit, model):
    with gzip.open(os.path.join(DATA, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(DATA, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = x[:limit].astype(np.float32) / 255.0
    if model == "tiny":
        x = x[:, :, 2:26, 2:26].reshape(-1, 1, 8, 3, 8, 3).mean(axis=(3, 5), dtype=np.float32)
    x = (x - 0.2860) / 0.3530
    return np.ascontiguousarray(x, np.float32), y[:limit].astype(np.int64)


def make_model(nn, model):
    if model == "tiny":
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64),
                             nn.ReLU(), nn.Linear(64, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


def bind_rank(rank, world):
    """Binds every thread of this process to the rank-th CPU it may use, when the ranks fit."""
    cpus = sorted(os.sched_getaffinity(0))
    if os.environ.get("REF_BIND_CPUS", "1") == "0" or world < 2 or world > len(cpus):
        return
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), {cpus[rank]})


def worker(rank, world, limit, epochs, model_name, k, batch):
    import contextlib

    import torch
    import torch.distributed as dist
    import torch.nn as nn

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    bind_rank(rank, world)
    x, y = load(limit, model_name)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    torch.manual_seed(0)
    ddp = nn.parallel.DistributedDataParallel(make_model(nn, model_name))
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
        starts = list(range(0, len(idx), batch))
        for i, b in enumerate(starts):
            sel = idx[b:b + batch]
            last = (i + 1) % k == 0 or i + 1 == len(starts)
            with (contextlib.nullcontext() if last else ddp.no_sync()):
                loss = loss_fn(ddp(x[sel]), y[sel])
                (loss / k if k > 1 else loss).backward()
            if last:
                opt.step()
                opt.zero_grad()
            samples += len(sel)
        secs = torch.tensor([time.monotonic() - t0], dtype=torch.float64)
        n = torch.tensor([samples], dtype=torch.float64)
        dist.all_reduce(secs, op=dist.ReduceOp.MAX)
        dist.all_reduce(n)
        if rank == 0:
            print("epoch %d: samples_per_s=%.1f" % (epoch + 1, n.item() / secs.item()), flush=True)
    # both ranks tear down together (bench/gpt_train/ref_ddp_text.py's rank 0 once hung in
    # destroy_process_group after its peer had left)
    dist.barrier()
    dist.destroy_process_group()


def single(limit, epochs, model_name, threads, batch):
    import torch
    import torch.nn as nn

    torch.set_num_threads(threads)
    x, y = load(limit, model_name)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    torch.manual_seed(0)
    model = make_model(nn, model_name)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator()
    for epoch in range(epochs):
        g.manual_seed(epoch)
        idx = torch.randperm(len(x), generator=g)
        t0 = time.monotonic()
        for b in range(0, len(idx), batch):
            sel = idx[b:b + batch]
            opt.zero_grad()
            loss_fn(model(x[sel]), y[sel]).backward()
            opt.step()
        print("epoch %d: samples_per_s=%.1f" % (epoch + 1, len(idx) / (time.monotonic() - t0)),
              flush=True)


def main():
    import torch.multiprocessing as mp
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    model = sys.argv[2] if len(sys.argv) > 2 else "cnn"
    mode = sys.argv[3] if len(sys.argv) > 3 else "ddp"
    arg = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    epochs = int(sys.argv[6]) if len(sys.argv) > 6 else 2
    if mode == "single":
        batch = int(sys.argv[5]) if len(sys.argv) > 5 else 128
        single(limit, epochs, model, arg, batch)
        return
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 64
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    s.close()
    mp.spawn(worker, args=(2, limit, epochs, model, arg, batch), nprocs=2, join=True)


if __name__ == "__main__":
    main()
