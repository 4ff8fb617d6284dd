#!/usr/bin/env bash
# bench/dashboard_overhead/run.sh — what the head's HTTP endpoint costs the head (issue 42:
# "with a scrape every 1 s, the head's CPU time rises by at most 5%"). A ct-head with 2 ct-nodes
# (heartbeat 100 ms) runs BENCH_SECONDS (default 45) while 2-replica training jobs
# (build/bin/ddp_fashion_mnist, mlp, 4096 samples, one epoch each) run one after another against
# it; the head's CPU time (user + system, /proc/PID/stat) over that window is measured
#   off     without --dashboard-port
#   scrape  with --dashboard-port, /metrics and /api/jobs fetched every second (curl)
# alternately, BENCH_ROUNDS times (default 2), medians reported. "ref" is off: ratio = off /
# scrape (lower CPU is better), so 1 means free and the goal is >= 0.95. The clock tick (10 ms)
# bounds the resolution: a few ticks either way are noise. Not runtime_load itself (that test
# starts its own head without the endpoint).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${CT_BUILD:-$here/../../build}
rounds=${BENCH_ROUNDS:-2}
secs=${BENCH_SECONDS:-45}
work=$(mktemp -d /tmp/ct-bench-dash.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
export CT_SECRET_FILE=$work/secret
"$build/bin/ctup" secret "$CT_SECRET_FILE" >/dev/null
tck=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# one window: prints the head's CPU seconds
window() {
    local mode=$1 port args hp addr n1 n2 load t0 t1 end scrapes=0
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    args=(--port 0 --heartbeat-ms 100)
    [ "$mode" = scrape ] && args+=(--dashboard-port "$port")
    "$build/bin/ct-head" "${args[@]}" >"$work/head.out" 2>"$work/head.err" &
    hp=$!
    pids+=("$hp")
    for _ in $(seq 100); do grep -q "listening on" "$work/head.out" && break; sleep 0.1; done
    addr=$(sed -n 's/listening on //p' "$work/head.out")
    "$build/bin/ct-node" --head "$addr" --cpus 2 >/dev/null 2>&1 &
    n1=$!
    "$build/bin/ct-node" --head "$addr" --cpus 2 >/dev/null 2>&1 &
    n2=$!
    pids+=("$n1" "$n2")
    sleep 2
    (while :; do
        CT_ADDRESS=$addr "$build/bin/ddp_fashion_mnist" --replicas 2 --model mlp --limit 4096 \
            --epochs 1 >/dev/null 2>&1 || true
    done) &
    load=$!
    pids+=("$load")
    t0=$(cpu_ticks "$hp")
    end=$((SECONDS + secs))
    while [ $SECONDS -lt $end ]; do
        if [ "$mode" = scrape ] &&
            curl -sf -o /dev/null "http://127.0.0.1:$port/metrics" &&
            curl -sf -o /dev/null "http://127.0.0.1:$port/api/jobs"; then
            scrapes=$((scrapes + 1))
        fi
        sleep 1
    done
    t1=$(cpu_ticks "$hp")
    kill -STOP "$load" # no new job; then its running one (by parent pid), then the loop
    pkill -P "$load" 2>/dev/null || true
    kill "$load"
    kill -CONT "$load"
    wait "$load" 2>/dev/null || true
    sleep 1
    kill "$n1" "$n2" "$hp"
    wait "$n1" "$n2" "$hp" 2>/dev/null || true
    echo "$mode: head CPU $(awk -v t=$((t1 - t0)) -v k="$tck" 'BEGIN {print t / k}') s over $secs s ($scrapes scrapes)" >&2
    awk -v t=$((t1 - t0)) -v k="$tck" 'BEGIN {print t / k}'
}
off=() scrape=()
for r in $(seq "$rounds"); do
    off+=("$(window off)")
    scrape+=("$(window scrape)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
awk -v c="$(median "${scrape[@]}")" -v r="$(median "${off[@]}")" -v s="$secs" 'BEGIN {
    printf "dashboard_overhead: ct=%.3f ref=%.3f head-CPU-s/%ds ratio=%.3f\n", c, r, s, (c > 0 ? r / c : 0) }'
