#!/bin/sh
# bench/ddp_throughput/run.sh — data-parallel training speed, the per-step job of DDP: ct's
# trainer (examples/trainer_fashion_mnist: 2 replica actors on an embedded cluster, one thread
# each, gradients averaged in buckets during backward over shared memory) against PyTorch 1.13
# DDP (gloo, 2 processes by torch.multiprocessing.spawn, one thread each), Adam, batch 64 per
# replica, DistributedSampler semantics. Samples/s of epoch 2 (steady state: all ranks'
# samples over the slowest rank's time in the training loop; startup and evaluation not
# counted), best of RUNS (default 2) each; the MLP's epochs take a fraction of a second (ct's
# 60000 samples in about 60 ms, where one descheduled replica moves an epoch's rate by 20%), so
# there each run trains MLP_EPOCHS (default 10) epochs and counts the median of epochs 2 and
# later, on both sides. Rows:
#   ddp_throughput_mlp         the MLP 64-128-64-10 on all 60000 images downsampled to 8x8:
#                              ct 2 replicas vs torch DDP 2 processes (goal: ratio >= 2)
#   ddp_throughput_mlp_single  the same ct run vs torch's best single process (1 or 2
#                              threads, batch 128 = the global batch; goal: ratio >= 1)
#   ddp_throughput_mlp_accum   accumulation at one global batch: k=4 batches of 64 per
#                              optimizer step vs k=1 batch of 256, samples/s of each, ct's
#                              trainer (accumulate=4) and torch DDP (no_sync); ct= and ref=
#                              are k=4's samples/s in % of k=1's (goal for ct: >= 95)
#   ddp_throughput_cnn_accum   the same accumulation rows on the CNN (the first LIMIT images;
#                              ACCUM=0 skips them): where a batch's compute, not its fixed
#                              costs, is the step
#   ddp_throughput             the Fashion-MNIST CNN on the first LIMIT (default 20000)
#                              images: ct vs torch DDP (the headline, last)
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
ACCUM=${ACCUM:-1}
TAG=${BENCH_TAG:-}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$BUILD/bin/trainer_fashion_mnist"
[ -x "$BIN" ] || { echo "ddp_throughput: $BIN not built" >&2; exit 1; }
epoch2() { sed -n 's/^epoch 2:.*samples_per_s=\([0-9.]*\).*/\1/p'; }
# later: the median samples/s of epochs 2 and later (0 when none)
later() {
    sed -n 's/^epoch \([2-9]\|[1-9][0-9]\):.*samples_per_s=\([0-9.]*\).*/\2/p' | sort -n |
        awk '{ v[NR] = $1 } END { print NR ? (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) : 0 }'
}
# best LIST...: the largest of the numbers in the space-separated LISTs (0 when none)
best() { printf '%s\n' $* | sed '/^$/d' | sort -n | tail -n 1 | awk 'END { print (NR ? $1 : 0) }'; }
# ct ARGS...: epoch 2's samples/s of the trainer example (2 replicas) with ARGS
ct() { "$BIN" --replicas 2 --epochs 2 "$@" 2>/dev/null | epoch2; }
# ref ARGS...: epoch 2's samples/s of ref_torch.py ARGS
ref() { "$PY" "$HERE/ref_torch.py" "$@" 2>/dev/null | epoch2; }
# ct5 ARGS / ref5 MODE N BATCH: the MLP's MLP_EPOCHS epochs, the median of epochs 2 and later
ct5() { "$BIN" --replicas 2 --epochs "$MLP_EPOCHS" --model tiny --validate 0 "$@" 2>/dev/null | later; }
ref5() { "$PY" "$HERE/ref_torch.py" 60000 tiny "$@" "$MLP_EPOCHS" 2>/dev/null | later; }
row() { # row NAME CT REF UNIT: a result line, ratio CT/REF
    awk -v n="$1$TAG" -v c="$2" -v r="$3" -v u="$4" 'BEGIN {
        printf "%s: ct=%.1f ref=%.1f %s ratio=%.2f\n", n, c, r, u, (r > 0 ? c / r : 0) }'
}

# accum_rows NAME CT_K4 CT_K1 REF_K4 REF_K1: the two lines of an accumulation row
accum_rows() {
    awk -v n="$1$TAG" -v c4="$2" -v c1="$3" -v t4="$4" -v t1="$5" 'BEGIN {
        pc = c1 > 0 ? 100 * c4 / c1 : 0; pt = t1 > 0 ? 100 * t4 / t1 : 0
        printf "%s: ct k=4 %.1f k=1 %.1f samples/s (k=4 loses %.1f%%), torch DDP no_sync k=4 %.1f " \
               "k=1 %.1f samples/s (loses %.1f%%)\n", n, c4, c1, 100 - pc, t4, t1, 100 - pt
        printf "%s: ct=%.1f ref=%.1f %%_of_k1 ratio=%.2f\n", n, pc, pt, (pt > 0 ? pc / pt : 0) }'
}

if [ "$MLP" != 0 ]; then
    m_ct="" m_ddp="" m_one="" a_ct4="" a_ct1="" a_t4="" a_t1=""
    i=0
    while [ "$i" -lt "$RUNS" ]; do
        # ct's runs together, then torch's: a ct run right after a torch run was up to 30%
        # slower here (the accumulation pair's first then lost to its second every time)
        c=$(ct5)
        c4=$(ct5 --batch 64 --accumulate 4)
        c1=$(ct5 --batch 256)
        d=$(ref5 ddp 1 64)
        s1=$(ref5 single 1 128)
        s2=$(ref5 single 2 128)
        t4=$(ref5 ddp 4 64)
        t1=$(ref5 ddp 1 256)
        echo "ddp_throughput_mlp$TAG run $i: ct ${c:-?}, torch DDP ${d:-?}, torch single 1 thread" \
            "${s1:-?}, 2 threads ${s2:-?}; accumulation ct k=4 ${c4:-?} k=1 ${c1:-?}," \
            "torch k=4 ${t4:-?} k=1 ${t1:-?} samples/s"
        m_ct="$m_ct $c" m_ddp="$m_ddp $d" m_one="$m_one $s1 $s2"
        a_ct4="$a_ct4 $c4" a_ct1="$a_ct1 $c1" a_t4="$a_t4 $t4" a_t1="$a_t1 $t1"
        i=$((i + 1))
    done
    c=$(best $m_ct)
    row ddp_throughput_mlp "$c" "$(best $m_ddp)" samples/s
    row ddp_throughput_mlp_single "$c" "$(best $m_one)" samples/s
    accum_rows ddp_throughput_mlp_accum "$(best $a_ct4)" "$(best $a_ct1)" "$(best $a_t4)" \
        "$(best $a_t1)"
fi

if [ "$ACCUM" != 0 ]; then
    a_ct4="" a_ct1="" a_t4="" a_t1=""
    i=0
    while [ "$i" -lt "$RUNS" ]; do
        c4=$(ct --limit "$LIMIT" --batch 64 --accumulate 4)
        c1=$(ct --limit "$LIMIT" --batch 256)
        t4=$(ref "$LIMIT" cnn ddp 4 64)
        t1=$(ref "$LIMIT" cnn ddp 1 256)
        echo "ddp_throughput_cnn_accum$TAG run $i: ct k=4 ${c4:-?} k=1 ${c1:-?}," \
            "torch k=4 ${t4:-?} k=1 ${t1:-?} samples/s"
        a_ct4="$a_ct4 $c4" a_ct1="$a_ct1 $c1" a_t4="$a_t4 $t4" a_t1="$a_t1 $t1"
        i=$((i + 1))
    done
    accum_rows ddp_throughput_cnn_accum "$(best $a_ct4)" "$(best $a_ct1)" "$(best $a_t4)" \
        "$(best $a_t1)"
fi

ct_all=""
ref_all=""
i=0
while [ "$i" -lt "$RUNS" ]; do
    c=$(ct --limit "$LIMIT")
    r=$(ref "$LIMIT")
    echo "ddp_throughput$TAG run $i: ct ${c:-?} samples/s, torch DDP ${r:-?} samples/s"
    ct_all="$ct_all $c" ref_all="$ref_all $r"
    i=$((i + 1))
done
row ddp_throughput "$(best $ct_all)" "$(best $ref_all)" samples/s
