#!/usr/bin/env bash
# bench/attention/run.sh — one GPT layer's causal self-attention, forward and backward (B 16,
# T 128, 4 heads, n_embd 128: bench/gpt_train's shape), ct's fused op (attention_bench) against
# PyTorch's composition as nanoGPT writes it (REF_PYTHON ref_torch.py), the same thread count:
# 1, then CT_BENCH_THREADS (torch's bmm and softmax ran slower on 2 threads than on 1 here);
# alternating runs, each side's best median of ROUNDS (3). The time is what a training step
# spends there per layer; ratio = torch's / ct's (> 1: ct is faster).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${CT_BUILD:-$here/../../build}
threads=${CT_BENCH_THREADS:-2}
py=${REF_PYTHON:-/usr/bin/python3}
rounds=${ROUNDS:-3}
steps=${STEPS:-40}
tag=${BENCH_TAG:-}
bin=$build/bin/attention_bench
[ -x "$bin" ] || { echo "attention: $bin not built" >&2; exit 1; }
field() { sed -n "s/.*\b$1=\([0-9.]*\).*/\1/p"; }
min() { awk -v a="$1" -v b="$2" 'BEGIN{print (b == 0 || a < b) ? a : b}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", b / a}'; }
# 1 thread (a replica's share in bench/gpt_train's 2-replica row), then CT_BENCH_THREADS
for th in $(printf '%s\n' 1 "$threads" | sort -nu); do
    ct=0 ref=0 ct_f=0 ref_f=0
    for ((r = 0; r < rounds; r++)); do
        out=$(OMP_NUM_THREADS=$th "$bin" "$steps" "$th") || { echo "$out"; exit 1; }
        ct=$(min "$(echo "$out" | field ms)" "$ct")
        ct_f=$(min "$(echo "$out" | field fwd_ms)" "$ct_f")
        out=$(OMP_NUM_THREADS=$th "$py" "$here/ref_torch.py" "$steps" "$th") || { echo "$out"; exit 1; }
        ref=$(min "$(echo "$out" | field ms)" "$ref")
        ref_f=$(min "$(echo "$out" | field fwd_ms)" "$ref_f")
    done
    echo "attention_fwd$tag: ct=$ct_f ref=$ref_f ms ratio=$(ratio "$ct_f" "$ref_f") ($th threads, forward)"
    echo "attention$tag: ct=$ct ref=$ref ms ratio=$(ratio "$ct" "$ref") ($th threads, forward + backward)"
done
