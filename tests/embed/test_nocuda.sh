#!/usr/bin/env bash
# tests/embed/test_nocuda.sh BUILD_DIR SOURCE_DIR HAVE_CUDA(ON|OFF) — libct.so runs where CUDA
# is absent: installs the build into a temporary prefix and checks that the installed libct.so
# needs none of CUDA's libraries (ldd), that a build with CUDA installs libct_cuda.so beside it
# (which does, and exports one symbol), and that an application asking for device "cuda" gets
# CT_ENOSYS naming what is missing (cuda_app.c): with libct_cuda.so there and no GPU (this
# part is skipped where a GPU is), and with libct_cuda.so moved away. Removes the prefix when it
# ends, also on failure.
set -euo pipefail
build=$1
src=$2
have_cuda=$3
tmp=$(mktemp -d /tmp/ct-nocuda.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name ct.pc -print -quit)
[ -n "$pc" ] || { echo "FAIL: no ct.pc installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(pkg-config --variable=libdir ct)
cudalibs='libcudart|libnccl|libcublas|libcudnn|libcuda\.so'

deps=$(ldd "$libdir/libct.so")
if grep -E "$cudalibs" <<<"$deps"; then
    echo "FAIL: the installed libct.so loads CUDA's libraries (above)"
    exit 1
fi
echo "libct.so: no CUDA library among its $(wc -l <<<"$deps") dependencies"

cc -std=c11 -Wall -Werror -o "$tmp/cuda_app" "$src/tests/embed/cuda_app.c" \
   $(pkg-config --cflags --libs ct) -Wl,-rpath,"$libdir"
if grep -E "$cudalibs" <<<"$(ldd "$tmp/cuda_app")"; then
    echo "FAIL: an application of the install loads CUDA's libraries (above)"
    exit 1
fi

if [ "$have_cuda" != ON ]; then
    [ ! -e "$libdir/libct_cuda.so" ] || { echo "FAIL: libct_cuda.so in a build without CUDA"; exit 1; }
    timeout 60 "$tmp/cuda_app" "this build of ct has no CUDA" trainer
    echo PASS
    exit 0
fi

[ -e "$libdir/libct_cuda.so" ] || { echo "FAIL: $libdir/libct_cuda.so not installed"; exit 1; }
# the library that does load CUDA (so the check above can tell), exporting its entry alone
grep -qE 'libcudart' <<<"$(ldd "$libdir/libct_cuda.so")" ||
    { echo "FAIL: libct_cuda.so does not link cudart"; exit 1; }
exports=$(nm -D --defined-only "$libdir/libct_cuda.so" | awk '$2 ~ /^[TDRB]$/ {print $3}')
[ "$exports" = ct__cuda_lib_entry ] ||
    { echo "FAIL: libct_cuda.so exports '$exports', want ct__cuda_lib_entry alone"; exit 1; }

if [ -e /dev/nvidia0 ]; then
    echo "a GPU is here: the no-GPU case is not checked"
else
    # libct_cuda.so and CUDA's runtime load; the runtime finds no device or no driver
    out=$(timeout 60 "$tmp/cuda_app" "device cuda: no ")
    echo "$out"
    if grep -q "could not be loaded" <<<"$out"; then
        echo "FAIL: libct_cuda.so did not load"
        exit 1
    fi
fi

mkdir "$tmp/away"
mv "$libdir"/libct_cuda.so "$tmp/away/"
timeout 60 "$tmp/cuda_app" "libct_cuda.so could not be loaded" trainer
echo PASS
