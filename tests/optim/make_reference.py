#!/usr/bin/python3
"""tests/optim/make_reference.py — PyTorch 1.13 reference values for the optim, sched and loss
tests. Run with Debian's /usr/bin/python3 (which has torch); writes tests/optim/ref/*.txt, which
are committed so the C tests never need torch.

File format: one line per array, `key v0 v1 ...` (floats as %.9g, lrs as %.17g). The C tests
(tests/optim/test_*.c) hard-code the same cases and options; keep the two in sync.
"""
import math
import os

import torch
import torch.nn.functional as F

torch.manual_seed(1234)
torch.set_default_dtype(torch.float32)
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "ref")
os.makedirs(OUT, exist_ok=True)


def fmt(vals, spec="%.9g"):
    return " ".join(spec % v for v in vals)


class Writer:
    def __init__(self, name):
        self.f = open(os.path.join(OUT, name), "w")

    def put(self, key, t, spec="%.9g"):
        if isinstance(t, torch.Tensor):
            vals = t.detach().reshape(-1).tolist()
        else:
            vals = list(t)
        self.f.write(key + " " + fmt(vals, spec) + "\n")

    def close(self):
        self.f.close()


# ---- optimizers ---------------------------------------------------------------------------
# Two parameters: w (3,4) and b (5), flattened as one vector of 17: w first.
STEPS = 10
OPTIM_CASES = [
    # name, class, kwargs, two_groups (b gets lr*0.1 in a second group)
    ("sgd_plain", torch.optim.SGD, dict(lr=0.1), False),
    ("sgd_mom", torch.optim.SGD, dict(lr=0.1, momentum=0.9), False),
    ("sgd_damp", torch.optim.SGD, dict(lr=0.05, momentum=0.8, dampening=0.5), False),
    ("sgd_nesterov", torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True), False),
    ("sgd_wd", torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01), False),
    ("sgd_max", torch.optim.SGD, dict(lr=0.1, momentum=0.5, weight_decay=0.1, maximize=True), False),
    ("sgd_groups", torch.optim.SGD, dict(lr=0.1, momentum=0.9), True),
    ("adam_default", torch.optim.Adam, dict(lr=1e-2), False),
    ("adam_wd", torch.optim.Adam, dict(lr=1e-2, weight_decay=0.1), False),
    ("adam_amsgrad", torch.optim.Adam, dict(lr=1e-2, amsgrad=True), False),
    ("adam_betas", torch.optim.Adam, dict(lr=3e-2, betas=(0.8, 0.99), eps=1e-6), False),
    ("adam_max", torch.optim.Adam, dict(lr=1e-2, maximize=True), False),
    ("adam_groups", torch.optim.Adam, dict(lr=1e-2), True),
    ("adamw_default", torch.optim.AdamW, dict(lr=1e-2), False),
    ("adamw_wd", torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1), False),
    ("adamw_amsgrad", torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.05, amsgrad=True), False),
]


def make_optim():
    w = Writer("optim.txt")
    for name, cls, kw, two_groups in OPTIM_CASES:
        pw = torch.randn(3, 4, requires_grad=True)
        pb = torch.randn(5, requires_grad=True)
        if two_groups:
            groups = [{"params": [pw]}, {"params": [pb], "lr": kw["lr"] * 0.1}]
        else:
            groups = [pw, pb]
        opt = cls(groups, foreach=False, **kw)
        w.put(name + ".init", torch.cat([pw.reshape(-1), pb.reshape(-1)]))
        for k in range(STEPS):
            g = torch.randn(17)
            if k % 3 == 2:
                g = g * 10  # a large step now and then
            pw.grad = g[:12].reshape(3, 4).clone()
            pb.grad = g[12:].clone()
            opt.step()
            w.put("%s.grad.%d" % (name, k), g)
            w.put("%s.after.%d" % (name, k), torch.cat([pw.reshape(-1), pb.reshape(-1)]))
    w.close()


def make_clip():
    w = Writer("clip.txt")
    for name, max_norm, norm_type in [("l2", 1.0, 2.0), ("l2_noclip", 100.0, 2.0),
                                      ("l1", 2.0, 1.0), ("inf", 0.5, math.inf),
                                      ("p3", 1.5, 3.0)]:
        pw = torch.randn(3, 4, requires_grad=True)
        pb = torch.randn(5, requires_grad=True)
        pw.grad = torch.randn(3, 4)
        pb.grad = torch.randn(5) * 3
        g0 = torch.cat([pw.grad.reshape(-1), pb.grad.reshape(-1)])
        total = torch.nn.utils.clip_grad_norm_([pw, pb], max_norm, norm_type)
        w.put(name + ".grad", g0)
        w.put(name + ".total", [float(total)])
        w.put(name + ".after", torch.cat([pw.grad.reshape(-1), pb.grad.reshape(-1)]))
    pw = torch.randn(3, 4, requires_grad=True)
    pw.grad = torch.randn(3, 4)
    w.put("value.grad", pw.grad)
    torch.nn.utils.clip_grad_value_([pw], 0.5)
    w.put("value.after", pw.grad)
    w.close()


# ---- schedulers ---------------------------------------------------------------------------
SCHED_STEPS = 30
PLATEAU_METRICS = [1.0, 0.9, 0.85, 0.85, 0.86, 0.849, 0.84, 0.84, 0.84, 0.7, 0.7, 0.7, 0.7,
                   0.71, 0.7, 0.65, 0.66, 0.66, 0.66, 0.66, 0.66, 0.5, 0.5, 0.5, 0.5, 0.5,
                   0.5, 0.5, 0.5, 0.5]
PLATEAU_MAX_METRICS = [0.1, 0.2, 0.22, 0.3, 0.3, 0.31, 0.36, 0.4, 0.4, 0.44, 0.5, 0.5, 0.52,
                       0.6, 0.6, 0.6, 0.6, 0.66, 0.7, 0.7, 0.7, 0.7, 0.7, 0.8, 0.8, 0.8, 0.8,
                       0.8, 0.8, 0.8]
S = torch.optim.lr_scheduler
SCHED_CASES = [
    ("steplr", lambda o: S.StepLR(o, step_size=7, gamma=0.5), None),
    ("multistep", lambda o: S.MultiStepLR(o, milestones=[5, 12, 12, 20], gamma=0.3), None),
    ("exponential", lambda o: S.ExponentialLR(o, gamma=0.9), None),
    ("cosine", lambda o: S.CosineAnnealingLR(o, T_max=10, eta_min=0.001), None),
    ("cosine7", lambda o: S.CosineAnnealingLR(o, T_max=7), None),
    ("linear", lambda o: S.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=8), None),
    ("linear_down", lambda o: S.LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=10),
     None),
    ("seq_warm_cos", lambda o: S.SequentialLR(
        o, [S.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=5),
            S.CosineAnnealingLR(o, T_max=20, eta_min=1e-4)], milestones=[5]), None),
    ("seq4", lambda o: S.SequentialLR(
        o, [S.ExponentialLR(o, gamma=0.9), S.StepLR(o, step_size=3, gamma=0.5),
            S.MultiStepLR(o, milestones=[2, 4], gamma=0.5),
            S.LinearLR(o, start_factor=0.5, total_iters=4)], milestones=[4, 10, 16]), None),
    ("plateau_min", lambda o: S.ReduceLROnPlateau(o, mode="min", factor=0.5, patience=2,
                                                  cooldown=1, min_lr=0.004), PLATEAU_METRICS),
    ("plateau_max_abs", lambda o: S.ReduceLROnPlateau(o, mode="max", factor=0.3, patience=0,
                                                      threshold=0.05, threshold_mode="abs"),
     PLATEAU_MAX_METRICS),
    ("plateau_max_rel", lambda o: S.ReduceLROnPlateau(o, mode="max", factor=0.5, patience=1,
                                                      threshold=0.1, threshold_mode="rel",
                                                      cooldown=2), PLATEAU_MAX_METRICS),
    # eps 0.01: a reduction smaller than it is skipped (the second one of each group)
    ("plateau_min_abs_eps", lambda o: S.ReduceLROnPlateau(o, mode="min", factor=0.1, patience=1,
                                                          threshold=0.02, threshold_mode="abs",
                                                          eps=0.01), PLATEAU_METRICS),
]


def make_sched():
    w = Writer("sched.txt")
    for name, ctor, metrics in SCHED_CASES:
        p0 = torch.zeros(2, requires_grad=True)
        p1 = torch.zeros(2, requires_grad=True)
        opt = torch.optim.SGD([{"params": [p0]}, {"params": [p1], "lr": 0.05}], lr=0.1)
        s = ctor(opt)
        w.put(name + ".lr.0", [g["lr"] for g in opt.param_groups], "%.17g")
        for k in range(1, SCHED_STEPS + 1):
            opt.step()
            if metrics is None:
                s.step()
            else:
                s.step(metrics[k - 1])
            w.put("%s.lr.%d" % (name, k), [g["lr"] for g in opt.param_groups], "%.17g")
        if metrics is not None:
            w.put(name + ".metric", metrics, "%.17g")
    w.close()


# warmup_cosine (ct_sched_warmup_cosine_new): LinearLR + CosineAnnealingLR in SequentialLR.
# name, warmup_steps, total_steps, start_factor, eta_min; 40 steps (past total_steps too).
WARMUP_STEPS = 40
WARMUP_CASES = [
    ("wc_4_20", 4, 20, 0.2, 1e-3),
    ("wc_1_10", 1, 10, 1.0 / 3, 0.0),
    ("wc_10_35", 10, 35, 0.01, 0.02),
]


def make_warmup_cosine():
    w = Writer("sched_warmup.txt")
    for name, warm, total, sf, eta_min in WARMUP_CASES:
        p0 = torch.zeros(2, requires_grad=True)
        p1 = torch.zeros(2, requires_grad=True)
        opt = torch.optim.SGD([{"params": [p0]}, {"params": [p1], "lr": 0.05}], lr=0.1)
        s = S.SequentialLR(opt, [S.LinearLR(opt, start_factor=sf, end_factor=1.0,
                                            total_iters=warm),
                                 S.CosineAnnealingLR(opt, T_max=total - warm, eta_min=eta_min)],
                           milestones=[warm])
        w.put(name + ".lr.0", [g["lr"] for g in opt.param_groups], "%.17g")
        for k in range(1, WARMUP_STEPS + 1):
            opt.step()
            s.step()
            w.put("%s.lr.%d" % (name, k), [g["lr"] for g in opt.param_groups], "%.17g")
    w.close()


# ---- losses -------------------------------------------------------------------------------
RED = ["mean", "sum", "none"]


def put_case(w, key, out, x, gout):
    """Forward value, and the gradient w.r.t. x for upstream gradient gout."""
    w.put(key + ".out", out)
    w.put(key + ".gout", gout)
    (g,) = torch.autograd.grad(out, x, gout)
    w.put(key + ".grad", g)


def gout_for(out):
    if out.dim() == 0:
        return torch.tensor(0.7)
    return torch.randn(out.shape)


def make_loss():
    w = Writer("loss.txt")
    # cross entropy / nll: (6,5), targets with class 2 twice (ignored in the ign variants)
    logits = (torch.randn(6, 5) * 2).requires_grad_()
    target = torch.tensor([0, 3, 2, 4, 2, 1])
    weight = torch.rand(5) + 0.5
    w.put("ce.logits", logits)
    w.put("ce.target", target.float())
    w.put("ce.weight", weight)
    variants = {
        "plain": dict(),
        "ls": dict(label_smoothing=0.1),
        "ign": dict(ignore_index=2),
        "w": dict(weight=weight),
        "wlsign": dict(weight=weight, label_smoothing=0.2, ignore_index=2),
    }
    for v, kw in variants.items():
        for r in RED:
            out = F.cross_entropy(logits, target, reduction=r, **kw)
            put_case(w, "ce.%s.%s" % (v, r), out, logits, gout_for(out))
    logp = F.log_softmax(torch.randn(6, 5), dim=1).requires_grad_()
    w.put("nll.logp", logp)
    for v, kw in {"plain": dict(), "w": dict(weight=weight), "ign": dict(ignore_index=2)}.items():
        for r in RED:
            out = F.nll_loss(logp, target, reduction=r, **kw)
            put_case(w, "nll.%s.%s" % (v, r), out, logp, gout_for(out))
    # mse / l1: (4,5); l1 has one tie (gradient 0 there)
    x = torch.randn(4, 5).requires_grad_()
    y = torch.randn(4, 5)
    y[0, 0] = x[0, 0].detach()
    w.put("el.input", x)
    w.put("el.target", y)
    for r in RED:
        out = F.mse_loss(x, y, reduction=r)
        put_case(w, "mse.%s" % r, out, x, gout_for(out))
        out = F.l1_loss(x, y, reduction=r)
        put_case(w, "l1.%s" % r, out, x, gout_for(out))
    # bce: probabilities (4,3), soft targets with exact 0 and 1
    p = torch.sigmoid(torch.randn(4, 3)).requires_grad_()
    t = torch.rand(4, 3)
    t[0, 0], t[1, 1] = 0.0, 1.0
    bw = torch.rand(4, 3) + 0.5
    w.put("bce.input", p)
    w.put("bce.target", t)
    w.put("bce.weight", bw)
    for v, kw in {"plain": dict(), "w": dict(weight=bw)}.items():
        for r in RED:
            out = F.binary_cross_entropy(p, t, reduction=r, **kw)
            put_case(w, "bce.%s.%s" % (v, r), out, p, gout_for(out))
    # bce with logits: (4,3) with huge logits (stability), pos_weight (3)
    z = torch.randn(4, 3) * 3
    z[0, 0], z[1, 1], z[2, 2] = 40.0, -40.0, 90.0
    z.requires_grad_()
    pw = torch.tensor([0.5, 2.0, 3.0])
    w.put("bcel.input", z)
    w.put("bcel.target", t)
    w.put("bcel.weight", bw)
    w.put("bcel.pos_weight", pw)
    vs = {"plain": dict(), "pw": dict(pos_weight=pw), "w": dict(weight=bw),
          "pww": dict(weight=bw, pos_weight=pw)}
    for v, kw in vs.items():
        for r in RED:
            out = F.binary_cross_entropy_with_logits(z, t, reduction=r, **kw)
            put_case(w, "bcel.%s.%s" % (v, r), out, z, gout_for(out))
    w.close()


if __name__ == "__main__":
    assert torch.__version__.startswith("1.13"), torch.__version__
    make_optim()
    make_clip()
    make_sched()
    make_warmup_cosine()
    make_loss()
    print("wrote", OUT)
