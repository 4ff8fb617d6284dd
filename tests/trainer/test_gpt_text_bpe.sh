#!/usr/bin/env bash
# tests/trainer/test_gpt_text_bpe.sh BIN_DIR — examples/gpt_text with BPE tokens on 100 kB of
# the King James Bible (Debian's bible-kjv; skips without it): --vocab names a missing file, so
# 64 merges are learned from the training split and written there (a valid `ct-bpe 1 64` file);
# a 1-layer GPT of vocabulary 320 trains one epoch on 2 replicas and learns (the validation
# loss, in nats per byte, falls between the validations and ends under ln 256 = 5.55; fewer
# validation tokens than bytes). A second run loads the file instead of learning, gpt_sample
# decodes text with it (the same text from the model built by hand as from the checkpoint
# directory's metadata), and a broken vocabulary file stops gpt_text with its file:line.
set -euo pipefail
bin=$1
command -v bible >/dev/null ||
    { echo "SKIP: no 'bible' (Debian's bible-kjv; scripts/install-deps.sh installs it)"; exit 77; }
tmp=$(mktemp -d /tmp/ct-gpt-bpe.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
{ COLUMNS=80 bible Genesis1:1-Revelation22:21 || true; } | head -c 100000 >"$tmp/kjv.txt" # bible: SIGPIPE
args=(--text "$tmp/kjv.txt" --layers 1 --heads 2 --embd 32 --block 32 --batch 16 --val 0.1
      --val-every 10 --log-every 0 --vocab "$tmp/v.bpe" --bpe-merges 64)

"$bin/gpt_text" "${args[@]}" --checkpoint-dir "$tmp/ck" >"$tmp/run1.out" 2>"$tmp/run1.err" ||
    { cat "$tmp/run1.out" "$tmp/run1.err"; fail "first run"; }
cat "$tmp/run1.out"
grep -q "learning 64 merges from 90000 bytes" "$tmp/run1.err" || fail "did not learn 64 merges"
[ "$(head -1 "$tmp/v.bpe")" = "ct-bpe 1 64" ] || fail "v.bpe's header: $(head -1 "$tmp/v.bpe")"
[ "$(wc -l <"$tmp/v.bpe")" = 65 ] || fail "v.bpe does not hold 64 merges"
# params: wte 320*32 + wpe 32*32 + one block (12*32*32 + 13*32) + ln_f 2*32 = 24032
grep -Eq '^final: val_loss=[0-9.]+ tokens_per_s=[0-9]+ params=24032 vocab=320 val_tokens=[0-9]+ val_bytes=[0-9]+$' \
    "$tmp/run1.out" || fail "no final line with params=24032 vocab=320"
sed -n 's/^final: .* val_tokens=\([0-9]*\) val_bytes=\([0-9]*\)$/\1 \2/p' "$tmp/run1.out" |
    awk '{ exit !($1 > 0 && $1 < 0.75 * $2) }' || fail "BPE tokens do not compress the bytes"
awk '/^val step=/ { split($3, a, "="); v[n++] = a[2] } END { exit !(n >= 4 && v[n-1] < v[0] - 0.1 && v[n-1] < 5.55) }' \
    "$tmp/run1.out" || fail "the validation loss did not fall"
final=$(sed -n 's/^final: val_loss=\([0-9.]*\) .*/\1/p' "$tmp/run1.out")
awk -v v="$final" 'BEGIN { exit !(v < 5.55) }' || fail "final val_loss $final is not under 5.55"

"$bin/gpt_text" "${args[@]}" >"$tmp/run2.out" 2>"$tmp/run2.err" ||
    { cat "$tmp/run2.out" "$tmp/run2.err"; fail "second run"; }
! grep -q "learning" "$tmp/run2.err" || fail "the second run learned merges instead of loading"
grep -q "vocab=320" "$tmp/run2.out" || fail "the second run's vocabulary is not 320"

ck=$(ls "$tmp"/ck/ckpt-*.safetensors | tail -1)
s1=$("$bin/gpt_sample" --checkpoint "$ck" --layers 1 --heads 2 --embd 32 --block 32 \
    --vocab "$tmp/v.bpe" --prompt "And God said" --tokens 40 --seed 3) || fail "gpt_sample"
echo "sample: $s1"
case "$s1" in "And God said"*) ;; *) fail "the sample does not start with the prompt" ;; esac
[ "$(printf '%s' "$s1" | wc -c)" -ge 52 ] || fail "40 BPE tokens decoded to fewer than 40 bytes"
# the model from the checkpoint directory's metadata alone (ct_module_from_checkpoint): the
# same model, so the same text
s2=$("$bin/gpt_sample" --checkpoint "$tmp/ck" --vocab "$tmp/v.bpe" --prompt "And God said" \
    --tokens 40 --seed 3) || fail "gpt_sample from the directory's metadata"
[ "$s2" = "$s1" ] || fail "gpt_sample from the metadata gave another text: $s2"

printf 'ct-bpe 1 2\n97 97\n97 300\n' >"$tmp/bad.bpe"
if "$bin/gpt_text" "${args[@]}" --vocab "$tmp/bad.bpe" >"$tmp/bad.out" 2>"$tmp/bad.err"; then
    fail "gpt_text ran with a broken vocabulary file"
fi
grep -q "bad.bpe:3: merge 1 (id 257) names id 300" "$tmp/bad.err" ||
    { cat "$tmp/bad.err"; fail "no file:line error for the broken vocabulary"; }
echo PASS
