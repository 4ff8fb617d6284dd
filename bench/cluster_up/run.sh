#!/usr/bin/env bash
# bench/cluster_up/run.sh — time to a usable cluster: `ctup up` of a head + 2 nodes on this
# host (local provider) until every node has registered with the head, against Ray starting a
# head + 2 worker nodes on one host (ray.cluster_utils.Cluster + wait_for_nodes, dashboard off)
# until all are registered. Median of BENCH_REPS (default 5 ct, 3 Ray). Ray must be importable
# by RAY_PYTHON (default: the python3 on PATH; `pip install ray`); without it the reference is
# reported as 0 and the ratio as 0 (Ray publishes no figure for this).
# Last line: cluster_up: ct=<ms> ref=<ms> ms ratio=<ref/ct>
set -eu
build=${CT_BUILD:-build}
here=$(cd "$(dirname "$0")" && pwd)
reps=${BENCH_REPS:-5}
ray_reps=${BENCH_RAY_REPS:-3}
rpy=${RAY_PYTHON:-python3}
[ -x "$build/bin/ctup" ] || { echo "cluster_up: $build/bin/ctup not built" >&2; exit 1; }
work=$(mktemp -d)
export CT_STATE_DIR="$work/state"
cfg="$work/bench.yaml"
cat >"$cfg" <<YAML
cluster_name: bench-up-$$
provider: {type: local, worker_ips: [127.0.0.1, 127.0.0.1]}
available_node_types:
  w: {resources: {CPU: 2}, min_workers: 2, store_memory: 256M}
YAML
cleanup() { "$build/bin/ctup" down "$cfg" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
ms_now() { date +%s%N | awk '{ printf "%.3f\n", $1 / 1e6 }'; }
ct_times=()
for _ in $(seq "$reps"); do
    t0=$(ms_now)
    "$build/bin/ctup" up "$cfg" >"$work/up.out" 2>"$work/up.err" ||
        { cat "$work/up.out" "$work/up.err" >&2; exit 1; }
    t1=$(ms_now)
    "$build/bin/ctup" down "$cfg" >/dev/null 2>&1
    ct_times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')")
done
echo "ctup up (head + 2 nodes, registered), ms: ${ct_times[*]}" >&2
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ct=$(median "${ct_times[@]}")
ref=0
if "$rpy" -c 'import ray' 2>/dev/null; then
    ray_out=$(cd "$work" && "$rpy" "$here/ray_ref.py" "$ray_reps" 2>"$work/ray.err") ||
        { tail -20 "$work/ray.err" >&2; ray_out=""; }
    mapfile -t ray_times < <(echo "$ray_out" | awk '$1 == "ray_up_ms" { print $2 }')
    if [ "${#ray_times[@]}" -gt 0 ]; then
        echo "ray Cluster (head + 2 nodes, wait_for_nodes), ms: ${ray_times[*]}" >&2
        ref=$(median "${ray_times[@]}")
    fi
else
    echo "cluster_up: Ray is not importable by $rpy (pip install ray): no reference" >&2
fi
awk -v c="$ct" -v r="$ref" 'BEGIN { printf "cluster_up: ct=%.1f ref=%.1f ms ratio=%.2f\n", c, r, (c > 0 ? r / c : 0) }'
