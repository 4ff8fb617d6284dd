#!/usr/bin/env bash
# bench/gpt_train/text.sh — the GPT recipe of examples/gpt_text (4 layers, 4 heads, n_embd 128,
# block 128, vocabulary 256, batch 16 per replica, AdamW with decay on matrices, warm-up +
# cosine, clipping at 1) on the King James Bible, 2 replicas of THREADS threads each (1), one
# epoch: ct's gpt_text against the same recipe under PyTorch DDP with gloo
# (ref_ddp_text.py), in the same run, one after the other. Both print the validation loss every
# VAL_EVERY (250) steps: the two curves, side by side. Then the final validation loss (nats per
# byte; ratio = torch's / ct's, > 1 when ct's is lower) and the training throughput (tokens/s
# over the epoch's wall time, validations included; ratio ct / torch) with each side's MFU.
# The two run alternately ROUNDS (2) times, and each side's best round counts, as run.sh does:
# on this VM ct's rate moved between 18.5k and 22.2k tokens/s over three rounds in a row (torch's
# 13.8k-14.3k). Every round's rates are printed. About 8 minutes a round here.
#   TEXT=kjv.txt EPOCHS=1 ROUNDS=3 ARGS="--layers 2 ..." bench/gpt_train/text.sh
# BENCH_TAG: a suffix of the result lines' names (scripts/run-bench.sh's "[avx2]" pass).
set -u
here=$(cd "$(dirname "$0")" && pwd)
tag=${BENCH_TAG:-}
build=${CT_BUILD:-$here/../../build}
py=${REF_PYTHON:-/usr/bin/python3}
threads=${CT_BENCH_THREADS:-1}
text=${TEXT:-$(mktemp -u /tmp/ct-kjv.XXXXXX).txt}
made=0
if [ ! -s "$text" ]; then
    command -v bible >/dev/null || { echo "gpt_text: skipped: no bible-kjv"; exit 0; }
    COLUMNS=80 bible Genesis1:1-Revelation22:21 >"$text"
    made=1
fi
tmp=$(mktemp -d /tmp/ct-gpt-bench.XXXXXX)
trap 'rm -rf "$tmp"; [ $made = 1 ] && rm -f "$text"' EXIT
args=(--replicas 2 --threads "$threads" --epochs "${EPOCHS:-1}" --val-every "${VAL_EVERY:-250}"
      ${ARGS:-})
rounds=${ROUNDS:-2}
secs_ct=0 secs_ref=0 best_ct=0 best_ref=0 best=1
field() { sed -n "s/^final: .*$1=\([0-9.]*\).*/\1/p" "$2"; }
for ((r = 1; r <= rounds; r++)); do
    t0=$(date +%s)
    OMP_NUM_THREADS=$threads "$build/bin/gpt_text" --text "$text" "${args[@]}" >"$tmp/ct$r.out" \
        2>"$tmp/ct$r.err" || { cat "$tmp/ct$r.out" "$tmp/ct$r.err"; exit 1; }
    t1=$(date +%s)
    OMP_NUM_THREADS=$threads "$py" "$here/ref_ddp_text.py" "$text" "${args[@]}" \
        >"$tmp/ref$r.out" 2>"$tmp/ref$r.err" || { cat "$tmp/ref$r.out" "$tmp/ref$r.err"; exit 1; }
    t2=$(date +%s)
    c=$(field tokens_per_s "$tmp/ct$r.out") f=$(field tokens_per_s "$tmp/ref$r.out")
    echo "round $r: ct $c tokens/s ($((t1 - t0)) s), torch $f tokens/s ($((t2 - t1)) s)"
    [ $r = 1 ] && secs_ct=$((t1 - t0)) secs_ref=$((t2 - t1))
    if awk -v a="$c" -v b="$best_ct" 'BEGIN{exit !(a > b)}'; then best_ct=$c best=$r; fi
    best_ref=$(awk -v a="$f" -v b="$best_ref" 'BEGIN{print (a > b) ? a : b}')
done
# the curves and the final loss are the same every round (both sides seed everything): round 1's
echo "validation loss (nats per byte) by step: ct (gpt_text, $secs_ct s) | torch DDP gloo ($secs_ref s)"
join <(sed -n 's/^val step=\([0-9]*\) val_loss=\([0-9.]*\).*/\1 \2/p' "$tmp/ct1.out" | sort -k1,1) \
     <(sed -n 's/^val step=\([0-9]*\) val_loss=\([0-9.]*\).*/\1 \2/p' "$tmp/ref1.out" | sort -k1,1) |
    sort -n | awk '{ printf "  step %6d  ct %.4f  torch %.4f  (%+.2f%%)\n", $1, $2, $3, 100 * ($2 - $3) / $3 }'
grep -h "MFU" "$tmp/ct$best.err" | tail -1 | sed "s/^/  ct (round $best): /"
vc=$(field val_loss "$tmp/ct1.out") vr=$(field val_loss "$tmp/ref1.out")
rc=$best_ct rr=$best_ref
params=$(field params "$tmp/ct1.out")
block=$(echo " ${ARGS:-} " | sed -n 's/.* --block \([0-9]*\) .*/\1/p'); block=${block:-128}
layers=$(echo " ${ARGS:-} " | sed -n 's/.* --layers \([0-9]*\) .*/\1/p'); layers=${layers:-4}
embd=$(echo " ${ARGS:-} " | sed -n 's/.* --embd \([0-9]*\) .*/\1/p'); embd=${embd:-128}
core=$("$build/bin/gpt_bench" --peak | sed -n 's/^peak_flops_per_core=\([0-9.]*\).*/\1/p')
# MFU: 6 N + 12 L T C FLOPs a token (N without the position embedding) over 2 x threads cores'
# FP32 peak, one core's measured as the trainer's MFU measures it (gpt_bench --peak)
mfu() { awk -v r="$1" -v n="$params" -v l="$layers" -v t="$block" -v c="$embd" -v p="$core" \
        -v th="$threads" \
        'BEGIN { printf "%.1f", 100 * r * (6 * (n - t * c) + 12 * l * t * c) / (2 * th * p) }'; }
echo "gpt_text_mfu$tag: ct=$(mfu "$rc")% torch=$(mfu "$rr")% (2 replicas x $threads threads, $(awk -v p="$core" 'BEGIN{printf "%.0f", p / 1e9}') GFLOP/s FP32 peak a core, measured)"
echo "gpt_text_val$tag: ct=$vc ref=$vr nats/byte ratio=$(awk -v a="$vc" -v b="$vr" 'BEGIN{printf "%.3f", b / a}')"
echo "tokens/s: each side's best of $rounds rounds"
echo "gpt_text_2rep$tag: ct=$rc ref=$rr tokens/s ratio=$(awk -v a="$rc" -v b="$rr" 'BEGIN{printf "%.2f", a / b}')"
