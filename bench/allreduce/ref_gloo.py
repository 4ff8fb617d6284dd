#!/usr/bin/python3
"""bench/allreduce/ref_gloo.py — the reference: torch.distributed with the gloo backend,
2 processes on loopback, f32 allreduce (SUM) of the same sizes as ct's side, warm-up, median
of per-call times. Prints `RESULT gloo <bytes> <median us> <busbw GB/s>` from rank 0.
Each size is checked before and after its timed calls as ct's side does: one allreduce of a
rank-dependent pattern, every element compared with the exact sum; a wrong element prints
"allreduce: WRONG SUM gloo ..." and the script exits non-zero.
Run with /usr/bin/python3 (Debian's python3-torch)."""
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [4096, 65536, 1 << 20, 16 << 20, 64 << 20]


def iters_for(nbytes):
    if nbytes <= 65536:
        return 2000
    if nbytes <= (1 << 20):
        return 300
    if nbytes <= (16 << 20):
        return 40
    return 15


def check_sum(nbytes, rank):
    """Allreduces a pattern (rank r holds (i % 1000) + 1000 r, sums exact in f32) and exits 1
    after printing the first wrong element."""
    pattern = (torch.arange(nbytes // 4) % 1000).float()
    t = pattern + 1000.0 * rank
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    want = 2.0 * pattern + 1000.0  # rank 0's + rank 1's
    if not torch.equal(t, want):
        i = int((t != want).nonzero()[0])
        print(f"allreduce: WRONG SUM gloo {nbytes} bytes, rank {rank}: element {i} = "
              f"{float(t[i])}, want {float(want[i])}", file=sys.stderr, flush=True)
        sys.exit(1)


def worker(rank, world, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    for nbytes in SIZES:
        check_sum(nbytes, rank)
        t = torch.ones(nbytes // 4, dtype=torch.float32)
        iters = iters_for(nbytes)
        warm = iters // 10 + 2
        times = []
        for it in range(warm + iters):
            t0 = time.perf_counter()
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            dt = time.perf_counter() - t0
            if it >= warm:
                times.append(dt)
        check_sum(nbytes, rank)  # again: repeated calls left nothing wrong
        med = statistics.median(times)
        busbw = nbytes / med * 2 * (world - 1) / world / 1e9
        if rank == 0:
            print(f"RESULT gloo {nbytes} {med * 1e6:.2f} {busbw:.3f}", flush=True)
        dist.barrier()
    dist.destroy_process_group()


def main():
    world = 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(world, port), nprocs=world, join=True)


if __name__ == "__main__":
    sys.exit(main())
