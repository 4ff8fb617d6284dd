#!/usr/bin/python3
"""The reference for bench/trainer_recovery: PyTorch 1.13 DDP (gloo, CPU, 2 processes) training
the same Fashion-MNIST MLP (784-256-128-10, Adam lr 1e-3, batch 64 per rank) as ct's bench.

  ref_torch.py startup DIR   torch.multiprocessing.spawn of 2 workers; each inits the process
                             group (gloo, TCP store), loads the data, wraps the model in DDP
                             and takes one step. Prints `startup_ms <first step - spawn start>`.
  ref_torch.py recovery DIR  torchrun (torch.distributed.run, the elastic agent) with
                             --max_restarts 1 --monitor_interval 0.1 (its best case; the default
                             interval is 5 s) runs 2 workers; rank 0 saves a checkpoint
                             (torch.save, model + optimizer + epoch) to DIR at every epoch end;
                             rank 1 parks at its step VICTIM_STEP in the first incarnation and
                             this script kills it with SIGKILL. The agent sees the death, stops
                             the other worker, restarts both, they re-rendezvous, load the
                             checkpoint from disk and step. Prints `recovery_ms <first step of
                             the restarted workers - kill>` and `steps_lost <VICTIM_STEP - the
                             step the restarted workers start from>` (steps trained again).
  ref_torch.py heal DIR H     the reference of a replacement's copy of a big model's state: the
                             wide MLP 784-H-H/4-10 (ct's --hidden H) with Adam after one step;
                             rank 0's checkpoint path of the recovery above, torch.save of model
                             + optimizer to DIR, then torch.load and load_state_dict into a fresh
                             model and optimizer (as a restarted worker does). Prints
                             `heal_copy_ms <save + load> snapshot_mb <file size>`.
  ref_torch.py worker ...    (internal) the worker, under torchrun or spawn.
Times are time.monotonic() (CLOCK_MONOTONIC), comparable across processes."""
import gzip
import os
import signal
import subprocess
import sys
import time

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"
LIMIT = int(os.environ.get("REF_LIMIT", "8192"))
VICTIM_STEP = int(os.environ.get("REF_VICTIM_STEP", str(8192 // 2 // 64 + 10)))


def load(limit):
    with gzip.open(os.path.join(DATA, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(DATA, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (x[:limit].astype(np.float32) / 255.0 - 0.2860) / 0.3530
    return x, y[:limit].astype(np.int64)


def worker(rank, world, outdir, mode, epochs=3):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    x, y = load(LIMIT)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                          nn.ReLU(), nn.Linear(128, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    ckpt = os.path.join(outdir, "ckpt.pt")
    start_epoch = 0
    if mode == "recovery" and os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start_epoch = state["epoch"]
    sampler = torch.utils.data.distributed.DistributedSampler(
        torch.utils.data.TensorDataset(x, y), num_replicas=world, rank=rank, shuffle=True, seed=0)
    loss_fn = nn.CrossEntropyLoss()
    steps = 0
    if mode == "recovery" and restart > 0 and rank == 0:  # where the restarted group starts
        with open(os.path.join(outdir, "start_step.%d" % restart), "w") as f:
            f.write("%d\n" % (start_epoch * ((len(x) // world + 63) // 64)))
    for epoch in range(start_epoch, epochs):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)))
        for b in range(0, len(idx), 64):
            sel = idx[b:b + 64]
            opt.zero_grad()
            loss = loss_fn(ddp(x[sel]), y[sel])
            loss.backward()
            opt.step()
            steps += 1
            if steps == 1:
                with open(os.path.join(outdir, "first_step.%d.%d" % (restart, rank)), "w") as f:
                    f.write("%.9f\n" % time.monotonic())
                if mode == "startup":
                    dist.destroy_process_group()
                    return
            if mode == "recovery" and restart == 0 and rank == 1 and steps == VICTIM_STEP:
                with open(os.path.join(outdir, "victim.tmp"), "w") as f:
                    f.write("%d\n" % os.getpid())
                os.rename(os.path.join(outdir, "victim.tmp"), os.path.join(outdir, "victim"))
                time.sleep(60)  # until killed
        if rank == 0 and mode == "recovery":
            torch.save({"model": model.state_dict(), "optim": opt.state_dict(),
                        "epoch": epoch + 1}, ckpt + ".tmp")
            os.rename(ckpt + ".tmp", ckpt)
        dist.barrier()
    dist.destroy_process_group()


def spawn_entry(rank, world, outdir):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    worker(rank, world, outdir, "startup")


def first_step(outdir, restart, world=2):
    t = []
    for r in range(world):
        with open(os.path.join(outdir, "first_step.%d.%d" % (restart, r))) as f:
            t.append(float(f.read()))
    return max(t)


def startup(outdir):
    import socket

    import torch.multiprocessing as mp
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    s.close()
    t0 = time.monotonic()
    mp.spawn(spawn_entry, args=(2, outdir), nprocs=2, join=True)
    print("startup_ms %.1f" % ((first_step(outdir, 0) - t0) * 1e3))


def recovery(outdir):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, os.path.abspath(__file__), "torchrun", "--standalone", "--nproc_per_node", "2",
           "--max_restarts", "1", "--monitor_interval", "0.1", os.path.abspath(__file__),
           "worker", outdir]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    victim = os.path.join(outdir, "victim")
    try:
        until = time.monotonic() + 120
        while not os.path.exists(victim) and time.monotonic() < until and p.poll() is None:
            time.sleep(0.001)
        with open(victim) as f:
            pid = int(f.read())
        t_kill = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    print("recovery_ms %.1f" % ((first_step(outdir, 1) - t_kill) * 1e3))
    # the victim parked after VICTIM_STEP completed steps; the restart trains again from its start
    with open(os.path.join(outdir, "start_step.1")) as f:
        print("steps_lost %d" % (VICTIM_STEP - int(f.read())))


def torchrun(argv):
    """torch.distributed.run's main, with one fix: on Python >= 3.11 iterating an IntFlag skips
    its 0 member, so torch 1.13's Std.from_str("0") returns None and the agent crashes."""
    from torch.distributed.elastic.multiprocessing import api
    from torch.distributed import run

    def from_str(vm):
        if ":" in vm:
            return {int(i): api.Std(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
        return api.Std(int(vm))

    api.Std.from_str = from_str
    run.Std.from_str = from_str
    run.main(argv)


def heal(outdir, hidden):
    import torch
    import torch.nn as nn

    torch.set_num_threads(1)

    def make():
        torch.manual_seed(0)
        m = nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU(),
                          nn.Linear(hidden, hidden // 4), nn.ReLU(), nn.Linear(hidden // 4, 10))
        return m, torch.optim.Adam(m.parameters(), lr=1e-3)

    model, opt = make()
    x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
    nn.CrossEntropyLoss()(model(x), y).backward()
    opt.step()
    fresh, fresh_opt = make()
    path = os.path.join(outdir, "heal.pt")
    t0 = time.monotonic()
    torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, path)
    state = torch.load(path)
    fresh.load_state_dict(state["model"])
    fresh_opt.load_state_dict(state["optim"])
    t1 = time.monotonic()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))
    print("heal_copy_ms %.1f snapshot_mb %.1f" % ((t1 - t0) * 1e3, os.path.getsize(path) / 1e6))


if __name__ == "__main__":
    if sys.argv[1] == "torchrun":
        torchrun(sys.argv[2:])
    elif sys.argv[1] == "worker":
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), sys.argv[2], "recovery")
    elif sys.argv[1] == "heal":
        heal(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "startup":
        startup(sys.argv[2])
    else:
        recovery(sys.argv[2])
