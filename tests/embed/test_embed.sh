#!/usr/bin/env bash
# tests/embed/test_embed.sh BUILD_DIR SOURCE_DIR — ct as a library for other applications:
# installs the build into a temporary prefix (cmake --install), compiles embed_app.c there
# with nothing but `pkg-config --cflags --libs ct` (headers and libct.so from the prefix, not
# the source tree), checks that the program loads the installed libct.so, and runs it.
# Removes the prefix when it ends, also on failure.
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d /tmp/ct-embed.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name ct.pc -print -quit)
[ -n "$pc" ] || { echo "FAIL: no ct.pc installed"; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
flags=$(pkg-config --cflags --libs ct)
echo "pkg-config ct: $flags"
case "$flags" in *"$tmp/prefix"*) ;; *) echo "FAIL: ct.pc does not point into the prefix"; exit 1 ;; esac
libdir=$(pkg-config --variable=libdir ct)
for f in "$libdir/libct.so" "$tmp/prefix/include/ct/ct.h" "$tmp/prefix/bin/ct-head" \
         "$tmp/prefix/bin/ct-node" "$tmp/prefix/bin/ctup"; do
    [ -e "$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
# Only the installed headers: no -I into the source tree.
cc -std=c11 -Wall -Werror -o "$tmp/embed_app" "$src/tests/embed/embed_app.c" $flags \
   -Wl,-rpath,"$libdir"
loaded=$(ldd "$tmp/embed_app" | awk '$1 ~ /^libct\.so/ {print $3}')
[ "$(readlink -f "$loaded")" = "$(readlink -f "$libdir/libct.so")" ] ||
    { echo "FAIL: embed_app loads libct from '$loaded', not $libdir"; exit 1; }
out=$(timeout 60 "$tmp/embed_app")
echo "$out"
[ "$out" = "embed ok $(pkg-config --modversion ct)" ] || { echo "FAIL: unexpected output"; exit 1; }
echo PASS
