#!/usr/bin/env bash
# tests/runtime/test_purge_pidns.sh — a node purges only what dead nodes of its own PID namespace
# left in /tmp. A pid means nothing in another namespace: cluster_slurm runs its nodes in one of
# their own, sharing /tmp, and their start-up purge took every live node outside for dead and
# removed its directory (a shipped executable then failed to cache: "shipped executable
# unavailable"). Each node notes its namespace in <dir>/pidns (actor/objnode.c).
#   1. ct-node --purge P of a dead pid P removes P's directories of this namespace (noted, or
#      with no note: older nodes) and keeps one noted with another namespace.
#   2. (root, unshare) ct-node --purge of this shell's pid, run in a new PID namespace where that
#      pid does not exist, keeps this live shell's directory.
# Usage: test_purge_pidns.sh BIN_DIR
set -u
bin=$1
ours=$(readlink /proc/self/ns/pid) || { echo "SKIP: no /proc/self/ns/pid"; exit 77; }
made=()
trap 'rm -rf "${made[@]}"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
nodedir() { # nodedir PID SUFFIX NOTE ("" for none): makes /tmp/ct-node.PID.SUFFIX (in this
    # shell, not a $(...) subshell: the EXIT trap removes what made lists)
    local d=/tmp/ct-node.$1.$2
    mkdir -m 700 "$d" || fail "mkdir $d"
    made+=("$d")
    if [ -n "$3" ]; then echo "$3" >"$d/pidns"; fi
    touch "$d/marker"
}

sleep 0 & dead=$!
wait $dead
other=/tmp/ct-node.$dead.OtherN same=/tmp/ct-node.$dead.SameNs legacy=/tmp/ct-node.$dead.Legacy
nodedir $dead OtherN "pid:[1]"
nodedir $dead SameNs "$ours"
nodedir $dead Legacy ""
"$bin/ct-node" --purge $dead || fail "ct-node --purge $dead: exit $?"
[ -e "$other/marker" ] || fail "purged $other, noted with another PID namespace"
[ -e "$same" ] && fail "kept $same, a dead node's of this namespace"
[ -e "$legacy" ] && fail "kept $legacy, a dead node's with no note"
echo "ok: --purge $dead kept the other namespace's directory, removed this one's and the unnoted"

if [ "$(id -u)" -eq 0 ] && unshare --pid --fork --mount-proc true 2>/dev/null; then
    live=/tmp/ct-node.$$.LiveSh
    nodedir $$ LiveSh "$ours"
    unshare --pid --fork --mount-proc "$bin/ct-node" --purge $$ ||
        fail "ct-node --purge $$ in a new PID namespace: exit $?"
    [ -e "$live/marker" ] || fail "a node in another PID namespace purged live $live"
    echo "ok: a purge in another PID namespace kept this live shell's directory"
else
    echo "note: no PID namespace here (needs root and unshare); case 2 not run"
fi
echo ok
