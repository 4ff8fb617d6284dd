#!/usr/bin/env bash
# tests/trainer/test_storage_path.sh — what `make run` leaves behind (issue 39 item 8):
# trainer_fashion_mnist --storage-path DIR --name NAME saves the trained model as
# DIR/NAME/model.safetensors, prints `model: <that path>`, and its run ends without a warning on
# stderr; the file reads as safetensors (check_safetensors.py: the header parsed with json +
# struct, data offsets and dtype sizes checked, and the `safetensors` package asked too when it
# is importable). Usage: test_storage_path.sh BIN_DIR
set -u
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/ct-storage.XXXXXX)
fail() { echo "FAIL: $*" >&2; echo "--- stdout"; cat "$tmp/out" >&2; echo "--- stderr"; cat "$tmp/err" >&2; exit 1; }
"$bin/trainer_fashion_mnist" --replicas 2 --epochs 1 --model tiny --limit 2000 \
    --storage-path "$tmp/results" --name run1 > "$tmp/out" 2> "$tmp/err" || fail "exit $?"
want="$tmp/results/run1/model.safetensors"
grep -qx "model: $want" "$tmp/out" || fail "no line 'model: $want'"
[ -s "$want" ] || fail "$want missing or empty"
grep -Eq ' (WARN|ERROR) ' "$tmp/err" && fail "a warning on stderr"
python3 "$here/check_safetensors.py" "$want" > "$tmp/py" 2>&1 || { cat "$tmp/py" >&2; fail "check_safetensors.py"; }
grep -q '^ok tensors=' "$tmp/py" || fail "check_safetensors.py said: $(cat "$tmp/py")"
cat "$tmp/out" "$tmp/py"
rm -rf "$tmp"
echo ok
