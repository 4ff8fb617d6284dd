/* ct/ct.h — the ct runtime: a cluster of nodes under one head, actors (processes that serve
 * named methods), events, placement groups and a KV for rendezvous.
 *
 * A complete program:
 *
 *     static int counter_new(const void *args, size_t len, void **state)
 *     {
 *         *state = calloc(1, sizeof(long));
 *         return *state ? 0 : CT_ENOMEM;
 *     }
 *     static int counter_add(void *state, const void *args, size_t len, void **res,
 *                            size_t *rlen)
 *     {
 *         long *c = state;
 *         *c += *(const long *)args;
 *         *res = malloc(sizeof *c);
 *         memcpy(*res, c, sizeof *c);
 *         *rlen = sizeof *c;
 *         return 0;
 *     }
 *     int main(void)
 *     {
 *         ct_actor_class_register("Counter", &(ct_actor_class){
 *             .create = counter_new, .destroy = free, .methods = {{"add", counter_add}}});
 *         ct_init(NULL);   // embedded head + node; in an actor process: serves, never returns
 *         ct_actor *a;
 *         ct_actor_create("Counter", &(ct_resources){.cpu = 1}, NULL, 0, &a);
 *         long one = 1, *v;
 *         size_t n;
 *         ct_actor_call(a, "add", &one, sizeof one, (void **)&v, &n, 1000);  // *v == 1
 *         free(v);
 *         ct_actor_kill(a);
 *         ct_actor_release(&a);
 *         ct_shutdown();
 *     }
 *
 * How it runs. An actor is this same executable started again in actor mode: everything before
 * ct_init() (class registration) runs in every process, and in an actor process ct_init() (or
 * ct_serve_if_worker()) serves and never returns, so do nothing before it that must happen once.
 * Method calls go from the caller straight to the actor's own socket, never through the head.
 *
 * Threads. Every function here may be called from any thread; one process-wide lock guards
 * the API's state, and calls that wait (ct_future_wait, ct_kv_get, ct_events_next, ...) release
 * it while they wait, so one thread's long wait does not hold up another's calls.
 * ct_init starts one small thread that heartbeats this driver to the head, and keeps one TCP
 * connection to the head's death watch open: when a driver stops (crash, kill -9), its kernel
 * closes that connection and the head kills the actors it created at once. Call ct_init from the
 * main thread: the embedded cluster's processes die with the thread that started them
 * (PR_SET_PDEATHSIG).
 *
 * Failure semantics. A call pending on an actor that dies fails with CT_EDEAD as soon as the
 * actor's connection closes (well under a millisecond on one host); the ACTOR_DEAD event with
 * the exit status or signal follows from the head. A node whose process ends (crash, kill -9)
 * is declared dead at once (its death-watch connection closes); a node that goes silent (power
 * loss, a cut network, SIGSTOP) after dead_after_ms without heartbeats, counting only time the
 * head itself ran. Its actors are then reported dead; a node declared dead while its process
 * lives kills them when it hears of it and joins again as a new node (a new id).
 * Ownership is stated per function; byte results are malloc'd and freed by the caller.
 * Errors: 0 or a negative CT_E* code; ct_last_error() says what failed. */
#ifndef CT_CT_H
#define CT_CT_H

#include <stddef.h>
#include <stdint.h>
#include "ct/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- init ---- */

typedef struct ct_init_opts {
    const char *address; /* "host:port" of a head; NULL: $CT_ADDRESS, else an embedded cluster */
    int timeout_ms;      /* connecting / starting the embedded cluster; 0: 10000 */
    /* the cluster secret file (docs/SECURITY.md) for a cluster at an address; NULL:
     * $CT_SECRET_FILE. An embedded cluster draws its own secret in memory. */
    const char *secret_file;
    /* embedded cluster only (0 = default): */
    double cpus;           /* CPUs of the embedded node; 0: detected */
    double gpus;           /* GPUs of the embedded node; 0: none */
    const char *resources; /* custom resources "name=n,..." of the embedded node */
    int heartbeat_ms;      /* 0: 100 */
    int dead_after_ms;     /* silent node or driver dead after this; 0: 10000 */
    uint64_t store_memory; /* object store of the embedded node, bytes; 0: RAM/4, <= 2 GiB */
} ct_init_opts;

/* In a process started as a ct worker (actor, head or node of an embedded cluster) this
 * serves and exits the process; elsewhere it returns at once. ct_init calls it first; call it
 * yourself right after registration when main does other work before ct_init. */
void ct_serve_if_worker(void);

/* Connects this driver to a cluster (opts may be NULL). With no address starts an embedded
 * head and node on 127.0.0.1 ephemeral ports; they end with this process, also when it
 * crashes. Every connection proves that both ends hold the cluster's secret: with an address,
 * the secret file must be given (CT_EACCES naming what is missing; a wrong secret makes the
 * head's ping time out, CT_ETIMEDOUT saying so). Not reentrant: a second ct_init without
 * ct_shutdown returns CT_EEXIST. */
int ct_init(const ct_init_opts *opts);

/* Kills the actors this process created (released handles included), ends an embedded cluster,
 * closes sockets. Safe to call when not initialized. */
void ct_shutdown(void);

/* "host:port" of the head this process talks to; "" before ct_init. Borrowed. */
const char *ct_head_address(void);

/* The version of ct this program runs with, "major.minor.patch". Static, borrowed. */
const char *ct_version(void);

/* ---- actor classes ---- */

#define CT_MAX_METHODS 32

/* create: builds the actor's state from the creation args (borrowed); returns 0 or a CT_E*.
 * method: runs on the actor's thread with the args (borrowed) and sets *result to a malloc'd
 * buffer (or NULL) of *result_len bytes that the runtime frees; returns 0 or a CT_E* code,
 * which the caller of the method receives (with the actor's ct_last_error() message).
 * destroy: frees the state (may be NULL). */
typedef int (*ct_actor_create_fn)(const void *args, size_t len, void **state);
typedef int (*ct_method_fn)(void *state, const void *args, size_t len, void **result,
                            size_t *result_len);
typedef struct ct_method {
    const char *name;
    ct_method_fn fn;
} ct_method;
typedef struct ct_actor_class {
    ct_actor_create_fn create; /* NULL: state is NULL */
    void (*destroy)(void *state);
    ct_method methods[CT_MAX_METHODS]; /* ends at the first NULL name */
} ct_actor_class;

/* Registers class `name` (copied; the method names must stay valid: string literals). Call
 * before ct_init, identically in every process: after it, CT_EINVAL (actors run the program
 * only up to ct_init). CT_EEXIST if the name is taken. */
int ct_actor_class_register(const char *name, const ct_actor_class *cls);

/* ---- resources and placement ---- */

typedef enum ct_strategy { CT_PACK = 0, CT_SPREAD = 1 } ct_strategy;

typedef struct ct_resource {
    const char *name; /* NULL ends the list */
    double amount;
} ct_resource;

typedef struct ct_placement_group ct_placement_group;

/* What an actor needs (all zero: nothing) and where it goes. */
typedef struct ct_resources {
    double cpu, gpu;
    ct_resource custom[8];
    ct_strategy strategy;   /* PACK (default) fills nodes; SPREAD balances actors over them */
    ct_placement_group *pg; /* place inside this group's reservation (borrowed) */
    int bundle;             /* bundle index in pg; -1 any */
    int timeout_ms;         /* creation (including waiting for room); 0: 30000 */
} ct_resources;

typedef struct ct_bundle {
    double cpu, gpu;
    ct_resource custom[8];
} ct_bundle;

/* Reserves n bundles all-or-nothing. Returns at once; the group may stay pending until nodes
 * with room join. *out is owned by the caller (ct_placement_group_remove). */
int ct_placement_group_create(const ct_bundle *bundles, int n, ct_strategy strategy,
                              ct_placement_group **out);
/* 0 once every bundle is reserved; CT_ETIMEDOUT if still pending after timeout_ms. */
int ct_placement_group_wait(ct_placement_group *pg, int timeout_ms);
/* Releases the reservation (its actors are killed) and frees *pg, nulling it. */
int ct_placement_group_remove(ct_placement_group **pg);
const char *ct_placement_group_id(const ct_placement_group *pg);

/* Sum over live nodes of a resource ("CPU", "GPU", custom): total and currently free. */
int ct_cluster_resources(const char *name, double *total, double *free_amount);

/* One live node that takes actors (not draining): its id, and its CPUs and GPUs, in all and
 * free now. */
typedef struct ct_node_resources {
    char node_id[32];
    double cpu_total, cpu_free, gpu_total, gpu_free;
} ct_node_resources;

/* The live nodes that take actors, up to cap of them into out (out may be NULL when cap is 0);
 * *n gets how many there are (may exceed cap). */
int ct_cluster_nodes(ct_node_resources *out, int cap, int *n);

/* ---- actors ---- */

typedef struct ct_actor ct_actor;
typedef struct ct_future ct_future;

/* Creates an actor of class cls with creation args (copied) where res fits (res may be NULL),
 * waiting for it to serve. *out is owned by the caller: ct_actor_release. CT_ETIMEDOUT when
 * nothing had room within res->timeout_ms; CT_EDEAD when it died while starting; CT_ESTART when
 * its program cannot start on the node (an exec error, a missing shared library: the message
 * quotes the end of the program's stderr), which a retry would not change. */
int ct_actor_create(const char *cls, const ct_resources *res, const void *args, size_t len,
                    ct_actor **out);

/* Creates n actors alike at once (requests pipelined: far faster than n ct_actor_create).
 * out[0..n) receives the handles; on error the first error (a CT_ESTART before others) is
 * returned with its message and the slots of the
 * actors that were created are still filled (the caller releases them). */
int ct_actor_create_many(const char *cls, const ct_resources *res, const void *args, size_t len,
                         int n, ct_actor **out);

/* Calls method with args (copied) and waits up to timeout_ms (<= 0: forever) for the result
 * (*result malloc'd, caller frees; may be NULL when *result_len is 0). CT_EDEAD at once when the
 * actor dies; CT_ETIMEDOUT; or the method's own error code. */
int ct_actor_call(ct_actor *a, const char *method, const void *args, size_t len, void **result,
                  size_t *result_len, int timeout_ms);

/* Sends a call and returns at once; *f is owned by the caller (ct_future_destroy). Calls on
 * one actor run in the order sent. */
int ct_actor_call_async(ct_actor *a, const char *method, const void *args, size_t len,
                        ct_future **f);
/* Waits for f up to timeout_ms (<= 0: forever). On 0, *result (malloc'd, caller frees) and
 * *result_len hold the result (either pointer may be NULL to drop it). A future can be waited
 * again after CT_ETIMEDOUT. */
int ct_future_wait(ct_future *f, int timeout_ms, void **result, size_t *result_len);
/* Waits until one of the n futures (NULL entries skipped) is done, with a result or an error
 * (a call to an actor that dies fails at once), up to timeout_ms (<= 0: forever). Returns the
 * index of a done future, to be collected with ct_future_wait (it returns at once), or
 * CT_ETIMEDOUT. Lets a caller of many actors react to the first failure instead of waiting on
 * a live actor that is itself blocked on the dead one. */
int ct_future_wait_any(ct_future *const *fs, int n, int timeout_ms);
/* Frees f (a pending call's reply is then ignored); accepts NULL, nulls *f. */
void ct_future_destroy(ct_future **f);

/* Kills the actor's process (SIGKILL by its node); its death event follows. */
int ct_actor_kill(ct_actor *a);
/* Frees the handle (the actor keeps running); accepts NULL, nulls *a. */
void ct_actor_release(ct_actor **a);

/* Facts about a handle; strings borrowed while the handle lives. */
const char *ct_actor_id(const ct_actor *a);
const char *ct_actor_node(const ct_actor *a);
const char *ct_actor_address(const ct_actor *a); /* "tcp://host:port" it serves calls on */
int ct_actor_pid(const ct_actor *a);
/* 1 once the runtime knows the actor died, else 0. */
int ct_actor_is_dead(const ct_actor *a);

/* In an actor process: its own actor id and node id; in a driver: "" and "". Borrowed. */
const char *ct_self_actor_id(void);
const char *ct_self_node_id(void);

/* ---- events ---- */

typedef enum ct_event_type {
    CT_EVENT_NODE_JOINED = 1,
    CT_EVENT_NODE_DEAD = 2,
    CT_EVENT_ACTOR_DEAD = 3,
    /* a node told to stop (SIGTERM): it takes no new actors; when a job subscribed to this
     * event has actors there, the node waits (ct-node --drain-ms) until they exited, so the
     * job saves its work first (the trainer checkpoints at its next step boundary) */
    CT_EVENT_NODE_DRAINING = 4,
} ct_event_type;

#define CT_EVENTS_ALL                                                                              \
    ((1u << CT_EVENT_NODE_JOINED) | (1u << CT_EVENT_NODE_DEAD) | (1u << CT_EVENT_ACTOR_DEAD) |     \
     (1u << CT_EVENT_NODE_DRAINING))

typedef struct ct_event {
    ct_event_type type;
    char node_id[32];
    char actor_id[32];
    int pid;         /* the actor's (or node's) pid */
    int exit_status; /* when term_signal == 0 */
    int term_signal;
    char reason[128];
    int64_t received_ns; /* CLOCK_MONOTONIC when this process received it */
} ct_event;

/* Subscribes to event types (mask of 1u << ct_event_type; CT_EVENTS_ALL). Without a
 * subscription a driver still receives the death events of the actors it created. */
int ct_events_subscribe(unsigned mask);
/* Next event, waiting up to timeout_ms (0: poll once). 0 or CT_ETIMEDOUT. */
int ct_events_next(ct_event *ev, int timeout_ms);

/* ---- objects (the distributed object store) ----
 *
 * Immutable blobs addressed by 20-byte ids, held in the shared-memory shards of the nodes.
 * A process uses the shard of "its" node: an actor the node it runs on; a driver the embedded
 * node (ct_init(NULL)), else a node of the cluster whose shard runs on this host (the same
 * host id: kernel boot, network namespace and /dev/shm). A driver attached with CT_ADDRESS
 * whose host has no node (or run with CT_REMOTE_DRIVER=1) is a *remote driver*, as a Ray
 * Client is: ct_put and ct_object_seal upload the bytes to one node (opts.node first, else the
 * one with the most room) through its data port, and ct_get copies an object from a holder's
 * data port into this process's memory (the view is then a private copy, not zero-copy;
 * ct_object_create's buffer is private memory until the seal uploads it). A cluster with no
 * node at all gives CT_ENOENT ("... lists no ct-node with an object store").
 *
 *     ct_object_id id;
 *     ct_put(buf, len, &(ct_put_opts){.replicas = 2}, &id);   // copies on 2 nodes
 *     ct_actor_call(a, "consume", &id, sizeof id, ...);       // ids travel as 20 raw bytes
 *     ...in the actor: ct_object_view v; ct_get(&id, 5000, &v); use v.data, v.size;
 *     ct_object_release(&v);
 *     ct_free(&id);                                           // gone from every node
 *
 * Passing objects to actors: an id is a plain 20-byte value; put it (or several, back to back)
 * in the call's args and memcpy it out in the method (ct_object_id_from_args helps).
 * Threads: all functions are thread-safe; a view may be used from any thread of the process. */
#ifndef CT_OBJECT_ID_DEFINED
#define CT_OBJECT_ID_DEFINED
#define CT_OBJECT_ID_LEN 20
typedef struct ct_object_id {
    uint8_t b[CT_OBJECT_ID_LEN];
} ct_object_id;
#endif

typedef struct ct_put_opts {
    int replicas;     /* copies on distinct nodes, this node's included; 0: 1. More than the
                         live nodes with a store: one per node (best effort) */
    const char *node; /* preferred node id: it gets a copy (in addition); NULL: none */
    int timeout_ms;   /* waiting for the copies; 0: 60000 */
} ct_put_opts;

/* A pinned, read-only, zero-copy view of an object in this node's shard. Fields after id are
 * private. Valid until ct_object_release (or ct_shutdown). */
typedef struct ct_object_view {
    const void *data;
    uint64_t size;
    ct_object_id id;
    void *priv_[3];
} ct_object_view;

/* Stores len bytes (copied) under a new random id (*id) in this node's shard and registers it
 * with the head; with opts->replicas = k returns once k nodes hold it (CT_ETIMEDOUT past
 * opts->timeout_ms; the object then exists with fewer copies). opts may be NULL. CT_ENOSPC when
 * the shard cannot make room (nothing stored is lost). */
int ct_put(const void *data, size_t len, const ct_put_opts *opts, ct_object_id *id);
/* Same with a file's contents. */
int ct_put_file(const char *path, const ct_put_opts *opts, ct_object_id *id);

/* Zero-copy put: ct_object_create gives a writable buffer of len bytes in this node's shard
 * under a new id (invisible to everyone until sealed; *data valid until seal/abort); write it,
 * then ct_object_seal publishes it like ct_put (opts as there, may be NULL) or ct_object_abort
 * drops it. Serialize a checkpoint straight into shared memory this way. */
int ct_object_create(size_t len, ct_object_id *id, void **data);
int ct_object_seal(const ct_object_id *id, const ct_put_opts *opts);
int ct_object_abort(const ct_object_id *id);

/* Pins the object and fills *view. When this node's shard lacks it, the node pulls it from a
 * holder first (chunked, checksummed, failing over to other holders). timeout_ms > 0: wait up
 * to that long for an id no node holds yet, and for the pull; <= 0: an unknown id fails at
 * once with CT_ENOENT, a pull may take up to 60 s. CT_EDEAD when every holder died. */
int ct_get(const ct_object_id *id, int timeout_ms, ct_object_view *view);
/* Unpins and zeroes the view; accepts an empty (zeroed) view. */
void ct_object_release(ct_object_view *view);

/* Waits until at least num_ready of the n ids exist somewhere in the cluster. Returns how many
 * are ready (>= num_ready), or CT_ETIMEDOUT after timeout_ms (<= 0: poll once). */
int ct_wait(const ct_object_id *ids, int n, int num_ready, int timeout_ms);

/* Deletes the object from every node and the directory (readers holding views keep their
 * bytes until they release them). CT_ENOENT for an unknown id. */
int ct_free(const ct_object_id *id);

/* The directory's view: up to cap holder node ids into nodes[], their count in *n, the size in
 * *size (either may be NULL). CT_ENOENT when no node holds the id. */
int ct_object_nodes(const ct_object_id *id, char (*nodes)[32], int cap, int *n, uint64_t *size);

/* The live nodes with an object store: the most copies a put can have (a put asking for more
 * settles for one per node). Returns the count, or a CT_E* code. */
int ct_object_store_nodes(void);

/* The node whose shard this process uses ("" before the first object call, and always in a
 * remote driver). Borrowed. */
const char *ct_object_node(void);

/* The i-th id (0-based) of args holding ids back to back. CT_EINVAL if args is too short. */
int ct_object_id_from_args(const void *args, size_t len, int i, ct_object_id *id);
/* 40 lower-case hex digits + NUL into out; returns out. Parse: 0 or CT_EINVAL. */
char *ct_object_id_hex(const ct_object_id *id, char out[2 * CT_OBJECT_ID_LEN + 1]);
int ct_object_id_parse(ct_object_id *id, const char *hex);

/* ---- KV (rendezvous) ---- */

/* Stores a copy of value under key, overwriting. */
int ct_kv_put(const char *key, const void *value, size_t len);
/* Waits until key exists or timeout_ms passes (CT_ETIMEDOUT); *value is malloc'd, the caller
 * frees it. */
int ct_kv_get(const char *key, void **value, size_t *len, int timeout_ms);
/* Removes key; CT_ENOENT if absent. */
int ct_kv_del(const char *key);

#ifdef __cplusplus
}
#endif
#endif
