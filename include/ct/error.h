/* ct/error.h — error codes shared by every ct module.
 *
 * Every fallible ct function returns 0 or a negative CT_E* code. Codes that have an errno
 * equivalent are that errno negated, so system-call failures pass through unchanged.
 * ct_strerror() names a code; ct_last_error() gives the detailed message (what failed, and
 * which field, key or file position) for the calling thread's most recent failure.
 * All functions here are thread-safe. */
#ifndef CT_ERROR_H
#define CT_ERROR_H

#include <errno.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    CT_OK = 0,
    CT_EINVAL = -EINVAL,         /* bad argument, bad configuration, malformed input */
    CT_ENOMEM = -ENOMEM,         /* out of memory */
    CT_ENOENT = -ENOENT,         /* no such thing: file, object, actor, key */
    CT_EEXIST = -EEXIST,         /* already exists / already registered */
    CT_EIO = -EIO,               /* I/O failure: file, socket, corrupted data */
    CT_ETIMEDOUT = -ETIMEDOUT,   /* deadline passed */
    CT_ECANCELED = -ECANCELED,   /* aborted on request (e.g. collective abort) */
    CT_EPROTO = -EPROTO,         /* malformed message or protocol version mismatch */
    CT_ECONNRESET = -ECONNRESET, /* peer died or went away */
    CT_EBUSY = -EBUSY,           /* resource busy (e.g. pinned object) */
    CT_ENOSPC = -ENOSPC,         /* out of space (store memory, spill dir) */
    CT_ENOSYS = -ENOSYS,         /* not built in (e.g. CUDA backend in a CPU-only build) */
    CT_ERANGE = -ERANGE,         /* value out of range, shape mismatch */
    CT_EACCES = -EACCES,         /* authentication failed: no or another cluster's secret */
    /* ct-specific codes, below every errno */
    CT_EDEAD = -10001,   /* an actor, replica or node died */
    CT_EDNNL = -10002,   /* oneDNN call failed */
    CT_ECUDA = -10003,   /* CUDA / cuDNN / cuBLAS call failed */
    CT_ENCCL = -10004,   /* NCCL call failed */
    CT_EZMQ = -10005,    /* ZeroMQ call failed */
    CT_ERETRY = -10006,  /* retries spent */
    CT_ENOTREG = -10007, /* no creator or step registered under that name (trainer) */
    CT_ESTART = -10008,  /* a process cannot start and would fail the same way again (an exec
                          * error, a missing shared library): not worth a retry */
};

/* Returns a static, human-readable name for an error code ("invalid argument", ...). */
const char *ct_strerror(int err);

/* Returns the calling thread's last detailed error message, or "" if none. The string is
 * borrowed until the next ct call on this thread. */
const char *ct_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
