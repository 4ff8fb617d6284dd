#!/bin/sh
# bench/ddp_throughput/run.sh — data-parallel training speed, the per-step job of DDP: ct's
# trainer (examples/trainer_fashion_mnist: 2 replica actors on an embedded cluster, one thread
# each, gradients averaged in buckets during backward over shared memory) against PyTorch 1.13
# DDP (gloo, 2 processes by torch.multiprocessing.spawn, one thread each), Adam, batch 64 per
# replica, DistributedSampler semantics. Samples/s of epoch 2 (steady state: all ranks'
# samples over the slowest rank's time in the training loop; startup and evaluation not
# counted), best of RUNS (default 2) each; the MLP's epochs take a fraction of a second (ct's
# 60000 samples in about 60 ms, where one descheduled replica moves an epoch's rate by 20%), so
# there each run counts the median of epochs 2 and later: torch trains MLP_EPOCHS (default 10)
# epochs, ct CT_MLP_EPOCHS (default 40, about as long as torch's 5). Rows:
#   ddp_throughput_mlp         the MLP 64-128-64-10 on all 60000 images downsampled to 8x8:
#                              ct 2 replicas vs torch DDP 2 processes (goal: ratio >= 2)
#   ddp_throughput_mlp_single  the same ct run vs torch's best single process (1 or 2
#                              threads, batch 128 = the global batch; goal: ratio >= 1)
#   ddp_throughput_mlp_accum   accumulation at one global batch: k=4 batches of 64 per
#                              optimizer step vs k=1 batch of 256, ct's trainer (accumulate=4)
#                              and torch DDP (no_sync); ct= and ref= are k=4's samples/s in %
#                              of k=1's (goal for ct: >= 95), the median over PAIRS (default
#                              5) pairs of runs, k=4 then k=1 and k=1 then k=4 in turn: run to
#                              run this VM moves one side's rate by up to 25%, ten times the
#                              difference measured, so a ratio of two bests was noise
#   ddp_throughput_cnn_accum   the same accumulation rows on the CNN (the first LIMIT images,
#                              RUNS pairs; ACCUM=0 skips them): where a batch's compute, not
#                              its fixed costs, is the step
#   ddp_throughput             the Fashion-MNIST CNN on the first LIMIT (default 20000)
#                              images: ct vs torch DDP (the headline, last)
# ct's replicas bind their threads to a CPU each (trainer_opts' default); torch's DDP ranks
# bind the same way with REF_BIND_CPUS=1 (ref_torch.py). Binding sped torch's CNN up here and
# slowed its MLP, so torch's best-of runs alternate: bound in even runs, unbound in odd ones
# (RUNS 2 gives it one of each). The accumulation pairs bind on both sides.
# BENCH_TAG (scripts/run-bench.sh sets "[avx2]" for its pass with ONEDNN_MAX_CPU_ISA=AVX2 and
# ATEN_CPU_CAPABILITY=avx2) is appended to the rows' names. MLP=0 skips the MLP rows.
# Last line: ddp_throughput: ct=<samples/s> ref=<samples/s> samples/s ratio=<ct/ref>
set -eu
BUILD=${CT_BUILD:-build}
PY=${REF_PYTHON:-/usr/bin/python3}
RUNS=${RUNS:-2}
LIMIT=${LIMIT:-20000}
MLP=${MLP:-1}
MLP_EPOCHS=${MLP_EPOCHS:-10}
CT_MLP_EPOCHS=${CT_MLP_EPOCHS:-40}
ACCUM=${ACCUM:-1}
PAIRS=${PAIRS:-5}
TAG=${BENCH_TAG:-}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$BUILD/bin/trainer_fashion_mnist"
[ -x "$BIN" ] || { echo "ddp_throughput: $BIN not built" >&2; exit 1; }
epoch2() { sed -n 's/^epoch 2:.*samples_per_s=\([0-9.]*\).*/\1/p'; }
# best LIST...: the largest of the numbers in the space-separated LISTs (0 when none)
best() { printf '%s\n' $* | sed '/^$/d' | sort -n | tail -n 1 | awk 'END { print (NR ? $1 : 0) }'; }
# median LIST...: the median of the numbers in the space-separated LISTs (0 when none)
median() { printf '%s\n' $* | sed '/^$/d' | sort -n | awk '{ v[NR] = $1 } END {
    print NR ? (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) : 0 }'; }
# pct A B: A in % of B (0 when either is missing)
pct() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { printf "%.2f\n", (a > 0 && b > 0) ? 100 * a / b : 0 }'; }
# later: the median samples/s of epochs 2 and later (0 when none)
later() { median $(sed -n 's/^epoch \([2-9]\|[1-9][0-9]\):.*samples_per_s=\([0-9.]*\).*/\2/p'); }
# ct ARGS...: epoch 2's samples/s of the trainer example (2 replicas) with ARGS
ct() { "$BIN" --replicas 2 --epochs 2 "$@" 2>/dev/null | epoch2; }
# ref ARGS...: epoch 2's samples/s of ref_torch.py ARGS
ref() { "$PY" "$HERE/ref_torch.py" "$@" 2>/dev/null | epoch2; }
# ct5 ARGS / ref5 MODE N BATCH: the MLP's CT_MLP_EPOCHS / MLP_EPOCHS epochs, the median of
# epochs 2 and later
ct5() { "$BIN" --replicas 2 --epochs "$CT_MLP_EPOCHS" --model tiny --validate 0 "$@" 2>/dev/null | later; }
ref5() { "$PY" "$HERE/ref_torch.py" 60000 tiny "$@" "$MLP_EPOCHS" 2>/dev/null | later; }
row() { # row NAME CT REF UNIT: a result line, ratio CT/REF
    awk -v n="$1$TAG" -v c="$2" -v r="$3" -v u="$4" 'BEGIN {
        printf "%s: ct=%.1f ref=%.1f %s ratio=%.2f\n", n, c, r, u, (r > 0 ? c / r : 0) }'
}

# accum_pairs NAME N CT4 CT1 REF4 REF1: an accumulation row from N pairs of runs per side (the
# functions CT4 ... REF1 print one run's samples/s), k=4 first in even pairs and k=1 first in
# odd ones (a drift over a pair cancels over two); ct's pairs first, then torch's
accum_pairs() {
    n=$1 pairs=$2 p_ct="" p_ref=""
    for side in ct ref; do
        i=0
        if [ $side = ct ]; then f4=$3 f1=$4; else f4=$5 f1=$6; fi
        while [ "$i" -lt "$pairs" ]; do
            if [ $((i % 2)) = 0 ]; then
                v4=$($f4) v1=$($f1)
            else
                v1=$($f1) v4=$($f4)
            fi
            p=$(pct "$v4" "$v1")
            echo "$n$TAG $side pair $i: k=4 ${v4:-?} k=1 ${v1:-?} samples/s (k=4 at $p% of k=1)"
            if [ $side = ct ]; then p_ct="$p_ct $p"; else p_ref="$p_ref $p"; fi
            i=$((i + 1))
        done
    done
    awk -v n="$n$TAG" -v c="$(median $p_ct)" -v t="$(median $p_ref)" 'BEGIN {
        printf "%s: median of pairs: ct k=4 loses %.1f%%, torch DDP no_sync k=4 loses %.1f%%\n",
               n, 100 - c, 100 - t
        printf "%s: ct=%.1f ref=%.1f %%_of_k1 ratio=%.2f\n", n, c, t, (t > 0 ? c / t : 0) }'
}
mlp_ct4() { ct5 --batch 64 --accumulate 4; }
mlp_ct1() { ct5 --batch 256; }
mlp_ref4() { ref5 ddp 4 64; }
mlp_ref1() { ref5 ddp 1 256; }
cnn_ct4() { ct --limit "$LIMIT" --batch 64 --accumulate 4; }
cnn_ct1() { ct --limit "$LIMIT" --batch 256; }
cnn_ref4() { ref "$LIMIT" cnn ddp 4 64; }
cnn_ref1() { ref "$LIMIT" cnn ddp 1 256; }

if [ "$MLP" != 0 ]; then
    m_ct="" m_ddp="" m_one=""
    i=0
    while [ "$i" -lt "$RUNS" ]; do
        # ct's runs together, then torch's: a ct run right after a torch run was up to 30%
        # slower here
        c=$(ct5)
        export REF_BIND_CPUS=$((1 - i % 2))
        d=$(ref5 ddp 1 64)
        s1=$(ref5 single 1 128)
        s2=$(ref5 single 2 128)
        echo "ddp_throughput_mlp$TAG run $i: ct ${c:-?}, torch DDP ${d:-?}, torch single 1 thread" \
            "${s1:-?}, 2 threads ${s2:-?} samples/s"
        m_ct="$m_ct $c" m_ddp="$m_ddp $d" m_one="$m_one $s1 $s2"
        i=$((i + 1))
    done
    c=$(best $m_ct)
    row ddp_throughput_mlp "$c" "$(best $m_ddp)" samples/s
    row ddp_throughput_mlp_single "$c" "$(best $m_one)" samples/s

    export REF_BIND_CPUS=1
    accum_pairs ddp_throughput_mlp_accum "$PAIRS" mlp_ct4 mlp_ct1 mlp_ref4 mlp_ref1
fi

if [ "$ACCUM" != 0 ]; then
    accum_pairs ddp_throughput_cnn_accum "$RUNS" cnn_ct4 cnn_ct1 cnn_ref4 cnn_ref1
fi

ct_all=""
ref_all=""
i=0
while [ "$i" -lt "$RUNS" ]; do
    c=$(ct --limit "$LIMIT")
    export REF_BIND_CPUS=$((1 - i % 2))
    r=$(ref "$LIMIT")
    echo "ddp_throughput$TAG run $i: ct ${c:-?} samples/s, torch DDP ${r:-?} samples/s"
    ct_all="$ct_all $c" ref_all="$ref_all $r"
    i=$((i + 1))
done
row ddp_throughput "$(best $ct_all)" "$(best $ref_all)" samples/s
