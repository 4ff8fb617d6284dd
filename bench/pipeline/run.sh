#!/usr/bin/env bash
# bench/pipeline/run.sh — pipelining within a replica on the CPU (pipeline_bench.c): an MLP split
# into 2 stages, each on a thread of 1 engine thread, M = 8 micro-batches in 1F1B's order,
# against the same 2 stages without micro-batches (ref) and against one process with 2 threads;
# samples/s, CPU time per step and the bubble, and CPU-time ratios (micro-batches against the
# whole batch on one thread; 1F1B against unpipelined). The reference is ct's own unpipelined run
# (the issue's baseline; there is no PyTorch side). Its wall times need 2 free cores to mean
# anything; its CPU times hold on a loaded machine. Last line:
#   pipeline: ct=<1F1B samples/s> ref=<unpipelined samples/s> samples/s ratio=<r>
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${CT_BUILD:-$here/../../build}
bin=$build/bin/pipeline_bench
[ -x "$bin" ] || { echo "pipeline: $bin not built" >&2; exit 1; }
# the nodes rows first (2 GPT stage actors on 2 nodes of 1 CPU: pipeline_nodes_bench.c), so that
# pipeline_bench's line is the last; NODES=0 skips them
nodes=$build/bin/pipeline_nodes_bench
if [ "${NODES:-1}" != 0 ]; then
    if [ -x "$nodes" ]; then
        "$nodes" "${NODE_STEPS:-5}" "${M:-8}" || echo "pipeline: the nodes rows failed" >&2
    else
        echo "pipeline: $nodes not built (no ct_trainer): no nodes rows" >&2
    fi
fi
"$bin" "${STEPS:-10}" "${M:-8}" "${N:-256}" "${W:-1024}" "${LAYERS:-8}"
