/* common/fault.h — the one fault-injection point of ct: production code asks ct__fault() whether
 * a test armed a fault, and never reads a test's environment variable itself. A build with
 * CT_FAULTS (the CMake option, on except in Release builds) compiles common/fault.c, which reads
 * CT_TEST_FAULTS ("name=value,name=value"); without it ct__fault() is a constant false and the
 * fault branches compile away. The faults, their names and values: fault.c's table and
 * docs/ARCHITECTURE.md ("Test faults"). Not here: configuration variables (docs/GUIDE.md). */
#ifndef CT_COMMON_FAULT_H
#define CT_COMMON_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

/* The environment variable that arms faults. A node passes it on to its zygotes and actors
 * (actor/node_zygote.c), so that a fault armed where the cluster starts reaches every process. */
#define CT__FAULT_ENV "CT_TEST_FAULTS"

typedef enum ct__fault_id {
    CT__FAULT_XFER_CORRUPT_CHUNK,       /* xfer_corrupt_chunk=N: a pull flips a byte of chunk N */
    CT__FAULT_XFER_CORRUPT_PUT,         /* xfer_corrupt_put=N: a push sends chunk N's sum wrong */
    CT__FAULT_COLL_CONNECT_DELAY_MS,    /* coll_connect_delay_ms=MS: the ring connects late */
    CT__FAULT_NODE_START_STALL_MS,      /* node_start_stall_ms=MS: each actor start stalls */
    CT__FAULT_NODE_SPARE_EXEC_DELAY_MS, /* node_spare_exec_delay_ms=MS: a spare zygote execs late */
    CT__FAULT_TRAIN_HOLD,               /* train_hold=STEP:PATH: a replica waits at STEP while
                                         * PATH exists */
    CT__FAULT_HEAL_HOLD,                /* heal_hold=ROLE:PATH: the heal's copy waits, once,
                                         * in the newcomer or the serving peer (ROLE "newcomer"
                                         * or "peer"), or the newcomer's quorum ("quorum")
                                         * while PATH exists */
    CT__FAULT_COUNT
} ct__fault_id;

#ifdef CT_FAULTS
/* Whether fault f is armed in CT_TEST_FAULTS (read at each call: a test may set and unset it
 * between calls); when it is and value is not NULL, its value ("" when none) is copied into
 * value (cap bytes). An unknown name in the variable is logged as an error. Thread-safe as
 * getenv is. */
bool ct__fault(ct__fault_id f, char *value, size_t cap);
#else
static inline bool ct__fault(ct__fault_id f, char *value, size_t cap)
{
    (void)f, (void)value, (void)cap;
    return false;
}
#endif

/* Fault f's value as a number; 0 when it is not armed. */
static inline long ct__fault_num(ct__fault_id f)
{
    char v[32];
    return ct__fault(f, v, sizeof v) ? strtol(v, NULL, 10) : 0;
}

#endif
