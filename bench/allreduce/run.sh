#!/bin/sh
# bench/allreduce/run.sh — 2-rank f32 allreduce of 4 KiB .. 64 MiB: ct over shared memory,
# ct over TCP (loopback), torch.distributed gloo (the reference, same sizes, warm-up, median),
# and memcpy bandwidth as the limit. Prints a table; the last line compares bus bandwidth at
# 64 MiB: ct shm vs gloo.
set -eu
BUILD=${CT_BUILD:-build}
PY=${REF_PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$BUILD/bin/bench_allreduce"
[ -x "$BIN" ] || { echo "allreduce: $BIN not built" >&2; exit 1; }
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
"$BIN" memcpy >>"$OUT"
"$BIN" shm >>"$OUT"
"$BIN" tcp >>"$OUT"
"$PY" "$HERE/ref_gloo.py" >>"$OUT"
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
    ct = bw["ct_shm 67108864"]; ref = bw["gloo 67108864"]
    printf "allreduce: ct=%.3f ref=%.3f GB/s ratio=%.2f\n", ct, ref, (ref > 0 ? ct / ref : 0)
}' "$OUT"
