/* tests/common/test_fault.c — common/fault.c: a fault is armed by its name in CT_TEST_FAULTS,
 * with its value (a number or text, "" when none), several at once, anywhere in the list; a
 * fault not in the list, an empty or unset variable, and a name that only starts like a
 * fault's arm nothing. Skips (77) in a build without CT_FAULTS, where no fault can be armed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fault.h"

#include "tests/check.h"

int main(void)
{
#ifndef CT_FAULTS
    return 77;
#endif
    char v[64];
    unsetenv("CT_TEST_FAULTS");
    CHECK(!ct__fault(CT__FAULT_XFER_CORRUPT_CHUNK, v, sizeof v));
    CHECK(ct__fault_num(CT__FAULT_XFER_CORRUPT_CHUNK) == 0);
    setenv("CT_TEST_FAULTS", "", 1);
    CHECK(!ct__fault(CT__FAULT_XFER_CORRUPT_CHUNK, v, sizeof v));

    setenv("CT_TEST_FAULTS", "xfer_corrupt_put=3", 1);
    CHECK(ct__fault_num(CT__FAULT_XFER_CORRUPT_PUT) == 3);
    CHECK(ct__fault_num(CT__FAULT_XFER_CORRUPT_CHUNK) == 0);

    setenv("CT_TEST_FAULTS",
           "node_start_stall_ms=2500,train_hold=12:/tmp/x/hold,xfer_corrupt_chunk", 1);
    CHECK(ct__fault_num(CT__FAULT_NODE_START_STALL_MS) == 2500);
    CHECK(ct__fault(CT__FAULT_TRAIN_HOLD, v, sizeof v) && !strcmp(v, "12:/tmp/x/hold"));
    CHECK(ct__fault(CT__FAULT_XFER_CORRUPT_CHUNK, v, sizeof v) && !strcmp(v, ""));
    CHECK(ct__fault(CT__FAULT_XFER_CORRUPT_CHUNK, NULL, 0));
    CHECK(!ct__fault(CT__FAULT_COLL_CONNECT_DELAY_MS, v, sizeof v));

    /* a value longer than the buffer is cut, not overrun */
    setenv("CT_TEST_FAULTS", "train_hold=1:/a/very/long/path/indeed", 1);
    char small[8];
    CHECK(ct__fault(CT__FAULT_TRAIN_HOLD, small, sizeof small) && !strcmp(small, "1:/a/ve"));

    /* names match whole: neither a prefix nor a longer name arms a fault (and is logged) */
    setenv("CT_TEST_FAULTS", "xfer_corrupt=1,xfer_corrupt_put_more=2", 1);
    CHECK(!ct__fault(CT__FAULT_XFER_CORRUPT_PUT, v, sizeof v));
    unsetenv("CT_TEST_FAULTS");
    if (failures)
        fprintf(stderr, "FAIL: %d checks\n", failures);
    return failures ? 1 : 0;
}
