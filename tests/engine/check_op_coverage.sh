#!/bin/sh
# tests/engine/check_op_coverage.sh TEST.c HEADER... — fails, naming them, when a public op (a
# `ct_tensor *ct_nn_...(` declaration of the headers) is not used by the device test TEST.c,
# which runs every op on a device against the CPU: a new op must be checked there.
test_c=$1
shift
ops=$(sed -n 's/^ct_tensor \*\(ct_nn_[a-z0-9_]*\)(.*/\1/p' "$@" | sort -u)
missing=""
for f in $ops; do
    grep -q "\<$f\>" "$test_c" || missing="$missing $f"
done
if [ -n "$missing" ]; then
    echo "public ops not run by $(basename "$test_c"):$missing"
    exit 1
fi
echo "$(echo "$ops" | wc -l) public ops, each run by $(basename "$test_c")"
