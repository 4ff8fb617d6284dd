#!/usr/bin/env bash
# tests/embed/test_cluster.sh MODE BUILD_DIR SOURCE_DIR — a program built against an installed
# ct, run on a real cluster: installs the build into a temporary prefix (cmake --install),
# starts that prefix's bin/ct-head and two bin/ct-nodes by hand on loopback (one CPU each, a
# secret file, no LD_LIBRARY_PATH anywhere) and runs tests/embed/cluster_app.c (2 replicas, so
# one on each node) against them through CT_ADDRESS / CT_SECRET_FILE.
#   train:   the program is built with `pkg-config --cflags --libs ct` alone (ct.pc's rpath is
#            what lets the nodes' zygotes load libct.so.0); it must train 2 epochs with no
#            retry and replicas that agree; after it ends its zygotes must be gone from both
#            nodes (the head's JobEnded), the nodes still running.
#   nolib:   the program is built without ct.pc's rpath and the driver alone gets
#            LD_LIBRARY_PATH: the nodes' zygotes cannot load libct.so.0. The driver must fail
#            with CT_ESTART ("cannot start"), the loader's message from the zygote's stderr in
#            its error, and no retry spent.
# Kills what it started by pid and removes the prefix when it ends, also on failure.
set -euo pipefail
mode=$1
build=$2
src=$3
tmp=$(mktemp -d /tmp/ct-embed-cluster.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    for f in "$tmp"/*.err; do [ -s "$f" ] && { echo "--- $f"; tail -20 "$f"; }; done
    exit 1
}
unset LD_LIBRARY_PATH CT_ADDRESS CT_SECRET_FILE

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name ct.pc -print -quit)
[ -n "$pc" ] || fail "no ct.pc installed"
export PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(pkg-config --variable=libdir ct)
case $mode in
train)
    cc -std=c11 -Wall -Werror -o "$tmp/app" "$src/tests/embed/cluster_app.c" \
        $(pkg-config --cflags --libs ct)
    # the rpath alone finds the installed library: no LD_LIBRARY_PATH here
    loaded=$(ldd "$tmp/app" | awk '$1 ~ /^libct\.so/ {print $3}')
    [ "$(readlink -f "$loaded")" = "$(readlink -f "$libdir/libct.so")" ] ||
        fail "app loads libct from '$loaded', not $libdir"
    ;;
nolib)
    cc -std=c11 -Wall -Werror -o "$tmp/app" "$src/tests/embed/cluster_app.c" \
        $(pkg-config --cflags ct) -L"$libdir" -lct
    ! readelf -d "$tmp/app" | grep -q 'R.*PATH' || fail "the nolib app has an rpath"
    ;;
*) fail "mode '$mode' is neither train nor nolib" ;;
esac

(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$tmp/secret" && echo >>"$tmp/secret")
# no failure detection is tested: dead times a loaded machine does not reach
"$tmp/prefix/bin/ct-head" --port 0 --dead-after-ms 20000 --secret-file "$tmp/secret" >"$tmp/head.out" 2>"$tmp/head.err" &
pids+=($!)
addr=
for _ in $(seq 200); do
    addr=$(sed -n 's/^listening on //p' "$tmp/head.out")
    [ -n "$addr" ] && break
    sleep 0.05
done
[ -n "$addr" ] || fail "ct-head did not start"
nodes=()
for k in 1 2; do
    "$tmp/prefix/bin/ct-node" --head "$addr" --cpus 1 --store-memory 256M \
        --head-dead-after-ms 60000 --secret-file "$tmp/secret" 2>"$tmp/node$k.err" &
    pids+=($!)
    nodes+=($!)
done

rc=0
if [ "$mode" = train ]; then
    CT_ADDRESS=$addr CT_SECRET_FILE=$tmp/secret timeout 300 "$tmp/app" >"$tmp/app.out" \
        2>"$tmp/app.err" || rc=$?
else
    CT_ADDRESS=$addr CT_SECRET_FILE=$tmp/secret LD_LIBRARY_PATH=$libdir timeout 300 "$tmp/app" \
        >"$tmp/app.out" 2>"$tmp/app.err" || rc=$?
fi
out=$(cat "$tmp/app.out")
echo "app (exit $rc): $out"

# the pids of node $1's children (its zygotes and actors)
children() { cat /proc/"$1"/task/*/children 2>/dev/null | tr ' ' '\n' | grep . || true; }

if [ "$mode" = train ]; then
    [ "$rc" -eq 0 ] || fail "the app exited $rc"
    case $out in "cluster ok epochs=2 retries=0 agree=1 val_accuracy="*) ;;
    *) fail "unexpected result line" ;; esac
    acc=${out##*val_accuracy=}
    awk -v a="$acc" 'BEGIN { exit !(a >= 0.8) }' || fail "val_accuracy $acc < 0.8"
    # its job ended (ct_shutdown said so): each node ends its zygotes (its actors were killed)
    for n in "${nodes[@]}"; do
        left=
        for _ in $(seq 600); do
            left=$(children "$n")
            [ -z "$left" ] && break
            sleep 0.05
        done
        [ -z "$left" ] || fail "node $n still has children after the job: $(for c in $left; do
            echo "$c:$(cat /proc/"$c"/comm 2>/dev/null)"; done | tr '\n' ' ')"
        kill -0 "$n" 2>/dev/null || fail "node $n is gone"
    done
else
    [ "$rc" -eq 3 ] || fail "the app exited $rc, not 3 (a training failure)"
    case $out in "cluster failed rc=cannot start retries=0: "*) ;;
    *) fail "not a CT_ESTART failure with no retry" ;; esac
    case $out in *"libct.so.0: cannot open shared object file"*) ;;
    *) fail "the zygote's stderr is not in the driver's error" ;; esac
    case $out in *"before serving"*) ;; *) fail "the error does not say the zygote died" ;; esac
    # still in the node's own stderr too
    grep -q "libct.so.0: cannot open shared object file" "$tmp"/node*.err ||
        fail "the loader's message is not in the nodes' stderr"
fi
echo PASS
