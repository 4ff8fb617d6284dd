#!/usr/bin/env bash
# `make run`: the main job. Trains the Fashion-MNIST CNN with ct's trainer on an embedded local
# cluster (ct_init(NULL) starts a head and a node as child processes that end with the driver).
set -eu
build=${1:-build}
exec "$build/bin/fashion_mnist" "${@:2}"
