/* common/fault.c — the faults a test arms through CT_TEST_FAULTS, by name (fault.h). Compiled
 * only into builds with CT_FAULTS (common/CMakeLists.txt); the only place in ct that reads a
 * test's environment variable. Not here: what a fault does (the code that asks for it). */
#include <stdio.h>
#include <string.h>

#include "common/common.h"
#include "common/fault.h"

/* The names, in the order of ct__fault_id. */
static const char *const names[CT__FAULT_COUNT] = {
    [CT__FAULT_XFER_CORRUPT_CHUNK] = "xfer_corrupt_chunk",
    [CT__FAULT_XFER_CORRUPT_PUT] = "xfer_corrupt_put",
    [CT__FAULT_COLL_CONNECT_DELAY_MS] = "coll_connect_delay_ms",
    [CT__FAULT_NODE_START_STALL_MS] = "node_start_stall_ms",
    [CT__FAULT_NODE_SPARE_EXEC_DELAY_MS] = "node_spare_exec_delay_ms",
    [CT__FAULT_TRAIN_HOLD] = "train_hold",
    [CT__FAULT_HEAL_HOLD] = "heal_hold",
};

/* The fault named by the n bytes at s, or CT__FAULT_COUNT. */
static ct__fault_id lookup(const char *s, size_t n)
{
    for (int f = 0; f < CT__FAULT_COUNT; f++)
        if (strlen(names[f]) == n && !memcmp(names[f], s, n))
            return (ct__fault_id)f;
    return CT__FAULT_COUNT;
}

bool ct__fault(ct__fault_id f, char *value, size_t cap)
{
    const char *list = getenv(CT__FAULT_ENV);
    bool armed = false;
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ","), nlen = strcspn(p, "=,");
        ct__fault_id g = lookup(p, nlen);
        if (g == CT__FAULT_COUNT && len)
            CT_LOG(CT_LOG_ERROR, "fault", "%s: unknown fault \"%.*s\"", CT__FAULT_ENV, (int)nlen,
                   p);
        if (g == f && !armed) {
            armed = true;
            size_t vlen = nlen < len ? len - nlen - 1 : 0;
            if (value && cap)
                snprintf(value, cap, "%.*s", (int)vlen, p + nlen + (nlen < len));
        }
        p += len + (p[len] == ',');
    }
    return armed;
}
