#!/usr/bin/env bash
# Installs the Debian packages ct needs to build, test and benchmark; silent when all are present.
# Uses sudo when not root. With "bench", also Ray and numpy through pip (the reference of
# bench/cluster_up, actor_calls and objectstore; best effort: without them those benchmarks
# report no reference).
set -eu
# python3 (json and struct only, no PyTorch): tests/trainer/check_safetensors.py, which
# trainer_ckpt runs to read a checkpoint as another tool would. openssh-server/-client and
# iproute2 (ip addr, ip link in its namespaces): cluster_ssh_netns runs a real sshd on each of
# its test hosts. slurmctld, slurmd, slurm-client and munge: cluster_slurm starts its own Slurm
# (its own munged, slurmctld and two slurmd) for ctup's slurm provider.
# clang and its libFuzzer/sanitizer runtimes: make test runs each fuzz target of fuzz/ under
# libFuzzer (a clang build of the targets in build/fuzz-clang), and `make fuzz` longer;
# libomp-14-dev: clang's OpenMP, which the engine's CPU loops (trainer/cpu) build with.
# libmicrohttpd-dev: the head's HTTP endpoint (head/http.c). prometheus: head_prometheus starts
# its own (its binary only, its own config and data in a temporary directory), never the service.
# chromium: head_dashboard_browser loads the dashboard page in it, headless (its own profile in a
# temporary directory).
# With the argument "bench", also what the benchmarks' reference systems need (PyTorch, OpenBLAS).
pkgs=(build-essential cmake pkg-config libzmq3-dev libsodium-dev libprotobuf-c-dev
      protobuf-c-compiler libyaml-dev libdnnl-dev zlib1g-dev dataset-fashion-mnist bible-kjv iproute2 procps
      python3 openssh-client openssh-server slurmctld slurmd slurm-client munge clang
      libclang-rt-14-dev libomp-14-dev libmicrohttpd-dev prometheus chromium)
if [ "${1:-}" = bench ]; then
    pkgs+=(python3-torch libopenblas0-pthread)
fi
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    # openssh-server's postinst starts a system sshd through invoke-rc.d unless policy-rc.d
    # says no (exit 101), and so do munge's, slurmctld's, slurmd's and prometheus's.
    # Docker-style images ship such a policy-rc.d, and a chroot without /sbin/init blocks it
    # too, but a machine with an init system would keep an sshd on port 22, a Slurm and a
    # Prometheus (port 9090) running: the tests start their own, so block the starts here.
    policy=/usr/sbin/policy-rc.d
    made_policy=""
    if [ ! -e "$policy" ] && [[ " ${missing[*]} " =~ \ (openssh-server|munge|slurmctld|slurmd|prometheus)\  ]]; then
        printf '#!/bin/sh\n# install-deps.sh: no service starts during this install\nexit 101\n' |
            $sudo tee "$policy" >/dev/null
        $sudo chmod 755 "$policy"
        made_policy=1
    fi
    rc=0
    $sudo apt-get update -qq &&
        $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
    [ -z "$made_policy" ] || $sudo rm -f "$policy"
    [ "$rc" -eq 0 ] || exit "$rc"
fi
# tensorboard (PyPI) for trainer_progress, which reads the trainer's event file with
# TensorBoard's own reader; best effort: without it that part of the test skips (a fresh Debian 12
# has it skip: its python3 has no pip, and install-deps installs none).
if ! python3 -c 'import tensorboard' 2>/dev/null; then
    python3 -m pip install -q tensorboard >/dev/null 2>&1 ||
        echo "install-deps: pip install tensorboard failed; trainer_progress skips its TensorBoard check"
fi
if [ "${1:-}" = bench ] && ! python3 -c 'import ray, numpy' 2>/dev/null; then
    echo "install-deps: pip install ray numpy (the reference of the Ray benchmarks)"
    python3 -m pip install -q ray numpy >/dev/null 2>&1 ||
        echo "install-deps: pip install ray numpy failed; the Ray benchmarks report no reference"
fi
