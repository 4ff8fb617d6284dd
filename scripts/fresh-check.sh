#!/usr/bin/env bash
# scripts/fresh-check.sh — does the README hold on a fresh machine? Builds a minimal Debian 12
# root (mmdebstrap, variant minbase, plus only make, git, ca-certificates and sudo), puts the
# repository in it as /root/ct, and runs the README's two commands there under chroot:
# `make run`, then `make test`. Everything else they need must come from scripts/install-deps.sh.
# Run as root (mount, chroot) on a Debian host that reaches deb.debian.org; installs mmdebstrap
# when missing. Prints `fresh-check: PASS ...` or `fresh-check: FAIL at ...` last; exits 0 only
# on PASS. Not here: CUDA (not in the fresh root, so the GPU parts skip), `make bench`.
#
# Environment:
#   FRESH_DIR=/tmp/ct-fresh   the root (FRESH_DIR/root), the cached minbase tarball, the logs
#   FRESH_SOURCE=head         head: a clone of the current commit (default);
#                             worktree: a copy of the work tree as it is (uncommitted edits too)
#   FRESH_REFRESH=1           build the minbase tarball again instead of reusing the cached one
#   FRESH_KEEP=1              keep the root after a PASS (it is always kept after a FAIL)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${FRESH_DIR:-/tmp/ct-fresh}
root=$dir/root
source_mode=${FRESH_SOURCE:-head}
suite=bookworm
include=make,git,ca-certificates,sudo
tarball=$dir/cache/$suite-minbase-${include//,/-}.tar
apt_cache=$dir/cache/apt-archives # downloaded .debs kept between runs (apt still runs in full)
t0=$(date +%s)
step="setup"
mounted=()

elapsed() {
    local s=$(($(date +%s) - t0))
    printf '%dm%02ds' $((s / 60)) $((s % 60))
}

# Unmounts what we mounted, last first; lazily if a process still holds a mount.
unmount_all() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" ||
            echo "fresh-check: could not unmount ${mounted[i]}" >&2
    done
    mounted=()
}

# Ends, by pid, whatever still runs inside the root (a test's leftovers; everything after ^C),
# so that its mounts can go.
kill_in_root() {
    local p pids=()
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && pids+=("${p#/proc/}")
    done
    [ ${#pids[@]} -eq 0 ] || kill -KILL "${pids[@]}" 2>/dev/null || true
}

# Any mount point under the root? (never rm -rf a root with the host's /dev bound in it)
has_mounts() {
    awk -v r="$root" '$2 == r || index($2, r "/") == 1 {found = 1} END {exit !found}' /proc/mounts
}

on_exit() {
    local rc=$?
    kill_in_root
    unmount_all
    if [ "$rc" -eq 0 ]; then
        [ "${FRESH_KEEP:-0}" = 1 ] || has_mounts || rm -rf --one-file-system "$root"
        echo "fresh-check: PASS (make run, make test) in $(elapsed)"
    else
        echo "fresh-check: the root is kept in $root (logs in $dir)"
        echo "fresh-check: FAIL at $step (exit $rc) after $(elapsed)"
    fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM

bind() {
    mkdir -p "$root$2"
    mount --bind "$1" "$root$2"
    mounted+=("$root$2")
}

[ "$(id -u)" -eq 0 ] || { echo "fresh-check: run as root (mount, chroot)" >&2; exit 2; }
case "$source_mode" in head | worktree) ;;
*) echo "fresh-check: FRESH_SOURCE must be head or worktree, not '$source_mode'" >&2; exit 2 ;;
esac
[ -w /dev/shm ] || { echo "fresh-check: the host's /dev/shm is not writable" >&2; exit 2; }
mkdir -p "$dir/cache" "$apt_cache/partial"

step="installing mmdebstrap"
if ! command -v mmdebstrap >/dev/null; then
    echo "fresh-check: installing mmdebstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
        mmdebstrap >/dev/null
fi

step="mmdebstrap"
if [ ! -s "$tarball" ] || [ "${FRESH_REFRESH:-0}" = 1 ]; then
    echo "fresh-check: mmdebstrap $suite (minbase + $include) -> $tarball"
    mmdebstrap --quiet --variant=minbase --format=tar --include="$include" "$suite" \
        "$tarball.tmp" \
        "deb http://deb.debian.org/debian $suite main" \
        "deb http://deb.debian.org/debian $suite-updates main" \
        "deb http://deb.debian.org/debian-security $suite-security main"
    mv "$tarball.tmp" "$tarball"
else
    echo "fresh-check: reusing $tarball (FRESH_REFRESH=1 builds it again)"
fi

step="unpacking the root"
if has_mounts; then
    echo "fresh-check: something is still mounted under $root; unmount it first" >&2
    exit 1
fi
rm -rf --one-file-system "$root"
mkdir -p "$root"
tar -C "$root" -xf "$tarball"
cp /etc/resolv.conf "$root/etc/resolv.conf"
[ -s "$root/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost\n' >"$root/etc/hosts"

step="copying the source ($source_mode)"
src=$root/root/ct
if [ "$source_mode" = head ]; then
    sha=$(git -C "$repo" rev-parse HEAD)
    echo "fresh-check: clone of $sha"
    git clone -q --no-hardlinks --no-checkout "$repo" "$src"
    git -C "$src" checkout -q --detach "$sha"
else
    echo "fresh-check: copy of the work tree $repo (tracked and untracked, not ignored)"
    mkdir -p "$src"
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard |
        tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -C "$src" -xf -
fi

step="making the root a mount point"
# a private mount of its own: a test's `unshare -m` (cluster_ssh_netns) must change the
# propagation of /, which fails with EINVAL when / is not a mount point
bind "$root" ""
mount --make-private "$root"
step="mounting /proc, /sys, /dev, /dev/pts, /dev/shm"
bind /proc /proc
bind /sys /sys
bind /dev /dev
bind /dev/pts /dev/pts # apt logs through a pty
bind /dev/shm /dev/shm # the object store's POSIX shared memory
bind "$apt_cache" /var/cache/apt/archives

in_root() {
    chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        /bin/bash -c "cd /root/ct && $1"
}

for target in run test; do
    step="make $target"
    echo "fresh-check: make $target (log: $dir/make-$target.log) at $(elapsed)"
    s0=$(date +%s)
    rc=0
    # in the background: a signal to this script then ends the wait at once (on_exit kills it)
    in_root "make $target" >"$dir/make-$target.log" 2>&1 &
    wait $! || rc=$?
    tail -n 40 "$dir/make-$target.log"
    echo "fresh-check: make $target exited $rc after $(($(date +%s) - s0)) s"
    [ "$rc" -eq 0 ] || exit "$rc"
done
step="done"
