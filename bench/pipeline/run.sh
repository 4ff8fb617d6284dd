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
"$bin" "${STEPS:-10}" "${M:-8}" "${N:-256}" "${W:-1024}" "${LAYERS:-8}"
