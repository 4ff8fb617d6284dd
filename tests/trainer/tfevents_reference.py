#!/usr/bin/env python3
"""tests/trainer/tfevents_reference.py — the reference bytes of test_tfevents.c, computed
independently of ct: a bit-by-bit CRC-32C (no tables, no library), TensorFlow's mask, and the
two Event protobufs encoded by hand from the wire format (field numbers of TensorFlow's
event.proto / summary.proto). Prints the C lines pasted into test_tfevents.c. Standard
library only."""
import struct


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def key(field, wire):
    return varint(field << 3 | wire)


def ld(field, payload):  # length-delimited
    return key(field, 2) + varint(len(payload)) + payload


def record(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked(n)) + data + struct.pack("<I", masked(data))


# Event{wall_time = 1700000000.5, file_version = "brain.Event:2"}
ev1 = key(1, 1) + struct.pack("<d", 1700000000.5) + ld(3, b"brain.Event:2")
# Event{wall_time = 1700000001.25, step = 7, summary = {value = [{tag "train/loss",
# simple_value 0.5}, {tag "lr", simple_value 1e-3}]}}
vals = [(b"train/loss", 0.5), (b"lr", 1e-3)]
summary = b"".join(ld(1, ld(1, t) + key(2, 5) + struct.pack("<f", v)) for t, v in vals)
ev2 = key(1, 1) + struct.pack("<d", 1700000001.25) + key(2, 0) + varint(7) + ld(5, summary)
data = record(ev1) + record(ev2)

print("/* masked CRC-32C of \"123456789\" and of \"\" */")
print("#define REF_MASKED_123456789 0x%08Xu" % masked(b"123456789"))
print("#define REF_MASKED_EMPTY 0x%08Xu" % masked(b""))
print("/* the two records, %d bytes */" % len(data))
print('static const char *ref_hex = "%s";' % data.hex())
