#!/usr/bin/env bash
# bench/auth_cost/run.sh — what authentication costs (docs/SECURITY.md): the same ct runs with
# the cluster secret checked (the default: CURVE on ZeroMQ, the challenge-response on raw ports)
# and with CT_AUTH=off, alternately, BENCH_ROUNDS times (default 3), medians reported:
#   auth_cost_actor_calls  1:1 sync actor calls on an embedded cluster (calls/s), as
#                          bench/actor_calls measures them
#   auth_cost              node-to-node ct_get of a 64 MiB object between two ct-node processes
#                          (warm), as bench/objectstore's rt_remote_get_64MiB (GB/s)
# "ref" is ct without authentication: ratio = with / without, so 1 means free and the goal is
# >= 0.9 (at most 10% lost). Last line: the ct_get row.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${CT_BUILD:-$here/../../build}
rounds=${BENCH_ROUNDS:-3}
secs=${BENCH_SECONDS:-2}
on_calls=() off_calls=() on_get=() off_get=()
for r in $(seq "$rounds"); do
    for mode in on off; do
        env=()
        [ "$mode" = off ] && env=(CT_AUTH=off)
        calls=$(env "${env[@]}" "$build/bin/bench_actor_calls" "$secs" 1 | awk '$1 == "sync" {print $2}')
        get=$(env "${env[@]}" "$build/bin/bench_objectstore_rt" 64 |
            awk -F'[= ]' '$1 == "rt_remote_get_64MiB" {print $2}')
        echo "round $r auth $mode: sync calls/s $calls, remote get 64 MiB $get GB/s" >&2
        if [ "$mode" = on ]; then on_calls+=("$calls"); on_get+=("$get"); else
            off_calls+=("$calls"); off_get+=("$get"); fi
    done
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
row() { awk -v n="$1" -v c="$2" -v r="$3" -v u="$4" -v d="$5" 'BEGIN {
    printf "%s: ct=%.*f ref=%.*f %s ratio=%.3f\n", n, d, c, d, r, u, (r > 0 ? c / r : 0) }'; }
row auth_cost_actor_calls "$(median "${on_calls[@]}")" "$(median "${off_calls[@]}")" calls/s 0
row auth_cost "$(median "${on_get[@]}")" "$(median "${off_get[@]}")" GB/s 3
