#!/usr/bin/env bash
# bench/train_throughput/run.sh — single-process training throughput (samples/s) of ct against
# PyTorch (REF_PYTHON), same model, batch, optimizer (Adam) and data, same thread count
# (CT_BENCH_THREADS), alternating runs and keeping each side's best over ROUNDS x the OpenMP wait
# policies in POLICIES (unset/active/passive: both ct and torch use libgomp, and which policy is
# fastest depends on how busy the machine is, so each side gets its best). Configs:
#   cnn     the Fashion-MNIST CNN of examples/fashion_mnist.c, batch 64
#   mlp     MLP 784-256-128-10 on Fashion-MNIST, batch 64
#   resnet9 ResNet9 (base width 16) on 3x32x32, batch 32
#   tiny    MLP 64-128-64-10, batch 32 (framework overhead)
# Prints one line per config with peak RSS of both, and last the CNN headline line. BENCH_TAG
# (scripts/run-bench.sh sets "[avx2]" for its pass with ONEDNN_MAX_CPU_ISA=AVX2 and
# ATEN_CPU_CAPABILITY=avx2) is appended to every row's name: train_throughput_cnn[avx2]: ...
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${CT_BUILD:-$here/../../build}
threads=${CT_BENCH_THREADS:-2}
py=${REF_PYTHON:-/usr/bin/python3}
rounds=${ROUNDS:-1}
policies=${POLICIES:-"unset active passive"}
configs=${CONFIGS:-"mlp tiny resnet9 cnn"}
tag=${BENCH_TAG:-}
bin=$build/bin/train_bench
[ -x "$bin" ] || { echo "train_throughput: $bin not built" >&2; exit 1; }

steps_for() {
    case $1 in
    cnn) echo 60 ;; mlp) echo 400 ;; resnet9) echo 20 ;; tiny) echo 3000 ;;
    esac
}
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }

for cfg in $configs; do
    steps=$(steps_for "$cfg")
    best_ct=0 best_ref=0 rss_ct=0 rss_ref=0
    for ((r = 0; r < rounds; r++)); do
        for pol in $policies; do
            if [ "$pol" = unset ]; then envp=(env -u OMP_WAIT_POLICY); else envp=(env OMP_WAIT_POLICY=$pol); fi
            out=$("${envp[@]}" OMP_NUM_THREADS=$threads "$bin" "$cfg" "$steps" "$threads") || { echo "$out"; exit 1; }
            v=$(echo "$out" | field samples_per_s); rss_ct=$(echo "$out" | field peak_rss_kb)
            best_ct=$(awk -v a="$v" -v b="$best_ct" 'BEGIN{print (a>b)?a:b}')
            out=$("${envp[@]}" OMP_NUM_THREADS=$threads "$py" "$here/ref_torch.py" "$cfg" "$steps" "$threads") || { echo "$out"; exit 1; }
            v=$(echo "$out" | field samples_per_s); rss_ref=$(echo "$out" | field peak_rss_kb)
            best_ref=$(awk -v a="$v" -v b="$best_ref" 'BEGIN{print (a>b)?a:b}')
        done
    done
    ratio=$(awk -v a="$best_ct" -v b="$best_ref" 'BEGIN{printf "%.2f", (b>0)?a/b:0}')
    echo "train_throughput_$cfg$tag: ct=$best_ct ref=$best_ref samples/s ratio=$ratio" \
         "(peak RSS ct=${rss_ct}kB torch=${rss_ref}kB, threads=$threads)"
    last="train_throughput$tag: ct=$best_ct ref=$best_ref samples/s ratio=$ratio"
done
echo "$last"
