/* common/auth.h — the cluster secret, and the two ways a ct process proves that it holds it.
 *
 * The secret is 32 random bytes, kept in a file of its owner's (64 hex digits, mode 0600) that
 * `ctup up` writes, or drawn in memory by ct_init(NULL) for an embedded cluster. Every ct
 * process of a cluster holds the same secret: ct-head and ct-node read it from --secret-file or
 * CT_SECRET_FILE, drivers from CT_SECRET_FILE (or ct_init_opts.secret_file), actors get it from
 * their node through an inherited pipe (never in the environment).
 *
 * From it come, by keyed BLAKE2b with a fixed label each:
 * - the ZeroMQ CURVE keys. Every ZeroMQ server socket (the head's, each node's transfer
 *   server) is a CURVE server with the derived server key; every client uses the derived
 *   server public key and one derived client key pair, and a ZAP handler in the server's
 *   process accepts only that client key. A peer without the secret cannot finish the
 *   handshake, and the traffic is encrypted and authenticated (CurveZMQ).
 * - the key of a challenge-response that starts each raw TCP connection (the object data port,
 *   the actor call port, the collective ring). The client speaks first, so that a client never
 *   waits for a server that is itself waiting (the collective ring connects in a circle):
 *       C1  client -> server  "CTA1" nonce_c(32)                                   36 bytes
 *       S1  server -> client  "CTA1" nonce_s(32) HMAC(k, "ct-srv" nonce_c nonce_s)  68 bytes
 *       C2  client -> server  HMAC(k, "ct-cli" nonce_c nonce_s)                    32 bytes
 *   HMAC-SHA256 with fresh random nonces on both sides, so no answer can be replayed, and the
 *   labels differ, so the server's answer is no client proof (no reflection). The client checks
 *   S1 before it sends C2 or anything else; the server reads nothing but C2 until C2 checked
 *   out. The bytes after it are not encrypted (they are checked by CRC for corruption only):
 *   see docs/SECURITY.md.
 *
 * CT_AUTH=off in the environment of every process of a cluster turns both off (to measure what
 * they cost); a process with it off cannot talk to one with it on.
 *
 * The secret is process-wide state, set once at start-up (like the log sink). Thread-safe. */
#ifndef CT_COMMON_AUTH_H
#define CT_COMMON_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CT_SECRET_LEN 32
#define CT_AUTH_C1_LEN 36
#define CT_AUTH_S1_LEN 68
#define CT_AUTH_C2_LEN 32
#define CT_AUTH_STATE_LEN 64 /* nonce_c, nonce_s: what a side keeps between its steps */

/* ---- the secret ---- */

/* Writes a new random secret to path: created exclusively (an existing file is CT_EEXIST),
 * mode 0600, fsync'd. 0 or a CT_E* code naming the path. */
int ct__secret_file_create(const char *path);
/* Reads a secret file: a regular file of this user's, not readable or writable by group or
 * others, holding 64 hex digits (and an optional newline). 0, or CT_EACCES / CT_EINVAL / CT_EIO
 * with a message naming the path and what is wrong. */
int ct__secret_file_read(const char *path, uint8_t out[CT_SECRET_LEN]);

/* Makes the secret in path (NULL: $CT_SECRET_FILE) this process's. CT_EACCES when neither
 * names a file (the message says how to give one). */
int ct__auth_load(const char *path);
/* Makes s this process's secret. */
void ct__auth_set(const uint8_t s[CT_SECRET_LEN]);
/* Draws a random secret unless one is set (an embedded cluster; tests that fork). */
int ct__auth_ensure(void);
bool ct__auth_has_secret(void);
/* CT_AUTH=off was set: no CURVE, no challenge-response. */
bool ct__auth_off(void);
/* A pipe's read end holding the secret, for a child to inherit (close-on-exec set: the
 * child clears it); ct__auth_load_fd reads it there and closes it. -1 / CT_E* on error. */
int ct__auth_secret_pipe(void);
int ct__auth_load_fd(int fd);

/* ---- the head's HTTP endpoint (head/http.c) ----
 * Its bearer token: BLAKE2b-256 keyed with the secret of the label "ct dashboard token v1", as
 * 64 lower-case hex digits. Whoever holds the secret can compute it; knowing it gives nothing
 * but the endpoint's read-only pages (the secret cannot be computed back from it). */
#define CT_DASH_TOKEN_LEN 64
/* Writes the token and a NUL into out; CT_EACCES when this process has no secret. */
int ct__auth_dashboard_token(char out[CT_DASH_TOKEN_LEN + 1]);
/* Whether tok (len bytes, not NUL-terminated) is the token; compared in constant time. False
 * without a secret. */
bool ct__auth_dashboard_token_ok(const char *tok, size_t len);

/* ---- ZeroMQ CURVE ---- */

/* Before bind: makes sock a CURVE server with the cluster's key (ZAP domain "ct"). */
int ct__auth_zmq_server(void *sock);
/* Before connect: makes sock a CURVE client of the cluster's servers. */
int ct__auth_zmq_client(void *sock);
/* Starts (or, already running in zctx, takes another reference to) the ZAP handler thread of
 * the ZeroMQ context zctx, which accepts only the cluster's client key. ct__auth_zap_stop drops
 * a reference; the last one ends the thread. Stop before zmq_ctx_term (it holds a socket). */
int ct__auth_zap_start(void *zctx);
void ct__auth_zap_stop(void *zctx);

/* ---- the raw ports' challenge-response ---- */

/* The steps, for event-driven peers (actor/zmtp.c, the collective ring) and the fuzzers; each
 * returns 0, or CT_EACCES for a message that fails its check (or CT_E* for no secret). */
int ct__auth_client_start(uint8_t c1[CT_AUTH_C1_LEN], uint8_t state[CT_AUTH_STATE_LEN]);
int ct__auth_client_finish(uint8_t state[CT_AUTH_STATE_LEN], const uint8_t s1[CT_AUTH_S1_LEN],
                           uint8_t c2[CT_AUTH_C2_LEN]);
int ct__auth_server_answer(const uint8_t c1[CT_AUTH_C1_LEN], uint8_t s1[CT_AUTH_S1_LEN],
                           uint8_t state[CT_AUTH_STATE_LEN]);
int ct__auth_server_check(const uint8_t state[CT_AUTH_STATE_LEN], const uint8_t c2[CT_AUTH_C2_LEN]);

/* The whole exchange on a connected socket (blocking or not), within timeout_ms. 0, or
 * CT_EACCES (wrong secret), CT_ETIMEDOUT, CT_ECONNRESET, with a message naming what. Nothing
 * to do (0) when auth is off. */
int ct__auth_accept(int fd, int timeout_ms);
int ct__auth_connect(int fd, int timeout_ms);

#endif
