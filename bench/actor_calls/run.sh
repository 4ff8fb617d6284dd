#!/usr/bin/env bash
# bench/actor_calls/run.sh — ct's actor call and creation rates against Ray's published
# microbenchmark (release/perf_metrics/microbenchmark.json: 1:1 sync actor calls 2,012/s,
# async 8,664/s, 551 actors created/s). Ray is not installed here, so its own figures are the
# reference. Last line: the sync row (the bench's summary).
set -eu
build=${CT_BUILD:-build}
secs=${BENCH_SECONDS:-2}
ncreate=${BENCH_ACTORS:-500}
out=$("$build/bin/bench_actor_calls" "$secs" "$ncreate")
echo "$out" >&2
# the floor under the creation row: bare forks of a process with the same libraries, from as
# many forkers as CPUs, with no runtime at all (fork_floor.c); informational, on stderr
if [ -x "$build/bin/fork_floor" ]; then
    "$build/bin/fork_floor" "$ncreate" >&2 || true
fi
val() { echo "$out" | awk -v k="$1" '$1 == k {print $2}'; }
row() { # name value ref unit
    awk -v n="$1" -v c="$2" -v r="$3" -v u="$4" \
        'BEGIN { printf "%s: ct=%d ref=%d %s ratio=%.2f\n", n, c, r, u, c / r }'
}
row actor_calls_async "$(val async)" 8664 calls/s
row actor_create "$(val create)" 551 actors/s
row actor_calls "$(val sync)" 2012 calls/s
