#!/usr/bin/env bash
# Runs the benchmarks: every bench/NAME/run.sh, or only the one named. Each prints, last,
# "NAME: ct=<v> ref=<v> <unit> ratio=<r>" (r > 1 means ct is better). The reference systems get
# their best case: OpenBLAS single-threaded per process, glibc malloc thresholds that keep
# torch from re-faulting its buffers, and the same thread count as ct (CT_BENCH_THREADS).
set -u
build=${1:-build}
only=${2:-}
export CT_BUILD=$(cd "$build" && pwd)
export CT_BENCH_THREADS=${CT_BENCH_THREADS:-$(nproc)}
export OPENBLAS_NUM_THREADS=1
export MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824
export REF_PYTHON=/usr/bin/python3 # Debian's python3-torch belongs to this interpreter
status=0
summary=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for dir in bench/*/; do
    name=$(basename "$dir")
    [ -n "$only" ] && [ "$name" != "$only" ] && continue
    [ -x "$dir/run.sh" ] || continue
    echo "== bench $name"
    "$dir/run.sh" > "$log" 2>&1 || status=1
    cat "$log"
    summary+=("$(tail -n 1 "$log")")
done
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
