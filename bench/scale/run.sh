#!/usr/bin/env bash
# bench/scale/run.sh — the head at N = 1k, 4k, 10k simulated nodes (ct-simnodes, each node its
# own CURVE connection heartbeating twice a period as ct-node does; no death watch, whose extra
# descriptor per node a 10k run cannot afford under a 20,000-descriptor limit). For each N it
# runs tests/scale's program (test_scale_nodes) with 5 actors of CPU=1 a node (50,000 at 10k),
# N single-bundle placement groups, nodes of 8 CPUs, the default heartbeat (100 ms) and
# dead-after (10 s) times (floors: the head sizes the period for N, 1.6 s and 16 s at 10,000
# nodes), a 60 s hold (SCALE_HOLD_MS), then a head kill -9 and restart on its state file, and
# prints what it measured: time to register N nodes, the head's CPU per second per 1,000 nodes
# while only heartbeats arrive, actor creations/s, placement groups/s, a status's time, the
# state file's size, the restart's replay (until it listens) and the time until every node
# and actor is back, memory per node and per actor, and calls per second to simulated actors
# (300 of them, each on its own connection as a driver's handle, 10 rounds of "echo" all sent
# then all read, over actor/zmtp.c's client, the transport of ct_actor_call; ct-simnodes
# answers every simulated actor on one listener and one thread). A size whose run fails (a false death, a
# placement unanswered) says so.
#
# The reference is Ray's published release-test envelope (not runnable here): many_actors
# (ray 1.12.0 release log, release/release_logs/1.12.0/benchmarks/many_actors.json: 10,000
# actors at 388.9 actors/s) and many_pgs (ray 2.6.1, release/release_logs/2.6.1/benchmarks/
# many_pgs.json: 1,000 placement groups at 17.2 groups/s) and, for calls, its microbenchmark
# (ray 1.12.0, release/release_logs/1.12.0/microbenchmark.json: 1_n_actor_calls_async, one
# driver calling n actors, 13,864.9 calls/s). Those ran on real multi-node
# clusters (actors are processes there); ct's actors here are records on simulated nodes on one
# 2-core machine, so the rows compare the control plane's scheduling throughput only.
# Each heartbeat costs the head about 5 to 7 us of CPU (most of it libzmq, the kernel and
# CURVE), so 10,000 nodes at a fixed 100 ms would need over a core for heartbeats alone; the
# head therefore doubles the period while the nodes would send over 20,000 a second
# (head/nodes.c, ct__head_scale_heartbeat), and hb_cpu_ms_per_s_per_1k falls as N grows
# (heartbeat_ms: the period the nodes were given). SCALE_HEARTBEAT_MS (default 100) sets the
# floor. Env: SCALE_SIZES (default "1000 4000 10000"), SCALE_HEARTBEAT_MS, SCALE_HOLD_MS.
# Deaths (test_scale_nodes --kill): for each N, N full nodes of 4 CPUs (4N actors), 10,000
# creations waiting, then N/500 of the nodes (at least 2; a ct-simnodes process of their own,
# death watches on) killed at once, and as many fresh nodes with room for the waiting ones: the
# head's CPU from the kill until the deaths were handled (deaths_cpu_ms) and until every waiting
# actor was placed (placed_cpu_ms, placed_ms), printed as "scale deaths N=..." lines. No
# published figure of Ray's to set beside them, so no ratio row; before head/actors.c's
# scheduler pass kept what it learned, 20 deaths at 10,000 nodes cost the head 33 s of CPU.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${CT_BUILD:-$here/../../build}
sizes=${SCALE_SIZES:-"1000 4000 10000"}
ray_actors_per_s=388.9
ray_pgs_per_s=17.2
ray_calls_per_s=13864.9
declare -A act pgs calls
for n in $sizes; do
    sims=$(((n + 3999) / 4000))
    out=$("$build/bin/ct_test_guard" "$build/bin/test_scale_nodes" --nodes "$n" \
        --actors $((5 * n)) --pgs "$n" --cpus 8 --sims "$sims" --no-watch --hold-ms "${SCALE_HOLD_MS:-60000}" \
        --heartbeat-ms "${SCALE_HEARTBEAT_MS:-100}" \
        --restart 2>/dev/null)
    rc=$?
    metrics=$(echo "$out" | sed -n 's/^metric //p' | tr '\n' ' ')
    echo "scale N=$n: ${metrics}$([ $rc = 0 ] || echo "FAILED (exit $rc)")" >&2
    echo "$out" | grep -E 'failed|refused_heartbeats' >&2
    act[$n]=$(echo "$out" | sed -n 's/^metric actors_per_s=//p')
    pgs[$n]=$(echo "$out" | sed -n 's/^metric pgs_per_s=//p')
    calls[$n]=$(echo "$out" | sed -n 's/^metric calls_per_s=//p')
    [ $rc = 0 ] || { act[$n]=0; pgs[$n]=0; calls[$n]=0; }
done
for n in $sizes; do
    k=$((n / 500 > 2 ? n / 500 : 2))
    out=$("$build/bin/ct_test_guard" "$build/bin/test_scale_nodes" --nodes "$n" \
        --actors $((4 * n)) --cpus 4 --pgs 0 --calls 0 --hold-ms 0 --sims $(((n + 3999) / 4000)) \
        --no-watch --kill "$k" --waiting 10000 2>/dev/null)
    rc=$?
    metrics=$(echo "$out" | sed -n 's/^metric \(deaths\|placed\)/\1/p' | tr '\n' ' ')
    echo "scale deaths N=$n K=$k waiting=10000: ${metrics}$([ $rc = 0 ] || echo "FAILED (exit $rc)") (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
row() { awk -v n="$1" -v c="$2" -v r="$3" -v u="$4" 'BEGIN {
    printf "%s: ct=%.0f ref=%.1f %s ratio=%.1f\n", n, c, r, u, (r > 0 ? c / r : 0) }'; }
for n in $sizes; do
    row "scale_pgs_${n}_nodes" "${pgs[$n]:-0}" "$ray_pgs_per_s" groups/s
done
for n in $sizes; do
    row "scale_calls_${n}_nodes" "${calls[$n]:-0}" "$ray_calls_per_s" calls/s
done
for n in $sizes; do
    row "scale_actors_${n}_nodes" "${act[$n]:-0}" "$ray_actors_per_s" actors/s
done
