#!/usr/bin/python3
"""tests/engine/make_reference.py — PyTorch reference values for the engine tests.

Run with Debian's python3-torch:  /usr/bin/python3 tests/engine/make_reference.py tests/engine/ref
Writes ops.bin (every op: inputs, output, upstream gradient, input gradients), transformer.bin
(the same for the transformer ops: layer norm, GELU, product, embedding), modules.bin (a
composite net: state dict, forward, gradients) and train.bin (a small CNN trained 20 steps with
SGD+momentum and with Adam+MultiStepLR: initial weights, batches, loss after every step).

File format (little-endian): b"CTREF1\\0\\0", then records until EOF:
  u32 name_len, name bytes, u32 dtype (0 f32, 4 i64), u32 ndim, i64 dims[ndim], data.
Not here: any test logic (tests/engine/*.c).
"""
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from gpt_torch import GPT  # noqa: E402  nanoGPT's model, shared with bench/gpt_train

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


class Writer:
    def __init__(self, path):
        self.f = open(path, "wb")
        self.f.write(b"CTREF1\0\0")

    def put(self, name, t):
        t = t.detach().contiguous()
        if t.dtype == torch.int64:
            code, data = 4, t.numpy().astype("<i8").tobytes()
        else:
            code, data = 0, t.float().numpy().astype("<f4").tobytes()
        nb = name.encode()
        self.f.write(struct.pack("<I", len(nb)) + nb)
        self.f.write(struct.pack("<II", code, t.dim()))
        self.f.write(struct.pack("<%dq" % t.dim(), *t.shape))
        self.f.write(data)

    def close(self):
        self.f.close()


def op_case(w, name, fn, inputs, grad_inputs=None):
    """Runs fn(*inputs) with grads on float inputs; stores in/out/gy/grads."""
    ins = []
    for i, x in enumerate(inputs):
        x = x.clone()
        if x.dtype == torch.float32 and (grad_inputs is None or i in grad_inputs):
            x.requires_grad_(True)
        ins.append(x)
        w.put("%s.in%d" % (name, i), x)
    y = fn(*ins)
    gy = torch.randn_like(y)
    y.backward(gy)
    w.put("%s.out" % name, y)
    w.put("%s.gy" % name, gy)
    for i, x in enumerate(ins):
        if x.requires_grad:
            w.put("%s.g%d" % (name, i), x.grad)


def ops(path):
    torch.manual_seed(1234)
    w = Writer(path)
    r = torch.randn
    op_case(w, "linear", F.linear, [r(4, 5), r(3, 5), r(3)])
    op_case(w, "linear_nobias", lambda x, W: F.linear(x, W), [r(4, 5), r(3, 5)])
    op_case(w, "matmul", torch.matmul, [r(3, 4), r(4, 5)])
    op_case(w, "conv", lambda x, W, b: F.conv2d(x, W, b, stride=2, padding=1),
            [r(2, 3, 7, 7), r(4, 3, 3, 3), r(4)])
    op_case(w, "conv_dil", lambda x, W: F.conv2d(x, W, None, stride=1, padding=2, dilation=2),
            [r(2, 3, 7, 7), r(4, 3, 3, 3)])
    op_case(w, "convt", lambda x, W, b: F.conv_transpose2d(x, W, b, stride=2, padding=1,
                                                           output_padding=1),
            [r(2, 3, 5, 5), r(3, 4, 3, 3), r(4)])
    # batch norm, training: also the running stats after one update (start 0.1.., 1.5..)
    x, g, b = r(4, 3, 5, 5), r(3), r(3)
    rm, rv = torch.linspace(-0.2, 0.2, 3), torch.linspace(0.5, 1.5, 3)
    w.put("bn_train.rm0", rm)
    w.put("bn_train.rv0", rv)
    rm1, rv1 = rm.clone(), rv.clone()
    op_case(w, "bn_train", lambda x, g, b: F.batch_norm(x, rm1, rv1, g, b, True, 0.1, 1e-5),
            [x, g, b])
    w.put("bn_train.rm1", rm1)
    w.put("bn_train.rv1", rv1)
    op_case(w, "bn_eval", lambda x, g, b: F.batch_norm(x, rm, rv, g, b, False, 0.1, 1e-5),
            [x, g, b])
    x1, g1, b1 = r(8, 6), r(6), r(6)
    rm2, rv2 = torch.zeros(6), torch.ones(6)
    op_case(w, "bn1d", lambda x, g, b: F.batch_norm(x, rm2, rv2, g, b, True, 0.1, 1e-5),
            [x1, g1, b1])
    w.put("bn1d.rm1", rm2)
    w.put("bn1d.rv1", rv2)
    # pooling: distinct values so max pooling has no ties
    xp = (torch.randperm(2 * 3 * 8 * 8).float() * 0.01).reshape(2, 3, 8, 8)
    op_case(w, "maxpool", lambda x: F.max_pool2d(x, 2, 2), [xp])
    op_case(w, "maxpool_pad", lambda x: F.max_pool2d(x, 3, 2, 1), [xp])
    op_case(w, "avgpool", lambda x: F.avg_pool2d(x, 2, 2), [r(2, 3, 8, 8)])
    op_case(w, "avgpool_pad", lambda x: F.avg_pool2d(x, 3, 2, 1), [r(2, 3, 8, 8)])
    op_case(w, "avgpool_excl", lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
            [r(2, 3, 8, 8)])
    op_case(w, "apool", lambda x: F.adaptive_avg_pool2d(x, (3, 3)), [r(2, 3, 7, 7)])
    op_case(w, "apool1", lambda x: F.adaptive_avg_pool2d(x, (1, 1)), [r(2, 3, 4, 4)])
    e = r(3, 4, 5)
    op_case(w, "relu", F.relu, [e])
    op_case(w, "leaky_relu", lambda x: F.leaky_relu(x, 0.1), [e])
    op_case(w, "elu", lambda x: F.elu(x, 1.0), [e])
    op_case(w, "tanh", torch.tanh, [e])
    op_case(w, "sigmoid", torch.sigmoid, [e])
    op_case(w, "softmax", lambda x: F.softmax(x, -1), [r(6, 10)])
    op_case(w, "log_softmax", lambda x: F.log_softmax(x, -1), [r(6, 10)])
    op_case(w, "add", torch.add, [r(3, 4), r(3, 4)])
    op_case(w, "flatten", lambda x: torch.flatten(x, 1), [r(2, 3, 2, 2)])
    op_case(w, "sum", torch.sum, [r(3, 4)])
    t = torch.randint(0, 7, (6,))
    op_case(w, "ce", lambda x, t: F.cross_entropy(x, t), [r(6, 7), t])
    op_case(w, "ce_ls", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), [r(6, 7), t])
    op_case(w, "nll", lambda x, t: F.nll_loss(x, t), [F.log_softmax(r(6, 7), -1), t])
    op_case(w, "mse", F.mse_loss, [r(4, 5), r(4, 5)], [0])
    op_case(w, "l1", F.l1_loss, [r(4, 5), r(4, 5)], [0])
    op_case(w, "bce", F.binary_cross_entropy, [torch.rand(4, 5) * 0.9 + 0.05, torch.rand(4, 5)],
            [0])
    op_case(w, "bce_logits", F.binary_cross_entropy_with_logits, [r(4, 5), torch.rand(4, 5)],
            [0])
    # 16-channel chain: ct keeps these activations in oneDNN's blocked layout (nChw16c)
    rmb, rvb = torch.zeros(16), torch.ones(16)

    def chain(x, w1, b1, g, bb, w2):
        h = F.relu(F.batch_norm(F.conv2d(x, w1, b1, padding=1), rmb, rvb, g, bb, True, 0.1, 1e-5))
        h = h + F.conv2d(h, w2, None, padding=1)
        h = F.max_pool2d(F.avg_pool2d(torch.tanh(h), 1), 2)
        return torch.flatten(h, 1)

    op_case(w, "blk_chain", chain, [r(2, 3, 6, 6), r(16, 3, 3, 3) * 0.3, r(16), r(16), r(16),
                                    r(16, 16, 3, 3) * 0.1])
    # products past one register block of trainer/cpu/gemm.c (6x16 blocks of c, 8x8 transposes):
    # full blocks, a row edge (13 = 6+6+1), a column edge (35 = 16+16+3), a k not a multiple of 8;
    # a weight used twice, so its gradient is added to in place (gradient accumulation's path)
    op_case(w, "linear_blocks", F.linear, [r(13, 37), r(35, 37), r(35)])
    op_case(w, "matmul_blocks", torch.matmul, [r(13, 37), r(37, 35)])
    op_case(w, "linear_shared", lambda x1, x2, W, b: F.linear(x1, W, b) + F.linear(x2, W, b),
            [r(13, 37), r(13, 37), r(35, 37), r(35)])
    # past 2^20 multiply-adds, where one thread sends a product to gemm.c and two to oneDNN:
    # k cut into blocks of 256 (the weight gradient's k = 270 = 256 + 14), a transposed a
    # (dy^T x) packed in panels of 6 rows (67 = 11 * 6 + 1), a column edge (61 = 3 * 16 + 13)
    op_case(w, "linear_big", F.linear, [r(270, 61), r(67, 61), r(67)])
    # a micro-batch's few rows past 2^20 multiply-adds (30 x 190 x 191), where one thread on an
    # AVX-512 CPU sends the forward to trainer/cpu/gemm_rows.c: 30 of its 32 rows (the rest
    # zero), 191 outputs = 15 blocks of 12 and one of 11
    op_case(w, "linear_rows", F.linear, [r(30, 190), r(191, 190), r(191)])
    w.close()


class Residual(nn.Sequential):
    """y = x + Sequential(children)(x), named like nn.Sequential (as ct's Residual)."""

    def forward(self, x):
        return x + super().forward(x)


def conv_bn(cin, cout):
    s = nn.Sequential()
    s.add_module("conv", nn.Conv2d(cin, cout, 3, padding=1, bias=False))
    s.add_module("bn", nn.BatchNorm2d(cout))
    s.add_module("relu", nn.ReLU())
    return s


def composite():
    """Uses every module kind; the ct test builds the same tree."""
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1),                         # 0
        nn.BatchNorm2d(4),                                     # 1
        nn.LeakyReLU(0.1),                                     # 2
        Residual(conv_bn(4, 4), conv_bn(4, 4)),                # 3
        nn.MaxPool2d(2),                                       # 4  -> (4,4,4)
        nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1),  # 5 -> (3,8,8)
        nn.ELU(),                                              # 6
        nn.AvgPool2d(2),                                       # 7 -> (3,4,4)
        nn.AdaptiveAvgPool2d((2, 2)),                          # 8 -> (3,2,2)
        nn.Flatten(),                                          # 9 -> 12
        nn.Linear(12, 8),                                      # 10
        nn.BatchNorm1d(8),                                     # 11
        nn.Tanh(),                                             # 12
        nn.Dropout(0.0),                                       # 13
        nn.Linear(8, 5),                                       # 14
        nn.Sigmoid(),                                          # 15
    )


def modules(path):
    torch.manual_seed(99)
    w = Writer(path)
    net = composite()
    for k, v in net.state_dict().items():
        w.put("sd." + k, v)
    x = torch.randn(3, 2, 8, 8)
    w.put("x", x)
    y = net(x)
    gy = torch.randn_like(y)
    y.backward(gy)
    w.put("y", y)
    w.put("gy", gy)
    for k, p in net.named_parameters():
        w.put("grad." + k, p.grad)
    for k, v in net.state_dict().items():  # buffers after one training forward
        if "running" in k:
            w.put("after." + k, v)
    net.eval()
    with torch.no_grad():
        w.put("y_eval", net(x))
    w.close()


def small_cnn():
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 3 * 3, 32), nn.ReLU(), nn.Linear(32, 10))


def train(path):
    torch.manual_seed(7)
    w = Writer(path)
    steps, batch = 20, 16
    xs = torch.randn(steps, batch, 1, 14, 14)
    ys = torch.randint(0, 10, (steps, batch))
    w.put("xs", xs)
    w.put("ys", ys)
    net0 = small_cnn()
    for k, v in net0.state_dict().items():
        w.put("init." + k, v)
    for mode in ("sgd", "adam"):
        net = small_cnn()
        net.load_state_dict(net0.state_dict())
        if mode == "sgd":
            opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
            sched = None
        else:
            opt = torch.optim.Adam(net.parameters(), lr=2e-3)
            sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[6, 12], gamma=0.5)
        losses = []
        for s in range(steps):
            opt.zero_grad()
            loss = F.cross_entropy(net(xs[s]), ys[s])
            loss.backward()
            opt.step()
            if sched:
                sched.step()
            losses.append(loss.item())
        w.put(mode + ".losses", torch.tensor(losses))
    w.close()


def transformer(path):
    """The transformer ops, in op_case's records (seeded on their own: ops.bin stays as it is)."""
    torch.manual_seed(4321)
    w = Writer(path)
    r = torch.randn
    x, g, b = r(2, 3, 8), r(8), r(8)
    op_case(w, "layer_norm", lambda x, g, b: F.layer_norm(x, (8,), g, b, 1e-5), [x, g, b])
    op_case(w, "layer_norm_plain", lambda x: F.layer_norm(x, (100,), None, None, 1e-5),
            [r(5, 100) * 3 + 1])
    op_case(w, "layer_norm_wide", lambda x, g, b: F.layer_norm(x, (768,), g, b, 1e-5),
            [r(16, 768), r(768), r(768)])
    e = r(4, 9) * 2.5
    op_case(w, "gelu", lambda x: F.gelu(x), [e])
    op_case(w, "gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), [e])
    op_case(w, "mul", torch.mul, [r(3, 4), r(3, 4)])
    op_case(w, "mul_self", lambda x: x * x, [r(3, 4)])
    idx = torch.tensor([[1, 3, 3, 0, 9], [0, 2, 1, 1, 7]])
    op_case(w, "embedding", lambda i, W: F.embedding(i, W), [idx, r(10, 6)])
    op_case(w, "embedding_pad", lambda i, W: F.embedding(i, W, padding_idx=0), [idx, r(10, 6)])
    op_case(w, "permute", lambda x: x.permute(0, 2, 1, 3), [r(2, 3, 4, 5)])
    op_case(w, "transpose", lambda x: x.transpose(1, 2), [r(3, 4, 5)])
    op_case(w, "slice1", lambda x: x[:, 3:7], [r(4, 9)])
    op_case(w, "slice0", lambda x: x[1:3], [r(4, 2, 3)])
    op_case(w, "bmm", torch.bmm, [r(2, 3, 4), r(2, 4, 5)])
    op_case(w, "bmm_ta", lambda a, b: torch.bmm(a.transpose(1, 2), b), [r(2, 4, 3), r(2, 4, 5)])
    op_case(w, "bmm_tb", lambda a, b: torch.bmm(a, b.transpose(1, 2)), [r(2, 3, 4), r(2, 5, 4)])
    op_case(w, "bmm_tab", lambda a, b: torch.bmm(a.transpose(1, 2), b.transpose(1, 2)),
            [r(2, 4, 3), r(2, 5, 4)])
    mask = torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)
    op_case(w, "softmax_causal", lambda x: F.softmax(x.masked_fill(mask, float("-inf")), -1),
            [r(2, 3, 5, 5)])

    def attention(q, k, v, causal):
        s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        if causal:
            n = q.shape[-2]
            s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
        return F.softmax(s, -1) @ v
    op_case(w, "attention", lambda q, k, v: attention(q, k, v, False),
            [r(2, 3, 7, 8), r(2, 3, 7, 8), r(2, 3, 7, 8)])
    op_case(w, "attention_causal", lambda q, k, v: attention(q, k, v, True),
            [r(2, 3, 7, 8), r(2, 3, 7, 8), r(2, 3, 7, 8)])
    gpt(w)
    # longer rows: 37 = 2 x 16 + 5 keys (gemm.c's panels of 16 columns), 6 x 6 + 1 rows (its
    # blocks of 6 rows), with head size 16
    torch.manual_seed(37)
    op_case(w, "attention_long", lambda q, k, v: attention(q, k, v, False),
            [r(1, 2, 37, 16), r(1, 2, 37, 16), r(1, 2, 37, 16)])
    op_case(w, "attention_long_causal", lambda q, k, v: attention(q, k, v, True),
            [r(1, 2, 37, 16), r(1, 2, 37, 16), r(1, 2, 37, 16)])

    # q, k and v packed in one (B, T, 3C) tensor (ct_nn_attention_qkv): 2 heads of 16
    def attention_qkv(x, heads, causal):
        b, t, c = x.shape[0], x.shape[1], x.shape[2] // 3
        q, k, v = (u.view(b, t, heads, c // heads).transpose(1, 2) for u in x.split(c, 2))
        return attention(q, k, v, causal).transpose(1, 2).reshape(b, t, c)
    op_case(w, "attention_qkv", lambda x: attention_qkv(x, 2, False), [r(2, 37, 96)])
    op_case(w, "attention_qkv_causal", lambda x: attention_qkv(x, 2, True), [r(2, 37, 96)])
    # past one block of query rows (ct's CPU kernel takes 64 at a time: 150 = 64 + 64 + 22),
    # whose causal products skip the masked keys (trainer/cpu/gemm.c's bands); head size 24 =
    # one panel of 16 columns and an edge of 8
    op_case(w, "attention_blocks_causal", lambda q, k, v: attention(q, k, v, True),
            [r(1, 1, 150, 24), r(1, 1, 150, 24), r(1, 1, 150, 24)])
    w.close()


def gpt(w):
    """A small GPT's state dict (without the tied lm_head.weight), a batch, the logits, the
    loss and every parameter's gradient (the tied weight's: both uses summed)."""
    torch.manual_seed(2024)
    m = GPT(2, 2, 16, 8, 11)
    for k, v in m.state_dict().items():
        if k != "lm_head.weight":
            w.put("gpt.sd." + k, v)
    idx, tgt = torch.randint(0, 11, (3, 8)), torch.randint(0, 11, (3, 8))
    w.put("gpt.idx", idx)
    w.put("gpt.targets", tgt.view(-1))
    logits = m(idx).view(-1, 11)
    loss = F.cross_entropy(logits, tgt.view(-1))
    loss.backward()
    w.put("gpt.logits", logits)
    w.put("gpt.loss", loss.reshape(1))
    for k, p in m.named_parameters():
        w.put("gpt.grad." + k, p.grad)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "ref")
    os.makedirs(out, exist_ok=True)
    ops(os.path.join(out, "ops.bin"))
    transformer(os.path.join(out, "transformer.bin"))
    modules(os.path.join(out, "modules.bin"))
    train(os.path.join(out, "train.bin"))
