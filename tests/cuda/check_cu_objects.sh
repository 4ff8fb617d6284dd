#!/bin/sh
# tests/cuda/check_cu_objects.sh OBJECT... — passes when at least one of the objects is a
# non-empty .cu.o: a build that found CUDA must have compiled the CUDA backend with nvcc.
n=0
for f in "$@"; do
    case $f in
    *.cu.o) [ -s "$f" ] && n=$((n + 1)) ;;
    esac
done
echo "$n .cu objects in ct_cuda"
[ "$n" -gt 0 ]
