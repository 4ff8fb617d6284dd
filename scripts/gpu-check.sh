#!/usr/bin/env bash
# scripts/gpu-check.sh — runs ct's GPU tests on a lent GPU machine (the `device` tool of the
# workplace; CI never has a GPU). Two steps:
#
#   here (no GPU needed):  bash scripts/gpu-check.sh prepare
#       builds the GPU test programs in build-gpu/ (CUDA found under /usr/local/cuda), copies
#       them to .gpu/bin and downloads the runtime .debs they need (ZeroMQ, protobuf-c, libyaml,
#       oneDNN and their dependencies) into .gpu/debs; both folders are git-ignored.
#   on the device (carry .gpu):  bash scripts/gpu-check.sh run
#       unpacks the .debs into .gpu/root (never into /), finds the CUDA runtime and NCCL that
#       the device's image ships (its Python packages nvidia-*), and runs each GPU test program
#       directly (ctest files hold this machine's absolute paths). Logs go to $OUT/gpu-check.log
#       when $OUT is set. Exit status: nonzero when a test failed; 77 from a test means it saw
#       no GPU and counts as a failure here.
#
# The programs: collective_nccl (tests/collective/test_nccl.c), cuda_kernels and cuda_cudnn
# (tests/cuda/: trainer/cuda's allocator, kernels, GEMMs and cuDNN ops against ct's CPU code),
# cuda_streams (events, stream order, the allocator across streams), test_engine_device (every op
# on the GPU against the CPU, and a small CNN trained 200 steps with SGD and AdamW against the
# CPU), test_engine_amp with cuda (bf16 autocast: cuBLASLt and cuDNN against PyTorch's values,
# the loss scaler, an MLP trained in bf16 and f16 near f32), test_trainer_gpu
# (tests/trainer/test_gpu.c: trainer_train with use_gpu, one replica, on the CNN and on ResNet9).
# NCCL refuses two ranks on one GPU, so with one GPU only world size 1 runs. Then the CPU
# programs of cpu_tests on the lent machine's processor, compute-sanitizer's memcheck and
# racecheck over the GPU programs (SANITIZE=0: skip), and bench/gpu_train (BENCH=0: skip).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# each a program of build-gpu/bin, with its arguments after ':' (comma-separated)
gpu_tests="collective_nccl cuda_kernels cuda_cudnn cuda_streams test_engine_device:cuda,200
           test_engine_amp:$root/tests/engine/ref,cuda test_trainer_gpu"
# CPU-only programs run on the lent machine's processor too (an AVX-512 host there, so oneDNN
# takes other kernels than on an AVX2 one)
cpu_tests="test_engine_ops_ref:$root/tests/engine/ref test_engine_train:$root/tests/engine/ref
           checkdev_selftest test_engine_device:checkdev,50"
gpu_targets=$(for t in $gpu_tests $cpu_tests gpu_bench; do printf '%s ' "${t%%:*}"; done)
debs="libzmq5 libprotobuf-c1 libyaml-0-2 libdnnl2 libsodium23 libpgm-5.3-0 libnorm1 libbsd0
      libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libmd0 libgomp1
      ocl-icd-libopencl1"

prepare() {
    [ -x /usr/local/cuda/bin/nvcc ] || { echo "gpu-check: no CUDA toolkit here" >&2; exit 1; }
    cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release | grep 'CUDA/cuDNN/NCCL backends: ON' >/dev/null ||
        { echo "gpu-check: CMake did not enable CUDA (CT_HAVE_CUDA)" >&2; exit 1; }
    # shellcheck disable=SC2086
    cmake --build build-gpu -j"$(nproc)" --target $gpu_targets
    # only the programs travel (the device tool carries at most 64 MiB)
    rm -rf .gpu/bin
    mkdir -p .gpu/debs .gpu/bin
    for t in $gpu_targets; do cp "build-gpu/bin/$t" .gpu/bin/; done
    (cd .gpu/debs && apt-get download $debs 2>/dev/null)
    du -sh .gpu/bin .gpu/debs
}

args_of() {
    case "$1" in
    *:*) echo "${1#*:}" | tr ',' ' ' ;;
    esac
}

run() {
    log=${OUT:-/tmp}/gpu-check.log
    : >"$log"
    exec > >(tee -a "$log") 2>&1
    nvidia-smi -L || { echo "gpu-check: no GPU on this machine"; exit 1; }
    mkdir -p .gpu/root
    for f in .gpu/debs/*.deb; do dpkg -x "$f" .gpu/root; done
    libs="$root/.gpu/root/usr/lib/x86_64-linux-gnu"
    for so in libcudart.so.13 libnccl.so.2 libcublasLt.so.13 libcudnn.so.9; do
        d=$(find /opt /usr/local /usr/lib -name "$so" -print -quit 2>/dev/null | xargs -r dirname)
        [ -n "$d" ] || { echo "gpu-check: $so not found on this machine"; exit 1; }
        libs="$libs:$d"
    done
    export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    failed=0
    for t in $gpu_tests $cpu_tests; do
        echo "== $t"
        set +e
        # shellcheck disable=SC2046
        timeout 300 ".gpu/bin/${t%%:*}" $(args_of "$t")
        rc=$?
        set -e
        echo "== $t: exit $rc"
        [ "$rc" -eq 0 ] || failed=1
    done
    # compute-sanitizer's memcheck (bad device accesses, leaks) and racecheck (shared-memory
    # races) over the same programs, where the image has it and time allows (SANITIZE=0: skip).
    cs=$(command -v compute-sanitizer || find /usr/local /opt -name compute-sanitizer -type f -print -quit 2>/dev/null || true)
    if [ "${SANITIZE:-1}" = 1 ] && [ -n "$cs" ]; then
        for tool in memcheck racecheck; do
            for t in $gpu_tests; do
                t=${t%,200} # the training test: its default steps under the sanitizers
                # NCCL's kernels do not load under memcheck (cudaErrorNoKernelImageForDevice,
                # then its init times out; seen on the H100): racecheck only
                [ "$tool.$t" != memcheck.collective_nccl ] || continue
                # the trainer's run is many processes (cluster, replica): not under the tools
                [ "$t" != test_trainer_gpu ] || continue
                echo "== $tool $t"
                set +e
                # shellcheck disable=SC2046
                # API errors are not memory errors: cuda_kernels asks for 2^50 bytes on purpose
                timeout 300 "$cs" --tool "$tool" --report-api-errors no --error-exitcode 99 \
                    ".gpu/bin/${t%%:*}" \
                    $(args_of "$t") >/tmp/sanitizer-one.log 2>&1
                rc=$?
                set -e
                { echo "== $tool $t: exit $rc"; cat /tmp/sanitizer-one.log; } >>"${OUT:-/tmp}/sanitizer.log"
                tail -5 /tmp/sanitizer-one.log
                echo "== $tool $t: exit $rc"
                [ "$rc" -eq 0 ] || failed=1
            done
        done
    fi
    # bench/gpu_train: ct against torch eager and torch.compile (BENCH=0: skip)
    if [ "${BENCH:-1}" = 1 ]; then
        echo "== bench/gpu_train"
        GPU_BENCH=.gpu/bin/gpu_bench ROUNDS=${ROUNDS:-1} bash bench/gpu_train/run.sh ||
            failed=1
    fi
    exit $failed
}

case "${1:-}" in
prepare) prepare ;;
run) run ;;
*) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
