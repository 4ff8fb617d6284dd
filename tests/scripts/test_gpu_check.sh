#!/usr/bin/env bash
# tests/scripts/test_gpu_check.sh GPU_LIBVERSIONS CC — the test gpu_check_dryrun: a dry run of
# scripts/gpu-check.sh's stages (quick, bench, sanitize) and of bench/gpu_train/run.sh's control
# flow, on any machine, with or without CUDA. Everything the stages call is a stand-in made here
# in a temporary folder (removed on exit by the trap; nothing is left running: every stand-in
# exits at once):
#   - nvidia-smi and compute-sanitizer first on PATH (shell scripts; compute-sanitizer runs the
#     program after its options, as the real one does);
#   - the CUDA libraries: real shared objects built with CC (libcudart.so.13, libcublasLt.so.13,
#     libcudnn.so.9, libnccl.so.2), each with its version function, under a stand-in site-packages;
#   - the programs (GPU_CHECK_BIN): one small ELF built with CC that needs the stand-in
#     libcudart.so.13 (so it loads, and `ldd` resolves it, only with the library path gpu-check
#     gives it) and runs NAME.sh beside it: each appends `NAME ARGS LD_LIBRARY_PATH=...` to a trace
#     and exits with NAME.rc (0 when absent); gpu_bench.sh prints gpu_bench's key=value line;
#   - torch: REF_PYTHON, a script that prints ref_torch.py's line;
#   - the headers: record-versions reads stand-in ones (CUDA_HOME);
#   - gpu_libversions is the real program (GPU_LIBVERSIONS).
# It asserts each stage's exit status; that a failing program (exit 1, and 77) fails the stage and
# the stage goes on to the next program; summary.txt's rows, one per check and program; that each
# program gets the library path and nothing else does (LD_LIBRARY_PATH is never exported); that a
# major version that differs, a library that is not found, and a program whose library `ldd` does
# not find each fail quick; that a bench row with a cudaMalloc after step 2 or a failing ct fails
# and the bench goes on; that each stage's time limits add up to at most 390 s. No timing
# assertions. Not a test of the programs themselves: on a GPU machine gpu-check.sh runs those.
set -u
libversions=$1 cc=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
script=$root/scripts/gpu-check.sh
tmp=$(mktemp -d -t gpu-check-dryrun.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails + 1)); }
# expect DESCRIPTION COMMAND...: the command must succeed
expect() { if "${@:2}"; then ok "$1"; else bad "$1"; fi; }
has() { grep -q -- "$2" "$1"; }          # FILE PATTERN
lacks() { ! grep -q -- "$2" "$1"; }      # FILE PATTERN
# row_exit STAGE NAME: the exit status summary.txt gives NAME
row_exit() { awk -v n="$2" '$1 == n {print $3}' "$tmp/out/gpu-check/$1/summary.txt"; }
rows() { awk '{print $1}' "$tmp/out/gpu-check/$1/summary.txt" | tr '\n' ' '; }

# ---- stand-ins ----
mkdir -p "$tmp/path" "$tmp/gpu/bin" "$tmp/cuda/include" "$tmp/ghost"
site=$tmp/site/nvidia
cat >"$tmp/path/nvidia-smi" <<'EOF'
#!/bin/sh
echo "nvidia-smi $* LD_LIBRARY_PATH=${LD_LIBRARY_PATH-unset}" >>"$TRACE"
echo "GPU 0: NVIDIA H200 (stand-in)"
exit "$(cat "$(dirname "$0")/nvidia-smi.rc" 2>/dev/null || echo 0)"
EOF
cat >"$tmp/path/compute-sanitizer" <<'EOF'
#!/bin/sh
echo "compute-sanitizer $* LD_LIBRARY_PATH=${LD_LIBRARY_PATH-unset}" >>"$TRACE"
while [ $# -gt 0 ]; do
    case $1 in
    --tool | --report-api-errors | --error-exitcode) shift 2 ;;
    -*) shift ;;
    *) break ;;
    esac
done
exec "$@"
EOF
cat >"$tmp/python" <<'EOF'
#!/bin/sh
# REF_PYTHON ref_torch.py CONFIG BATCH STEPS SIZE MODE PRECISION
echo "python $2 $6 $7 LD_LIBRARY_PATH=${LD_LIBRARY_PATH-unset}" >>"$TRACE"
echo "tokens_per_s=900.0 samples_per_s=900.0 peak_alloc_mb=90.0 loss=2.3"
EOF
chmod +x "$tmp/path/nvidia-smi" "$tmp/path/compute-sanitizer" "$tmp/python"

# mklib FILE CODE: a shared library whose soname is its file name
mklib() {
    mkdir -p "$(dirname "$1")"
    echo "$2" | "$cc" -shared -fPIC -x c -o "$1" -Wl,-soname,"$(basename "$1")" - ||
        { echo "FAIL: cannot build $1 with $cc"; exit 1; }
}
cudnn_lib() { mklib "$site/cudnn/lib/libcudnn.so.9" "unsigned long cudnnGetVersion(void) { return $1; }"; }
mklib "$site/cu13/lib/libcudart.so.13" 'int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }'
mklib "$site/cu13/lib/libcublasLt.so.13" 'unsigned long cublasLtGetVersion(void) { return 130200; }'
cudnn_lib 91002 # 9.10.2: older than the headers' 9.19.0, same major: a warning
mklib "$site/nccl/lib/libnccl.so.2" 'int ncclGetVersion(int *v) { *v = 22809; return 0; }'
mklib "$tmp/ghost/libghost.so.1" 'int ghost(void) { return 0; }'

cat >"$tmp/shim.c" <<'EOF'
/* a stand-in program: needs libcudart.so.13, then runs ARGV0.sh with its arguments */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int cudaRuntimeGetVersion(int *v);
int main(int argc, char **argv)
{
    int v = 0;
    char path[4096];
    char **args = calloc((size_t)argc + 2, sizeof *args);
    cudaRuntimeGetVersion(&v);
    snprintf(path, sizeof path, "%s.sh", argv[0]);
    args[0] = "sh";
    args[1] = path;
    for (int i = 1; i < argc; i++)
        args[i + 1] = argv[i];
    execv("/bin/sh", args);
    perror(path);
    return 126;
}
EOF
"$cc" -o "$tmp/shim" "$tmp/shim.c" "$site/cu13/lib/libcudart.so.13" || { echo "FAIL: cc"; exit 1; }
# the same, also needing libghost.so.1 (which calls nothing in it: --no-as-needed keeps it)
"$cc" -o "$tmp/shim_ghost" "$tmp/shim.c" "$site/cu13/lib/libcudart.so.13" \
    -Wl,--no-as-needed "$tmp/ghost/libghost.so.1" || { echo "FAIL: cc"; exit 1; }
rm -f "$tmp/ghost/libghost.so.1" # now nowhere: ldd says "not found"

b=$tmp/gpu/bin
for p in collective_nccl cuda_kernels cuda_cudnn cuda_streams test_engine_backend_ops \
         test_engine_amp test_trainer_gpu test_engine_ops_ref test_engine_train checkdev_selftest; do
    cp "$tmp/shim" "$b/$p"
    cat >"$b/$p.sh" <<'EOF'
#!/bin/sh
echo "$(basename "$0" .sh) $* LD_LIBRARY_PATH=${LD_LIBRARY_PATH-unset}" >>"$TRACE"
exit "$(cat "${0%.sh}.rc" 2>/dev/null || echo 0)"
EOF
done
cp "$tmp/shim" "$b/gpu_bench"
cat >"$b/gpu_bench.sh" <<'EOF'
#!/bin/sh
# gpu_bench CONFIG BATCH STEPS SIZE PRECISION; gpu_bench.fail.CONFIG_PREC: fail as an op the
# backend lacks; gpu_bench.mallocs.CONFIG_PREC: that many cudaMallocs after step 2
row=$1_$5 dir=$(dirname "$0")
echo "gpu_bench $1 $2 $5 LD_LIBRARY_PATH=${LD_LIBRARY_PATH-unset}" >>"$TRACE"
if [ -e "$dir/gpu_bench.fail.$row" ]; then
    echo "gpu_bench $1: step 0: layer_norm is not implemented on device cuda" >&2
    exit 1
fi
m=$(cat "$dir/gpu_bench.mallocs.$row" 2>/dev/null || echo 0)
[ "$1" != gpt ] || printf 'tokens_per_s=1800.0 '
echo "samples_per_s=1000.0 peak_alloc_mb=100.0 device_mallocs_after_step2=$m loss=2.3"
EOF
cp "$libversions" "$b/gpu_libversions"

cat >"$tmp/cuda/include/cuda_runtime_api.h" <<'EOF'
#define CUDART_VERSION  13000
EOF
cat >"$tmp/cuda/include/cublas_api.h" <<'EOF'
#define CUBLAS_VER_MAJOR 13
#define CUBLAS_VER_MINOR 1
#define CUBLAS_VER_PATCH 0
#define CUBLAS_VER_BUILD 3
EOF
cat >"$tmp/cuda/include/cudnn_version.h" <<'EOF'
#define CUDNN_MAJOR 9
#define CUDNN_MINOR 19
#define CUDNN_PATCHLEVEL 0
EOF
cat >"$tmp/cuda/include/nccl.h" <<'EOF'
#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""
EOF

# gpu STAGE: runs a stage as on the device, but with the stand-ins; LD_LIBRARY_PATH unset
gpu() {
    : >"$tmp/trace"
    env -u LD_LIBRARY_PATH PATH="$tmp/path:$PATH" TMPDIR="$tmp" TRACE="$tmp/trace" \
        GPU_CHECK_DIR="$tmp/gpu" GPU_CHECK_BIN="$b" GPU_CHECK_LIBROOTS="$tmp/site" \
        OUT="$tmp/out" REF_PYTHON="$tmp/python" bash "$script" "$@" >"$tmp/stdout" 2>&1
}
# traced NAME: the trace line of program NAME (first word)
traced() { awk -v n="$1" '$1 == n' "$tmp/trace"; }
libdirs_in() { # TRACE-LINE: it holds the three stand-in library folders
    case $1 in *"$site/cu13/lib"*) ;; *) return 1 ;; esac
    case $1 in *"$site/cudnn/lib"*) ;; *) return 1 ;; esac
    case $1 in *"$site/nccl/lib"*) ;; *) return 1 ;; esac
}

# ---- record-versions: the headers' versions and sonames ----
env CUDA_HOME="$tmp/cuda" GPU_CHECK_DIR="$tmp/gpu" bash "$script" record-versions >/dev/null
printf '%s\n' "cudart 13.0 libcudart.so.13" "cublas 13.1.0 libcublasLt.so.13" \
    "cudnn 9.19.0 libcudnn.so.9" "nccl 2.28.9 libnccl.so.2" >"$tmp/want"
expect "record-versions writes the headers' versions" cmp -s "$tmp/want" "$tmp/gpu/versions"
env CUDA_HOME="$tmp/nowhere" GPU_CHECK_DIR="$tmp/gpu2" bash "$script" record-versions \
    >/dev/null 2>&1
expect "record-versions fails without the headers" test $? -ne 0

# ---- plan: every stage's limits add up to at most 390 s ----
bash "$script" plan >"$tmp/plan"
for s in quick bench sanitize cpu; do
    total=$(awk -v s="$s:" '$1 == s && $2 == "total" {print $3}' "$tmp/plan")
    expect "stage $s's limits add up to ${total:-?} s, at most 390" test "${total:-999}" -le 390
done

# ---- quick, everything passes ----
gpu quick
rc=$?
cat "$tmp/stdout"
expect "quick passes when everything passes (exit $rc)" test "$rc" -eq 0
expect "quick's summary.txt has a row per check and program" test "$(rows quick)" = \
    "gpu libs versions ldd collective_nccl cuda_kernels cuda_cudnn cuda_streams test_engine_backend_ops test_engine_amp test_trainer_gpu "
expect "summary rows read NAME exit RC SECONDSs" \
    awk '!/^[a-z_0-9]+ +exit +[0-9]+ +[0-9]+s$/ {exit 1}' "$tmp/out/gpu-check/quick/summary.txt"
expect "a log per program" test -s "$tmp/out/gpu-check/quick/ldd.log" -a \
    -e "$tmp/out/gpu-check/quick/test_trainer_gpu.log"
expect "the versions log warns of cuDNN older than its headers" \
    has "$tmp/out/gpu-check/quick/versions.log" "cudnn: 9.10.2 here, built against 9.19.0: WARNING"
expect "test_engine_backend_ops runs with cuda 200" \
    test "$(traced test_engine_backend_ops | cut -d' ' -f2-3)" = "cuda 200"
expect "test_engine_amp gets the reference folder" \
    test "$(traced test_engine_amp | cut -d' ' -f2-3)" = "$root/tests/engine/ref cuda"
expect "each program gets the CUDA libraries' folders" libdirs_in "$(traced cuda_kernels)"
expect "nvidia-smi does not: LD_LIBRARY_PATH is not exported" \
    test "$(traced nvidia-smi)" = "nvidia-smi -L LD_LIBRARY_PATH=unset"

# ---- quick: one program fails, one exits 77 ----
echo 1 >"$b/cuda_cudnn.rc"
echo 77 >"$b/cuda_streams.rc"
gpu quick
rc=$?
expect "a failing program fails quick (exit $rc)" test "$rc" -eq 1
expect "cuda_cudnn's row says exit 1" test "$(row_exit quick cuda_cudnn)" = 1
expect "exit 77 (no GPU) is a failure: cuda_streams's row says 77" \
    test "$(row_exit quick cuda_streams)" = 77
expect "quick goes on after them: test_trainer_gpu ran and passed" \
    test -n "$(traced test_trainer_gpu)" -a "$(row_exit quick test_trainer_gpu)" = 0
expect "the verdict counts 2 failed rows" has "$tmp/stdout" "gpu-check quick: FAIL (2 of 11 rows"
rm -f "$b/cuda_cudnn.rc" "$b/cuda_streams.rc"

# ---- quick: no GPU ----
echo 9 >"$tmp/path/nvidia-smi.rc"
gpu quick
rc=$?
expect "quick fails when nvidia-smi -L fails (exit $rc)" test "$rc" -eq 1 -a "$(row_exit quick gpu)" = 9
rm -f "$tmp/path/nvidia-smi.rc"

# ---- quick: a major version that differs ----
cudnn_lib 8907 # cuDNN 8.9.7 under libcudnn.so.9's name
gpu quick
rc=$?
expect "a major version that differs fails quick (exit $rc)" test "$rc" -eq 1
expect "its row is versions" test "$(row_exit quick versions)" = 1 -a "$(row_exit quick ldd)" = 0
expect "its log names it" has "$tmp/out/gpu-check/quick/versions.log" \
    "cudnn: FAIL: 8.9.7 here, built against 9.19.0: the major versions differ"
cudnn_lib 91900

# ---- quick: a library the program needs is nowhere ----
cp "$tmp/shim_ghost" "$b/test_trainer_gpu"
gpu quick
rc=$?
expect "a library ldd does not find fails quick (exit $rc)" test "$rc" -eq 1
expect "its row is ldd" test "$(row_exit quick ldd)" = 1 -a "$(row_exit quick versions)" = 0
expect "ldd's log names it" has "$tmp/out/gpu-check/quick/ldd.log" \
    "test_trainer_gpu: FAIL: libraries not found: libghost.so.1"
cp "$tmp/shim" "$b/test_trainer_gpu"

# ---- quick: a CUDA library the machine lacks ----
mv "$site/nccl/lib/libnccl.so.2" "$tmp/libnccl.so.2"
gpu quick
rc=$?
expect "a CUDA library not found fails quick (exit $rc)" test "$rc" -eq 1 -a "$(row_exit quick libs)" = 1
expect "libs' log names it" has "$tmp/out/gpu-check/quick/libs.log" \
    "nccl: libnccl.so.2 (built against 2.28.9) not found"
mv "$tmp/libnccl.so.2" "$site/nccl/lib/libnccl.so.2"

# ---- bench: every row passes ----
export ROWS="resnet9:f32 gpt:bf16 mlp:bf16"
gpu bench
rc=$?
cat "$tmp/stdout"
log=$tmp/out/gpu-check/bench/gpu_train.log
expect "bench passes when every row passes (exit $rc)" test "$rc" -eq 0
expect "bench's rows" test "$(rows bench)" = "gpu libs ldd gpu_train "
expect "a row in the house format" has "$log" \
    "^gpu_train_resnet9_f32: ct=1000.0 ref=900.0 samples/s ratio=1.11 "
expect "the last line is the GPT row's, in tokens/s" \
    test "$(tail -1 "$log")" = "gpu_train_gpt_bf16: ct=1800.0 ref=900.0 tokens/s ratio=2.00"
expect "gpu_bench gets the CUDA libraries' folders" libdirs_in "$(traced gpu_bench | head -1)"
expect "gpu_bench runs the GPT at batch 16 in bf16" has "$tmp/trace" "^gpu_bench gpt 16 bf16 "
expect "torch (eager and compile) gets no library path" \
    test "$(grep -c '^python .*LD_LIBRARY_PATH=unset$' "$tmp/trace")" = 6

# ---- bench: a cudaMalloc after step 2, and a ct that fails ----
echo 3 >"$b/gpu_bench.mallocs.resnet9_f32"
touch "$b/gpu_bench.fail.gpt_bf16"
gpu bench
rc=$?
cat "$log"
expect "failing rows fail bench (exit $rc)" test "$rc" -eq 1 -a "$(row_exit bench gpu_train)" = 1
expect "a cudaMalloc after step 2 is a failure" has "$log" \
    "^gpu_train_resnet9_f32: FAIL: ct called cudaMalloc 3 times after step 2 (must be 0)"
expect "a failing ct is reported with its reason" has "$log" \
    "^gpu_train_gpt_bf16: FAIL: ct exit 1: gpu_bench gpt: step 0: layer_norm is not implemented on device cuda"
expect "the bench goes on: the mlp row ran after them and passed" \
    test -n "$(grep '^gpu_train_mlp_bf16: ct=1000.0 ' "$log")" -a -z "$(grep '^gpu_train_mlp_bf16: FAIL' "$log")"
expect "the bench names the failed rows" has "$log" \
    "gpu_train: 2 of 3 rows failed: gpu_train_resnet9_f32 gpu_train_gpt_bf16"
expect "the last line is still the headline row" has <(tail -1 "$log") "^gpu_train_gpt_bf16: ct=0 "
rm -f "$b"/gpu_bench.mallocs.* "$b"/gpu_bench.fail.*
unset ROWS

# ---- bench: torch.compile left out; and no time left (run.sh alone) ----
COMPILE=0 ROWS=mlp:f32 gpu bench
rc=$?
expect "COMPILE=0: torch.compile is skipped, not failed (exit $rc)" test "$rc" -eq 0
expect "COMPILE=0: the row says so" has "$log" "torch.compile=skipped ratio_compile=-;"
expect "COMPILE=0: torch ran once" test "$(grep -c '^python ' "$tmp/trace")" = 1
: >"$tmp/trace"
env -u LD_LIBRARY_PATH PATH="$tmp/path:$PATH" TRACE="$tmp/trace" GPU_BENCH="$b/gpu_bench" \
    GPU_BENCH_LIBS="$site/cu13/lib" REF_PYTHON="$tmp/python" ROWS="mlp:f32 gpt:bf16" \
    BUDGET_S=0 bash "$root/bench/gpu_train/run.sh" >"$tmp/stdout" 2>&1
rc=$?
expect "run.sh with no time left fails its rows (exit $rc) and starts nothing" \
    test "$rc" -eq 1 -a -z "$(grep -E '^(gpu_bench|python) ' "$tmp/trace")"
expect "run.sh says why" has "$tmp/stdout" \
    "^gpu_train_gpt_bf16: FAIL: ct exit 124: not started: no time left of BUDGET_S=0"

# ---- sanitize ----
gpu sanitize
rc=$?
cat "$tmp/stdout"
expect "sanitize passes when memcheck finds nothing (exit $rc)" test "$rc" -eq 0
expect "sanitize's rows" test "$(rows sanitize)" = \
    "gpu libs ldd sanitizer cuda_kernels test_engine_backend_ops "
expect "memcheck runs cuda_kernels" has "$tmp/trace" "^compute-sanitizer --tool memcheck .*$b/cuda_kernels "
expect "memcheck runs test_engine_backend_ops cuda" \
    test "$(traced test_engine_backend_ops | cut -d' ' -f2)" = cuda
expect "through compute-sanitizer with the library path" \
    libdirs_in "$(grep '^compute-sanitizer' "$tmp/trace" | head -1)"
echo 99 >"$b/cuda_kernels.rc" # memcheck's --error-exitcode
gpu sanitize
rc=$?
expect "a memcheck error fails sanitize (exit $rc), which goes on" test "$rc" -eq 1 -a \
    "$(row_exit sanitize cuda_kernels)" = 99 -a "$(row_exit sanitize test_engine_backend_ops)" = 0
rm -f "$b/cuda_kernels.rc"

# ---- without OUT: a temporary folder ----
: >"$tmp/trace"
env -u LD_LIBRARY_PATH -u OUT PATH="$tmp/path:$PATH" TMPDIR="$tmp" TRACE="$tmp/trace" \
    GPU_CHECK_DIR="$tmp/gpu" GPU_CHECK_BIN="$b" GPU_CHECK_LIBROOTS="$tmp/site" \
    bash "$script" quick >"$tmp/stdout" 2>&1
dir=$(sed -n 's/^gpu-check quick: results in //p' "$tmp/stdout")
expect "without OUT the results go to a new temporary folder ($dir)" \
    test -s "$dir/summary.txt" -a "${dir#"$tmp"/gpu-check.}" != "$dir"

if [ "$fails" -ne 0 ]; then
    echo "gpu_check_dryrun: $fails checks failed"
    exit 1
fi
echo "gpu_check_dryrun: every check passed"
