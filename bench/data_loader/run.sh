#!/usr/bin/env bash
# bench/data_loader: ct's loader vs torch's DataLoader(num_workers=0) on Fashion-MNIST train,
# batch 64, shuffled, normalised. ct's number is its single-threaded path (prefetch=0), the same
# thread count as the reference's num_workers=0; the prefetching number is printed as well.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${CT_BUILD:-$here/../../build}
py=${REF_PYTHON:-/usr/bin/python3}
epochs=${DATA_BENCH_EPOCHS:-5}
ct_out=$("$build/bin/bench_data_loader" "$epochs")
echo "$ct_out"
ref_out=$("$py" "$here/ref_torch.py" "$epochs")
echo "$ref_out"
ct=$(echo "$ct_out" | sed -n 's/^ct_loader prefetch=0 samples_per_s=\([0-9]*\).*/\1/p')
ref=$(echo "$ref_out" | sed -n 's/^torch_best samples_per_s=\([0-9]*\).*/\1/p')
ratio=$(awk -v a="$ct" -v b="$ref" 'BEGIN { printf "%.2f", a / b }')
echo "data_loader: ct=$ct ref=$ref samples/s ratio=$ratio"
