#!/usr/bin/env bash
# bench/actor_calls/run.sh — actor call and creation rates, ct against Ray measured in the same
# run, on the rows of Ray's microbenchmark:
#   actor_calls        1:1 sync actor calls, one in flight (calls/s)
#   actor_calls_async  1:1 async actor calls, 1000 in flight (calls/s)
#   actor_create       actors created and answering a call (actors/s); ct creates BENCH_ACTORS
#                      (default 500), Ray BENCH_RAY_ACTORS (default 20: each Ray actor is a
#                      Python process of ~100 MB)
# ct: bench_actor_calls on an embedded cluster. Ray: ray_ref.py, local Ray with num_cpus = this
# machine's cores, after a warm-up, run by RAY_PYTHON (default: the python3 on PATH, where
# `pip install ray` puts it). Without Ray the rows say so and report ref=0 ratio=0.
# Last line: the sync row, "actor_calls: ct=<calls/s> ref=<calls/s> calls/s ratio=<ct/ref>".
set -euo pipefail
build=${CT_BUILD:-build}
here=$(cd "$(dirname "$0")" && pwd)
secs=${BENCH_SECONDS:-2}
ncreate=${BENCH_ACTORS:-500}
ray_ncreate=${BENCH_RAY_ACTORS:-20}
rpy=${RAY_PYTHON:-python3}
out=$("$build/bin/bench_actor_calls" "$secs" "$ncreate")
echo "ct: $out" | paste -sd ' ' >&2
# the floor under the creation row: bare forks of a process with the same libraries, from as
# many forkers as CPUs, with no runtime at all (fork_floor.c); informational, on stderr
if [ -x "$build/bin/fork_floor" ]; then
    "$build/bin/fork_floor" "$ncreate" >&2 || true
fi
ray_out=""
if "$rpy" -c 'import ray' 2>/dev/null; then
    ray_err=$(mktemp)
    trap 'rm -f "$ray_err"' EXIT
    ray_out=$("$rpy" "$here/ray_ref.py" "$secs" "$ray_ncreate" "$(nproc)" 2>"$ray_err" |
        awk '$1 ~ /^(sync|async|create)$/') ||
        { tail -n 20 "$ray_err" >&2; echo "actor_calls: the Ray reference failed (above)" >&2; }
    echo "ray: $ray_out" | paste -sd ' ' >&2
else
    echo "actor_calls: Ray is not importable by $rpy (pip install ray): no reference, ref=0" >&2
fi
val() { echo "$1" | awk -v k="$2" '$1 == k {print $2}'; }
row() { # name ct ref unit decimals
    awk -v n="$1" -v c="${2:-0}" -v r="${3:-0}" -v u="$4" -v d="$5" 'BEGIN {
        printf "%s: ct=%.*f ref=%.*f %s ratio=%.2f\n", n, d, c, d, r, u, (r > 0 ? c / r : 0) }'
}
row actor_calls_async "$(val "$out" async)" "$(val "$ray_out" async)" calls/s 0
row actor_create "$(val "$out" create)" "$(val "$ray_out" create)" actors/s 1
row actor_calls "$(val "$out" sync)" "$(val "$ray_out" sync)" calls/s 0
