#!/usr/bin/env bash
# tests/cluster/test_trainer_e2e.sh BIN_DIR — the product end to end: `ctup up` a cluster of a
# head and 2 nodes on this host (2 CPUs each), `ctup submit` trainer_fashion_mnist (2 replicas,
# 3 epochs, 12,800 samples) once undisturbed, then again killing with SIGKILL, after epoch 1,
# the node that runs the replicas (also the node whose store the driver uses). The second run
# must end with exit 0 after one retry on the other node, restart from the epoch-1 checkpoint
# (replicated to the other node), and print the same final loss and accuracy as the first.
# Then `ctup down`, and no process the cluster started may be left. Cleans up on failure too.
set -euo pipefail
bin=$1
tmp=$(mktemp -d /tmp/ct-e2e.XXXXXX)
export CT_STATE_DIR=$tmp/state
cfg=$tmp/e2e.yaml
cat >"$cfg" <<YAML
cluster_name: e2e-$$
provider: {type: local, worker_ips: [127.0.0.1, 127.0.0.1]}
available_node_types:
  w: {resources: {CPU: 2}, min_workers: 2, store_memory: 512M}
YAML
state=$CT_STATE_DIR/e2e-$$.state
pids() { awk '$1 == "proc" {print $4}' "$state" 2>/dev/null; }
cleanup() {
    "$bin/ctup" down "$cfg" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$bin/ctup" up "$cfg" >"$tmp/up.out" 2>&1 || { cat "$tmp/up.out"; fail "ctup up"; }
all_pids=$(pids)
job() { "$bin/ctup" submit "$cfg" "$bin/trainer_fashion_mnist" --replicas 2 --epochs 3 \
        --limit 12800 --max-retries 2 --recovery restart; }

job >"$tmp/run1.out" 2>&1 || { cat "$tmp/run1.out"; fail "undisturbed run"; }
cat "$tmp/run1.out"

job >"$tmp/run2.out" 2>&1 &
driver=$!
# until epoch 1 or the driver's end, however slow this machine is (ctest's timeout bounds it)
while ! grep -q '^epoch 1:' "$tmp/run2.out" && kill -0 "$driver" 2>/dev/null; do sleep 0.05; done
grep -q '^epoch 1:' "$tmp/run2.out" || { kill "$driver" 2>/dev/null || true; cat "$tmp/run2.out"; fail "no epoch 1"; }
# the node of the first live replica, and that node's pid, from `ctup status` (the head's node
# ids are random, not the state file's roles node-1, node-2)
"$bin/ctup" status "$cfg" >"$tmp/status.out"
victim=$(awk '$2 == "ct.trainer.Replica" && $5 == "ALIVE" {print $3; exit}' "$tmp/status.out")
[ -n "$victim" ] || { kill "$driver" 2>/dev/null || true; fail "no live replica in ctup status"; }
vpid=$(awk -v n="$victim" '$1 == n && $3 == "ALIVE" {print $4; exit}' "$tmp/status.out")
[ -n "$vpid" ] && echo "$all_pids" | grep -qx "$vpid" ||
    { kill "$driver" 2>/dev/null || true; fail "node $victim's pid '$vpid' is not one ctup started"; }
echo "killing $victim (pid $vpid) after epoch 1"
kill -9 "$vpid"
rc=0
wait "$driver" || rc=$?
cat "$tmp/run2.out"
[ "$rc" -eq 0 ] || fail "run with a node killed exited $rc"
grep -q "lost with its node" "$tmp/run2.out" || fail "no node loss reported"
grep -q '^epoch 3: .*retries=1' "$tmp/run2.out" || fail "epoch 3 not reached after one retry"
final() { sed -n 's/^final: \(test_accuracy=[^ ]* train_loss=[^ ]*\).*/\1/p' "$1"; }
[ -n "$(final "$tmp/run1.out")" ] || fail "no final line"
[ "$(final "$tmp/run1.out")" = "$(final "$tmp/run2.out")" ] ||
    fail "final results differ: '$(final "$tmp/run1.out")' vs '$(final "$tmp/run2.out")'"

"$bin/ctup" down "$cfg" >/dev/null 2>&1 || fail "ctup down"
for p in $all_pids; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
    ! kill -0 "$p" 2>/dev/null || fail "pid $p still running after down"
done
echo PASS
