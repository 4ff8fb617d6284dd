#!/usr/bin/env bash
# bench/gpu_train/run.sh — training throughput on one GPU: ct (gpu_bench) against PyTorch eager
# and torch.compile (ref_torch.py) in the same run, same model, batch, data and optimizer, in f32
# and in bf16 (autocast: ct_autocast_push / torch.autocast; f32 master weights).
#   resnet9  ResNet9, base width WIDTH (64), batch 512, random CIFAR-shaped data
#   mlp      MLP 784-256-128-10, batch 512
# Each side runs ROUNDS times alternating (default 2) and keeps its best samples/s. Rows print
# peak allocated memory (each side's caching allocator) and ct's cudaMalloc calls after step 2.
# The last line compares ct with torch eager on ResNet9. Needs a GPU (scripts/gpu-check.sh runs
# it on the lent machine; elsewhere it prints that it skipped); REF_PYTHON is the python that has
# torch with CUDA (python3).
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=${GPU_BENCH:-${CT_BUILD:-$here/../../build}/bin/gpu_bench}
py=${REF_PYTHON:-python3}
rounds=${ROUNDS:-2}
last=""
width=${WIDTH:-64}
field() { sed -n "s/.*$1=\([0-9.e+-]*\).*/\1/p"; }
best() { awk -v a="$1" -v b="$2" 'BEGIN{print (a>b)?a:b}'; }
# no GPU here (make bench on a CPU machine): say so and pass
if [ ! -x "$bin" ]; then
    echo "gpu_train: skipped: $bin is not built (no CUDA toolkit)"
    exit 0
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_train: skipped: no GPU on this machine"
    exit 0
fi

for prec in f32 bf16; do
for cfg in resnet9 mlp; do
    steps=30
    [ "$cfg" = mlp ] && steps=300
    ct=0 eager=0 comp=0 mem_ct=0 mem_eager=0 mem_comp=0 mallocs=-1
    for ((r = 0; r < rounds; r++)); do
        out=$("$bin" "$cfg" 512 "$steps" "$width" "$prec") || { echo "$out"; exit 1; }
        ct=$(best "$(echo "$out" | field samples_per_s)" "$ct")
        mem_ct=$(echo "$out" | field peak_alloc_mb); mallocs=$(echo "$out" | field device_mallocs_after_step2)
        out=$("$py" "$here/ref_torch.py" "$cfg" 512 "$steps" "$width" eager "$prec") || { echo "$out"; exit 1; }
        eager=$(best "$(echo "$out" | field samples_per_s)" "$eager"); mem_eager=$(echo "$out" | field peak_alloc_mb)
        if out=$(timeout 300 "$py" "$here/ref_torch.py" "$cfg" 512 "$steps" "$width" compile "$prec" 2>/dev/null); then
            comp=$(best "$(echo "$out" | field samples_per_s)" "$comp"); mem_comp=$(echo "$out" | field peak_alloc_mb)
        fi
    done
    r1=$(awk -v a="$ct" -v b="$eager" 'BEGIN{printf "%.2f", (b>0)?a/b:0}')
    r2=$(awk -v a="$ct" -v b="$comp" 'BEGIN{printf "%.2f", (b>0)?a/b:0}')
    echo "gpu_train_${cfg}_${prec}: ct=$ct eager=$eager compile=$comp samples/s ratio_eager=$r1" \
         "ratio_compile=$r2 (peak alloc MB ct=$mem_ct eager=$mem_eager compile=$mem_comp;" \
         "ct cudaMalloc after step 2: $mallocs)"
    [ "$cfg" = resnet9 ] && last="$last${last:+; }gpu_train $prec: ct=$ct ref=$eager samples/s ratio=$r1"
done
done
echo "$last"
