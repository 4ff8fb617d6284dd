#!/bin/sh
# bench/allreduce/run.sh — 2-rank f32 allreduce of 4 KiB .. 64 MiB: ct over TCP (loopback),
# ct over shared memory, torch.distributed gloo over TCP (the reference: same sizes, warm-up,
# median, one thread), and memcpy bandwidth as the limit. Every size is checked on both sides
# (every element of an allreduce of a known pattern, before and after the timed calls); a wrong
# sum or any failure prints "allreduce: FAILED ..." and exits 1. Prints a table, then bus
# bandwidth at 64 MiB: ct shared memory vs gloo TCP on its own line (allreduce_shm), and last
# the headline, TCP against TCP:
#   allreduce: ct=<ct tcp GB/s> ref=<gloo GB/s> GB/s ratio=<ct/ref>
set -eu
BUILD=${CT_BUILD:-build}
PY=${REF_PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$BUILD/bin/bench_allreduce"
[ -x "$BIN" ] || { echo "allreduce: $BIN not built" >&2; exit 1; }
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
fail() { echo "allreduce: FAILED: $1 (wrong sum or error, above)" >&2; exit 1; }
"$BIN" memcpy >>"$OUT" || fail "memcpy"
"$BIN" shm >>"$OUT" || fail "ct over shared memory"
"$BIN" tcp >>"$OUT" || fail "ct over TCP"
"$PY" "$HERE/ref_gloo.py" >>"$OUT" || fail "gloo (the reference)"
awk '
/^RESULT/ { lat[$2 " " $3] = $4; bw[$2 " " $3] = $5; if ($2 == "memcpy") mc = $5 }
END {
    n = split("4096 65536 1048576 16777216 67108864", sz, " ")
    split("4KiB 64KiB 1MiB 16MiB 64MiB", nm, " ")
    printf "memcpy bandwidth (64 MiB): %.2f GB/s (the limit)\n", mc
    printf "%-6s | %12s %12s %12s | %9s %9s %9s | %8s %8s\n", "size", "ct_shm us", "ct_tcp us",
           "gloo us", "shm GB/s", "tcp GB/s", "gloo GB/s", "shm/gloo", "tcp/gloo"
    for (i = 1; i <= n; i++) {
        s = sz[i]; g = bw["gloo " s]
        printf "%-6s | %12.2f %12.2f %12.2f | %9.3f %9.3f %9.3f | %8.2f %8.2f\n", nm[i],
               lat["ct_shm " s], lat["ct_tcp " s], lat["gloo " s], bw["ct_shm " s],
               bw["ct_tcp " s], g, (g > 0 ? bw["ct_shm " s] / g : 0), (g > 0 ? bw["ct_tcp " s] / g : 0)
    }
    printf "4 KiB latency: ct shm %.2f us, ct tcp %.2f us, gloo %.2f us (gloo/ct shm = %.1fx)\n",
           lat["ct_shm 4096"], lat["ct_tcp 4096"], lat["gloo 4096"],
           (lat["ct_shm 4096"] > 0 ? lat["gloo 4096"] / lat["ct_shm 4096"] : 0)
    ref = bw["gloo 67108864"]
    shm = bw["ct_shm 67108864"]
    printf "allreduce_shm: ct=%.3f ref=%.3f GB/s ratio=%.2f %s\n", shm, ref,
           (ref > 0 ? shm / ref : 0), "(ct over shared memory vs gloo over TCP)"
    ct = bw["ct_tcp 67108864"]
    printf "allreduce: ct=%.3f ref=%.3f GB/s ratio=%.2f\n", ct, ref, (ref > 0 ? ct / ref : 0)
}' "$OUT"
