#!/usr/bin/python3
"""Reads a ct checkpoint as any tool would: a safetensors file parsed with json + struct only.

Checks the layout (u64 header length, JSON header, data offsets contiguous and in bounds,
dtype sizes), the ct metadata keys, and prints
`ok tensors=<n> epoch=<e> sum_first=<s>` (sum of the first tensor's values) for the C test to compare. If the `safetensors`
package is importable it is asked to read the file too."""
import json
import struct
import sys

SIZES = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1}


def main(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__")
    for k in ("format", "format_version", "epoch", "step", "model", "optimizer", "config",
              "optimizer_state", "rng", "seed"):
        assert isinstance(meta.get(k), str), "metadata %s missing" % k
    assert meta["format"] == "ct-checkpoint"
    json.loads(meta["optimizer_state"])
    if "scheduler_state" in meta:
        json.loads(meta["scheduler_state"])
    end = 0
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, t = e["data_offsets"]
        count = 1
        for d in e["shape"]:
            count *= d
        assert b == end, "%s starts at %d, previous ended at %d" % (name, b, end)
        assert t - b == count * SIZES[e["dtype"]], "%s: size" % name
        end = t
    assert end == len(data), "data section %d bytes, tensors cover %d" % (len(data), end)
    first = min(header.values(), key=lambda e: e["data_offsets"][0])
    b, t = first["data_offsets"]
    vals = struct.unpack("<%df" % ((t - b) // 4), data[b:t])
    try:
        import safetensors  # noqa: F401  (optional)
        from safetensors.numpy import load_file
        load_file(path)
    except ImportError:
        pass
    print("ok tensors=%d epoch=%s sum_first=%.12g" % (len(header), meta["epoch"], sum(vals)))


if __name__ == "__main__":
    main(sys.argv[1])
