#!/usr/bin/env bash
# tests/cluster/test_ssh_netns.sh BIN_DIR — the ssh provider on real hosts: three network
# namespaces, each a "host" with its own address on a test-made switch and a real OpenSSH sshd,
# and ctup driving them over ssh like any cluster.
#
#   ct-test-netdelay (netdelay.c, in the test's own namespace)
#       <- TUN eth0 -> h1 10.200.0.1 (head, a node, ctup and the driver)
#       <- TUN eth0 -> h2 10.200.0.2 (node)
#       <- TUN eth0 -> h3 10.200.0.3 (node)
# Each link gets 1 ms of delay each way. The project's kernels (the CI's Firecracker VMs) have no
# sch_netem (tc netem), nor sch_fq: the switch is a userspace one over TUN devices that it makes
# in each host's namespace, and it holds every packet 1 ms before passing it to the host its
# IPv4 destination names. The test measures it: a TCP connect from h1 to h2 (one round trip)
# must take 2 to 50 ms. There is no default route: traffic stays between the test's namespaces.
#
# Each host's sshd (/usr/sbin/sshd -D -f <generated config>) listens on its address only, with
# a host key and an authorized user key that the test generates; known_hosts is the test's
# file, given to ctup as auth.ssh_known_hosts. sshd and everything it starts (and ctup and the
# driver on h1) run with /root bind-mounted, in a private mount namespace, to the host's own
# directory: each host has its own ~/.ct (the copied binaries, the logs), and ssh's ~/.ssh
# (which ssh creates when missing) is the test's, never the real /root/.ssh. /etc/ssh is only
# read (ssh_config). The filesystem otherwise, pids and /dev/shm are shared, as namespaces are.
#
# The run: `ctup up` (ssh provider: head + a node on h1, a node on h2 and h3; every listening
# socket must be on its host's own address), `ctup submit` of trainer_fashion_mnist (2
# replicas, 1 CPU per node: on two hosts, the gradients' ring over TCP between them), and after
# epoch 1 every ct process of a worker host that runs a replica is SIGKILLed (found by network
# namespace, sshd spared). The job must recover (below: live, or a retry where the kill lands
# outside a step) and finish all epochs with an accuracy above a bar fit for the data limit; `ctup down` must then leave no process in any test
# namespace (only sshd), no shard in /dev/shm, node directory or spill file of the run's nodes.
#
# Namespaces are held by `unshare --net sleep` processes rather than named with `ip netns add`:
# a named namespace outlives a SIGKILLed test, these go with their last process (and with the
# switch's TUN fds, which hold them too: the switch dies with the script, PR_SET_PDEATHSIG). The
# EXIT trap kills everything by pid; when ctest kills bash at the TIMEOUT the trap does not run,
# and ct_test_guard kills what carries its CT_TEST_GUARD mark: the holders, the switch, ctup, the
# driver and (the sshd config's SetEnv) every process a login starts, ct-head and ct-node
# included; each sshd dies with the script (PR_SET_PDEATHSIG).
# Skips (exit 77) without root, ip, ss, unshare/nsenter/setpriv, ssh, /usr/sbin/sshd,
# /dev/net/tun, /proc, network namespaces, or a private mount namespace with a bind mount in it
# (`unshare -m` makes / private, which fails with EINVAL where / is not a mount point: a plain
# chroot; scripts/fresh-check.sh bind-mounts its root onto itself first).
set -euo pipefail
bin=$(cd "$1" && pwd) # absolute: commands on a host start in its home
skip() {
    echo "SKIP: $*"
    exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, sshd)"
for t in ip ss unshare nsenter setpriv ssh ssh-keygen; do
    command -v "$t" >/dev/null || skip "$t not found (scripts/install-deps.sh installs it)"
done
[ -x /usr/sbin/sshd ] || skip "/usr/sbin/sshd not found (openssh-server: scripts/install-deps.sh)"
[ -c /dev/net/tun ] || skip "no /dev/net/tun (the switch's TUN devices)"
[ -r /proc/self/ns/net ] || skip "no /proc/self/ns/net (is /proc mounted?)"
unshare --net true 2>/dev/null || skip "cannot make a network namespace (unshare --net)"
probe=$(mktemp -d /tmp/ct-netns-probe.XXXXXX)
if ! err=$(unshare -m sh -c 'mount --bind "$0" "$0"' "$probe" 2>&1); then
    rmdir "$probe"
    skip "cannot make a private mount namespace with a bind mount in it (unshare -m:" \
        "${err:-failed}); in a chroot, / must be a mount point (mount --bind ROOT ROOT first)"
fi
rmdir "$probe"

tmp=$(mktemp -d /tmp/ct-netns.XXXXXX)
name=netns-$$
export CT_STATE_DIR=$tmp/state
state=$CT_STATE_DIR/$name.state
hosts=(h1 h2 h3)
declare -A hold addr sshd
for i in 1 2 3; do addr[h$i]=10.200.0.$i; done
driver=""
netdelay=""

fail() {
    echo "FAIL: $*"
    exit 1
}

# Every pid in the network namespace of holder pid $1 (what `ip netns pids` does).
ns_pids() {
    local want p
    want=$(readlink "/proc/$1/ns/net") || return 0
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/ns/net" 2>/dev/null)" = "$want" ] && echo "${p#/proc/}"
    done
    return 0
}
# in_ns HOST CMD...: CMD in HOST's network namespace.
in_ns() {
    local h=$1
    shift
    nsenter -t "${hold[$h]}" -n "$@"
}
# on_host HOST CMD...: CMD as if logged into HOST: its network namespace, and in a private mount
# namespace /root is HOST's home directory (unshare -m makes its mounts private). A build under
# /root (a clone in root's home, fresh-check's chroot) is bound into that home first, at the same
# path, so the hosts still see it. nsenter, unshare and sh exec: CMD keeps the pid.
build=$(dirname "$bin")
on_host_script='case "$1" in /root/*)
    mkdir -p "$0/${1#/root/}" && mount --bind "$1" "$0/${1#/root/}" || exit 1 ;; esac
mount --rbind "$0" /root && cd /root && shift && exec "$@"'
on_host() {
    local h=$1
    shift
    in_ns "$h" unshare -m sh -c "$on_host_script" "$tmp/$h/root" "$build" "$@"
}
node_pids() { awk '$1 == "proc" && $2 != "head" {print $4}' "$state" 2>/dev/null; }
nodes=""

cleanup() {
    local h p
    [ -z "$driver" ] || kill -9 "$driver" 2>/dev/null || true
    [ -z "$netdelay" ] || kill -9 "$netdelay" 2>/dev/null || true
    # whatever runs in the test's namespaces (ct-head, ct-node, actors, sshd), then the holders
    for h in "${hosts[@]}"; do
        [ -n "${hold[$h]:-}" ] || continue
        for p in $(ns_pids "${hold[$h]}"); do
            [ "$p" = "${hold[$h]}" ] || kill -9 "$p" 2>/dev/null || true
        done
        kill -9 "${hold[$h]}" 2>/dev/null || true
    done
    # what killed nodes of this run left (shards, node directories); --purge refuses a pid
    # that runs again, as another process
    for p in $nodes $(node_pids); do
        "$bin/ct-node" --purge "$p" >/dev/null 2>&1 || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the network: one namespace per host, linked by ct-test-netdelay ----
for h in "${hosts[@]}"; do
    unshare --net sleep 100000 &
    hold[$h]=$!
    disown # killed by cleanup: no "Killed" notice from bash
done
for h in "${hosts[@]}"; do # unshare has made the namespace once its pid shows it
    for _ in $(seq 100); do
        [ "$(readlink "/proc/${hold[$h]}/ns/net")" != "$(readlink /proc/$$/ns/net)" ] && break
        sleep 0.02
    done
done
# the switch runs in the test's own namespace and makes each host's eth0 (a TUN device) in
# the host's; it dies with this script (PR_SET_PDEATHSIG) and carries the guard's mark
"$bin/ct-test-netdelay" --delay-us 1000 "${hold[h1]}" "${hold[h2]}" "${hold[h3]}" \
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
    in_ns "$h" ip link set eth0 mtu 65000 up # large packets: fewer for the switch to carry
    in_ns "$h" ip link set lo up
done
# the delay is there: a TCP connect is one round trip (nothing listens yet: the RST comes back
# as fast as a SYN-ACK would); the least of a few, in microseconds from bash's clock (its digits:
# the locale's decimal point dropped). `:` with the redirection runs in the shell itself: no
# fork in the timing.
rtt_us=$(in_ns h1 timeout 30 bash -c 'min=""
    for _ in 1 2 3 4 5 6 7 8; do
        t0=${EPOCHREALTIME//[!0-9]/}
        : 2>/dev/null 3<>"/dev/tcp/$1/22"
        t1=${EPOCHREALTIME//[!0-9]/}
        [ -n "$min" ] && [ $((t1 - t0)) -ge "$min" ] || min=$((t1 - t0))
    done
    echo "$min"' rtt "${addr[h2]}") || true
[ -n "$rtt_us" ] || { cat "$tmp/netdelay.out"; fail "no round trip h1->h2 through the switch"; }
printf 'links: 1 ms delay each way (ct-test-netdelay over TUN); h1->h2 rtt min %d.%02d ms\n' \
    $((rtt_us / 1000)) $((rtt_us % 1000 / 10))
[ "$rtt_us" -ge 2000 ] || fail "h1->h2 round trip ${rtt_us} us: under the 2 ms of the delay"
[ "$rtt_us" -le 50000 ] || fail "h1->h2 round trip ${rtt_us} us: over 50 ms"

# ---- keys and one sshd per host ----
ssh-keygen -q -t ed25519 -N '' -C ct-test-user -f "$tmp/id_user"
cp "$tmp/id_user.pub" "$tmp/authorized_keys"
: >"$tmp/known_hosts"
mkdir -p /run/sshd # sshd's privilege separation directory (Debian's service makes it too)
for h in "${hosts[@]}"; do
    mkdir -p "$tmp/$h/root"
    chmod 700 "$tmp/$h/root"
    ssh-keygen -q -t ed25519 -N '' -C "$h" -f "$tmp/$h/host_key"
    echo "${addr[$h]} $(cut -d' ' -f1,2 "$tmp/$h/host_key.pub")" >>"$tmp/known_hosts"
    {
        echo "ListenAddress ${addr[$h]}:22"
        echo "HostKey $tmp/$h/host_key"
        echo "PidFile $tmp/$h/sshd.pid"
        echo "AuthorizedKeysFile $tmp/authorized_keys"
        echo "AuthenticationMethods publickey"
        echo "PermitRootLogin prohibit-password"
        echo "PasswordAuthentication no"
        echo "KbdInteractiveAuthentication no"
        echo "UsePAM no"
        echo "StrictModes no" # the key files are under /tmp
        echo "PrintMotd no"
        echo "Subsystem sftp internal-sftp" # scp speaks sftp
        echo "LogLevel VERBOSE"
        # every process a login starts carries the guard's mark (see the top of this file)
        [ -z "${CT_TEST_GUARD:-}" ] || echo "SetEnv CT_TEST_GUARD=$CT_TEST_GUARD"
    } >"$tmp/$h/sshd_config"
    /usr/sbin/sshd -t -f "$tmp/$h/sshd_config" || fail "sshd -t: config of $h refused"
    # on_host spelled out: a function run with & is a subshell, $! would not be sshd. sshd's
    # setproctitle overwrites its environment, so ct_test_guard cannot see its mark: it dies
    # with this script instead (its parent, everything in between execs).
    nsenter -t "${hold[$h]}" -n unshare -m sh -c "$on_host_script" "$tmp/$h/root" "$build" \
        setpriv --pdeathsig KILL /usr/sbin/sshd -D -f "$tmp/$h/sshd_config" -E "$tmp/$h/sshd.log" &
    sshd[$h]=$!
    disown
done
for h in "${hosts[@]}"; do
    for _ in $(seq 200); do
        grep -q "Server listening on ${addr[$h]} port 22" "$tmp/$h/sshd.log" 2>/dev/null && break
        kill -0 "${sshd[$h]}" 2>/dev/null || break
        sleep 0.05
    done
    grep -q "Server listening on ${addr[$h]}" "$tmp/$h/sshd.log" 2>/dev/null ||
        { cat "$tmp/$h/sshd.log" 2>/dev/null; fail "sshd on $h did not start"; }
done

# ---- the cluster: ctup runs on h1 ----
cfg=$tmp/cluster.yaml
cat >"$cfg" <<YAML
cluster_name: $name
provider:
  type: ssh
  head_ip: ${addr[h1]}
  worker_ips: [${addr[h2]}, ${addr[h3]}]
auth:
  ssh_user: root
  ssh_private_key: $tmp/id_user
  ssh_known_hosts: $tmp/known_hosts
head_node_type: head
available_node_types:
  head: {resources: {CPU: 1}}
  w: {resources: {CPU: 1}, min_workers: 2, store_memory: 256M}
ct:
  head_port: 0
  head_bind: ${addr[h1]}
  head_runs_node: true
  dead_after_ms: 2000
  store_memory: 256M
  spill_dir: $tmp/spill
  start_timeout_s: 60
YAML
ctup() { on_host h1 "$bin/ctup" "$@"; }

ctup up "$cfg" >"$tmp/up.out" 2>&1 || { cat "$tmp/up.out"; fail "ctup up"; }
cat "$tmp/up.out"
grep -q "is up: head ${addr[h1]}:[0-9]*, 3 nodes registered" "$tmp/up.out" ||
    fail "up did not report 3 nodes at ${addr[h1]}"
# every process ctup started runs in the namespace of the host it was started on
while read -r role host pid; do
    h=h${host##*.}
    [ "$(readlink "/proc/$pid/ns/net")" = "$(readlink "/proc/${hold[$h]}/ns/net")" ] ||
        fail "$role (pid $pid) does not run in the namespace of $host"
    [ -x "$tmp/$h/root/.ct/bin/ct-node" ] || fail "no ct-node was copied to $h's ~/.ct/bin"
done < <(awk '$1 == "proc" {print $2, $3, $4}' "$state")
[ "$(node_pids | wc -l)" -eq 3 ] || fail "the state file does not list 3 nodes"

job() {
    ctup submit "$cfg" "$bin/trainer_fashion_mnist" --replicas 2 --epochs 4 --limit 6400 \
        --max-retries 2 --min-accuracy 0.65
}
job >"$tmp/job.out" 2>&1 &
driver=$!
# until epoch 1 or the driver's end, however slow this machine is (ctest's timeout bounds it)
while ! grep -q '^epoch 1:' "$tmp/job.out" && kill -0 "$driver" 2>/dev/null; do sleep 0.05; done
grep -q '^epoch 1:' "$tmp/job.out" || { cat "$tmp/job.out"; fail "no epoch 1"; }

# the victim: a worker host (h2 or h3) that runs a live replica, from `ctup status`
ctup status "$cfg" >"$tmp/status.out" 2>&1 || { cat "$tmp/status.out"; fail "ctup status"; }
spread=$(awk '$2 == "ct.trainer.Replica" && $5 == "ALIVE" {print $3}' "$tmp/status.out" |
    sort -u | wc -l)
[ "$spread" -eq 2 ] || { cat "$tmp/status.out"; fail "the 2 replicas are not on 2 nodes"; }
victim=""
for node in $(awk '$2 == "ct.trainer.Replica" && $5 == "ALIVE" {print $3}' "$tmp/status.out"); do
    host=$(awk -v n="$node" '$1 == n && $3 ~ /^(ALIVE|DEAD)$/ {print $2; exit}' "$tmp/status.out")
    [ "$host" = "${addr[h1]}" ] || { victim=h${host##*.}; break; }
done
cat "$tmp/status.out"
[ -n "${hold[$victim]:-}" ] || fail "no replica on a worker host"
killed=()
for p in $(ns_pids "${hold[$victim]}"); do
    [ "$p" = "${hold[$victim]}" ] || [ "$p" = "${sshd[$victim]}" ] || killed+=("$p")
done
echo "killing every ct process of $victim (${addr[$victim]}) after epoch 1: pids ${killed[*]}"
kill -9 "${killed[@]}"
# every socket that listens in a host's namespace is bound to that host's address (no 0.0.0.0,
# no loopback): what the head, the nodes, the actors and sshd serve is on the test's network
# (checked after the kill, which must land while the job trains however slow this machine is)
for h in "${hosts[@]}"; do
    in_ns "$h" ss -Hltn >"$tmp/$h.listen"
    bad=$(awk -v a="${addr[$h]}" '{n = split($4, x, ":"); if (x[1] != a) print $4}' \
        "$tmp/$h.listen")
    [ -z "$bad" ] || { cat "$tmp/$h.listen"; fail "$h listens on $bad, not on ${addr[$h]} only"; }
done

rc=0
wait "$driver" || rc=$?
driver=""
cat "$tmp/job.out"
[ "$rc" -eq 0 ] || fail "the job exited $rc"
# recovery "live" (the default): the survivor regroups over TCP without a retry, and a
# replacement heals from it onto h1's free CPU. A kill that lands in an epoch's end, validation
# or checkpoint rather than a step restarts from the checkpoint instead (a retry): the live
# attempt is refused ("could not go on live"), or none is made ("lost with its node"). Each is a
# recovery, and the job must reach its last epoch with 2 replicas
if grep -q "recovery: the survivors could not go on live" "$tmp/job.out"; then
    grep -Eq "failure 1 of 2 allowed: replica .* died; live recovery failed" "$tmp/job.out" ||
        fail "a refused live recovery without its retry's reason"
    grep -Eq '^epoch 4: .*retries=[1-9]' "$tmp/job.out" || fail "epoch 4 not reached after a retry"
elif grep -Eq "recovery: replica .* died; 1 survivors? go(es)? on live" "$tmp/job.out"; then
    grep -Eq "training with 1 replica of the 2 asked .*: replica .* died; the survivors go on" \
        "$tmp/job.out" || fail "the smaller group's reason is not the death"
    grep -Eq '^epoch 4: .*replicas=2 retries=0' "$tmp/job.out" ||
        fail "epoch 4 not reached with 2 replicas (healed) and no retry"
else
    grep -q "lost with its node" "$tmp/job.out" || fail "no live recovery and no node loss reported"
    grep -Eq '^epoch 4: .*retries=[1-9]' "$tmp/job.out" || fail "epoch 4 not reached after a retry"
fi
grep -q '^final: test_accuracy=' "$tmp/job.out" || fail "no final line"

# ---- down: nothing of the cluster is left ----
nodes=$(node_pids) # the state file goes with down
for p in $nodes; do
    [ ! -e "/dev/shm/ct.node.$p.arena" ] || echo "before down: node pid $p has its shard"
done
ctup down "$cfg" >"$tmp/down.out" 2>&1 || { cat "$tmp/down.out"; fail "ctup down"; }
cat "$tmp/down.out"
for h in "${hosts[@]}"; do
    for _ in $(seq 100); do # sshd's sessions of `down` may still be exiting
        left=""
        for p in $(ns_pids "${hold[$h]}"); do
            [ "$p" = "${hold[$h]}" ] || [ "$p" = "${sshd[$h]}" ] || left+=" $p"
        done
        [ -z "$left" ] && break
        sleep 0.05
    done
    [ -z "$left" ] || { ps -o pid,args -p "${left// /,}" || true; fail "left running in $h:$left"; }
done
[ "$(echo $nodes | wc -w)" -eq 3 ] || fail "the state file did not list 3 nodes: $nodes"
for p in $nodes; do
    [ ! -e "/dev/shm/ct.node.$p.arena" ] || fail "node pid $p left its shard in /dev/shm"
    ! ls -d /tmp/ct-node."$p".?????? >/dev/null 2>&1 || fail "node pid $p left its directory"
done
left=$(find "$tmp/spill" -mindepth 1 2>/dev/null)
[ -z "$left" ] || fail "left in the spill root: $left"
# the switch's account of the run (it prints it on SIGTERM)
kill -TERM "$netdelay" 2>/dev/null ||
    { cat "$tmp/netdelay.out"; fail "ct-test-netdelay ended before the test"; }
for _ in $(seq 100); do
    grep -q '^netdelay: forwarded' "$tmp/netdelay.out" && break
    sleep 0.02
done
grep '^netdelay: forwarded' "$tmp/netdelay.out" || fail "ct-test-netdelay printed no stats"
echo PASS
