#!/bin/sh
# bench/ddp_throughput/run.sh — data-parallel training speed, the per-step job of DDP: ct's
# trainer (examples/trainer_fashion_mnist: 2 replica actors on an embedded cluster, one thread
# each, gradients averaged in buckets during backward over shared memory) against PyTorch 1.13
# DDP (gloo, 2 processes by torch.multiprocessing.spawn, one thread each), same CNN, Adam,
# batch 64 per replica, DistributedSampler over the first LIMIT (default 20000) Fashion-MNIST
# images. Samples/s of epoch 2 (steady state: all ranks' samples over the slowest rank's time
# in the training loop; startup and evaluation not counted), best of RUNS (default 2) each.
# BENCH_TAG (scripts/run-bench.sh sets "[avx2]" for its pass with ONEDNN_MAX_CPU_ISA=AVX2 and
# ATEN_CPU_CAPABILITY=avx2) is appended to the rows' names.
# Last line: ddp_throughput: ct=<samples/s> ref=<samples/s> samples/s ratio=<ct/ref>
set -eu
BUILD=${CT_BUILD:-build}
PY=${REF_PYTHON:-/usr/bin/python3}
RUNS=${RUNS:-2}
LIMIT=${LIMIT:-20000}
TAG=${BENCH_TAG:-}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$BUILD/bin/trainer_fashion_mnist"
[ -x "$BIN" ] || { echo "ddp_throughput: $BIN not built" >&2; exit 1; }
epoch2() { sed -n 's/^epoch 2:.*samples_per_s=\([0-9.]*\).*/\1/p'; }
best() { sort -n | tail -n 1; }
ct_all=""
ref_all=""
i=0
while [ "$i" -lt "$RUNS" ]; do
    c=$("$BIN" --replicas 2 --epochs 2 --limit "$LIMIT" 2>/dev/null | epoch2)
    r=$("$PY" "$HERE/ref_torch.py" "$LIMIT" 2>/dev/null | epoch2)
    echo "ddp_throughput$TAG run $i: ct ${c:-?} samples/s, torch DDP ${r:-?} samples/s"
    ct_all="$ct_all$c
"
    ref_all="$ref_all$r
"
    i=$((i + 1))
done
ct=$(printf '%s' "$ct_all" | best)
ref=$(printf '%s' "$ref_all" | best)
awk -v t="$TAG" -v c="$ct" -v r="$ref" 'BEGIN {
    printf "ddp_throughput%s: ct=%.1f ref=%.1f samples/s ratio=%.2f\n", t, c, r, (r > 0 ? c / r : 0) }'
