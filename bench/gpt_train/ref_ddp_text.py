#!/usr/bin/python3
"""bench/gpt_train/ref_ddp_text.py — PyTorch DDP (gloo) side of the text benchmark: the recipe of
examples/gpt_text.c under torch, for the same step count.

  ref_ddp_text.py TEXT [--replicas 2] [--threads 1] [--epochs 1] [--layers 4] [--heads 4]
                  [--embd 128] [--block 128] [--batch 16] [--lr 1e-3] [--clip 1] [--val 0.05]
                  [--val-every 250] [--seed 1]

The same as gpt_text, piece by piece:
- data: byte tokens; the first 1 - val of the file trains, the rest validates; each split cut
  into one byte range per rank, each range into windows of block + 1 bytes at a stride of block
  (trainer/data/text.c); a rank shuffles its own windows every epoch and pads its order by
  repeating it to the longest rank's count, batches of `batch` with the last one short
  (trainer/train/replica.c's loader);
- model: nanoGPT's (bench/gpt_torch.py) with nanoGPT's initialisation (normal 0.02, output
  projections 0.02 / sqrt(2 n_layer), zero biases), the output layer tied to wte, dropout 0;
- AdamW lr, betas (0.9, 0.95), weight decay 0.1 on the matrices only (dim >= 2);
- gradients averaged by DDP (gloo), clipped by their global norm;
- per step: LinearLR(0.05 -> 1 over 20 steps), then CosineAnnealingLR down to lr / 10 at the
  run's last step (SequentialLR);
- validation: mean cross entropy over the whole validation split, every val-every steps and at
  the end.
Prints `val step=<s> val_loss=<x>` lines and last `final: val_loss=<nats per byte>
tokens_per_s=<training tokens per second of the epochs' wall time, their validations
included, as the trainer counts an epoch> params=<count>`."""
import argparse
import math
import os
import sys
import time

import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gpt_torch import GPT  # noqa: E402


def shard(data, lo, length, rank, world, block):
    s0, s1 = lo + length * rank // world, lo + length * (rank + 1) // world
    count = (s1 - s0 - 1) // block if s1 - s0 > block else 0
    return s0, count


def windows(data, s0, idx, block):
    x = torch.stack([data[s0 + i * block:s0 + i * block + block] for i in idx.tolist()])
    y = torch.stack([data[s0 + i * block + 1:s0 + i * block + block + 1] for i in idx.tolist()])
    return x.long(), y.long()


def init_nanogpt(model, n_layer):
    for name, p in model.named_parameters():
        if name.endswith("c_proj.weight"):
            torch.nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))
        elif name.endswith(".bias") and "ln_" not in name:
            torch.nn.init.zeros_(p)
        elif p.dim() >= 2:
            torch.nn.init.normal_(p, 0.0, 0.02)


def validate(model, data, a, rank, world):
    size = data.numel()
    split = int(size * (1.0 - a.val))
    s0, count = shard(data, split, size - split, rank, world, a.block)
    loss_sum, n = torch.zeros(1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        for b in range(0, count, a.batch):
            x, y = windows(data, s0, torch.arange(b, min(b + a.batch, count)), a.block)
            loss = F.cross_entropy(model(x).view(-1, 256), y.view(-1), reduction="sum")
            loss_sum += loss.double()
            n += y.numel()
    model.train()
    dist.all_reduce(loss_sum)
    dist.all_reduce(n)
    return (loss_sum / n).item()


def run(rank, a, port):
    torch.set_num_threads(a.threads)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=a.replicas)
    with open(a.text, "rb") as f:
        data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
    size = data.numel()
    split = int(size * (1.0 - a.val))
    s0, count = shard(data, 0, split, rank, a.replicas, a.block)
    longest = max(shard(data, 0, split, k, a.replicas, a.block)[1] for k in range(a.replicas))
    steps_per_epoch = (longest + a.batch - 1) // a.batch
    total = steps_per_epoch * a.epochs

    torch.manual_seed(a.seed)
    model = GPT(a.layers, a.heads, a.embd, a.block, 256)
    init_nanogpt(model, a.layers)
    params = sum(p.numel() for p in model.parameters())
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.05, end_factor=1.0,
                                             total_iters=20)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - 20, eta_min=a.lr / 10)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[20])

    g = torch.Generator()
    step, train_s, tokens = 0, 0.0, 0
    for epoch in range(a.epochs):
        g.manual_seed(a.seed * 1000003 + rank * 7919 + epoch)
        perm = torch.randperm(count, generator=g)
        order = torch.cat([perm] * ((longest + count - 1) // count))[:longest]
        t0 = time.perf_counter()
        for b in range(0, longest, a.batch):
            x, y = windows(data, s0, order[b:b + a.batch], a.block)
            loss = F.cross_entropy(ddp(x).view(-1, 256), y.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
            opt.step()
            sched.step()
            step += 1
            tokens += y.numel() * a.replicas
            if a.val_every > 0 and step % a.val_every == 0 and step < total:
                v = validate(model, data, a, rank, a.replicas)
                if rank == 0:
                    print("val step=%d val_loss=%.4f train_loss=%.4f" % (step, v, loss.item()),
                          flush=True)
        train_s += time.perf_counter() - t0
    v = validate(model, data, a, rank, a.replicas)
    rate = torch.tensor([train_s])
    dist.all_reduce(rate, op=dist.ReduceOp.MAX)
    if rank == 0:
        print("val step=%d val_loss=%.4f" % (step, v))
        print("final: val_loss=%.4f tokens_per_s=%.0f params=%d" % (v, tokens / rate.item(), params),
              flush=True)
    # both ranks tear down together: rank 0 once hung in destroy_process_group (futex wait,
    # idle, 15 minutes) after rank 1, done first, had already left
    dist.barrier()
    dist.destroy_process_group()


def main():
    warnings.filterwarnings("ignore", category=UserWarning)  # SequentialLR's epoch warning
    p = argparse.ArgumentParser()
    p.add_argument("text")
    for k, v in [("replicas", 2), ("threads", 1), ("epochs", 1), ("layers", 4), ("heads", 4),
                 ("embd", 128), ("block", 128), ("batch", 16), ("val-every", 250), ("seed", 1)]:
        p.add_argument("--" + k, type=int, default=v)
    for k, v in [("lr", 1e-3), ("clip", 1.0), ("val", 0.05)]:
        p.add_argument("--" + k, type=float, default=v)
    a = p.parse_args()
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(a, port), nprocs=a.replicas, join=True)


if __name__ == "__main__":
    main()
