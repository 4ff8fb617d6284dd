#!/usr/bin/env bash
# tests/cluster/test_slurm.sh BIN_DIR — the slurm provider on a real Slurm (Debian's slurmctld,
# slurmd and munge, scripts/install-deps.sh), which the test starts itself:
#
#   ct-test-netdelay (netdelay.c, no delay: the hosts' only link)
#       <- TUN eth0 -> ctl 10.200.0.1  slurmctld; ctup runs here (the login node)
#       <- TUN eth0 -> n1  10.200.0.2  slurmd -N n1
#       <- TUN eth0 -> n2  10.200.0.3  slurmd -N n2
# Each host is a network and UTS namespace of its own (hostname ctl, n1, n2), held by an
# `unshare --net --uts sleep` process as in cluster_ssh_netns. One munged (its own key and
# socket) serves them all: its socket is a file, which every namespace sees. slurm.conf is the
# test's: its own ports, state, spool and log directories under the test's temporary directory,
# SlurmUser root, proctrack/linuxproc, task/none, select/cons_tres, no cgroups. The filesystem
# is shared, like the home directory of a real Slurm cluster: ctup's state directory (the
# batch script, the logs, the 0600 secret file) is seen by every node at the same path.
#
# The run: `ctup up` of a slurm YAML (2 nodes, 1 CPU each): one job, ct-head on its first
# node, one ct-node step per node; `ctup status` shows the job RUNNING; `ctup submit` of
# trainer_fashion_mnist (2 replicas: one per node) runs the driver in the allocation (srun
# --overlap); mid-training the ct-node step of the node that does not run the head is
# scancelled: the job goes on from its checkpoint and finishes (the step starts again). The kill
# lands mid-training however loaded the machine is: the replicas hold before step 12 of 20 (the
# test fault train_hold, common/fault.h, armed through the nodes' environment) while a file
# exists; the test scancels once both say they are held and removes the file once the driver
# reported the node's loss. `ctup down`: no job in squeue, and no process left in the nodes'
# namespaces but slurmd. The secret is in no process's command line or environment.
#
# Skips (exit 77) in a build without test faults (CT_FAULTS, the second argument), without root,
# namespaces, /dev/net/tun, a cgroup file system, or the Slurm and munge binaries. The EXIT trap
# kills everything by pid; ct_test_guard kills what carries its CT_TEST_GUARD mark (the job's
# processes inherit the environment of ctup through sbatch and srun) when ctest kills the script
# at the timeout; the Slurm daemons die with the script (PR_SET_PDEATHSIG).
set -euo pipefail
bin=$(cd "$1" && pwd)
skip() {
    echo "SKIP: $*"
    exit 77
}
[ "${2:-ON}" = ON ] || skip "a build without CT_FAULTS (the job is held through a test fault)"
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, slurmd)"
for t in ip unshare nsenter setpriv; do
    command -v "$t" >/dev/null || skip "$t not found (scripts/install-deps.sh installs it)"
done
for t in slurmctld slurmd munged mungekey sbatch srun squeue scancel scontrol; do
    command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] ||
        skip "$t not found (slurmctld, slurmd, slurm-client, munge: scripts/install-deps.sh)"
done
export PATH=$PATH:/usr/sbin
[ -c /dev/net/tun ] || skip "no /dev/net/tun (the switch's TUN devices)"
[ -r /proc/self/ns/net ] || skip "no /proc/self/ns/net (is /proc mounted?)"
unshare --net --uts true 2>/dev/null || skip "cannot make network and UTS namespaces (unshare)"
# slurmd initialises its cgroup plugin at start and fails without a cgroup file system (a plain
# chroot, as scripts/fresh-check.sh makes, has none)
grep -qs ' /sys/fs/cgroup ' /proc/mounts ||
    skip "no cgroup file system at /sys/fs/cgroup (slurmd needs one; a plain chroot has none)"

# The whole test runs in a PID namespace of its own (with its own /proc and /dev/shm), so that
# nothing outlives it however it ends: slurmstepd daemonizes with a cleaned environment (no
# guard mark) and would wait for ever for its slurmd. When the namespace's init (a sh that runs
# this script) ends, or is killed with its parent unshare at a ctest timeout (--kill-child),
# the kernel kills every process of the namespace. Where a PID + mount namespace cannot be made (a chroot
# whose / is not a mount point) the test runs without it: only a timeout could leave a
# slurmstepd behind there.
if [ -z "${CT_SLURM_TEST_PIDNS:-}" ]; then
    if unshare --pid --fork --mount-proc --kill-child true 2>/dev/null; then
        export CT_SLURM_TEST_PIDNS=1
        # sh is the namespace's init, not this script: children of pid 1 (ct-test-netdelay)
        # would take their parent for gone
        exec unshare --pid --fork --mount-proc --kill-child sh -c 'bash "$@"; exit $?' sh "$0" "$@"
    fi
    echo "note: no PID namespace (unshare --pid --mount-proc failed): running without one"
    export CT_SLURM_TEST_PIDNS=0
elif [ "$CT_SLURM_TEST_PIDNS" = 1 ]; then
    # the nodes' shards by their pids in this namespace: a /dev/shm of its own, where no
    # process of the machine has a shard of the same name
    mount -t tmpfs -o mode=1777,size=2g ct-slurm-shm /dev/shm
fi

tmp=$(mktemp -d /tmp/ct-slurm.XXXXXX)
chmod 755 "$tmp" # munged wants its socket's directories searchable by all
name=slurm-${tmp##*.}
export CT_STATE_DIR=$tmp/state
state=$CT_STATE_DIR/$name.state
hosts=(ctl n1 n2)
declare -A hold addr
addr[ctl]=10.200.0.1 addr[n1]=10.200.0.2 addr[n2]=10.200.0.3
driver="" netdelay="" munged="" daemons=()

fail() {
    echo "FAIL: $*"
    for f in "$tmp"/slurm/*.log "$CT_STATE_DIR/$name"/*.log "$CT_STATE_DIR/$name"/job-*.out; do
        [ -f "$f" ] && { echo "---- $f"; tail -n 15 "$f"; }
    done
    exit 1
}
# Every pid in the network namespace of holder pid $1 (test -ef: the same nsfs inode; no fork
# per process, which a busy machine makes slow).
ns_pids() {
    local p
    [ -e "/proc/$1/ns/net" ] || return 0
    for p in /proc/[0-9]*; do
        [ "$p/ns/net" -ef "/proc/$1/ns/net" ] 2>/dev/null && echo "${p#/proc/}"
    done
    return 0
}
in_ns() {
    local h=$1
    shift
    nsenter -t "${hold[$h]}" -n -u "$@"
}
cleanup() {
    local h p
    [ -z "$driver" ] || kill -9 "$driver" 2>/dev/null || true
    for p in "${daemons[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for h in "${hosts[@]}"; do
        [ -n "${hold[$h]:-}" ] || continue
        for p in $(ns_pids "${hold[$h]}"); do
            [ "$p" = "${hold[$h]}" ] || kill -9 "$p" 2>/dev/null || true
        done
        kill -9 "${hold[$h]}" 2>/dev/null || true
    done
    [ -z "$netdelay" ] || kill -9 "$netdelay" 2>/dev/null || true
    [ -z "$munged" ] || kill -9 "$munged" 2>/dev/null || true
    for p in $(awk '$1 == "proc" {print $4}' "$state" 2>/dev/null); do
        "$bin/ct-node" --purge "$p" >/dev/null 2>&1 || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the network ----
for h in "${hosts[@]}"; do
    unshare --net --uts sleep 100000 &
    hold[$h]=$!
    disown
done
for h in "${hosts[@]}"; do
    for _ in $(seq 100); do
        [ "$(readlink "/proc/${hold[$h]}/ns/uts")" != "$(readlink /proc/$$/ns/uts)" ] && break
        sleep 0.02
    done
    nsenter -t "${hold[$h]}" -u hostname "$h"
done
"$bin/ct-test-netdelay" --delay-us 0 "${hold[ctl]}" "${hold[n1]}" "${hold[n2]}" \
    >"$tmp/netdelay.out" 2>&1 &
netdelay=$!
disown
for _ in $(seq 200); do
    grep -q '^netdelay: ready' "$tmp/netdelay.out" && break
    kill -0 "$netdelay" 2>/dev/null || break
    sleep 0.02
done
grep -q '^netdelay: ready' "$tmp/netdelay.out" ||
    { cat "$tmp/netdelay.out"; fail "ct-test-netdelay did not start"; }
for h in "${hosts[@]}"; do
    in_ns "$h" ip addr add "${addr[$h]}/24" dev eth0
    in_ns "$h" ip link set eth0 mtu 65000 up
    in_ns "$h" ip link set lo up
done

# ---- munge and Slurm ----
mkdir -p "$tmp/munge" "$tmp/slurm/ctld" "$tmp/slurm/spool-n1" "$tmp/slurm/spool-n2"
chmod 755 "$tmp/munge"
mungekey -c -k "$tmp/munge/munge.key"
chmod 600 "$tmp/munge/munge.key"
setpriv --pdeathsig KILL munged -F --socket="$tmp/munge/munge.sock" \
    --key-file="$tmp/munge/munge.key" --pid-file="$tmp/munge/munged.pid" \
    --log-file="$tmp/munge/munged.log" --seed-file="$tmp/munge/munged.seed" \
    >"$tmp/munge/out" 2>&1 &
munged=$!
disown
for _ in $(seq 100); do
    [ -S "$tmp/munge/munge.sock" ] && break
    kill -0 "$munged" 2>/dev/null || break
    sleep 0.05
done
[ -S "$tmp/munge/munge.sock" ] || { cat "$tmp/munge/out"; fail "munged did not start"; }
cat >"$tmp/slurm.conf" <<CONF
ClusterName=cttest
SlurmctldHost=ctl(${addr[ctl]})
SlurmctldPort=26817
SlurmdPort=26818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$tmp/slurm/ctld
SlurmdSpoolDir=$tmp/slurm/spool-%n
SlurmctldPidFile=$tmp/slurm/slurmctld.pid
SlurmdPidFile=$tmp/slurm/slurmd-%n.pid
SlurmctldLogFile=$tmp/slurm/slurmctld.log
SlurmdLogFile=$tmp/slurm/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=3
MinJobAge=300
InactiveLimit=0
NodeName=n1 NodeHostname=n1 NodeAddr=${addr[n1]} CPUs=1 RealMemory=1000 State=UNKNOWN
NodeName=n2 NodeHostname=n2 NodeAddr=${addr[n2]} CPUs=1 RealMemory=1000 State=UNKNOWN
PartitionName=ct Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$tmp/slurm.conf
nsenter -t "${hold[ctl]}" -n -u setpriv --pdeathsig KILL \
    slurmctld -D -i -f "$SLURM_CONF" >"$tmp/slurm/slurmctld.out" 2>&1 &
daemons+=($!)
for h in n1 n2; do
    nsenter -t "${hold[$h]}" -n -u setpriv --pdeathsig KILL \
        slurmd -D -N "$h" -f "$SLURM_CONF" >"$tmp/slurm/slurmd-$h.out" 2>&1 &
    daemons+=($!)
done
disown -a
for _ in $(seq 300); do
    idle=$(in_ns ctl sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
    [ "$idle" -eq 2 ] && break
    sleep 0.1
done
[ "$idle" -eq 2 ] || { in_ns ctl sinfo -N || true; fail "the 2 Slurm nodes are not idle"; }
echo "slurm: slurmctld on ctl, slurmd on n1 and n2: $(in_ns ctl sinfo -h -o '%D nodes %T')"

# ---- the cluster ----
cfg=$tmp/cluster.yaml
cat >"$cfg" <<YAML
cluster_name: $name
provider:
  type: slurm
  partition: ct
  nodes: 2
  cpus_per_node: 1
  time: "10:00"
  sbatch_args: [--comment=ct-test]
ct:
  dead_after_ms: 2000
  store_memory: 256M
  spill_dir: $tmp/spill
  start_timeout_s: 40
YAML
ctup() { in_ns ctl "$bin/ctup" "$@"; }
# the replicas (actors of the nodes that up starts, which inherit its environment) hold before
# optimizer step 12 of the job's 20 (2 epochs of 1280 samples, 64 per replica: 10 per epoch)
# while $hold exists: after the checkpoints of steps 4, 8 and 10, before the job can end
hold=$tmp/hold
export CT_TEST_FAULTS="train_hold=12:$hold"

# a job Slurm refuses: up says so, and leaves no state
sed 's/partition: ct/partition: nosuch/' "$cfg" >"$tmp/refused.yaml"
rc=0
ctup up "$tmp/refused.yaml" >"$tmp/refused.out" 2>&1 || rc=$?
cat "$tmp/refused.out"
[ "$rc" -eq 1 ] || fail "up of a job with an unknown partition exited $rc"
grep -q "ctup: up failed: Slurm refused the job: sbatch exited with 1" "$tmp/refused.out" ||
    fail "up did not say that Slurm refused the job"
grep -qi "invalid partition" "$tmp/refused.out" || fail "sbatch's reason is not shown"
[ ! -e "$state" ] || fail "a refused up left its state file"

ctup up "$cfg" >"$tmp/up.out" 2>&1 || { cat "$tmp/up.out"; fail "ctup up"; }
cat "$tmp/up.out"
grep -q "is up: head ${addr[n1]}:[0-9]*, 2 nodes registered" "$tmp/up.out" ||
    fail "up did not report 2 nodes with the head on n1 (${addr[n1]})"
job=$(awk '$1 == "job" {print $2}' "$state")
[ -n "$job" ] || fail "no job in the state file"
[ "$(in_ns ctl squeue -h -j "$job" -o %T)" = RUNNING ] || fail "job $job is not RUNNING"
steps=$(in_ns ctl squeue -h -s -j "$job" -o '%j %N' | grep '^ct-node-' | sort)
echo "steps: $steps"
[ "$(echo "$steps" | wc -l)" -eq 2 ] || fail "not 2 ct-node steps: $steps"

# the secret is in no command line or environment of the job's processes (only its path)
secret_hex=$(od -An -tx1 "$CT_STATE_DIR/$name.secret" | tr -d ' \n')
[ "$(stat -c %a "$CT_STATE_DIR/$name.secret")" = 600 ] || fail "the secret file is not 0600"
for h in n1 n2; do
    for p in $(ns_pids "${hold[$h]}"); do
        for f in cmdline environ; do
            od -An -tx1 "/proc/$p/$f" 2>/dev/null | tr -d ' \n' | grep -q "$secret_hex" &&
                fail "the secret is in /proc/$p/$f on $h"
        done
    done
done

ctup status "$cfg" >"$tmp/status.out" 2>&1 || { cat "$tmp/status.out"; fail "ctup status"; }
grep -q "^slurm job $job: RUNNING" "$tmp/status.out" ||
    { cat "$tmp/status.out"; fail "status does not show the Slurm job RUNNING"; }

# ---- a job in the allocation; one node's step cancelled mid-training ----
# recovery "restart": this test is of the slurm provider (the lost node's step started again,
# the job retried from its checkpoint); live recovery across hosts is cluster_ssh_netns's
job_run() {
    ctup submit "$cfg" "$bin/trainer_fashion_mnist" --replicas 2 --epochs 2 --limit 1280 \
        --max-retries 3 --checkpoint-dir "$tmp/ckpt" --checkpoint-every 4 --recovery restart
}
touch "$hold"
job_run >"$tmp/job.out" 2>&1 &
driver=$!
held() { [ "$(cat "$CT_STATE_DIR/$name"/node-*.log | grep -c 'held at step 12 while')" -ge 2 ]; }
for _ in $(seq 900); do
    [ -n "$(ls "$tmp/ckpt" 2>/dev/null)" ] && grep -q 'cluster at' "$tmp/job.out" && held && break
    kill -0 "$driver" 2>/dev/null || break
    sleep 0.05
done
[ -n "$(ls "$tmp/ckpt" 2>/dev/null)" ] || { cat "$tmp/job.out"; fail "no checkpoint written"; }
held || { cat "$tmp/job.out"; fail "the 2 replicas were not held at step 12 (test fault train_hold)"; }
# the driver runs in the allocation, on the head's node
in_ns ctl squeue -h -s -j "$job" -o '%j %N' | grep -q '^trainer_fashion_mnist n1$' ||
    { in_ns ctl squeue -s -j "$job"; fail "the driver is not a step of job $job on n1"; }
ctup status "$cfg" >"$tmp/status2.out" 2>&1 || true
spread=$(awk '$2 == "ct.trainer.Replica" && $5 == "ALIVE" {print $3}' "$tmp/status2.out" |
    sort -u | wc -l)
[ "$spread" -eq 2 ] || { cat "$tmp/status2.out"; fail "the 2 replicas are not on 2 nodes"; }
victim=$(in_ns ctl squeue -h -s -j "$job" -o '%i %j' | awk '$2 == "ct-node-n2" {print $1}')
[ -n "$victim" ] || fail "no ct-node step on n2"
echo "scancel $victim (the ct-node step on n2) mid-training"
in_ns ctl scancel "$victim"
# the replicas go on once the driver saw the loss (the head declares n2 dead after 2 s)
for _ in $(seq 600); do
    grep -Eq "lost with its node|failure 1 of 3" "$tmp/job.out" && break
    kill -0 "$driver" 2>/dev/null || break
    sleep 0.05
done
rm -f "$hold"
rc=0
wait "$driver" || rc=$?
driver=""
cat "$tmp/job.out"
[ "$rc" -eq 0 ] || fail "the job exited $rc"
grep -Eq "lost with its node|failure 1 of 3" "$tmp/job.out" || fail "no node loss reported"
grep -Eq '^epoch 2: .*retries=[1-9]' "$tmp/job.out" || fail "epoch 2 not reached after a retry"
grep -q '^final: test_accuracy=' "$tmp/job.out" || fail "no final line"
grep -q 'starting it again' "$CT_STATE_DIR/$name"/node-2.log ||
    fail "the cancelled node step was not started again"

# ---- Slurm ends the job itself (as at its time limit): ctup says so, and up starts anew ----
in_ns ctl scancel "$job"
for _ in $(seq 100); do
    st=$(in_ns ctl squeue -h -t all -j "$job" -o %T)
    [ "$st" = CANCELLED ] && break
    sleep 0.1
done
[ "$st" = CANCELLED ] || fail "job $job is $st after scancel"
rc=0
ctup status "$cfg" --timeout-ms 500 >"$tmp/status3.out" 2>&1 || rc=$?
cat "$tmp/status3.out"
[ "$rc" -ne 0 ] || fail "status of a cancelled job exited 0"
grep -q "the Slurm job has ended (CANCELLED): the cluster is down" "$tmp/status3.out" ||
    fail "status does not say that the job ended"
# the batch script writes this after Slurm already shows the job CANCELLED: wait for it. Slurm
# signals every process of the batch step, the head too, so either the script's trap stops the
# head ("the job ends (SIGTERM)" first) or the head ends first and the script's wait returns:
# which of the two SIGTERMs lands first is Slurm's order, not ct's
stopped=0
for _ in $(seq 300); do
    grep -q "ct-head exited with status" "$CT_STATE_DIR/$name/job-$job.out" && { stopped=1; break; }
    sleep 0.1
done
[ $stopped = 1 ] || fail "the head did not stop with the job"
ctup up "$cfg" >"$tmp/up2.out" 2>&1 || { cat "$tmp/up2.out"; fail "second ctup up"; }
cat "$tmp/up2.out"
grep -q "its Slurm job $job has ended (CANCELLED)" "$tmp/up2.out" ||
    fail "up did not say that the last job ended"
grep -q "is up: head ${addr[n1]}:[0-9]*, 2 nodes registered" "$tmp/up2.out" ||
    fail "the second up did not report 2 nodes"
job2=$(awk '$1 == "job" {print $2}' "$state")
[ -n "$job2" ] && [ "$job2" != "$job" ] || fail "no new job after the second up ($job2)"

# ---- down: no job, no process ----
ctup status "$cfg" >"$tmp/status4.out" 2>&1 || { cat "$tmp/status4.out"; fail "ctup status"; }
nodes=$(awk '$1 ~ /^node-/ && $3 == "ALIVE" {print $4}' "$tmp/status4.out")
[ "$(echo $nodes | wc -w)" -eq 2 ] || { cat "$tmp/status4.out"; fail "not 2 live nodes: $nodes"; }
ctup down "$cfg" >"$tmp/down.out" 2>&1 || { cat "$tmp/down.out"; fail "ctup down"; }
cat "$tmp/down.out"
[ -z "$(in_ns ctl squeue -h)" ] || { in_ns ctl squeue; fail "squeue is not empty after down"; }
slurmd_pids=" ${daemons[*]} "
for h in n1 n2; do
    for _ in $(seq 100); do # slurmstepd ends after the job
        left=""
        for p in $(ns_pids "${hold[$h]}"); do
            [ "$p" = "${hold[$h]}" ] || [[ "$slurmd_pids" == *" $p "* ]] ||
                [ "$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null)" = Z ] || left+=" $p"
        done
        [ -z "$left" ] && break
        sleep 0.1
    done
    [ -z "$left" ] || { ps -o pid,args -p "${left// /,}" || true; fail "left running on $h:$left"; }
done
for p in $nodes; do # the nodes stopped cleanly: no shard, no node directory left
    [ ! -e "/dev/shm/ct.node.$p.arena" ] || fail "node pid $p left its shard in /dev/shm"
    ! ls -d /tmp/ct-node."$p".?????? >/dev/null 2>&1 || fail "node pid $p left its directory"
done
[ ! -e "$state" ] || fail "the state file is still there"
[ ! -e "$CT_STATE_DIR/$name.secret" ] || fail "the secret file is still there"
echo PASS
