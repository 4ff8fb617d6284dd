#!/usr/bin/env bash
# tests/sanitize/tsan_check.sh SRC OUT — `make tsan` in small: configures ct with CT_TSAN=ON
# (gcc's ThreadSanitizer) into OUT, builds one collective test there, collective_setup, with
# everything it links (the CPU kernels too: their ISA clones once crashed every TSan binary at
# load, before main), and runs it as the Makefile's tsan target does (setarch -R, the same
# TSAN_OPTIONS). Fails when the configure, the build or the run fails or TSan reports a race;
# exits 77 (skip) where gcc cannot link -fsanitize=thread (no libtsan) or TSan cannot start.
# Not here: the rest of `make tsan`'s tests (run `make tsan` for those).
set -u
src=$1
out=$2
mkdir -p "$out"
arch=$(uname -m)

probe=$out/tsan-probe
printf 'int main(void) { return 0; }\n' >"$probe.c"
if ! gcc -fsanitize=thread "$probe.c" -o "$probe" 2>"$probe.log"; then
    echo "tsan_check: skip: gcc cannot link -fsanitize=thread (libtsan missing):"
    cat "$probe.log"
    exit 77
fi
if ! setarch "$arch" -R "$probe" 2>"$probe.log"; then
    echo "tsan_check: skip: a ThreadSanitizer program does not start here:"
    cat "$probe.log"
    exit 77
fi

if ! CC=gcc cmake -S "$src" -B "$out" -DCMAKE_BUILD_TYPE=Debug -DCT_TSAN=ON -DCT_WITH_CUDA=OFF \
    >"$out/configure.log" 2>&1; then
    echo "tsan_check: FAIL: configure (CT_TSAN=ON):"
    tail -30 "$out/configure.log"
    exit 1
fi
if ! cmake --build "$out" -j 2 --target collective_setup ct_test_guard >"$out/build.log" 2>&1; then
    echo "tsan_check: FAIL: building collective_setup with -fsanitize=thread:"
    grep -E 'error|Error' "$out/build.log" | head -30
    exit 1
fi
export TSAN_OPTIONS="suppressions=$src/tests/tsan.supp die_after_fork=0 ${TSAN_OPTIONS:-}"
setarch "$arch" -R "$out/bin/ct_test_guard" "$out/bin/collective_setup"
rc=$?
if [ $rc -ne 0 ]; then
    echo "tsan_check: FAIL: collective_setup under ThreadSanitizer exited $rc"
    exit 1
fi
echo "tsan_check: PASS: collective_setup built and ran clean under ThreadSanitizer"
