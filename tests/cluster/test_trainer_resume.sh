#!/usr/bin/env bash
# tests/cluster/test_trainer_resume.sh BIN_DIR — a job outlives its cluster. `ctup up` a cluster
# of a head and 2 nodes on this host; `ctup submit` trainer_fashion_mnist (CNN, 2 replicas,
# 2 epochs of 25 steps) once undisturbed (--save ref); then again with --checkpoint-dir DIR
# and a checkpoint every 5 steps, and as soon as DIR holds step 15's checkpoint (within epoch
# 1) the driver is killed (SIGKILL) and the cluster taken down (`ctup down`): nothing of the
# job is left but DIR. `ctup up` a new cluster; a new driver with --resume DIR must start its
# group at the step of DIR's latest checkpoint (within an epoch), finish, and save a file
# byte-identical to the undisturbed run's (weights, optimizer and scheduler state, step).
# Cleans up on failure too.
set -euo pipefail
bin=$1
tmp=$(mktemp -d /tmp/ct-resume-e2e.XXXXXX)
export CT_STATE_DIR=$tmp/state
cfg=$tmp/resume.yaml
cat >"$cfg" <<YAML
cluster_name: resume-$$
provider: {type: local, worker_ips: [127.0.0.1, 127.0.0.1]}
available_node_types:
  w: {resources: {CPU: 2}, min_workers: 2, store_memory: 512M}
YAML
ckdir=$tmp/ckpt
driver=
cleanup() {
    [ -n "$driver" ] && kill -9 "$driver" 2>/dev/null || true
    "$bin/ctup" down "$cfg" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
job() { "$bin/ctup" submit "$cfg" "$bin/trainer_fashion_mnist" --replicas 2 --epochs 2 \
        --limit 3200 --max-retries 0 "$@"; }

"$bin/ctup" up "$cfg" >"$tmp/up.out" 2>&1 || { cat "$tmp/up.out"; fail "ctup up"; }
job --save "$tmp/ref.safetensors" >"$tmp/ref.out" 2>&1 || { cat "$tmp/ref.out"; fail "reference run"; }

job --checkpoint-dir "$ckdir" --checkpoint-every 5 >"$tmp/run1.out" 2>&1 &
submit=$!
for _ in $(seq 1200); do [ -e "$ckdir/ckpt-epoch0000-step000015.safetensors" ] && break; sleep 0.05; done
[ -e "$ckdir/ckpt-epoch0000-step000015.safetensors" ] || { cat "$tmp/run1.out"; fail "no step-15 checkpoint"; }
# the driver is ctup submit's child
driver=$(cat /proc/"$submit"/task/"$submit"/children 2>/dev/null | awk '{print $1}')
[ -n "$driver" ] || fail "no driver process under ctup submit ($submit)"
kill -9 "$driver"
rc=0
wait "$submit" || rc=$?
driver=
[ "$rc" -eq 137 ] || { cat "$tmp/run1.out"; fail "the driver was not killed mid-run (ctup submit exited $rc)"; }
"$bin/ctup" down "$cfg" >/dev/null 2>&1 || fail "ctup down"
latest=$(sed -n 's/.*"latest": "\([^"]*\)".*/\1/p' "$ckdir/index.json")
echo "cluster gone; latest checkpoint: $latest ($(ls "$ckdir" | grep -c '^ckpt-') files)"
step=$(echo "$latest" | sed -n 's/.*-step0*\([0-9]*\)\.safetensors/\1/p')
[ -n "$step" ] && [ "$step" -ge 15 ] && [ "$step" -lt 50 ] || fail "latest checkpoint '$latest'"

"$bin/ctup" up "$cfg" >"$tmp/up2.out" 2>&1 || { cat "$tmp/up2.out"; fail "second ctup up"; }
job --resume "$ckdir" --checkpoint-dir "$ckdir" --checkpoint-every 5 --keep 3 \
    --save "$tmp/resumed.safetensors" >"$tmp/run2.out" 2>&1 || { cat "$tmp/run2.out"; fail "resumed run"; }
cat "$tmp/run2.out"
grep -q "^resumed: the group started at step $step\$" "$tmp/run2.out" || fail "not resumed at step $step"
cmp "$tmp/ref.safetensors" "$tmp/resumed.safetensors" || fail "resumed run's final state differs"
[ "$(ls "$ckdir" | grep -c '^ckpt-')" -eq 3 ] || fail "--keep 3: $(ls "$ckdir")"
grep -q '"latest": "ckpt-epoch0002-step000050.safetensors"' "$ckdir/index.json" || fail "index: $(cat "$ckdir/index.json")"
"$bin/ctup" down "$cfg" >/dev/null 2>&1 || fail "ctup down"
echo PASS
