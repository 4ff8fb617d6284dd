/* actor/runtime.h — internals shared by the node (node*.c), the zygote and actor processes
 * (worker.c) and the driver API (api_*.c). Not public API; see include/ct/ct.h. */
#ifndef CT_ACTOR_RUNTIME_H
#define CT_ACTOR_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ct/ct.h"

struct ct_store;

typedef struct ct_node_opts {
    const char *head;      /* "host:port" of the head */
    const char *host;      /* address actors bind to; NULL: the one that reaches the head */
    double cpus;           /* < 0: detected */
    double gpus;           /* < 0: detected (NVML, ct__gpu_count) */
    const char *resources; /* "name=n,..." or NULL */
    int watch_fd;          /* exit when it reaches EOF; -1 none */
    int ready_fd;          /* "registered <node-id>\n" written here once registered; -1 none */
    uint64_t store_memory; /* object store shard bytes; 0: RAM/4, at most 2 GiB */
    const char *spill_dir; /* NULL: the node's own /tmp/ct-node.<pid>.XXXXXX (mkdtemp) */
    int head_dead_ms;      /* grace time: the head silent this long, kill the actors and exit;
                              until then actors and objects are kept and a restarted head gets
                              them back (re-registration); 0: CT_NODE_HEAD_GRACE_MS */
    int drain_ms;          /* SIGTERM: how long to wait for the actors of jobs that save their work
                              first (NODE_DRAINING); 0: 60000. A second SIGTERM stops at once */
} ct_node_opts;

/* How long a node waits for a gone head by default (Ray's gcs_rpc_server_reconnect_timeout_s). */
#define CT_NODE_HEAD_GRACE_MS 60000

/* Registers with the head and serves (spawns, reaps, heartbeats) until SIGTERM/SIGINT,
 * watch_fd EOF, or the head silent for head_dead_ms (CT_EDEAD; its actors killed). Declared
 * dead by the head while alive, it kills its actors and registers again as a new node (a new
 * id); CT_EDEAD (or the registration's error) when that fails. Returns 0 or a CT_E* code
 * (message set). */
int ct__node_run(const ct_node_opts *opts);

/* The NVIDIA GPUs NVML counts on this machine (gpu_detect.c, loaded by dlopen); 0 when there is
 * no driver or NVML fails (one info line says why). */
int ct__gpu_count(void);
/* NVML kept open for sampling (gpu_detect.c): NULL when there is none or it fails to start.
 * ct__nvml_sample fills out with each GPU's memory and utilisation (NaN when the GPU does not
 * report it), at most cap; the count filled. ct__nvml_close accepts NULL and clears it. */
typedef struct ct__nvml ct__nvml;
typedef struct ct__gpu_sample {
    unsigned int index;
    unsigned long long memory_used, memory_total;
    double utilization; /* percent */
} ct__gpu_sample;
ct__nvml *ct__nvml_open(void);
int ct__nvml_sample(ct__nvml *m, ct__gpu_sample *out, int cap);
void ct__nvml_close(ct__nvml **m);

/* The node (node_shared.h). */
typedef struct nodest ct__node;
struct Ct__Envelope;
/* A row of the node's handler table (node.c), for each message kind from the head: a check of
 * the message's own fields, run first (false: dropped, or refused as its kind is), and the
 * handler (e borrowed; on the node's thread, never blocking on the head). */
typedef bool ct__node_check(ct__node *n, const struct Ct__Envelope *e);
typedef void ct__node_handler(ct__node *n, struct Ct__Envelope *e);

/* ---- a detached node, for fuzz/fuzz_node.c ----
 * The node's handlers without a head, a registration or processes: what it would send the head
 * goes to sock (borrowed; e.g. a DEALER connected nowhere, which refuses it). StartActor runs up
 * to the spawn: a zygote is a socketpair whose other end the caller plays (no fork, no exec),
 * no code shipping, and no signal is ever sent. Not thread-safe; one per thread.
 * handle_bytes: one envelope from the head (decoded with the node's caps); 0, the decode error,
 * or CT_EDEAD when it was the head's refusal of a heartbeat (it does not know the node).
 * zygote_bytes: one record (ct__zrep) from zygote zi (0 <= zi < ct__node_zygotes), after dropping
 * what the node sent it; 0 or CT_E*. */
ct__node *ct__node_new_detached(void *sock);
int ct__node_handle_bytes(ct__node *n, const uint8_t *data, size_t len);
int ct__node_zygote_bytes(ct__node *n, int zi, const uint8_t *data, size_t len);
int ct__node_zygotes(const ct__node *n);
void ct__node_destroy_detached(ct__node **n);

/* ---- the node's object store (objnode.c) ----
 * start: creates the shard "node.<pid>" and its transfer server, tells the head (on the node's
 * thread, after registration); CT_EINVAL when spill_dir is a symlink, not this uid's, or
 * group/other-writable. stop: ends pulls, removes the shard and the node's directory
 * /tmp/ct-node.<pid>.XXXXXX. exe: the path of the cached copy of executable object id (pulled
 * from holders first when the shard lacks it), and in *exe_fd that very file, open, whose
 * bytes were checked: the caller runs it through the descriptor (fexecve) and closes it, so a
 * file renamed over the path after the check never runs; CT_EPROTO (and the bad copy
 * removed) when the bytes' SHA-1 is not id: never run them, nor anything in their place.
 * purge_leftovers: removes shards and dirs (this uid's) of dead nodes on this host; purge_pid:
 * those of one (killed) node. */
typedef struct ct__objnode_opts {
    const char *node_id, *token; /* the node's, from its registration: its reports carry them */
    void *head_sock; /* the node's own head connection (borrowed until stop; node thread only):
                        ObjNodeInfo goes there, so that the head learns its route */
    const char *head, *host; /* the head's "host:port"; the address the server binds */
    uint64_t memory;         /* shard bytes; 0: ct__objnode_default_memory */
    const char *spill_dir;   /* NULL or "": the node's own directory */
} ct__objnode_opts;
int ct__objnode_start(const ct__objnode_opts *o);
void ct__objnode_stop(void);
/* The shard's stats (ct_store_get_stats); false while there is no shard. */
struct ct_store_stats;
bool ct__objnode_stats(struct ct_store_stats *st);
/* After the node registered again with a restarted head: tells it the shard (ObjNodeInfo) and
 * every object it holds (ObjAdded), through the node's main connection (node thread only). */
void ct__objnode_resume(void);
int ct__objnode_exe(const uint8_t *id, size_t idlen, char *const *holders, size_t nh, char *path,
                    size_t cap, int *exe_fd);
void ct__objnode_purge_leftovers(void);
void ct__objnode_purge_pid(int pid);
/* A --spill-dir: made 0700 when missing; 0, or CT_EINVAL (message says why, "refused") when
 * it is a symlink, not a directory, not this uid's, or group/other-writable. */
int ct__objnode_check_dir(const char *dir);
const char *ct__objnode_store_name(void);
/* The node's rows for the head's orders to the shard (node.c's table lists them): ObjPull, a pull
 * from the holders named (answered ObjPullDone), and ObjDelete. Before start they do nothing. */
ct__node_check ct__objnode_check_pull, ct__objnode_check_delete;
ct__node_handler ct__objnode_on_pull, ct__objnode_on_delete;
/* Detached mode (fuzz/fuzz_node.c): the ObjPull / ObjDelete handlers on store (borrowed), with
 * no head connection, no transfer server and no pulls: an order that passes the checks is
 * answered CT_ENOSYS instead of starting a pull thread. stop_detached undoes it. */
void ct__objnode_start_detached(struct ct_store *store);
void ct__objnode_stop_detached(void);
/* This process's host identity as the object store sees it: "<boot id>/net:<network namespace
 * inode>/shm:<device of /dev/shm>". Two processes with the same one share a kernel, a network
 * namespace and the /dev/shm that shards live in, so one can map the other's shard; a node
 * reports its own (ObjNodeInfo.host_id) and a driver compares it with its own to decide
 * whether a node runs on its host (api_objects.c). */
void ct__host_id(char *buf, size_t cap);
/* Default store memory: a quarter of RAM, at most 2 GiB and half of /dev/shm's free space. */
uint64_t ct__objnode_default_memory(void);

/* The head's death watch, client end (watch_dial.c; the wire is in head/watch.h): connects to
 * port on head_addr's host ("host:port", the head's ZeroMQ address), authenticates and presents
 * ticket, within timeout_ms. The connected fd (close-on-exec, blocking), to be kept open while
 * this process lives; or a CT_E* code with the reason. */
int ct__watch_dial(const char *head_addr, unsigned port, const char *ticket, int timeout_ms);

/* SHA-1 of len bytes (sha1.c): the content address of a shipped executable. */
void ct__sha1(const void *p, size_t len, uint8_t out[20]);

/* Parses "name=n,name=n" into out[0..*n) (names point into a copy the caller frees: *store).
 * Returns 0 or CT_EINVAL naming the bad entry. */
int ct__parse_resources(const char *s, ct_resource *out, int cap, int *n, char **store);

/* Class registry (api_actors.c). NULL when unknown. */
const ct_actor_class *ct__class_find(const char *name);
/* True once ct_serve_if_worker / ct_init ran in this (non-actor) process: what is registered
 * from then on (actor classes, trainer creators) exists in no actor of this program
 * (api_actors.c). ct_serve_if_worker (worker.c) closes it. */
bool ct__registration_closed(void);
void ct__registration_close(void);

/* Client side inside an actor process (api_transport.c): records the head's address and self ids;
 * the ZeroMQ context and head connection are made on first use (ct_kv_*, creating actors from an
 * actor), so an actor that never needs them costs no threads. */
void ct__client_attach(const char *head_addr, const char *sender, const char *actor_id,
                       const char *node_id);

/* Zygote <-> node records over a SOCK_SEQPACKET socketpair. */
#define CT_ZYGOTE_MAX_ARGS (64 * 1024)
typedef struct ct__zreq {
    char actor_id[32];
    char cls[64];
    /* the actor's CUDA_VISIBLE_DEVICES, set in the child right after the fork ("" hides every
     * GPU): the node chooses them (node.c), so actors get GPUs of their own */
    char cuda_devices[512];
    unsigned args_len; /* args follow */
} ct__zreq;
/* Records to the node over the same socketpair: the zygote reports each spawn, and each actor
 * reports once, ready (text = its address) or failed (text = why), then closes its copy. The
 * SPAWNED record of an actor whose class has create carries (SCM_RIGHTS) the memfd that is its
 * stderr until it reports: the node quotes its end when the actor dies before that. */
enum { CT_ZREP_SPAWNED = 0, CT_ZREP_READY = 1, CT_ZREP_FAILED = 2 };
typedef struct ct__zrep {
    char actor_id[32];
    int pid; /* > 0, or a negative CT_E* when the spawn failed */
    int kind;
    char text[400];
} ct__zrep;

/* ---- a training job's progress for the head's metrics (api_cluster.c) ----
 * What trainer/train/report.c tells the head (TrainReport in proto/ct.proto): sent without
 * waiting for an answer (the head keeps the last one per job; it answers only a refusal).
 * The caller rate-limits. 0, or CT_E* when not connected or the send failed. Thread-safe. */
#define CT_TRAIN_REASONS 8
#define CT_TRAIN_POINTS 64
#define CT_TRAIN_HISTS 4
#define CT_TRAIN_HIST_BOUNDS 32
/* counts by reason ([a-z_], 1-31 bytes): a report's retries, and its drains */
typedef struct ct__train_reasons {
    int n; /* <= CT_TRAIN_REASONS */
    const char *reason[CT_TRAIN_REASONS];
    uint64_t count[CT_TRAIN_REASONS];
} ct__train_reasons;
typedef struct ct__train_report {
    const char *job; /* NULL or "": the driver's name */
    int64_t step, epoch;
    double loss, samples_per_s, mfu_pct; /* NaN / mfu_pct < 0: unknown */
    int replicas;
    bool done;
    ct__train_reasons retries;            /* retries spent, by reason */
    double val_loss;                      /* NaN: no validation yet */
    double eta_s;                         /* NaN: unknown */
    int64_t epochs;                       /* trainer_train's; 0: unknown */
    uint64_t drains;                      /* groups a node's drain ended ... */
    ct__train_reasons drains_by;          /* ... by reason ("mid_epoch", "segment_end") */
    uint64_t live_recoveries, heals;      /* replicas lost and gone on without; replacements */
    const char *live_what, *heal_what;    /* the newest of each, in words (NULL: none) */
    int64_t checkpoints, checkpoint_step; /* checkpoints taken, the newest one's steps */
    int npoints;                          /* the steps since the last report (<= CT_TRAIN_POINTS) */
    const int64_t *point_step;            /* npoints each */
    const double *point_loss, *point_sps;
    int nhist; /* <= CT_TRAIN_HISTS cumulative histograms of seconds */
    struct ct__train_hist {
        const char *name; /* "step", "allreduce", "data_wait", "checkpoint" */
        int nbounds;      /* <= CT_TRAIN_HIST_BOUNDS */
        const double *bounds;
        const uint64_t *counts; /* per bound, not cumulative */
        uint64_t count;
        double sum;
    } hist[CT_TRAIN_HISTS];
} ct__train_report;
int ct__report_train(const ct__train_report *r);

#endif
