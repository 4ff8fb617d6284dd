#!/usr/bin/env bash
# bench/gpt_train/run.sh — single-process GPT training throughput (tokens/s) of ct against
# PyTorch's nanoGPT (REF_PYTHON), the same model (4 layers, 4 heads, n_embd 128, block 64,
# vocabulary 256), batch 16, AdamW, random tokens, the same thread count (CT_BENCH_THREADS),
# alternating runs, each side's best of ROUNDS (2). Also each side's model FLOPs utilization
# (MFU, as TorchTitan reports it): 6 N + 12 L T C FLOPs per token over this CPU's FP32 peak,
# threads x one core's, measured as the trainer's MFU measures it (gpt_bench --peak:
# trainer/cpu/peak.c's FMA loop, AVX-512 where oneDNN may use it).
# Then the 2-replica row on the same cores (threads / 2 a replica): text.sh (gpt_text against
# PyTorch DDP, one epoch of the Bible, alternating, each side's best of ROUNDS; about 8 minutes a
# round here; TEXT_ROW=0 skips it), whose tokens/s line is then the last.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${CT_BUILD:-$here/../../build}
threads=${CT_BENCH_THREADS:-2}
py=${REF_PYTHON:-/usr/bin/python3}
rounds=${ROUNDS:-2}
steps=${STEPS:-20}
tag=${BENCH_TAG:-}
bin=$build/bin/gpt_bench
[ -x "$bin" ] || { echo "gpt_train: $bin not built" >&2; exit 1; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
best_ct=0 best_ref=0 fpt=0
for ((r = 0; r < rounds; r++)); do
    out=$(OMP_NUM_THREADS=$threads "$bin" "$steps" "$threads") || { echo "$out"; exit 1; }
    best_ct=$(awk -v a="$(echo "$out" | field tokens_per_s)" -v b="$best_ct" 'BEGIN{print (a>b)?a:b}')
    fpt=$(echo "$out" | field flops_per_token)
    out=$(OMP_NUM_THREADS=$threads "$py" "$here/ref_torch.py" "$steps" "$threads") || { echo "$out"; exit 1; }
    best_ref=$(awk -v a="$(echo "$out" | field tokens_per_s)" -v b="$best_ref" 'BEGIN{print (a>b)?a:b}')
done
core=$("$bin" --peak | field peak_flops_per_core)
peak=$(awk -v t="$threads" -v c="$core" 'BEGIN{print t * c}')
mfu() { awk -v r="$1" -v f="$fpt" -v p="$peak" 'BEGIN{printf "%.1f", 100 * r * f / p}'; }
ratio=$(awk -v a="$best_ct" -v b="$best_ref" 'BEGIN{printf "%.2f", (b>0)?a/b:0}')
echo "gpt_train_mfu$tag: ct=$(mfu "$best_ct")% torch=$(mfu "$best_ref")% of $(awk -v p="$peak" 'BEGIN{printf "%.0f", p / 1e9}') GFLOP/s FP32 peak ($threads threads, measured)"
echo "gpt_train$tag: ct=$best_ct ref=$best_ref tokens/s ratio=$ratio"
# the same cores as 2 replicas: threads / 2 each
[ "${TEXT_ROW:-1}" = 0 ] || CT_BENCH_THREADS=$((threads > 1 ? threads / 2 : 1)) "$here/text.sh"
