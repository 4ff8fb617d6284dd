#!/usr/bin/env bash
# bench/objectstore/run.sh — object store throughput, ct against Ray measured in the same run.
# ct, store level (bench_objectstore): local put (create + copy + seal), local get (zero-copy
# pin + read every byte), node-to-node pull over loopback TCP from a holder process, for 1 MiB,
# 64 MiB and 1 GiB objects, with this machine's memcpy as the physical limit. Then the same
# through the runtime API (bench_objectstore_rt: ct_put / ct_get on the driver's node, and a
# node-to-node ct_get between two ct-node processes on loopback).
# Ray (ray_ref.py, run by RAY_PYTHON, default the python3 on PATH): ray.put / ray.get of a
# 64 MiB numpy array on the head of a 2-node ray.cluster_utils.Cluster, and ray.get of it in an
# actor on the other node. Without Ray the rows say so and report ref=0 ratio=0.
# Rows, at 64 MiB, API against API: objectstore_get (get + read every byte),
# objectstore_remote_get (node to node, warm), and last the put:
#   objectstore: ct=<ct_put GB/s> ref=<ray.put GB/s> GB/s ratio=<ct/ref>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${CT_BUILD:-$here/../../build}
bin=$build/bin/bench_objectstore
[ -x "$bin" ] || { echo "objectstore: $bin not built" >&2; exit 1; }
sizes="1 64 1024"
# 1 GiB objects need ~5 GiB (two stores, two source buffers); drop them on small machines.
avail_kb=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
[ "$avail_kb" -lt $((8 * 1024 * 1024)) ] && sizes="1 64"
out=$("$bin" $sizes)
echo "$out"
rt=$build/bin/bench_objectstore_rt
[ -x "$rt" ] || { echo "objectstore: $rt not built" >&2; exit 1; }
rtout=$("$rt" 1 64) || { echo "objectstore: $rt failed" >&2; exit 1; }
echo "$rtout"
out="$out
$rtout"
# The same with each node on its own CPU (ct-node --cpuset), as on two machines.
if [ "$(nproc)" -ge 2 ]; then
    pin=$(BENCH_NODE_CPUSETS=0:1 "$rt" 64 | sed 's/^rt_/rt_pinned_/') ||
        { echo "objectstore: $rt (pinned) failed" >&2; exit 1; }
    echo "$pin"
    out="$out
$pin"
fi
get() { printf '%s\n' "$out" | awk -F'[= ]' -v k="$1" '$1 == k {print $2}'; }
put=$(get put_64MiB)
mcp=$(get memcpy_64MiB)
pull=$(get pull_64MiB)
awk -v p="$put" -v m="$mcp" -v l="$pull" 'BEGIN {
    printf "local put at 64 MiB = %.0f%% of memcpy (target >= 70%%)\n", 100 * p / m;
    printf "pull at 64 MiB = %.2f GB/s (target >= 3 GB/s on loopback)\n", l }'
rp=$(get rt_put_64MiB)
rp_get=$(get rt_get_read_64MiB)
rr=$(get rt_remote_get_64MiB)
rc=$(get rt_remote_get_cold_64MiB)
# ct_put against the memcpy timed next to each put (same process, same moment), if reported.
rm=$(get rt_memcpy_64MiB)
[ -n "$rm" ] || rm=$mcp
pr=$(get rt_pinned_remote_get_64MiB)
pc=$(get rt_pinned_remote_get_cold_64MiB)
[ -n "$rp" ] && awk -v p="$rp" -v m="$rm" -v r="$rr" -v c="${rc:-0}" 'BEGIN {
    printf "runtime ct_put at 64 MiB = %.2f GB/s (%.0f%% of memcpy %.2f GB/s, target >= 70%%); node-to-node ct_get = %.2f GB/s warm, %.2f GB/s cold (never-used destination pages), nodes sharing the CPUs\n", p, 100 * p / m, m, r, c }'
[ -n "$pr" ] && awk -v r="$pr" -v c="${pc:-0}" 'BEGIN {
    printf "node-to-node ct_get at 64 MiB with a CPU per node = %.2f GB/s warm, %.2f GB/s cold (target >= 3 GB/s on loopback)\n", r, c }'
ray=""
rpy=${RAY_PYTHON:-python3}
if "$rpy" -c 'import ray, numpy' 2>/dev/null; then
    ray_err=$(mktemp)
    trap 'rm -f "$ray_err"' EXIT
    ray=$("$rpy" "$here/ray_ref.py" "${BENCH_RAY_REPS:-10}" "$(nproc)" 2>"$ray_err" |
        awk '$1 ~ /^(put|get_read|remote_get)$/ { print "ray_" $1 "=" $2 }') ||
        { tail -n 20 "$ray_err" >&2; echo "objectstore: the Ray reference failed (above)" >&2; }
    grep '^ray ' "$ray_err" || true # Ray's per-round figures
    echo "$ray"
    out="$out
$ray"
else
    echo "objectstore: Ray or numpy is not importable by $rpy (pip install ray numpy): ref=0"
fi
row() { # name ct ref
    awk -v n="$1" -v c="${2:-0}" -v r="${3:-0}" \
        'BEGIN { printf "%s: ct=%.2f ref=%.2f GB/s ratio=%.2f\n", n, c, r, (r > 0 ? c / r : 0) }'
}
row objectstore_get "$rp_get" "$(get ray_get_read)"
row objectstore_remote_get "$rr" "$(get ray_remote_get)"
row objectstore "$rp" "$(get ray_put)"
