#!/usr/bin/env python3
"""tests/trainer/check_tensorboard.py LOG_DIR — reads the TensorBoard event file that a
trainer_train with log_dir = LOG_DIR wrote, with TensorBoard's own EventAccumulator, and checks
it against LOG_DIR/metrics.jsonl: the file version, the same set of scalar tags, and for every
tag the same steps, values (as float32: TensorBoard's simple_value) and wall times. Exit 0 when
all agree, 1 on a mismatch, 77 when the tensorboard package is not installed (test_progress.c
then reports a skip). Run by test_progress.c."""
import glob
import json
import os
import struct
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    print("check_tensorboard: no tensorboard package (python3 -m pip install tensorboard)")
    sys.exit(77)


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def expected_scalars(records):
    """tag -> [(step, value, wall_time)] as trainer.h documents them."""
    exp = {}

    def add(tag, step, value, wall):
        if value is not None:
            exp.setdefault(tag, []).append((step, f32(value), wall))

    for r in records:
        s, w = r["step"], r["wall_time"]
        if r["type"] == "step":
            add("train/loss", s, r["loss"], w)
            add("train/lr", s, r["lr"], w)
            if "grad_norm" in r:
                add("train/grad_norm", s, r["grad_norm"], w)
            add("train/samples_per_s", s, r["samples_per_s"], w)
            for i, v in enumerate(r["step_s"]):
                add("train/step_s/rank%d" % i, s, v, w)
            for i, v in enumerate(r["wait_s"]):
                add("train/wait_s/rank%d" % i, s, v, w)
            prefix = "train/metrics/"
        elif r["type"] == "epoch":
            add("epoch/train_loss", s, r["train_loss"], w)
            add("epoch/samples_per_s", s, r["samples_per_s"], w)
            add("epoch/seconds", s, r["epoch_seconds"], w)
            prefix = "epoch/metrics/"
        elif r["type"] == "val":
            add("val/loss", s, r["val_loss"], w)
            add("val/accuracy", s, r["val_accuracy"], w)
            prefix = "val/metrics/"
        else:
            raise SystemExit("unknown record type %r" % r["type"])
        for name, v in r["metrics"].items():
            add(prefix + name, s, v, w)
    return exp


def main():
    d = sys.argv[1]
    files = glob.glob(os.path.join(d, "events.out.tfevents.*"))
    if len(files) != 1:
        print("check_tensorboard: %d event files in %s, expected 1" % (len(files), d))
        return 1
    with open(os.path.join(d, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    exp = expected_scalars(records)
    acc = EventAccumulator(d, size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    bad = 0
    if acc.file_version != 2.0:
        print("file_version %r, expected 2.0 (\"brain.Event:2\")" % acc.file_version)
        bad += 1
    tags = set(acc.Tags()["scalars"])
    if tags != set(exp):
        print("tags differ: only in the event file %s, only in metrics.jsonl %s"
              % (sorted(tags - set(exp)), sorted(set(exp) - tags)))
        bad += 1
    n = 0
    for tag in sorted(tags & set(exp)):
        got = [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)]
        if got != exp[tag]:
            print("%s: event file %s\n  metrics.jsonl %s" % (tag, got[:4], exp[tag][:4]))
            bad += 1
        n += len(got)
    print("check_tensorboard: %d tags, %d scalars %s" % (len(tags), n,
                                                       "agree" if not bad else "DIFFER"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
