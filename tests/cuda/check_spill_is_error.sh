#!/bin/sh
# tests/cuda/check_spill_is_error.sh CMAKE BUILD_DIR SPILL_OBJECT NOSPILL_OBJECT — the test
# cuda_spill_is_error: builds the CMake targets cuda_spill_probe and cuda_nospill_probe (kernels
# compiled with ct_cuda_compile_options, the options of every .cu file of ct's) and passes when
# the first fails with ptxas's spill error and the second builds. Each object is removed first, so
# both are compiled again every run. Not a check of ct's own kernels: their build is that check.
set -u
cmake=$1 build=$2 spill_obj=$3 nospill_obj=$4
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail() { echo "cuda_spill_is_error: FAIL: $*"; exit 1; }

rm -f "$spill_obj" "$nospill_obj"
"$cmake" --build "$build" --target cuda_spill_probe >"$log" 2>&1
rc=$?
cat "$log"
[ "$rc" -ne 0 ] || fail "the spilling kernel built (exit 0): spills are not errors"
grep -q "ptxas error.*Registers are spilled to local memory" "$log" ||
    fail "the spilling kernel's build failed (exit $rc) without ptxas's spill error"
echo "cuda_spill_is_error: the spilling kernel fails to build (exit $rc), as it must"

"$cmake" --build "$build" --target cuda_nospill_probe >"$log" 2>&1
rc=$?
cat "$log"
[ "$rc" -eq 0 ] || fail "the kernel without spills did not build with the same options (exit $rc)"
[ -s "$nospill_obj" ] || fail "no object $nospill_obj after its build"
echo "cuda_spill_is_error: the kernel without spills builds with the same options"
