#!/usr/bin/env bash
# bench/gpu_train/run.sh — training throughput on one GPU: ct (gpu_bench) against PyTorch eager
# and torch.compile (ref_torch.py) in the same run, same model, batch, data and optimizer, in f32
# and in bf16 (autocast: ct_autocast_push / torch.autocast; f32 master weights). The rows, ROWS
# (CONFIG:PRECISION, default all five):
#   resnet9:f32 resnet9:bf16   ResNet9, base width WIDTH (64), batch 512, random CIFAR-shaped data
#   mlp:f32 mlp:bf16           MLP 784-256-128-10, batch 512
#   gpt:bf16                   GPT-2 124M's shape (12 layers, 12 heads, 768 wide, vocab 50257),
#                              batch 16 of BLOCK (1024) tokens, AdamW; torch with flash SDPA
#                              (gpt:f32 runs too, when named)
# Each side runs ROUNDS times alternating (default 2) and keeps its best rate. Each row prints
#   gpu_train_CONFIG_PREC: ct=<x> ref=<eager> <unit> ratio=<ct/eager> (compile=..., peak alloc MB
#   of each side's caching allocator, ct's cudaMalloc calls after step 2)
# A row fails, with a line `gpu_train_CONFIG_PREC: FAIL: <why>`, when a program fails or runs out
# of time (its output's last line is the why: gpu_bench names an op the CUDA backend lacks), or
# when ct called cudaMalloc after step 2 (asserted 0: the steady state reuses its blocks); the
# bench goes on to the next row. COMPILE=0 leaves torch.compile out (printed as skipped, not a
# failure). Each program runs under `timeout` (CT_LIMIT 150 s, EAGER_LIMIT 150 s, COMPILE_LIMIT
# 240 s), cut to what is left of BUDGET_S when that is set (scripts/gpu-check.sh bench sets it,
# so the whole bench fits its stage); a program with no time left is not started and its row
# fails. GPU_BENCH_LIBS is a library path for gpu_bench alone (gpu-check.sh's; torch keeps its
# own). The last line repeats the headline row, HEADLINE (gpt:bf16, else the first of ROWS), as
#   gpu_train_CONFIG_PREC: ct=<x> ref=<eager> <unit> ratio=<r>
# and the exit status is 1 when any row failed. Needs a GPU (scripts/gpu-check.sh runs it on the
# lent machine); without gpu_bench or a GPU it prints that it skipped and exits 0. REF_PYTHON is
# the python that has torch with CUDA (python3). Not a test: tests/scripts/test_gpu_check.sh runs
# its control flow with stand-ins.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=${GPU_BENCH:-${CT_BUILD:-$here/../../build}/bin/gpu_bench}
py=${REF_PYTHON:-python3}
rounds=${ROUNDS:-2}
width=${WIDTH:-64}
block=${BLOCK:-1024}
rows=${ROWS:-resnet9:f32 resnet9:bf16 mlp:f32 mlp:bf16 gpt:bf16}
headline=${HEADLINE:-gpt:bf16}
case " $rows " in *" $headline "*) ;; *) headline=${rows%% *} ;; esac
deadline=""
[ -n "${BUDGET_S:-}" ] && deadline=$((SECONDS + BUDGET_S))
field() { sed -n "s/.*$1=\([0-9.e+-]*\).*/\1/p" | tail -1; }
best() { awk -v a="$1" -v b="$2" 'BEGIN{print (a>b)?a:b}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", (b>0)?a/b:0}'; }
# no GPU here (make bench on a CPU machine): say so and pass
if [ ! -x "$bin" ]; then
    echo "gpu_train: skipped: $bin is not built (no CUDA toolkit)"
    exit 0
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_train: skipped: no GPU on this machine"
    exit 0
fi

# call LIMIT CMD...: runs CMD under timeout (LIMIT, or what is left of BUDGET_S if less); sets out
# (stdout and stderr) and rc (124: out of time, also when none was left to start it)
call() {
    local limit=$1
    shift
    if [ -n "$deadline" ] && [ $((deadline - SECONDS)) -lt "$limit" ]; then
        limit=$((deadline - SECONDS))
    fi
    if [ "$limit" -le 0 ]; then
        out="not started: no time left of BUDGET_S=$BUDGET_S"
        rc=124
        return
    fi
    out=$(timeout -k 5 "$limit" "$@" 2>&1)
    rc=$?
    [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || out="$out
killed at its time limit of $limit s"
}

failed="" headline_line=""
for row in $rows; do
    cfg=${row%%:*} prec=${row#*:} name="gpu_train_${row%%:*}_${row#*:}"
    case $cfg in
    resnet9) batch=512 steps=30 size=$width unit=samples/s key=samples_per_s ;;
    mlp) batch=512 steps=300 size=0 unit=samples/s key=samples_per_s ;;
    gpt) batch=16 steps=20 size=$block unit=tokens/s key=tokens_per_s ;;
    *) echo "$name: FAIL: unknown config $cfg"; failed="$failed $name"; continue ;;
    esac
    ct=0 eager=0 comp=0 mem_ct=0 mem_eager=0 mem_comp=0 mallocs="" why=""
    [ "${COMPILE:-1}" = 1 ] || comp=skipped
    for ((r = 0; r < rounds; r++)); do
        call "${CT_LIMIT:-150}" env ${GPU_BENCH_LIBS:+"LD_LIBRARY_PATH=$GPU_BENCH_LIBS"} \
            "$bin" "$cfg" "$batch" "$steps" "$size" "$prec"
        if [ "$rc" -eq 0 ]; then
            ct=$(best "$(echo "$out" | field "$key")" "$ct")
            mem_ct=$(echo "$out" | field peak_alloc_mb)
            m=$(echo "$out" | field device_mallocs_after_step2)
            # the largest count of any round
            [ -n "$mallocs" ] && [ -n "$m" ] && [ "$m" -le "$mallocs" ] || mallocs=$m
        else
            why="${why:+$why; }ct exit $rc: $(echo "$out" | tail -1)"
        fi
        call "${EAGER_LIMIT:-150}" "$py" "$here/ref_torch.py" "$cfg" "$batch" "$steps" "$size" \
            eager "$prec"
        if [ "$rc" -eq 0 ]; then
            eager=$(best "$(echo "$out" | field "$key")" "$eager")
            mem_eager=$(echo "$out" | field peak_alloc_mb)
        else
            why="${why:+$why; }torch eager exit $rc: $(echo "$out" | tail -1)"
        fi
        [ "$comp" != skipped ] || continue
        call "${COMPILE_LIMIT:-240}" "$py" "$here/ref_torch.py" "$cfg" "$batch" "$steps" "$size" \
            compile "$prec"
        if [ "$rc" -eq 0 ]; then
            comp=$(best "$(echo "$out" | field "$key")" "$comp")
            mem_comp=$(echo "$out" | field peak_alloc_mb)
        else
            why="${why:+$why; }torch.compile exit $rc: $(echo "$out" | tail -1)"
        fi
    done
    if [ -n "$mallocs" ] && [ "$mallocs" != 0 ]; then
        why="${why:+$why; }ct called cudaMalloc $mallocs times after step 2 (must be 0)"
    elif [ -z "$mallocs" ] && [ "$ct" != 0 ]; then
        why="${why:+$why; }gpu_bench printed no device_mallocs_after_step2"
    fi
    r1=$(ratio "$ct" "$eager")
    r2=-
    [ "$comp" = skipped ] || r2=$(ratio "$ct" "$comp")
    line="$name: ct=$ct ref=$eager $unit ratio=$r1"
    echo "$line (torch.compile=$comp ratio_compile=$r2; peak alloc MB ct=$mem_ct" \
         "eager=$mem_eager compile=$mem_comp; ct cudaMalloc after step 2: ${mallocs:-?})"
    if [ -n "$why" ]; then
        echo "$name: FAIL: $why"
        failed="$failed $name"
    fi
    [ "$row" != "$headline" ] || headline_line=$line
done
if [ -n "$failed" ]; then
    echo "gpu_train: $(echo "$failed" | wc -w) of $(echo "$rows" | wc -w) rows failed:$failed"
fi
echo "${headline_line:-gpu_train: the headline row $headline did not run}"
[ -z "$failed" ]
