/* actor/node_shared.h — what the node daemon's files share: limits, the node's struct (its
 * zygotes, actors, start queue, GPUs and standing with the head), and the functions one file
 * offers the others, among them the rows of node.c's handler table (the row types are
 * runtime.h's, which objnode.c's rows share). Everything runs on the node's one thread (the
 * liveness thread has a copy of what it needs). Not for outside actor/node*.c (runtime.h is the
 * node's entry point).
 *
 * The files, each calling only those below it: node.c (the loop and the one handler table,
 * reaping, detached mode), node_head.c (registration, heartbeats and the liveness thread, the
 * death watch, head loss, resume and rejoin, the drain a first SIGTERM asks for),
 * node_start.c (StartActor: the start queue fed to the zygotes, their records), node_zygote.c
 * (the zygote processes: spawned, ended, retired), node_actors.c (the local actor table and
 * what the node tells the head about its actors), node_gpus.c (which GPUs each actor sees),
 * node_stderr.c (what starting processes wrote to stderr). */
#ifndef CT_ACTOR_NODE_SHARED_H
#define CT_ACTOR_NODE_SHARED_H

#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <zmq.h>
#include "actor/runtime.h"
#include "common/common.h"
#include "proto/msg.h"

#define MAX_ZYG 16
#define MAX_EARLY 256
#define MAX_GPUS 64 /* GPU indices a node hands out (a bit each in nactor.gpus) */
/* actors' stderr memfds held at once: a burst of thousands of creations keeps the node's
 * descriptors for its sockets and files (those beyond start without a quoted stderr) */
#define MAX_ERR_FDS 128
/* A start request not yet handed to a zygote: a zygote gets at most ZYG_INFLIGHT at once and
 * the node never blocks on its socket, so a burst of thousands of creations neither deadlocks
 * node and zygote (both sending into full socket buffers) nor starves the heartbeat. */
#define ZYG_INFLIGHT 32
#define ZYG_TAIL 512 /* bytes of a starting zygote's stderr kept for its failure report */

typedef struct zygote {
    char *key; /* job token + exe path + NUL-joined argv */
    size_t keylen;
    pid_t pid;
    int fd;
    int outstanding; /* start requests sent, spawn not yet reported */
    int64_t last_used;
    int peer_fd; /* detached node only: the zygote's end of the socketpair (no process) */
    int err_fd;  /* the pipe on its stderr until it serves (copied to the node's), -1: closed */
    char tail[ZYG_TAIL]; /* the last bytes read from err_fd */
    int tail_len;
    bool served; /* it sent a record: it got to its loop (a death is no start failure of its) */
} zygote;

typedef struct nactor {
    char id[32];
    pid_t pid; /* 0 until the zygote tells */
    int zyg_pid;
    bool kill_pending;
    bool reported;    /* its ready/failed record came (so its zygote may go) */
    uint64_t gpus;    /* the GPU indices it holds, bit i for index i */
    double gpu_share; /* how much of each of them (1: whole; < 1: shared) */
    int err_fd;       /* its stderr (a memfd) until it reports, from its zygote; -1: none */
    /* what a re-registration tells a restarted head (RegisterNode.actors) */
    char cls[64];
    char job[CT_TOKEN_LEN + 1];
    char addr[128]; /* its call address, once ready */
    char pg[32];    /* its placement group ("" none) and bundle */
    int bundle;
    int nres;
    char rname[16][32];
    double ramt[16];
} nactor;

typedef struct early {
    pid_t pid;
    int status;
} early;

typedef struct qreq {
    char *buf; /* ct__zreq + args */
    size_t len;
    char *key; /* the zygote key it needs */
    size_t keylen;
    char id[32];
} qreq;

/* The liveness thread (node_head.c): heartbeats the head from a socket of its own every hb_ms,
 * so that a main loop busy for a while (fetching the shipped executable, forking a zygote, a
 * machine starved of CPU) does not get the node declared dead. The main loop heartbeats too,
 * which keeps the head's route to it. Ends when stop[1] is closed. */
typedef struct liveness {
    void *ctx;
    char head[128], id[32], token[CT_TOKEN_LEN + 1];
    atomic_int hb_ms; /* the main loop changes it (HeartbeatPeriod) */
    int stop_fd;
    int stop[2]; /* ct__node_live_start / _stop: the pipe whose close ends the thread */
    pthread_t th;
    bool on;
} liveness;

/* What node_stats.c keeps between samples: the host's CPU ticks then, when, and NVML. */
typedef struct node_sampler {
    uint64_t cpu_busy, cpu_total;
    int64_t at;
    bool nvml_tried;
    ct__nvml *nvml;
} node_sampler;

typedef struct nodest {
    const ct_node_opts *o;
    void *ctx, *sock;
    char id[32];
    char token[CT_TOKEN_LEN + 1]; /* from the head: every message that speaks for id carries it */
    char host[64];
    char head[128];
    zygote z[MAX_ZYG];
    int nz, max_zyg;
    nactor *a;
    int na, cap;
    int *ix; /* open-addressing index actor id -> 1 + position in a; 0 empty */
    int ixcap;
    qreq *q; /* FIFO q[qh..qn) */
    int qh, qn, qcap;
    early early[MAX_EARLY];
    int nearly;
    pid_t retired[MAX_EARLY]; /* zygotes the node killed, not reaped yet (no early exits) */
    int nretired;
    int zyg_idle_ms; /* a zygote without actors here and unused this long ends */
    int nerr_fds;    /* actors' err_fd held */
    uint64_t req;
    bool detached;              /* ct__node_new_detached: no fork, no exec, no kill */
    int ngpu;                   /* GPU indices 0..ngpu-1 given to actors */
    double gpu_used[MAX_GPUS];  /* each index's share held by actors */
    char gpu_dev[MAX_GPUS][64]; /* index i's name in an actor's CUDA_VISIBLE_DEVICES */
    /* the head (node_head.c) */
    int hb_ms;          /* the heartbeat period it gave */
    int watch_fd;       /* its death watch (head/watch.h); -1: none */
    int64_t silent;     /* ms since anything came from it (ct__node_count_silence) */
    int64_t last_count; /* when silent was last counted */
    bool forgotten;     /* it refused a heartbeat: it does not know this node (resume) */
    bool declared_dead; /* it said so ('D' on the death watch): rejoin */
    liveness live;
    /* drain (a first SIGTERM): 0 none, 1 asked the head, 2 waits for its actors to exit, 3 stop */
    int drain;
    int64_t drain_asked, drain_until;
    node_sampler sampler; /* node_stats.c */
} nodest;

/* Sends e to the head on the node's main connection, with the node's token; never blocks. 0 or
 * a CT_E* code (logged). */
static inline int ct__node_send_head(nodest *n, Ct__Envelope *e)
{
    e->token = n->token;
    int rc = ct__msg_send(n->sock, NULL, e, ZMQ_DONTWAIT);
    if (rc)
        CT_LOG(CT_LOG_WARN, "node", "send %s: %s", ct__msg_body_name(e->body_case),
               ct_last_error());
    return rc;
}

/* arr (*cap elements of size bytes) grown to twice as many, first when it has none: the new
 * array (*cap updated), or NULL with arr and *cap unchanged (CT_ENOMEM set). */
static inline void *ct__node_grow(void *arr, int *cap, size_t size, int first)
{
    int c = *cap ? 2 * *cap : first;
    void *p = realloc(arr, (size_t)c * size);
    if (!p) {
        ct__error(CT_ENOMEM, "node: out of memory");
        return NULL;
    }
    *cap = c;
    return p;
}

/* SIGKILLs pid: never a process group or every process (pid <= 0), nothing when detached. */
static inline void ct__node_kill_pid(nodest *n, pid_t pid)
{
    if (pid > 0 && !n->detached)
        kill(pid, SIGKILL);
}

/* ---- node_head.c: the node and its head ---- */
/* The signals: a first SIGTERM asks for a drain (ct__node_drain_step), SIGINT or a second
 * SIGTERM stops at once; SIGPIPE ignored. stop_asked: SIGINT or a second SIGTERM came;
 * term_asked: a SIGTERM came. */
void ct__node_catch_signals(void);
bool ct__node_stop_asked(void);
bool ct__node_term_asked(void);
/* Registers with the head (resume: again under n's id and token, with its actors). 0; CT_EDEAD
 * when the head refused the resume; another CT_E* code when it got no answer. */
int ct__node_register(nodest *n, bool resume);
int ct__node_store_start(nodest *n); /* the shard (objnode.c), once registered */
void ct__node_heartbeat(nodest *n);
void ct__node_ping_head(nodest *n);
void ct__node_count_silence(nodest *n);
bool ct__node_head_lost(nodest *n, int dead_ms); /* logs and sets the error when it is */
void ct__node_watch_read(nodest *n);             /* the death watch spoke: 'D', or its end */
void ct__node_live_start(nodest *n);
void ct__node_live_stop(nodest *n);
int ct__node_resume(nodest *n); /* the head forgot this node; 0 or a failed rejoin's error */
int ct__node_rejoin(nodest *n); /* the head declared this node dead; 0 or the error */
bool ct__node_drain_step(nodest *n, int drain_ms); /* true: stop now */
ct__node_handler ct__node_on_drain_reply, ct__node_on_error, ct__node_on_heartbeat_period;

/* ---- node_stats.c: the host's and shard's numbers for the head's metrics ---- */
#define NODE_STATS_GPUS 16 /* head/head_internal.h NODE_GPUS */
/* A NodeStats and the storage its GPUs point into. */
typedef struct node_stats_msg {
    Ct__NodeStats stats;
    Ct__GpuStats gpu[NODE_STATS_GPUS];
    Ct__GpuStats *gpus[NODE_STATS_GPUS];
} node_stats_msg;
/* Fills m when SAMPLE_MS (1 s) passed since the last sample (true); false, m untouched, else. */
bool ct__node_stats_sample(nodest *n, node_stats_msg *m);
void ct__node_stats_close(nodest *n); /* NVML closed */

/* ---- node_start.c: StartActor, the start queue, the zygotes' records ---- */
ct__node_check ct__node_check_start_actor;
ct__node_handler ct__node_on_start_actor;
/* Hands queued start requests to zygotes while they take them without blocking. */
void ct__node_feed_zygotes(nodest *n);
/* Reads zygote zi's records (spawned, ready, failed), or its end. */
void ct__node_zygote_records(nodest *n, int zi);
void ct__node_drop_starts(nodest *n); /* empties the queue */

/* ---- node_zygote.c: the zygote processes ---- */
/* Starts a zygote for exe (exe_fd >= 0: exec that checked file) with s's argv and job token,
 * under key; may_evict: one nothing waits on may end to make room. Its index, or CT_E*. */
int ct__node_zygote_spawn(nodest *n, Ct__StartActor *s, const char *exe, int exe_fd,
                          const char *key, size_t keylen, bool may_evict);
/* Zygote zi's process ended (wait status; -1: unknown): out of the table, what waits on it
 * fails saying how it ended. */
void ct__node_zygote_gone(nodest *n, int zi, int status);
bool ct__node_zygote_exited(nodest *n, pid_t pid, int status); /* reaped pid was a zygote */
void ct__node_retire_idle(nodest *n);
/* Ends every zygote and empties the table; their pids in pids[0..returned), at most cap. */
int ct__node_zygotes_end(nodest *n, pid_t *pids, int cap);
ct__node_check ct__node_check_job_ended;
ct__node_handler ct__node_on_job_ended;

/* ---- node_actors.c: the local actor table ---- */
int ct__node_actor_find(nodest *n, const char *id); /* its index, -1 */
int ct__node_actor_room(nodest *n);                 /* room for one more: 0 or CT_ENOMEM */
nactor *ct__node_actor_add(nodest *n, const Ct__StartActor *s); /* after _room */
void ct__node_actor_remove(nodest *n, int i);                   /* gives its GPUs back */
/* The zygote told actor i's pid: an exit reaped before is reported now (it is removed). */
void ct__node_actor_pid(nodest *n, int i, pid_t pid);
void ct__node_actor_exited(nodest *n, pid_t pid, int status); /* reaped; no zygote's */
/* Kills every actor and empties the table; their pids in pids[0..returned), at most cap. */
int ct__node_actors_end(nodest *n, pid_t *pids, int cap);
void ct__node_report_ready(nodest *n, nactor *a, const ct__zrep *r);
/* permanent: it would fail the same way again (the head answers CT_ESTART, not retried) */
void ct__node_report_start_failed(nodest *n, const char *actor_id, const char *reason,
                                  bool permanent);
ct__node_check ct__node_check_kill_actor;
ct__node_handler ct__node_on_kill_actor;

/* ---- node_gpus.c ---- */
/* Names the GPU indices and returns the GPU amount to register (detected: counted by NVML). */
double ct__node_gpu_setup(nodest *n, double gpus, bool detected);
/* Gives a the GPU indices for demand d; their names, comma-separated, in out ("" for none). */
void ct__node_gpu_take(nodest *n, nactor *a, double d, char *out, size_t cap);
void ct__node_gpu_give_back(nodest *n, nactor *a);

/* ---- node_stderr.c ---- */
void ct__node_zygote_stderr(zygote *z); /* reads its pipe so far; closes it at its end */
/* Copies an actor's stderr memfd to the node's stderr; its last lines in tail. */
void ct__node_actor_stderr(int fd, char *tail, size_t cap);
/* The last lines (at most 3, 300 bytes) of the len bytes at tail on one line. */
void ct__node_tail_lines(const char *tail, int len, char *out, size_t cap);

#endif
