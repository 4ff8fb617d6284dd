/* head/head.h — the head's entry point (internal): ct-head's main and the embedded cluster of
 * ct_init(NULL) both call ct__head_run. Not public API. */
#ifndef CT_HEAD_HEAD_H
#define CT_HEAD_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What peers can make the head hold: each table's limit, beyond which it refuses (an Error
 * naming the field), so that no flood exhausts the head. 0: the default, sized for 10,000 nodes
 * (docs/ARCHITECTURE.md, "The head at scale", gives what each entry costs). ct-head's
 * --max-* flags and the cluster YAML's ct.max_* keys set them. */
typedef struct ct_head_limits {
    int nodes;       /* live nodes, and dead ones not yet forgotten (10000) */
    int actors;      /* actors, dead ones not yet forgotten included (100000) */
    int pgs;         /* placement groups (20000); bundles in all of them: 4 times as many */
    int objects;     /* objects the directory lists (1048576) */
    int kv_keys;     /* KV keys (262144; their bytes stay within MAX_KV_BYTES) */
    int subscribers; /* event subscribers (16384) */
} ct_head_limits;

#define CT_HEAD_DEFAULT_NODES 10000
#define CT_HEAD_DEFAULT_ACTORS 100000
#define CT_HEAD_DEFAULT_PGS 20000
#define CT_HEAD_DEFAULT_OBJECTS 1048576
#define CT_HEAD_DEFAULT_KV_KEYS 262144
#define CT_HEAD_DEFAULT_SUBSCRIBERS 16384

/* lim with every 0 replaced by its default. */
ct_head_limits ct__head_limits_or_default(ct_head_limits lim);

typedef struct ct_head_opts {
    const char *host;      /* bind address; NULL: 127.0.0.1 */
    int port;              /* 0: ephemeral */
    int heartbeat_ms;      /* period nodes heartbeat at; 0: 100 */
    int heartbeat_rate;    /* node heartbeats a second the period is sized for (head/nodes.c:
                              the period doubles while the live nodes would send more); 0: 20000 */
    int dead_after_ms;     /* a silent node or driver is dead after this long without a heartbeat
                              (only time the head itself ran counts); 0: 10000. A process that
                              ends is seen at once by the death watch (head/watch.h) */
    int watch_port;        /* the death-watch port, on host; 0: ephemeral */
    int ready_fd;          /* "listening on H:P\n" is written here once serving; -1: stdout */
    int watch_fd;          /* the head exits when this fd reaches EOF (its parent died); -1: none */
    const char *state_dir; /* KV, jobs and placement groups kept in DIR/head.wal (head/state.c)
                              and loaded at start; NULL: kept in memory only */
    int dashboard_port;    /* the read-only HTTP endpoint (/metrics, /api/...: head/http.h)'s
                              port; 0: none; -1: a free one (logged) */
    const char *dashboard_host; /* its bind address; NULL: 127.0.0.1 */
    int restarts;               /* times a supervisor started the head again (the metrics) */
    const char *restart_reason; /* why the supervisor started it again (the events); NULL */
    ct_head_limits limits;      /* the tables' limits (zeros: the defaults) */
} ct_head_opts;

struct ct__rid;
typedef struct head ct__head;

/* ---- a head without a loop, for the fuzz targets (fuzz/fuzz_envelope.c) ----
 * new_detached: a head whose replies go to sock (borrowed; a ROUTER bound nowhere drops them),
 * with its object directory; NULL when out of memory. handle_bytes: the bytes of one
 * message from rid, decoded with the serving loop's caps and refused or dispatched as the
 * loop does; returns the decode's result (0 or CT_EPROTO). destroy_detached: frees the tables
 * (not sock) and clears *h. */
ct__head *ct__head_new_detached(void *sock);
int ct__head_handle_bytes(ct__head *h, const struct ct__rid *rid, const void *data, size_t len);
void ct__head_destroy_detached(ct__head **h);

/* Serves until SIGTERM/SIGINT or watch_fd EOF. Returns 0, or a negative CT_E* code when it
 * cannot start (bad host, port in use), with the reason in ct_last_error(). */
int ct__head_run(const ct_head_opts *opts);

/* ct-head --supervise (head/supervise.c): runs ct-head with argv (less --supervise) as a child
 * and starts it again whenever it ends, until SIGTERM/SIGINT. The exit code for main. */
int ct__head_supervise(int argc, char **argv);

#endif
