#!/usr/bin/env bash
# tests/docs/test_guide.sh BUILD_DIR SOURCE_DIR — docs/GUIDE.md's programs stay true: installs
# the build into a temporary prefix, extracts every C block of the guide whose first line is
# "/* NAME.c — ...", compiles each with the guide's own command line (pkg-config alone), runs
# them as the guide does and checks what they print. Section 3's cluster commands run too
# (ctup up, submit, down); section 8's predict reads section 5's checkpoint directory. Removes
# everything it made, also on failure.
set -euo pipefail
build=$1
src=$2
guide=$src/docs/GUIDE.md
tmp=$(mktemp -d /tmp/ct-guide.XXXXXX)
export CT_STATE_DIR=$tmp/state
yaml=$src/cluster/examples/local.yaml
cleanup() {
    [ -x "$tmp/prefix/bin/ctup" ] && "$tmp/prefix/bin/ctup" down "$yaml" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH=$(dirname "$(find "$tmp/prefix" -name ct.pc -print -quit)")
export PATH=$tmp/prefix/bin:$PATH

# every ```c block that opens with "/* NAME.c — " becomes $tmp/NAME.c
awk -v dir="$tmp" '
    /^```c$/ { inblock = 1; file = ""; next }
    /^```$/  { inblock = 0; if (file != "") close(file); file = ""; next }
    inblock && file == "" { if (match($0, /^\/\* [a-z_]+\.c /)) file = dir "/" substr($0, 4, RLENGTH - 4) ; else inblock = 0 }
    inblock && file != "" { print > file }
' "$guide"
progs=$(cd "$tmp" && ls *.c | sed 's/\.c$//' | sort | tr '\n' ' ')
[ "$progs" = "checkpoints custom_step failures first predict " ] || fail "guide programs: '$progs'"

cd "$tmp"
for p in $progs; do
    # the guide's command line, plus warnings as errors
    cc -std=c11 -Wall -Werror "$p.c" $(pkg-config --cflags --libs ct) -o "$p" ||
        fail "$p.c does not compile"
done

run() { # NAME ARGS... -> prints the program's stdout; fails with its output on error
    local name=$1
    shift
    local rc=0
    timeout 120 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
    [ "$rc" -eq 0 ] || { cat "$tmp/$name.out" "$tmp/$name.err"; fail "$name exited $rc"; }
    cat "$tmp/$name.out"
}
expect() { # NAME REGEX
    grep -Eq "$2" "$tmp/$1.out" || { cat "$tmp/$1.err"; fail "$1: no line matching '$2'"; }
}
num() { sed -n "s/.*$2=\([-0-9.]*\).*/\1/p" "$tmp/$1.out" | head -1; }

# section 1
run first ./first
expect first '^replicas=2 train_loss=[0-9.]+ val_accuracy=0\.[0-9]+$'
awk -v a="$(num first val_accuracy)" 'BEGIN { exit !(a > 0.75) }' ||
    fail "first: val_accuracy $(num first val_accuracy) <= 0.75"
[ -s mlp.safetensors ] || fail "first: no mlp.safetensors"

# section 4
run custom_step ./custom_step
expect custom_step '^train_loss=[0-9.]+ grad_norm=[0-9.]+$'
awk -v g="$(num custom_step grad_norm)" 'BEGIN { exit !(g > 0) }' || fail "custom_step: grad_norm"

# section 5: one command line starts, then resumes
run ck1 ./checkpoints ck 1
expect ck1 '^epoch=1 steps=[0-9]+ started_at_step=0 '
[ -f ck/index.json ] || fail "checkpoints: no ck/index.json"
run ck2 ./checkpoints ck 2
expect ck2 '^epoch=2 '
[ "$(num ck2 started_at_step)" = "$(num ck1 steps)" ] ||
    fail "checkpoints: resumed at step $(num ck2 started_at_step), not $(num ck1 steps)"
[ "$(num ck2 steps)" = "$((2 * $(num ck1 steps)))" ] || fail "checkpoints: steps after resume"

# section 8: section 5's model from its checkpoint directory, on test images
run predict ./predict ck
expect predict '^accuracy=0\.[0-9]+$'
awk -v a="$(num predict accuracy)" 'BEGIN { exit !(a > 0.7) }' ||
    fail "predict: accuracy $(num predict accuracy) <= 0.7"
# the same 1000 images the trainer validated the latest checkpoint's weights on (val_limit)
awk -v a="$(num predict accuracy)" -v b="$(num ck2 val_accuracy)" \
    'BEGIN { d = a - b; exit !(d <= 0.002 && d >= -0.002) }' ||
    fail "predict: accuracy $(num predict accuracy), the trainer's $(num ck2 val_accuracy)"

# section 6
run failures ./failures
expect failures '^epoch=3 retries_used=0 live_recoveries=1 weights_agree=1$'

# section 3: the same first program on a ctup cluster
ctup up "$yaml" >"$tmp/up.out" 2>&1 || { cat "$tmp/up.out"; fail "ctup up"; }
run cluster ctup submit "$yaml" ./first
expect cluster '^replicas=2 train_loss=[0-9.]+ val_accuracy=0\.[0-9]+$'
ctup down "$yaml" >/dev/null || fail "ctup down"
echo PASS
