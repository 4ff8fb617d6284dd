#!/usr/bin/python3
"""tests/engine/make_reference_amp.py — PyTorch reference values for mixed precision
(tests/engine/test_amp.c).

Run with Debian's python3-torch:  /usr/bin/python3 tests/engine/make_reference_amp.py tests/engine/ref
Writes amp.bin, in make_reference.py's format (b"CTREF1\\0\\0", then records
u32 name_len, name, u32 dtype (0 f32), u32 ndim, i64 dims[ndim], data):

- round.in / round.bf16 / round.f16: values (ties, subnormals, overflow) and torch's
  .to(bfloat16) / .to(float16) of them, back in f32.
- lin.* and conv.*: inputs, the upstream gradient, and two answers for the output and every
  gradient under bf16 autocast:
    *.auto.*  torch.autocast("cpu", dtype=torch.bfloat16) (bf16 outputs, bf16 gradients),
    *.exact.* the arithmetic ct promises: operands rounded to bf16, products and sums exact
              (float64); the bias gradient from the upstream gradient as is (Linear) or rounded
              (convolution, whose kernel gets the rounded dy for both dw and db).
- scaler.*: a loss scaler run (growth_interval 3, the default scale 2^16 and factors): the
  per-step gradient factors c (p's gradient is c * scale, overflowing to inf on the steps
  meant to be skipped), and after each step the scale, growth tracker, whether the optimizer
  stepped, and p (torch.optim.SGD on the unscaled gradient). torch 1.13's GradScaler kernels
  exist for CUDA only, so the scale update is torch's _amp_update_scale_ rule
  (aten/src/ATen/native/cuda/AmpKernels.cu) in torch float32 tensors.
"""
import os
import struct
import sys

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.manual_seed(7)


class Writer:
    def __init__(self, path):
        self.f = open(path, "wb")
        self.f.write(b"CTREF1\0\0")

    def put(self, name, t):
        t = t.detach().contiguous().float()
        nb = name.encode()
        self.f.write(struct.pack("<I", len(nb)) + nb)
        self.f.write(struct.pack("<II", 0, t.dim()))
        self.f.write(struct.pack("<%dq" % t.dim(), *t.shape))
        self.f.write(t.numpy().astype("<f4").tobytes())

    def close(self):
        self.f.close()


def r(t):
    """t rounded to bf16, as float64 for the exact model."""
    return t.to(torch.bfloat16).double()


def rounding(w):
    v = [1.0, 1.00390625, 1.0078125, 1.01171875, 1.005859375, 1.0009765625, 1.00048828125,
         3.14159265, -2.718281828, 65504.0, 65519.0, 65520.0, 70000.0, 1e-5, 6.1e-5,
         5.96e-8, 2.98e-8, 2.99e-8, 1e-8, 3.0e38, 3.4e38, -3.4e38, 0.0, -0.0,
         float("inf"), float("-inf")]
    x = torch.tensor(v, dtype=torch.float32)
    x = torch.cat([x, torch.randn(38) * 100])
    w.put("round.in", x)
    w.put("round.bf16", x.to(torch.bfloat16).float())
    w.put("round.f16", x.to(torch.float16).float())


def case(w, name, fn, x, wt, b):
    gy_shape = fn(x.double(), wt.double(), b.double()).shape
    gy = torch.randn(gy_shape)
    for t, n in ((x, "x"), (wt, "w"), (b, "b"), (gy, "gy")):
        w.put("%s.%s" % (name, n), t)
    # torch's CPU autocast
    xa, wa, ba = (t.clone().requires_grad_(True) for t in (x, wt, b))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = fn(xa, wa, ba)
    assert y.dtype == torch.bfloat16
    y.backward(gy.to(y.dtype))
    w.put("%s.auto.y" % name, y.float())
    for t, n in ((xa, "x"), (wa, "w"), (ba, "b")):
        w.put("%s.auto.g%s" % (name, n), t.grad)
    # exact arithmetic on rounded operands
    xe, we = r(x).requires_grad_(True), r(wt).requires_grad_(True)
    be = b.double().requires_grad_(True)
    y = fn(xe, we, be)
    y.backward(r(gy))
    w.put("%s.exact.y" % name, y)
    w.put("%s.exact.gx" % name, xe.grad)
    w.put("%s.exact.gw" % name, we.grad)
    gb = (gy.double() if name == "lin" else r(gy)).sum(dim=[d for d in range(gy.dim()) if d != 1])
    w.put("%s.exact.gb" % name, gb)


def scaler(w):
    interval, growth, backoff = 3, 2.0, 0.5
    scale = torch.full((1,), 65536.0)
    tracker = 0
    p = torch.randn(4)
    w.put("scaler.p0", p)
    pt = p.clone().requires_grad_(True)
    opt = torch.optim.SGD([pt], lr=0.1)
    bad = {3: 1e35, 7: 1e35, 8: float("nan")}  # overflow twice, then a NaN
    cs, scales, trackers, stepped, ps = [], [], [], [], []
    for step in range(14):
        c = torch.randn(4)
        if step in bad:
            c[1] = bad[step]
        cs.append(c)
        g = c * scale  # the scaled gradient, f32 (inf where it overflows)
        inv = scale.double().reciprocal().float()
        found = not bool(torch.isfinite(g).all())
        pt.grad = g * inv
        if not found:
            opt.step()
        # _amp_update_scale_
        if found:
            scale = scale * backoff
            tracker = 0
        else:
            tracker += 1
            if tracker == interval:
                grown = scale * growth
                if torch.isfinite(grown).all():
                    scale = grown
                tracker = 0
        scales.append(float(scale))
        trackers.append(tracker)
        stepped.append(0.0 if found else 1.0)
        ps.append(pt.detach().clone())
    w.put("scaler.c", torch.stack(cs))
    w.put("scaler.scale", torch.tensor(scales))
    w.put("scaler.tracker", torch.tensor(trackers, dtype=torch.float32))
    w.put("scaler.stepped", torch.tensor(stepped))
    w.put("scaler.p", torch.stack(ps))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "ref")
    w = Writer(os.path.join(out, "amp.bin"))
    rounding(w)
    case(w, "lin", lambda x, wt, b: F.linear(x, wt, b), torch.randn(8, 40), torch.randn(24, 40),
         torch.randn(24))
    case(w, "conv", lambda x, wt, b: F.conv2d(x, wt, b, stride=1, padding=1),
         torch.randn(2, 5, 7, 7), torch.randn(6, 5, 3, 3), torch.randn(6))
    scaler(w)
    w.close()


if __name__ == "__main__":
    main()
