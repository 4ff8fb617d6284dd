#!/usr/bin/env bash
# Runs each libFuzzer target of fuzz/ (built by `make fuzz` into BUILD_DIR with -DCT_FUZZ=ON) for
# SECONDS on a copy of its seed corpus (BUILD_DIR/fuzz-corpus/T: what it finds stays there, the
# committed corpus is not touched). A crashing input lands in BUILD_DIR/fuzz-crashes/T/; copy it
# into fuzz/corpus/T/ once fixed, so the replay test of `make test` keeps it. Exits 1 when any
# target crashed, timed out or ran out of memory.
# Usage: scripts/run-fuzz.sh BUILD_DIR SECONDS TARGET...
set -u
build=$1 secs=$2
shift 2
failed=()
for t in "$@"; do
    corpus=$build/fuzz-corpus/$t crashes=$build/fuzz-crashes/$t log=$build/fuzz-$t.log
    rm -rf "$corpus"
    mkdir -p "$corpus" "$crashes"
    cp fuzz/corpus/"$t"/* "$corpus"/
    echo "fuzz: $t for ${secs}s (log $log)"
    CT_LOG_LEVEL=error "$build/bin/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$crashes/" "$corpus" >"$log" 2>&1
    rc=$?
    grep -E '^Done [0-9]+ runs' "$log" | sed "s/^/fuzz: $t: /"
    if [ $rc -ne 0 ]; then
        failed+=("$t")
        echo "fuzz: $t FAILED (exit $rc); inputs in $crashes:"
        ls "$crashes"
        grep -E 'ERROR: |SUMMARY: |runtime error' "$log" | head -5
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: FAIL: ${failed[*]}"
    exit 1
fi
echo "fuzz: PASS: $* (${secs}s each, no crash)"
