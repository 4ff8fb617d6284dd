#!/usr/bin/env bash
# scripts/busy-loop.sh BUILD_DIR N REGEX [HOGS] — the busy-machine check: runs `ctest -R REGEX`
# (one test at a time) N times beside HOGS CPU-bound shell loops (default 8: 4 per core on a
# 2-core machine), prints each run's result and "passed K/N"; a failed run's output is kept as
# /tmp/busy.fail.RUN.log. The hogs are this script's children and are killed by PID at its end.
set -u
[ $# -ge 3 ] || { echo "usage: $0 BUILD_DIR N REGEX [HOGS]" >&2; exit 2; }
build=$1 n=$2 regex=$3 hogs=${4:-8}
pids=()
for _ in $(seq "$hogs"); do (while :; do :; done) & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
log=$(mktemp /tmp/busy.XXXXXX.log)
pass=0
for i in $(seq "$n"); do
    if (cd "$build" && ctest -R "$regex" -j1 --output-on-failure --timeout 900 >"$log" 2>&1); then
        pass=$((pass + 1))
        echo "run $i: pass"
    else
        echo "run $i: FAIL"
        grep -E '\*\*\*Failed|\(Failed\)' "$log" | head -5
        cp "$log" "/tmp/busy.fail.$i.log"
    fi
done
rm -f "$log"
echo "passed $pass/$n ($regex, $hogs hogs)"
