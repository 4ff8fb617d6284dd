#!/usr/bin/env bash
# `make run`: the main job. Trains the Fashion-MNIST CNN through the trainer API
# (trainer_train) with 2 replica actors on an embedded local cluster (ct_init(NULL) starts a
# head and a node as child processes that end with the driver): gradients averaged in buckets
# during backward by the ring allreduce over shared memory, a checkpoint in the object store
# after every epoch, up to 3 retries from the last checkpoint if a replica dies. The trained
# model is saved as results/<name>/model.safetensors (--storage-path, as Ray's storage_path;
# the name is the program's, date and time) and its path printed (`model: ...`).
set -eu
build=${1:-build}
exec "$build/bin/trainer_fashion_mnist" --replicas 2 --epochs 3 --max-retries 3 \
    --storage-path "${CT_RESULTS:-results}" "${@:2}"
