#!/bin/sh
# bench/trainer_recovery/run.sh — how fast training resumes after a replica is killed, and how
# fast it starts: ct's trainer vs PyTorch 1.13 DDP (gloo, 2 CPU processes), same MLP, data and
# batch (Fashion-MNIST, first 8192 samples, batch 64 per rank, Adam).
#   ct:  bench_trainer_recovery: embedded cluster, 2 replicas through trainer_train; replica 1 is
#        killed with SIGKILL mid epoch 2; recovery = kill -> first step of the new group (restored
#        from the epoch-1 checkpoint in the object store: recovery "restart"), and, as a row of
#        its own, kill -> the survivor's next step (recovery "live": it goes on at once, no step
#        lost); startup = trainer_train -> first step.
#   ref: ref_torch.py: recovery under torchrun (the elastic agent, --max_restarts 1,
#        --monitor_interval 0.1 instead of the default 5 s: its best case), checkpoint saved by
#        rank 0 with torch.save each epoch and loaded from disk by the restarted workers;
#        startup = torch.multiprocessing.spawn of 2 workers -> init_process_group -> first step.
#   heal: ct's live run with --hidden 8192 (a 93 MB MLP, a 279 MB snapshot with Adam's state):
#        a replacement's copy of the survivor's state through the object store (put, fetch and
#        load, CRC-checked), on the embedded node and (2 nodes) between two ct-node processes of
#        1 CPU on loopback, where the snapshot crosses the data port; ref: ref_torch.py heal,
#        the same model and optimizer saved with torch.save and loaded into a fresh model and
#        optimizer (a restart's checkpoint path).
#   steps lost per failure: the optimizer steps trained again after the kill (the steps done
#        at the kill less the step the next group starts from): ct live (0: the survivor goes on
#        from the step it stood at), ct restart and torchrun (from the epoch-1 checkpoint).
# Medians of RUNS (default 3) runs each (heal: one run). Last lines: ratio = ref / ct (> 1: ct
# faster, or fewer steps lost; "inf" when ct lost none).
set -eu
BUILD=${CT_BUILD:-build}
PY=${REF_PYTHON:-/usr/bin/python3}
RUNS=${RUNS:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN="$BUILD/bin/bench_trainer_recovery"
[ -x "$BIN" ] || { echo "trainer_recovery: $BIN not built" >&2; exit 1; }
OUT=$(mktemp)
TMP=$(mktemp -d)
trap 'rm -rf "$OUT" "$TMP"' EXIT
"$BIN" --runs "$RUNS" --limit 8192 --recovery live 2>/dev/null | sed 's/^ct: /ct live: /' | tee -a "$OUT"
"$BIN" --runs "$RUNS" --limit 8192 --recovery restart 2>/dev/null | tee -a "$OUT"
"$BIN" --runs 1 --limit 2048 --recovery live --hidden 8192 2>/dev/null | grep '^ct heal:' | tee -a "$OUT"
"$BIN" --runs 1 --limit 2048 --recovery live --hidden 8192 --nodes 2 2>/dev/null | grep '^ct heal:' |
    sed 's/^ct heal:/ct heal 2 nodes:/' | tee -a "$OUT"
mkdir -p "$TMP/h"
"$PY" "$HERE/ref_torch.py" heal "$TMP/h" 8192 2>/dev/null | sed 's/^/ref heal: /' | tee -a "$OUT"
i=0
while [ "$i" -lt "$RUNS" ]; do
    mkdir -p "$TMP/s$i" "$TMP/r$i"
    "$PY" "$HERE/ref_torch.py" startup "$TMP/s$i" 2>/dev/null | sed "s/^/ref run $i: /" | tee -a "$OUT"
    "$PY" "$HERE/ref_torch.py" recovery "$TMP/r$i" 2>/dev/null | sed "s/^/ref run $i: /" | tee -a "$OUT"
    i=$((i + 1))
done
awk '
function median(a, n,    i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
/^ct: / { ct_s = $3; ct_r = $5; ct_rl = $7 }
/^ct live: / { ct_l = $6; ct_ll = $8 }
/^ct heal: / { ct_h = $4 }
/^ct heal 2 nodes: / { ct_h2 = $6 }
/^ref heal: / { ref_h = $4 }
/^ref run .*startup_ms/ { s[++ns] = $5 }
/^ref run .*recovery_ms/ { r[++nr] = $5 }
/^ref run .*steps_lost/ { l[++nl] = $5 }
END {
    ref_s = median(s, ns); ref_r = median(r, nr); ref_l = median(l, nl)
    printf "trainer_startup: ct=%.1f ref=%.1f ms ratio=%.2f\n", ct_s, ref_s, (ct_s > 0 ? ref_s / ct_s : 0)
    printf "trainer_recovery_live: ct=%.1f ref=%.1f ms ratio=%.2f\n", ct_l, ref_r, (ct_l > 0 ? ref_r / ct_l : 0)
    printf "trainer_heal_copy_93mb: ct=%.1f ref=%.1f ms ratio=%.2f\n", ct_h, ref_h, (ct_h > 0 ? ref_h / ct_h : 0)
    printf "trainer_heal_copy_93mb_2nodes: ct=%.1f ref=%.1f ms ratio=%.2f\n", ct_h2, ref_h, (ct_h2 > 0 ? ref_h / ct_h2 : 0)
    printf "trainer_steps_lost_live: ct=%d ref=%d steps ratio=%s\n", ct_ll, ref_l, (ct_ll > 0 ? sprintf("%.2f", ref_l / ct_ll) : "inf")
    printf "trainer_steps_lost_restart: ct=%d ref=%d steps ratio=%s\n", ct_rl, ref_l, (ct_rl > 0 ? sprintf("%.2f", ref_l / ct_rl) : "inf")
    printf "trainer_recovery: ct=%.1f ref=%.1f ms ratio=%.2f\n", ct_r, ref_r, (ct_r > 0 ? ref_r / ct_r : 0)
}' "$OUT"
