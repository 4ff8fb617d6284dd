#!/usr/bin/env bash
# tests/trainer/test_gpt_text.sh BIN_DIR SRC_DIR — examples/gpt_text end to end on 200 kB of the
# King James Bible (Debian's bible-kjv; skips without it): a 2-layer GPT on 2 replicas of an
# embedded cluster trains one epoch into a checkpoint directory and must learn (validation
# loss well under ln 256 = 5.55 nats per byte, the uniform guess, and falling between the
# validations every 50 steps; the trainer's log line shows MFU), with the parameter count of
# its shape (the output layer tied to the token embedding). The same command line with 2
# epochs and --zero 1 (ZeRO-1) resumes from the directory, trains only epoch 2 and ends lower,
# with half the optimizer-state bytes per replica. The checkpoint reads
# in Python as a safetensors file with the tied weight once, and examples/gpt_sample writes
# text from it (the same for a seed). Removes what it made.
set -euo pipefail
bin=$1
src=$2
command -v bible >/dev/null ||
    { echo "SKIP: no 'bible' (Debian's bible-kjv; scripts/install-deps.sh installs it)"; exit 77; }
tmp=$(mktemp -d /tmp/ct-gpt.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
{ COLUMNS=80 bible Genesis1:1-Revelation22:21 || true; } | head -c 200000 >"$tmp/kjv.txt" # bible: SIGPIPE
args=(--text "$tmp/kjv.txt" --layers 2 --heads 2 --embd 64 --block 32 --batch 16 --val 0.1
      --val-every 50 --log-every 20 --checkpoint-dir "$tmp/ck")
val() { sed -n 's/^final: val_loss=\([0-9.]*\) .*/\1/p' "$1"; }

"$bin/gpt_text" "${args[@]}" --epochs 1 >"$tmp/run1.out" 2>"$tmp/run1.err" ||
    { cat "$tmp/run1.out" "$tmp/run1.err"; fail "first run"; }
cat "$tmp/run1.out"
grep -Eq '^final: val_loss=[0-9.]+ tokens_per_s=[0-9]+ params=118528 vocab=256 val_tokens=[0-9]+ val_bytes=[0-9]+$' \
    "$tmp/run1.out" || fail "no final line with params=118528 vocab=256"
# bytes: as many validation tokens as bytes; the next-byte accuracy is well above chance
sed -n 's/^final: .* val_tokens=\([0-9]*\) val_bytes=\([0-9]*\)$/\1 \2/p' "$tmp/run1.out" |
    awk '{ exit !($1 == $2 && $1 > 0) }' || fail "val_tokens differs from val_bytes"
awk '/^val step=150 / { split($4, a, "="); ok = a[2] > 0.25 } END { exit !ok }' "$tmp/run1.out" ||
    fail "the next-byte accuracy at step 150 is not over 0.25 (chance: about 0.17)"
awk -v v="$(val "$tmp/run1.out")" 'BEGIN { exit !(v < 3.2) }' ||
    fail "validation loss $(val "$tmp/run1.out") after an epoch is not under 3.2"
# 176 steps an epoch: validations at steps 50, 100, 150, the last one lowest; the trainer's line
# every 20 steps shows MFU
[ "$(grep -c '^val step=' "$tmp/run1.out")" = 3 ] || fail "not 3 'val step=' lines"
awk '/^val step=/ { split($3, a, "="); v[n++] = a[2] } END { exit !(n == 3 && v[2] < v[0]) }' \
    "$tmp/run1.out" || fail "the validation loss did not fall between steps 50 and 150"
grep -Eq '^trainer: epoch 1/1 step [0-9]+/176 .*\| MFU [0-9]+\.[0-9]%' "$tmp/run1.err" ||
    fail "no trainer line with MFU on stderr"

"$bin/gpt_text" "${args[@]}" --epochs 2 --zero 1 >"$tmp/run2.out" 2>"$tmp/run2.err" ||
    { cat "$tmp/run2.out" "$tmp/run2.err"; fail "resumed run"; }
cat "$tmp/run2.out"
grep -q '^epoch 2:' "$tmp/run2.out" || fail "the resumed run did not train epoch 2"
# AdamW's two moments of 118528 parameters; ZeRO-1 on 2 replicas: half of them
grep -q '^optimizer_state_bytes=948224 zero=0$' "$tmp/run1.out" || fail "run 1's optimizer state"
grep -q '^optimizer_state_bytes=474112 zero=1$' "$tmp/run2.out" ||
    fail "ZeRO-1's optimizer state is not half: $(grep optimizer_state "$tmp/run2.out")"
! grep -q '^epoch 1:' "$tmp/run2.out" || fail "the resumed run trained epoch 1 again"
awk -v a="$(val "$tmp/run1.out")" -v b="$(val "$tmp/run2.out")" 'BEGIN { exit !(b < a) }' ||
    fail "validation loss did not fall in epoch 2: $(val "$tmp/run1.out") -> $(val "$tmp/run2.out")"

ck=$(ls "$tmp"/ck/ckpt-*.safetensors | tail -1)
/usr/bin/python3 "$src/tests/trainer/check_safetensors.py" "$ck" | grep -q '^ok tensors=' ||
    fail "check_safetensors.py cannot read $ck"
/usr/bin/python3 - "$ck" <<'PY' || fail "the tied weight is not held once"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
names = list(json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]]))
assert names.count("transformer.wte.weight") == 1, names
assert not [n for n in names if n.startswith("lm_head")], names
PY
# text from the checkpoint: the prompt, then 120 bytes; the same seed gives the same text
sample() {
    "$bin/gpt_sample" --checkpoint "$ck" --layers 2 --heads 2 --embd 64 --block 32 \
        --prompt "And God said" --tokens 120 --seed "$1"
}
s1=$(sample 7) || fail "gpt_sample"
echo "sample: $s1"
[ "$(sample 7)" = "$s1" ] || fail "gpt_sample with one seed gave two texts"
case "$s1" in "And God said"*) ;; *) fail "the sample does not start with the prompt" ;; esac
[ "$(printf '%s' "$s1" | wc -c)" -ge 130 ] || fail "the sample is shorter than the prompt + 120"
letters=$(printf '%s' "$s1" | tr -cd 'a-zA-Z ' | wc -c)
[ "$letters" -ge 100 ] || fail "the sample is not text: $letters letters and blanks of 132"
echo PASS
