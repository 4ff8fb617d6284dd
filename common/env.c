/* common/env.c — the table of the configuration variables ct reads (env.h): every read of one
 * comes through ct__env. Not here: what a value means (the code that asks for it) and test
 * faults (fault.c). */
#include <stdlib.h>

#include "common/env.h"

static const char *const names[CT__ENV_COUNT] = {
    [CT__ENV_ADDRESS] = "CT_ADDRESS",         /* the head that ct_init and ctup talk to */
    [CT__ENV_SECRET_FILE] = "CT_SECRET_FILE", /* the cluster secret's file */
    [CT__ENV_AUTH] = "CT_AUTH",               /* "off": no authentication */
    [CT__ENV_LOG_LEVEL] = "CT_LOG_LEVEL",     /* error, warn, info, debug */
    [CT__ENV_STATE_DIR] = "CT_STATE_DIR",     /* ctup's state directory */
    [CT__ENV_HOME] = "HOME",                  /* ~ in ctup's paths */
    [CT__ENV_MAX_ZYGOTES] = "CT_MAX_ZYGOTES", /* a node's zygote limit */
    [CT__ENV_ZYGOTE_IDLE_MS] = "CT_ZYGOTE_IDLE_MS",
    [CT__ENV_STORE_POPULATE_AHEAD_MB] = "CT_STORE_POPULATE_AHEAD_MB",
    [CT__ENV_REMOTE_DRIVER] = "CT_REMOTE_DRIVER",       /* "1": a remote driver */
    [CT__ENV_XFER_NO_SENDFILE] = "CT_XFER_NO_SENDFILE", /* send() instead of sendfile() */
    [CT__ENV_DNNL_BLOCKED] = "CT_DNNL_BLOCKED",         /* oneDNN activation layout */
    [CT__ENV_OMP_NUM_THREADS] = "OMP_NUM_THREADS",
    [CT__ENV_ONEDNN_MAX_CPU_ISA] = "ONEDNN_MAX_CPU_ISA",
    [CT__ENV_CUDA_VISIBLE_DEVICES] = "CUDA_VISIBLE_DEVICES", /* the GPUs a node offers */
    [CT__ENV_LD_BIND_NOW] = "LD_BIND_NOW",                   /* left as set for a node's zygotes */
    [CT__ENV_COLL_TCP_BUF_KB] = "CT_COLL_TCP_BUF_KB",        /* TCP ring socket buffers */
    [CT__ENV_COMM_HOST] = "CT_COMM_HOST",                    /* the address a rank listens on */
    [CT__ENV_COLL_SHM_SPIN_US] = "CT_COLL_SHM_SPIN_US",      /* shm collective: spin before sleep */
    [CT__ENV_COLL_SHM_SLOT_KB] = "CT_COLL_SHM_SLOT_KB",      /* ... its slot size */
    [CT__ENV_COLL_SHM_CHUNK_KB] = "CT_COLL_SHM_CHUNK_KB",    /* ... its chunk size */
    [CT__ENV_CHECKDEV_DELAY_US] = "CT_CHECKDEV_DELAY_US",    /* checking device: delay per task */
};

const char *ct__env(ct__env_id v)
{
    return v >= 0 && v < CT__ENV_COUNT ? getenv(names[v]) : NULL;
}

const char *ct__env_name(ct__env_id v)
{
    return v >= 0 && v < CT__ENV_COUNT ? names[v] : "?";
}
