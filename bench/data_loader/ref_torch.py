"""bench/data_loader/ref_torch.py — torch's DataLoader(num_workers=0) over a TensorDataset of
Fashion-MNIST train, batch 64, shuffled, normalised (mean 0.2860, std 0.3530). The reference gets
its best case: the normalisation is applied once to the whole tensor before timing, and two ways
of batching are timed, keeping the faster: the default per-sample fetch + collate, and a
BatchSampler handed in as the sampler (batch_size=None), so each batch is one tensor gather."""
import gzip, os, sys, time
import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

torch.set_num_threads(int(os.environ.get("CT_BENCH_THREADS", "1")))
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
d = "/usr/share/datasets/fashion-mnist"
t0 = time.perf_counter()
with gzip.open(f"{d}/train-images-idx3-ubyte.gz") as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
with gzip.open(f"{d}/train-labels-idx1-ubyte.gz") as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
print("torch_open seconds=%.3f samples=%d" % (time.perf_counter() - t0, len(y)))
x = (torch.from_numpy(x.copy()).float().div_(255.0) - 0.2860) / 0.3530
ds = TensorDataset(x, torch.from_numpy(y))
g = torch.Generator()
g.manual_seed(1)
loaders = {
    "per_sample": DataLoader(ds, batch_size=64, shuffle=True, num_workers=0, generator=g),
    "batch_sampler": DataLoader(ds, batch_size=None, num_workers=0,
                                sampler=BatchSampler(RandomSampler(ds, generator=g), 64, False)),
}
best_all = 0.0
for name, dl in loaders.items():
    best, sink = 0.0, 0.0
    for e in range(epochs if name == "batch_sampler" else max(2, epochs // 2)):
        n = 0
        t = time.perf_counter()
        for bx, by in dl:
            n += bx.shape[0]
            sink += float(bx[0, 0, 0, 0]) + float(by[-1])
        best = max(best, n / (time.perf_counter() - t))
    print("torch_loader %s samples_per_s=%.0f" % (name, best))
    best_all = max(best_all, best)
print("torch_best samples_per_s=%.0f" % best_all)
