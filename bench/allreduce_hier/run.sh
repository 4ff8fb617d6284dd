#!/bin/sh
# bench/allreduce_hier/run.sh — f32 SUM allreduce of 64 MiB over 4 simulated hosts (network
# namespaces joined by a bridge) x 2 ranks: ct's hierarchical layout (shared memory inside a
# host, a TCP ring among one leader per host) against ct's flat TCP ring of all 8 ranks (the
# reference), alternating in one run; both checked bit-identical first. Needs root: otherwise
# it says so and prints a skipped headline. Last line:
#   allreduce_hier: ct=<hierarchical busbw> ref=<flat busbw> GB/s ratio=<ct/ref>
set -u
BUILD=${CT_BUILD:-build}
BIN="$BUILD/bin/bench_hier"
[ -x "$BIN" ] || { echo "allreduce_hier: $BIN not built" >&2; exit 1; }
"$BIN"
rc=$?
if [ $rc -eq 77 ]; then
    echo "allreduce_hier: skipped (needs root for network namespaces)"
    exit 0
fi
exit $rc
