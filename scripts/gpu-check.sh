#!/usr/bin/env bash
# scripts/gpu-check.sh — ct's GPU checks on a lent GPU machine (the workplace's `device` tool; CI
# never has one), in stages: each stage is one device command (at most 600 s), sized to finish
# under 400 s (the time limits of its programs add up to less; `plan` prints them), so a stage
# that hangs still leaves time for the next command. Not a CPU test runner: make test runs the
# same programs everywhere, where they exit 77 without a GPU.
#
# Here (no GPU needed):
#   bash scripts/gpu-check.sh prepare
#     builds the GPU programs in build-gpu/ (Release, CUDA under /usr/local/cuda) and copies them
#     to .gpu/bin; records the versions of the CUDA headers they were built against in
#     .gpu/versions (record-versions: `NAME VERSION SONAME` for cudart, cublas (cuBLASLt),
#     cudnn, nccl); downloads the runtime .debs they need (ZeroMQ, protobuf-c, libyaml, oneDNN
#     and their dependencies) into .gpu/debs and compute-sanitizer's wheel into .gpu/wheels.
#     .gpu is git-ignored; the device tool carries it (carry [".gpu"], at most 64 MiB).
# On the device, one command each (quick first):
#   bash scripts/gpu-check.sh quick
#     the GPU (nvidia-smi -L); the CUDA libraries the machine has (its Python wheels': each
#     SONAME of .gpu/versions, found under the python's site-packages, /usr/local, /opt,
#     /usr/lib), each asked for its version by gpu_libversions and compared with the headers'
#     (a major version that differs fails; a lower minor is a warning); `ldd` of every program
#     with its library path (a library "not found" fails); the GPU unit tests without sanitizers
#     (collective_nccl, cuda_kernels, cuda_cudnn, cuda_streams, test_engine_backend_ops cuda 200:
#     every op and 200 training steps against the CPU, test_engine_amp on cuda) and one trainer
#     test (test_trainer_gpu).
#   bash scripts/gpu-check.sh bench
#     bench/gpu_train (ROUNDS 1; ROWS resnet9:f32 resnet9:bf16 gpt:bf16 unless set; its rows
#     fail on a failing program and on a cudaMalloc after step 2), within BUDGET_S of the stage.
#   bash scripts/gpu-check.sh sanitize
#     compute-sanitizer's memcheck (PATH's, else the wheel's from .gpu/wheels) on the programs
#     that run ct's own kernels: cuda_kernels and test_engine_backend_ops cuda (built with
#     -lineinfo, so its reports name source lines). API errors are not reported: cuda_kernels asks for
#     2^50 bytes on purpose.
#   bash scripts/gpu-check.sh cpu
#     CPU programs on the lent machine's processor (its oneDNN kernels differ from an AVX2
#     machine's): test_engine_ops_ref, test_engine_train, checkdev_selftest,
#     test_engine_backend_ops checkdev 50.
# A stage writes a log per program and summary.txt (a line per row: `NAME exit RC SECONDSs`)
# into $OUT/gpu-check/STAGE/ when OUT is set, else into a new temporary folder; it prints the
# same lines, a failing row's log tail, and its verdict. Each row runs under its own `timeout`.
# Exit status: 0 when every row passed, else 1 (a program that exits 77, "no GPU", fails here).
# The library path (.gpu/root's unpacked debs, then the folders of the CUDA libraries found) is
# given to each program alone (env LD_LIBRARY_PATH=... PROGRAM), never exported to the script.
#
# Settings (the dry run, tests/scripts/test_gpu_check.sh, points them at stand-ins): GPU_CHECK_DIR
# (.gpu), GPU_CHECK_BIN (GPU_CHECK_DIR/bin: the programs), GPU_CHECK_LIBROOTS (where the CUDA
# libraries are looked for), CUDA_HOME (/usr/local/cuda: record-versions' headers), OUT, ROWS and
# ROUNDS for bench.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
gdir=${GPU_CHECK_DIR:-$root/.gpu}
bin=${GPU_CHECK_BIN:-$gdir/bin}
ref=$root/tests/engine/ref

# The stages' programs, a line each: NAME LIMIT [ARG...]. NAME is a program of $bin, LIMIT its
# time limit in seconds, @ref@ stands for tests/engine/ref. With the checks before them (limits
# below) each stage's limits add up to at most stage_budget (`plan` prints the sums; the dry run
# checks them). And a row never runs past the stage's budget: its limit is cut to what is left,
# and a row with nothing left fails unstarted, so a stage ends within 390 s however its rows go.
stage_budget=390
quick_programs="
collective_nccl      30
cuda_kernels         45
cuda_cudnn           45
cuda_streams         30
test_engine_backend_ops 70 cuda 200
test_engine_amp      45 @ref@ cuda
test_trainer_gpu     70
"
sanitize_programs="
cuda_kernels        170
test_engine_backend_ops 170 cuda
"
cpu_programs="
test_engine_ops_ref  60 @ref@
test_engine_train   120 @ref@
checkdev_selftest    30
test_engine_backend_ops 120 checkdev 50
"
bench_limit=360       # bench/gpu_train as a whole (its BUDGET_S: 10 s less)
gpu_limit=10          # nvidia-smi -L
versions_limit=15     # gpu_libversions
ldd_limit=2           # ldd of one program
sanitizer_limit=30    # unpacking compute-sanitizer's wheel
# every program any stage runs, and the version reader: `ldd` in quick, copied by prepare
all_programs="collective_nccl cuda_kernels cuda_cudnn cuda_streams test_engine_backend_ops
              test_engine_amp test_trainer_gpu gpu_bench test_engine_ops_ref test_engine_train
              checkdev_selftest gpu_libversions"
debs="libzmq5 libprotobuf-c1 libyaml-0-2 libdnnl2 libsodium23 libpgm-5.3-0 libnorm1 libbsd0
      libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libmd0 libgomp1
      ocl-icd-libopencl1"

# record-versions: the versions of CUDA_HOME's headers (the ones ct is built against) into
# $gdir/versions, a line `NAME VERSION SONAME` each; SONAME is the library that version's programs
# load. Fails when a header or a number is missing.
record_versions() {
    local inc=${CUDA_HOME:-/usr/local/cuda}/include v
    def() { sed -n "s/^#define $2[[:space:]]\+\([0-9]\+\).*/\1/p" "$inc/$1" 2>/dev/null | head -1; }
    local rt cb1 cb2 cb3 dn1 dn2 dn3 nc1 nc2 nc3
    rt=$(def cuda_runtime_api.h CUDART_VERSION)
    cb1=$(def cublas_api.h CUBLAS_VER_MAJOR) cb2=$(def cublas_api.h CUBLAS_VER_MINOR)
    cb3=$(def cublas_api.h CUBLAS_VER_PATCH)
    dn1=$(def cudnn_version.h CUDNN_MAJOR) dn2=$(def cudnn_version.h CUDNN_MINOR)
    dn3=$(def cudnn_version.h CUDNN_PATCHLEVEL)
    nc1=$(def nccl.h NCCL_MAJOR) nc2=$(def nccl.h NCCL_MINOR) nc3=$(def nccl.h NCCL_PATCH)
    for v in "$rt" "$cb1" "$cb2" "$cb3" "$dn1" "$dn2" "$dn3" "$nc1" "$nc2" "$nc3"; do
        [ -n "$v" ] || { echo "gpu-check: a version is missing from the headers in $inc" >&2; return 1; }
    done
    mkdir -p "$gdir"
    {
        echo "cudart $((rt / 1000)).$((rt % 1000 / 10)) libcudart.so.$((rt / 1000))"
        echo "cublas $cb1.$cb2.$cb3 libcublasLt.so.$cb1"
        echo "cudnn $dn1.$dn2.$dn3 libcudnn.so.$dn1"
        echo "nccl $nc1.$nc2.$nc3 libnccl.so.$nc1"
    } >"$gdir/versions"
    cat "$gdir/versions"
}

prepare() {
    [ -x /usr/local/cuda/bin/nvcc ] || { echo "gpu-check: no CUDA toolkit here" >&2; exit 1; }
    cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release | grep 'CUDA/cuDNN/NCCL backends: ON' >/dev/null ||
        { echo "gpu-check: CMake did not enable CUDA (CT_HAVE_CUDA)" >&2; exit 1; }
    # shellcheck disable=SC2086
    cmake --build build-gpu -j"$(nproc)" --target $all_programs || exit 1
    # only the programs travel (the device tool carries at most 64 MiB)
    rm -rf "${gdir:?}/bin" "$gdir/root" "$gdir/sanitizer" "$gdir/wheels"
    mkdir -p "$gdir/debs" "$gdir/bin" "$gdir/wheels"
    for t in $all_programs; do cp "build-gpu/bin/$t" "$gdir/bin/" || exit 1; done
    record_versions || exit 1
    # shellcheck disable=SC2086
    (cd "$gdir/debs" && apt-get download $debs 2>/dev/null) || exit 1
    # compute-sanitizer for the sanitize stage, of the CUDA release built against
    local cuda
    cuda=$(awk '$1 == "cudart" {print $2}' "$gdir/versions")
    python3 -m pip download --no-deps -q -d "$gdir/wheels" "nvidia-cuda-sanitizer-api==$cuda.*" ||
        { echo "gpu-check: could not download compute-sanitizer's wheel" >&2; exit 1; }
    du -sh "$gdir/bin" "$gdir/debs" "$gdir/wheels"
    local mib
    mib=$(du -sm "$gdir" | cut -f1)
    echo "$gdir: $mib MiB to carry"
    [ "$mib" -le 64 ] || { echo "gpu-check: $gdir is over the device tool's 64 MiB" >&2; exit 1; }
}

# plan: each stage's rows and time limits, and their sum
plan() {
    local s name limit args sum
    for s in quick bench sanitize cpu; do
        sum=$gpu_limit
        echo "$s: gpu $gpu_limit"
        # libs (unpacking the debs, finding the libraries) has no limit of its own: seconds
        case $s in
        quick) echo "$s: versions $versions_limit"; sum=$((sum + versions_limit)) ;;
        sanitize) echo "$s: sanitizer $sanitizer_limit"; sum=$((sum + sanitizer_limit)) ;;
        esac
        local n=0
        for name in $(stage_programs "$s"); do n=$((n + 1)); done
        echo "$s: ldd $((n * ldd_limit))"
        sum=$((sum + n * ldd_limit))
        if [ "$s" = bench ]; then
            echo "$s: gpu_train $bench_limit"
            sum=$((sum + bench_limit))
        else
            while read -r name limit args; do
                [ -n "$name" ] || continue
                echo "$s: $name $limit${args:+ $args}"
                sum=$((sum + limit))
            done <<<"$(stage_table "$s")"
        fi
        echo "$s: total $sum"
    done
}

stage_table() {
    case $1 in
    quick) echo "$quick_programs" ;;
    sanitize) echo "$sanitize_programs" ;;
    cpu) echo "$cpu_programs" ;;
    esac
}

# The programs a stage's ldd row checks: quick every one, the others their own.
stage_programs() {
    case $1 in
    quick) echo "$all_programs" ;;
    bench) echo gpu_bench ;;
    *) stage_table "$1" | awk 'NF {print $1}' | sort -u ;;
    esac
}

# row NAME LIMIT CMD...: one row of the stage: CMD under `timeout` LIMIT seconds (or what is left
# of the stage's budget), its output in $res/NAME.log, then record
row() {
    local name=$1 limit=$2 t0=$SECONDS rc
    shift 2
    [ "$limit" -le $((deadline - SECONDS)) ] || limit=$((deadline - SECONDS))
    if [ "$limit" -le 0 ]; then
        echo "gpu-check: $name: not started: the stage's $stage_budget s are spent" >"$res/$name.log"
        record "$name" 124 0
        return
    fi
    timeout -k 5 "$limit" "$@" >"$res/$name.log" 2>&1 </dev/null
    rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "gpu-check: $name: killed at its time limit of $limit s" >>"$res/$name.log"
    fi
    record "$name" "$rc" $((SECONDS - t0))
}

# record NAME RC SECONDS: a line in summary.txt and on stdout; a nonzero RC fails the stage
record() {
    printf '%-20s exit %3d %4ds\n' "$1" "$2" "$3" | tee -a "$res/summary.txt"
    if [ "$2" -ne 0 ]; then
        failed=$((failed + 1))
        tail -n 15 "$res/$1.log" | sed 's/^/    | /'
    fi
}

# find_libs (a row's body, run in this shell: it sets libpath and libfile): unpacks the .debs
# once into $gdir/root, finds each SONAME of $gdir/versions under the library roots.
declare -A libfile
libpath=""
find_libs() {
    local ok=0 f name ver so roots dirs=""
    libpath="$gdir/root/usr/lib/x86_64-linux-gnu:$gdir/root/lib/x86_64-linux-gnu"
    if [ ! -e "$gdir/root/.unpacked" ]; then
        mkdir -p "$gdir/root"
        for f in "$gdir"/debs/*.deb; do
            [ -e "$f" ] || continue
            dpkg -x "$f" "$gdir/root" || ok=1
        done
        touch "$gdir/root/.unpacked"
    fi
    if [ -n "${GPU_CHECK_LIBROOTS:-}" ]; then
        roots=$GPU_CHECK_LIBROOTS
    else
        roots="$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)"
        roots="$roots /usr/local /opt /usr/lib"
    fi
    echo "looking under: $roots"
    [ -s "$gdir/versions" ] || { echo "no $gdir/versions (run prepare)"; return 1; }
    while read -r name ver so; do
        # shellcheck disable=SC2086
        f=$(find $roots -name "$so" -xtype f -print -quit 2>/dev/null)
        if [ -z "$f" ]; then
            echo "$name: $so (built against $ver) not found"
            ok=1
            continue
        fi
        echo "$name: $f"
        libfile[$name]=$f
        case ":$dirs:" in *":${f%/*}:"*) ;; *) dirs="$dirs${dirs:+:}${f%/*}" ;; esac
    done <"$gdir/versions"
    libpath="$libpath${dirs:+:$dirs}"
    echo "library path of each program: $libpath"
    return $ok
}

# check_versions (a row's body): each library's own version against the headers'
check_versions() {
    local ok=0 args=() name ver so have out
    while read -r name ver so; do
        [ -n "${libfile[$name]:-}" ] && args+=("$name=${libfile[$name]}")
    done <"$gdir/versions"
    out=$(timeout -k 5 "$versions_limit" env LD_LIBRARY_PATH="$libpath" "$bin/gpu_libversions" \
          "${args[@]}" 2>&1) || ok=1
    echo "$out"
    while read -r name ver so; do
        have=$(echo "$out" | awk -v n="$name" '$1 == n {print $2}')
        if [ -z "$have" ]; then
            echo "$name: FAIL: no version read (built against $ver)"
            ok=1
        elif [ "${have%%.*}" != "${ver%%.*}" ]; then
            echo "$name: FAIL: $have here, built against $ver: the major versions differ"
            ok=1
        elif [ "$(printf '%s\n%s\n' "$have" "$ver" | sort -V | head -1)" != "$ver" ]; then
            echo "$name: $have here, built against $ver: WARNING: older than the headers"
        else
            echo "$name: $have here, built against $ver: ok"
        fi
    done <"$gdir/versions"
    return $ok
}

# ldd_check PROGRAM...: each program's libraries resolve with the library path
ldd_check() {
    local ok=0 p out rc
    for p in "$@"; do
        echo "== $p"
        if [ ! -x "$bin/$p" ]; then
            echo "$p: FAIL: not in $bin"
            ok=1
            continue
        fi
        out=$(timeout -k 5 "$ldd_limit" env LD_LIBRARY_PATH="$libpath" ldd "$bin/$p" 2>&1)
        rc=$?
        echo "$out"
        if [ "$rc" -ne 0 ]; then
            echo "$p: FAIL: ldd exit $rc"
            ok=1
        elif echo "$out" | grep -q "not found"; then
            echo "$p: FAIL: libraries not found: $(echo "$out" | grep "not found" | awk '{print $1}' | tr '\n' ' ')"
            ok=1
        fi
    done
    return $ok
}

# find_sanitizer (a row's body): sets cs, compute-sanitizer from PATH, else from the wheel
cs=""
find_sanitizer() {
    local w
    cs=$(command -v compute-sanitizer || true)
    if [ -z "$cs" ]; then
        for w in "$gdir"/wheels/nvidia_cuda_sanitizer_api-*.whl; do
            [ -e "$w" ] || continue
            [ -d "$gdir/sanitizer" ] ||
                timeout "$sanitizer_limit" python3 -m zipfile -e "$w" "$gdir/sanitizer" || return 1
        done
        cs=$(find "$gdir/sanitizer" -name compute-sanitizer -type f -print -quit 2>/dev/null)
        [ -z "$cs" ] || chmod +x "$cs"
    fi
    [ -n "$cs" ] || { echo "compute-sanitizer: not on PATH, no wheel in $gdir/wheels"; return 1; }
    echo "compute-sanitizer: $cs"
}

# a body row: NAME FUNCTION [ARG...], timed, output in NAME.log (functions run in this shell)
body_row() {
    local name=$1 t0=$SECONDS rc
    shift
    "$@" >"$res/$name.log" 2>&1 </dev/null
    rc=$?
    record "$name" "$rc" $((SECONDS - t0))
}

stage() {
    local s=$1 name limit args
    if [ -n "${OUT:-}" ]; then
        res=$OUT/gpu-check/$s
    else
        res=$(mktemp -d -t gpu-check.XXXXXX)/$s
    fi
    rm -rf "$res"
    mkdir -p "$res" || exit 1
    : >"$res/summary.txt"
    failed=0
    deadline=$((SECONDS + stage_budget))
    echo "gpu-check $s: results in $res"
    row gpu "$gpu_limit" nvidia-smi -L
    body_row libs find_libs
    [ "$s" != quick ] || body_row versions check_versions
    # shellcheck disable=SC2046
    body_row ldd ldd_check $(stage_programs "$s")
    case $s in
    bench)
        # run.sh's budget: 10 s less than the row's limit, so it ends its last row itself
        limit=$bench_limit
        [ "$limit" -le $((deadline - SECONDS)) ] || limit=$((deadline - SECONDS))
        row gpu_train "$limit" env GPU_BENCH="$bin/gpu_bench" GPU_BENCH_LIBS="$libpath" \
            ROUNDS="${ROUNDS:-1}" ROWS="${ROWS:-resnet9:f32 resnet9:bf16 gpt:bf16}" \
            BUDGET_S=$((limit - 10)) bash "$root/bench/gpu_train/run.sh"
        sed 's/^/    /' "$res/gpu_train.log"
        ;;
    sanitize)
        body_row sanitizer find_sanitizer
        while read -r name limit args; do
            [ -n "$name" ] || continue
            # shellcheck disable=SC2086
            row "$name" "$limit" env LD_LIBRARY_PATH="$libpath" "${cs:-compute-sanitizer}" \
                --tool memcheck --report-api-errors no --error-exitcode 99 \
                "$bin/$name" ${args//@ref@/$ref}
        done <<<"$(stage_table "$s")"
        ;;
    *)
        while read -r name limit args; do
            [ -n "$name" ] || continue
            # shellcheck disable=SC2086
            row "$name" "$limit" env LD_LIBRARY_PATH="$libpath" "$bin/$name" ${args//@ref@/$ref}
        done <<<"$(stage_table "$s")"
        ;;
    esac
    local n
    n=$(wc -l <"$res/summary.txt")
    if [ "$failed" -eq 0 ]; then
        echo "gpu-check $s: PASS ($n rows; $res/summary.txt)"
        exit 0
    fi
    echo "gpu-check $s: FAIL ($failed of $n rows failed; $res/summary.txt)"
    exit 1
}

case "${1:-}" in
prepare) prepare ;;
record-versions) record_versions ;;
plan) plan ;;
quick | bench | sanitize | cpu) stage "$1" ;;
*) echo "usage: $0 prepare|quick|bench|sanitize|cpu|plan|record-versions" >&2; exit 2 ;;
esac
