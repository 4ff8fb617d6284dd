/* common/error.c — error names and the per-thread detailed error message. */
#include <stdio.h>
#include <string.h>
#include "common/common.h"

static _Thread_local char last_error[1024];

int ct__error(int code, const char *fmt, ...)
{
    /* through a copy: callers wrap the last message, ct__error(rc, "x: %s", ct_last_error()) */
    char msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, sizeof msg);
    return code;
}

void ct__clear_error(void)
{
    last_error[0] = '\0';
}

const char *ct_last_error(void)
{
    return last_error;
}

const char *ct_strerror(int err)
{
    switch (err) {
    case CT_OK:
        return "ok";
    case CT_EDEAD:
        return "peer died";
    case CT_EDNNL:
        return "oneDNN error";
    case CT_ECUDA:
        return "CUDA error";
    case CT_ENCCL:
        return "NCCL error";
    case CT_EZMQ:
        return "ZeroMQ error";
    case CT_ERETRY:
        return "retries exhausted";
    case CT_ENOTREG:
        return "name not registered";
    case CT_ESTART:
        return "cannot start";
    default:
        break;
    }
    if (err < 0 && err > -4096)
        return strerror(-err); /* glibc returns a static string for known codes */
    return "unknown error";
}
