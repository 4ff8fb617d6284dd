#!/usr/bin/env bash
# Runs the benchmarks: every bench/NAME/run.sh, or only the one named. Each prints, last,
# "NAME: ct=<v> ref=<v> <unit> ratio=<r>" (r > 1 means ct is better), after the machine line
# of build/bin/machine_info (CPU model, the ISA oneDNN uses, cores, memcpy GB/s measured now).
# The training benchmarks (TRAIN_BENCHES) run twice: first with both sides held to AVX2
# (ONEDNN_MAX_CPU_ISA=AVX2 for ct's and torch's oneDNN, ATEN_CPU_CAPABILITY=avx2 for torch; rows
# labelled "[avx2]" through BENCH_TAG), then natively, so the last line is the native headline.
# Held to AVX2 holds oneDNN and torch; ct's own GEMMs are AVX2 anyway, but its element-wise
# loops (vecmath.h's CT_CLONES, chosen by the CPU at load time) still take their AVX-512 clone on
# an AVX-512 host: there the [avx2] rows stand in for an AVX2-only machine, whose native rows are
# the real figure.
# The reference systems get their best case: OpenBLAS single-threaded per process, glibc malloc
# thresholds that keep torch from re-faulting its buffers, and the same thread count as ct
# (CT_BENCH_THREADS).
set -u
build=${1:-build}
only=${2:-}
export CT_BUILD=$(cd "$build" && pwd)
export CT_BENCH_THREADS=${CT_BENCH_THREADS:-$(nproc)}
export OPENBLAS_NUM_THREADS=1
export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824
export REF_PYTHON=/usr/bin/python3 # Debian's python3-torch belongs to this interpreter
# the benchmarks that time ct's engine against torch (the CNN on oneDNN, the GPT on ct's own
# kernels); trainer_recovery is not one: it trains an MLP and times startup and recovery, not the
# engine
TRAIN_BENCHES="train_throughput ddp_throughput gpt_train attention"
avx2_env=(ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 BENCH_TAG='[avx2]')
status=0
summary=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# run_pass DIR [VAR=value...]: the machine line and DIR/run.sh, both under the variables given.
run_pass() {
    local dir=$1
    shift
    env "$@" "$CT_BUILD/bin/machine_info" >"$log" 2>&1 || status=1
    if [[ " $TRAIN_BENCHES " == *" $(basename "$dir") "* ]]; then
        # the ISA torch's own kernels (ATen) use; its oneDNN follows ONEDNN_MAX_CPU_ISA as ct's
        env "$@" "$REF_PYTHON" -c 'import re, torch
print("reference: torch", torch.__version__, "cpu_capability=" +
      re.search("CPU capability usage: (.*)", torch.__config__.show()).group(1))' \
            >>"$log" 2>&1 || true
    fi
    env "$@" "$dir/run.sh" >>"$log" 2>&1 || status=1
    cat "$log"
    summary+=("$(tail -n 1 "$log")")
}

for dir in bench/*/; do
    name=$(basename "$dir")
    [ -n "$only" ] && [ "$name" != "$only" ] && continue
    [ -x "$dir/run.sh" ] || continue
    echo "== bench $name"
    if [[ " $TRAIN_BENCHES " == *" $name "* ]]; then
        echo "-- $name held to AVX2: ${avx2_env[*]}"
        run_pass "$dir" "${avx2_env[@]}"
        echo "-- $name native"
    fi
    run_pass "$dir"
done
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
