#!/usr/bin/env bash
# `make run`: the main job. Trains the Fashion-MNIST CNN data-parallel with 2 replica actors on
# an embedded local cluster (ct_init(NULL) starts a head and a node as child processes that end
# with the driver), gradients averaged by the ring allreduce over shared memory.
set -eu
build=${1:-build}
exec "$build/bin/ddp_fashion_mnist" --replicas 2 --epochs 3 "${@:2}"
