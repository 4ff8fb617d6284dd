/* head/head.h — the head's entry point (internal): ct-head's main and the embedded cluster of
 * ct_init(NULL) both call ct__head_run. Not public API. */
#ifndef CT_HEAD_HEAD_H
#define CT_HEAD_HEAD_H

typedef struct ct_head_opts {
    const char *host;  /* bind address; NULL: 127.0.0.1 */
    int port;          /* 0: ephemeral */
    int heartbeat_ms;  /* period nodes heartbeat at; 0: 100 */
    int dead_after_ms; /* node dead after this long without a heartbeat; 0: 1000 */
    int ready_fd;      /* "listening on H:P\n" is written here once serving; -1: stdout */
    int watch_fd;      /* the head exits when this fd reaches EOF (its parent died); -1: none */
} ct_head_opts;

/* Serves until SIGTERM/SIGINT or watch_fd EOF. Returns 0, or a negative CT_E* code when it
 * cannot start (bad host, port in use), with the reason in ct_last_error(). */
int ct__head_run(const ct_head_opts *opts);

#endif
