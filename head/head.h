/* head/head.h — the head's entry point (internal): ct-head's main and the embedded cluster of
 * ct_init(NULL) both call ct__head_run. Not public API. */
#ifndef CT_HEAD_HEAD_H
#define CT_HEAD_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ct_head_opts {
    const char *host;  /* bind address; NULL: 127.0.0.1 */
    int port;          /* 0: ephemeral */
    int heartbeat_ms;  /* period nodes heartbeat at; 0: 100 */
    int dead_after_ms; /* a silent node or driver is dead after this long without a heartbeat
                          (only time the head itself ran counts); 0: 10000. A process that
                          ends is seen at once by the death watch (head/watch.h) */
    int watch_port;    /* the death-watch port, on host; 0: ephemeral */
    int ready_fd;      /* "listening on H:P\n" is written here once serving; -1: stdout */
    int watch_fd;      /* the head exits when this fd reaches EOF (its parent died); -1: none */
} ct_head_opts;

/* ---- extension point for other modules' messages (e.g. the object directory) ----
 * A module registers, before ct__head_run, a handler for envelope body cases the head does not
 * handle itself, and optionally a hook told when a node is declared dead. Handlers run on the
 * head's thread, must not block, answer with ct__head_send, and borrow e (freed after).
 * Registration is process-wide and not thread-safe (call it from main before serving). */
struct ct__rid;
struct Ct__Envelope;
typedef struct head ct__head;
typedef void (*ct__head_handler)(ct__head *h, const struct ct__rid *rid, struct Ct__Envelope *e,
                                 void *user);
typedef void (*ct__head_node_hook)(ct__head *h, const char *node_id, void *user);
/* body_case: a Ct__Envelope__BodyCase value. CT_EEXIST if taken, CT_ENOSPC past 32. */
int ct__head_add_handler(int body_case, ct__head_handler fn, void *user);
int ct__head_add_node_dead_hook(ct__head_node_hook fn, void *user);
/* ---- authority (head.c's header says who may say what) ----
 * node_speaks: node_id is a live registered node and e carries its token, so e speaks for it
 * (the head gave that token to the node alone). head_job: the job token e acts for; a message
 * that creates or changes shared state must carry one, and when e has none the sender is
 * refused (field "token") and NULL returned. may_change: whether job may change what owner
 * (a job token; "" for no job) owns. refuse: an Error (code, field, message) to the sender,
 * and a log line (at most a few a second: a flood is counted, not logged line by line);
 * e may be NULL. */
bool ct__head_node_speaks(ct__head *h, const char *node_id, const struct Ct__Envelope *e);
const char *ct__head_job(ct__head *h, const struct ct__rid *rid, const struct Ct__Envelope *e);
bool ct__head_may_change(const char *owner, const char *job);
void ct__head_refuse(ct__head *h, const struct ct__rid *rid, const struct Ct__Envelope *e, int code,
                     const char *field, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* fn runs on the head's thread every tick (a few ms to 20 ms), for a module's timeouts. */
typedef void (*ct__head_tick_hook)(ct__head *h, void *user);
int ct__head_add_tick_hook(ct__head_tick_hook fn, void *user);
/* Sends e to the peer rid (a reply: set e->req_id to the request's). 0 or a CT_E* code. */
int ct__head_send(ct__head *h, const struct ct__rid *rid, struct Ct__Envelope *e);

/* The object directory (objdir.c): registers its handlers and hooks (idempotent; ct__head_run
 * calls it). ct__objdir_holders fills addrs with up to cap transfer addresses of live nodes
 * holding id (borrowed until the next message is handled) and returns how many. */
int ct__objdir_install(void);
int ct__objdir_holders(const uint8_t *id, size_t len, char **addrs, int cap);
void ct__objdir_reset(void);
/* Store facts of a node for the status reply (zeros and "" when it has no shard). */
void ct__objdir_node_usage(const char *node_id, const char **xfer_address, uint64_t *capacity,
                           uint64_t *objects, uint64_t *bytes);

/* ---- a head without a loop, for the fuzz targets (fuzz/fuzz_envelope.c) ----
 * new_detached: a head whose replies go to sock (borrowed; a ROUTER bound nowhere drops them),
 * with the object directory installed; NULL when out of memory. handle_bytes: the bytes of one
 * message from rid, decoded with the serving loop's caps and refused or dispatched as the
 * loop does; returns the decode's result (0 or CT_EPROTO). destroy_detached: frees the tables
 * (not sock) and clears *h. Not thread-safe (the object directory is process-wide). */
ct__head *ct__head_new_detached(void *sock);
int ct__head_handle_bytes(ct__head *h, const struct ct__rid *rid, const void *data, size_t len);
void ct__head_destroy_detached(ct__head **h);

/* Serves until SIGTERM/SIGINT or watch_fd EOF. Returns 0, or a negative CT_E* code when it
 * cannot start (bad host, port in use), with the reason in ct_last_error(). */
int ct__head_run(const ct_head_opts *opts);

#endif
