#!/bin/sh
# tests/cudaemu/check_coverage.sh TEST.c CU... — fails, naming them, when a kernel function that a
# .cu file of trainer/cuda exports (extern "C" int ct__cuda_...) is not called by the emulator's
# kernel test: a new kernel must be checked against the CPU there.
test_c=$1
shift
missing=""
for f in $(sed -n 's/^extern "C" int \(ct__cuda_[a-z0-9_]*\)(.*/\1/p' "$@" | sort -u); do
    grep -q "\<$f(" "$test_c" || missing="$missing $f"
done
if [ -n "$missing" ]; then
    echo "kernels not checked by $test_c:$missing"
    exit 1
fi
echo "every exported kernel of $# .cu files is called by $(basename "$test_c")"
