#!/usr/bin/env bash
# tests/common/test_getenv.sh SRC_DIR — ct's code reads the environment in one place: every
# getenv of the library, daemons and ctup is in common/env.c (configuration, one table) or
# common/fault.c (test faults), but for the listed exceptions: the variables a node hands to the
# zygote it execs (actor/worker.c, actor/api_transport.c). A new getenv anywhere else fails this test
# with its file and line. Tests, benchmarks, examples and fuzz targets are
# not looked at.
set -euo pipefail
src=$1
allowed=(
    common/env.c:names common/fault.c:CT__FAULT_ENV
    actor/worker.c:CT_HEAD actor/worker.c:CT_NODE_ID actor/worker.c:CT_NODE_HOST
    actor/worker.c:CT_NODE_PID actor/worker.c:CT_ZYGOTE_BIND_NOW actor/worker.c:CT_SECRET_FD
    actor/worker.c:CT_STDERR_FD actor/worker.c:CT_MODE actor/worker.c:CT_ZYGOTE_FD
    actor/api_transport.c:CT_JOB_TOKEN
)
cd "$src"
bad=0 seen=0
while IFS= read -r hit; do
    file=${hit%%:*}
    rest=${hit#*:}
    line=${rest%%:*}
    var=$(sed -n 's/.*getenv(\("\([A-Z0-9_]*\)"\|\([A-Za-z0-9_]*\)\[\{0,1\}\).*/\2\3/p' <<<"$rest")
    seen=$((seen + 1))
    ok=0
    for a in "${allowed[@]}"; do [ "$a" = "$file:$var" ] && ok=1; done
    if [ $ok = 0 ]; then
        echo "FAIL: $file:$line reads ${var:-the environment} with getenv: add it to common/env.c's table and use ct__env"
        bad=1
    fi
done < <(grep -rn --include='*.c' --include='*.h' --include='*.cu' 'getenv(' \
    actor cluster common head libct objectstore proto trainer | grep -v '^[^:]*:[0-9]*: *\*\|/\* .*getenv')
[ "$seen" -gt 10 ] || { echo "FAIL: found only $seen getenv calls: is $src the source tree?"; exit 1; }
[ $bad = 0 ] && echo "ok: $seen getenv calls, all in common/env.c, common/fault.c or the listed exceptions"
exit $bad
