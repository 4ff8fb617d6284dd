#!/usr/bin/env bash
# tests/cluster/test_trainer_head_restart.sh BIN_DIR [KILLS] — a head that restarts without
# losing the job: `ctup up` a cluster of a head (under its supervisor) and 2 nodes on this host,
# `ctup submit` trainer_fashion_mnist (2 replicas, 3 epochs) once undisturbed, then again
# killing the ct-head process with SIGKILL KILLS times (default 5) from epoch 1 on, each time
# waiting for the supervisor's new head before the next kill. The second run must end with exit
# 0, retries=0, the same final loss and accuracy as the first and a bit-identical weights file
# (--save), and the driver's log must say "waiting for a restarted head" and "head is back after
# X s", and never that the group's end missed a replica's death (the 10 s stall at shutdown after
# a restart). Then `ctup down`, and no
# process the cluster started may be left. Cleans up on failure too.
set -euo pipefail
bin=$1
kills=${2:-5}
tmp=$(mktemp -d /tmp/ct-hr.XXXXXX)
export CT_STATE_DIR=$tmp/state
cfg=$tmp/hr.yaml
cat >"$cfg" <<YAML
cluster_name: hr-$$
provider: {type: local, worker_ips: [127.0.0.1, 127.0.0.1]}
available_node_types:
  w: {resources: {CPU: 2}, min_workers: 2, store_memory: 512M}
YAML
state=$CT_STATE_DIR/hr-$$.state
pids() { awk '$1 == "proc" {print $4}' "$state" 2>/dev/null; }
cleanup() {
    "$bin/ctup" down "$cfg" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
# the ct-head that the supervisor (the first recorded pid) runs
head_child() { cat "/proc/$1/task/$1/children" 2>/dev/null | awk '{print $1}'; }

"$bin/ctup" up "$cfg" >"$tmp/up.out" 2>&1 || { cat "$tmp/up.out"; fail "ctup up"; }
all_pids=$(pids)
sup=$(echo "$all_pids" | head -1)
job() { "$bin/ctup" submit "$cfg" "$bin/trainer_fashion_mnist" --replicas 2 --epochs 3 \
        --limit 12800 --max-retries 2 --save "$1"; }

job "$tmp/w1.safetensors" >"$tmp/run1.out" 2>&1 || { cat "$tmp/run1.out"; fail "undisturbed run"; }
cat "$tmp/run1.out"

job "$tmp/w2.safetensors" >"$tmp/run2.out" 2>&1 &
driver=$!
# until epoch 1 or the driver's end, however slow this machine is (ctest's timeout bounds it)
while ! grep -q '^epoch 1:' "$tmp/run2.out" && kill -0 "$driver" 2>/dev/null; do sleep 0.05; done
grep -q '^epoch 1:' "$tmp/run2.out" || { kill "$driver" 2>/dev/null || true; cat "$tmp/run2.out"; fail "no epoch 1"; }
for k in $(seq "$kills"); do
    h=$(head_child "$sup")
    [ -n "$h" ] || { kill "$driver" 2>/dev/null || true; fail "no ct-head under the supervisor $sup"; }
    kill -0 "$driver" 2>/dev/null || break
    echo "kill $k: ct-head pid $h"
    kill -9 "$h"
    for _ in $(seq 200); do
        n=$(head_child "$sup")
        [ -n "$n" ] && [ "$n" != "$h" ] && break
        sleep 0.05
    done
    [ -n "$n" ] && [ "$n" != "$h" ] || { kill "$driver" 2>/dev/null || true; fail "the supervisor did not restart the head"; }
    sleep 1.5
done
rc=0
wait "$driver" || rc=$?
cat "$tmp/run2.out"
[ "$rc" -eq 0 ] || fail "run with the head killed exited $rc"
grep -q '^epoch 3: .*retries=0' "$tmp/run2.out" || fail "epoch 3 not reached with retries=0"
# the driver said that its head came back, and the group's end got every replica's death from
# the restarted head (it waited 10 s for them before)
waited=$(grep -c 'waiting for a restarted head' "$tmp/run2.out" || true)
backs=$(grep -c 'head is back after [0-9.]* s' "$tmp/run2.out" || true)
[ "$waited" -ge 1 ] && [ "$backs" -ge 1 ] || fail "'head is back' said $backs times, 'waiting' $waited"
! grep -q 'were not reported within' "$tmp/run2.out" || fail "the group's end waited for unreported deaths"
final() { sed -n 's/^final: \(test_accuracy=[^ ]* train_loss=[^ ]*\).*/\1/p' "$1"; }
[ -n "$(final "$tmp/run1.out")" ] || fail "no final line"
[ "$(final "$tmp/run1.out")" = "$(final "$tmp/run2.out")" ] ||
    fail "final results differ: '$(final "$tmp/run1.out")' vs '$(final "$tmp/run2.out")'"
[ -s "$tmp/w1.safetensors" ] || fail "no weights saved"
cmp "$tmp/w1.safetensors" "$tmp/w2.safetensors" || fail "the weights differ from the undisturbed run's"

"$bin/ctup" down "$cfg" >/dev/null 2>&1 || fail "ctup down"
for p in $all_pids; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
    ! kill -0 "$p" 2>/dev/null || fail "pid $p still running after down"
done
echo PASS
