/* common/env.h — the configuration variables ct reads from the environment, one table
 * (env.c): each has an id here, its name and what it sets there, and docs/ARCHITECTURE.md
 * ("Environment variables") lists them. Code reads a variable with ct__env(id), never with a
 * getenv of its own, so the table is every variable a program of ct honours. Not here: the
 * test faults (common/fault.h), the variables a node hands to the zygote it execs (actor/worker.c,
 * actor/api_init.c), and tests' and benchmarks' own variables. */
#ifndef CT_COMMON_ENV_H
#define CT_COMMON_ENV_H

typedef enum ct__env_id {
    CT__ENV_ADDRESS,                 /* CT_ADDRESS */
    CT__ENV_SECRET_FILE,             /* CT_SECRET_FILE */
    CT__ENV_AUTH,                    /* CT_AUTH */
    CT__ENV_LOG_LEVEL,               /* CT_LOG_LEVEL */
    CT__ENV_STATE_DIR,               /* CT_STATE_DIR */
    CT__ENV_HOME,                    /* HOME */
    CT__ENV_MAX_ZYGOTES,             /* CT_MAX_ZYGOTES */
    CT__ENV_ZYGOTE_IDLE_MS,          /* CT_ZYGOTE_IDLE_MS */
    CT__ENV_STORE_POPULATE_AHEAD_MB, /* CT_STORE_POPULATE_AHEAD_MB */
    CT__ENV_REMOTE_DRIVER,           /* CT_REMOTE_DRIVER */
    CT__ENV_XFER_NO_SENDFILE,        /* CT_XFER_NO_SENDFILE */
    CT__ENV_DNNL_BLOCKED,            /* CT_DNNL_BLOCKED */
    CT__ENV_OMP_NUM_THREADS,         /* OMP_NUM_THREADS */
    CT__ENV_ONEDNN_MAX_CPU_ISA,      /* ONEDNN_MAX_CPU_ISA */
    CT__ENV_CUDA_VISIBLE_DEVICES,    /* CUDA_VISIBLE_DEVICES */
    CT__ENV_LD_BIND_NOW,             /* LD_BIND_NOW */
    CT__ENV_COLL_TCP_BUF_KB,         /* CT_COLL_TCP_BUF_KB */
    CT__ENV_COMM_HOST,               /* CT_COMM_HOST */
    CT__ENV_COLL_SHM_SPIN_US,        /* CT_COLL_SHM_SPIN_US */
    CT__ENV_COLL_SHM_SLOT_KB,        /* CT_COLL_SHM_SLOT_KB */
    CT__ENV_COLL_SHM_CHUNK_KB,       /* CT_COLL_SHM_CHUNK_KB */
    CT__ENV_CHECKDEV_DELAY_US,       /* CT_CHECKDEV_DELAY_US */
    CT__ENV_COUNT
} ct__env_id;

/* The value of variable v in the environment, NULL when it is unset. Thread-safe as getenv. */
const char *ct__env(ct__env_id v);
/* The variable's name ("CT_SECRET_FILE"), for messages. */
const char *ct__env_name(ct__env_id v);

#endif
