#!/usr/bin/python3
"""Reference values for ct's data tests, from PyTorch (Debian's python3-torch; run with
/usr/bin/python3 tests/data/gen_ref.py from the repo root). Writes:
  tests/data/sampler_ref.txt   torch.utils.data.DistributedSampler(shuffle=False) shards:
                               "n world drop_last rank num_samples : indices..."
  tests/data/transform_ref.txt pad + crop + flip + normalise of a (2,3,4) image with torch ops:
                               "pad top left flip : 2*oh*ow values" after "in :" and "mean/std"
"""
import torch
from torch.utils.data import DistributedSampler

combos = [(10, 3), (11, 4), (12, 4), (7, 8), (1, 2), (5, 1), (100, 7), (13, 5), (3, 3),
          (2, 5), (64, 6)]
with open("tests/data/sampler_ref.txt", "w") as f:
    for n, world in combos:
        for drop_last in (False, True):
            for rank in range(world):
                s = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False,
                                       drop_last=drop_last)
                idx = list(iter(s))
                assert len(idx) == len(s)
                f.write("%d %d %d %d %d :%s\n" % (n, world, int(drop_last), rank, len(s),
                                                  "".join(" %d" % i for i in idx)))

# Transforms: torchvision's RandomCrop(size, padding) = F.pad(zeros) then a window at (top,
# left); RandomHorizontalFlip = flip of the last dim; Normalize = (x - mean[c]) / std[c].
torch.manual_seed(0)
img = torch.rand(2, 3, 4)
mean = torch.tensor([0.4914, 0.2023])
std = torch.tensor([0.2470, 0.3530])
cases = [(0, 0, 0, 3, 4, False), (0, 0, 0, 3, 4, True), (1, 0, 0, 3, 4, False),
         (1, 2, 2, 3, 4, True), (2, 1, 3, 2, 3, False), (2, 4, 0, 3, 2, True),
         (1, 0, 0, 5, 6, True)]
with open("tests/data/transform_ref.txt", "w") as f:
    f.write("in :%s\n" % "".join(" %.9g" % v for v in img.flatten().tolist()))
    f.write("mean :%s\n" % "".join(" %.9g" % v for v in mean.tolist()))
    f.write("std :%s\n" % "".join(" %.9g" % v for v in std.tolist()))
    for pad, top, left, oh, ow, flip in cases:
        p = torch.nn.functional.pad(img, (pad, pad, pad, pad))
        c = p[:, top:top + oh, left:left + ow]
        if flip:
            c = torch.flip(c, dims=[2])
        cn = (c - mean[:, None, None]) / std[:, None, None]
        f.write("%d %d %d %d %d %d :%s |%s\n" % (pad, top, left, oh, ow, int(flip),
                                              "".join(" %.9g" % v for v in c.flatten().tolist()),
                                              "".join(" %.9g" % v for v in cn.flatten().tolist())))
