/* common/common.h — internal helpers every ct module uses: error reporting, logging, clocks.
 *
 * Not public API: embedders include only the headers under include/ct/. Prefix ct__ marks internal
 * symbols. */
#ifndef CT_COMMON_H
#define CT_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdbool.h>
#include "ct/error.h"

/* ZeroMQ passes a zero-copy buffer to its I/O thread, which calls the buffer's free function,
 * through atomics ThreadSanitizer cannot see (libzmq is not instrumented). CT__TSAN_RELEASE(p)
 * before the buffer p is handed to zmq_msg_init_data and CT__TSAN_ACQUIRE(p) first thing in the
 * free function tell TSan that order (`make tsan`, gcc); elsewhere they do nothing. */
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define CT__TSAN_RELEASE(p) __tsan_release((void *)(p))
#define CT__TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#else
#define CT__TSAN_RELEASE(p) ((void)(p))
#define CT__TSAN_ACQUIRE(p) ((void)(p))
#endif

#ifdef __cplusplus /* the CUDA backend's .cu files (trainer/cuda) */
extern "C" {
#endif

/* Records a detailed message for ct_last_error() on this thread and returns code, so that
 * `return ct__error(CT_EINVAL, "field %s: ...", name);` both reports and fails. */
int ct__error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears this thread's last error message. */
void ct__clear_error(void);

/* Logging. Levels: 0 error, 1 warn, 2 info, 3 debug. CT_LOG_LEVEL=error|warn|info|debug
 * (default warn). The level is checked before the arguments are evaluated. Lines go to stderr
 * as "TIMESTAMP LEVEL component[who]: message"; who is set per process by ct__log_set_who. */
enum { CT_LOG_ERROR = 0, CT_LOG_WARN = 1, CT_LOG_INFO = 2, CT_LOG_DEBUG = 3 };
extern int ct__log_level;
void ct__log_init(void);
void ct__log_set_who(const char *who);
void ct__log(int level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define CT_LOG(level, component, ...)                                                              \
    do {                                                                                           \
        if ((level) <= ct__log_level)                                                              \
            ct__log((level), (component), __VA_ARGS__);                                            \
    } while (0)

/* Edit distance (optimal string alignment, case-insensitive) of two short names, capped at 99
 * (strdist.c); and the largest distance a "did you mean" suggestion for name accepts (1 for
 * names of up to 4 characters, 2 up to 8, else 3). */
int ct__edit_distance(const char *a, const char *b);
int ct__edit_limit(const char *name);

/* Monotonic clock in nanoseconds / milliseconds. */
int64_t ct__now_ns(void);
int64_t ct__now_ms(void);

/* A memory size such as "512M": a number of bytes, or a number with K/M/G (binary units,
 * optionally followed by B or iB), at least 1 MiB and at most 1e15 bytes. 0 and *bytes set,
 * or CT_EINVAL (no message: the caller names the option or key). */
int ct__parse_size(const char *s, uint64_t *bytes);

/* Hashing (hash.c). fnv1a64: 64-bit FNV-1a of n bytes, the standard one (its values are
 * compared across processes). hash_words: the same scheme over n 64-bit words, multiplied by a
 * word-wide constant, folded so the low bits mix; for in-process tables only. */
uint64_t ct__fnv1a64(const void *p, size_t n);
uint64_t ct__hash_words(const uint64_t *w, size_t n);

/* Writes the n bytes as 2n lower-case hex digits and a NUL into out (2n + 1 chars); returns
 * out (hex.c). */
char *ct__hex(char *out, const void *bytes, size_t n);

/* Whole buffers out (io.c). write_all: write(2) to a file or pipe. send_all: send(2) to a
 * socket with MSG_NOSIGNAL | flags; on a non-blocking socket with no room it waits up to
 * wait_ms for some (0: it does not wait). Both: 0, or -1 with errno set (EIO when a call
 * made no progress, ETIMEDOUT when the wait ran out); no message is recorded. */
int ct__write_all(int fd, const void *buf, size_t n);
int ct__send_all(int fd, const void *buf, size_t n, int flags, int wait_ms);

/* Runs fn in the calling thread when it ends (thread_exit.c), last registered first; each fn
 * once however often registered (a per-thread cache registers its release at its first use).
 * Not at the main thread's exit. 0, or CT_ENOMEM (message set). */
int ct__at_thread_exit(void (*fn)(void));

/* The address this host's links listen on, for peers to dial (host.c): $CT_COMM_HOST, else the
 * first non-loopback IPv4 address that is up, else 127.0.0.1. */
void ct__listen_host(char *out, size_t cap);

/* Dials "host:port" (IPv4) over TCP, retrying while it is refused (the peer's listener may not be
 * up yet) until deadline (ct__now_ns). TCP_NODELAY; bufsize > 0 sets both socket buffers before
 * the handshake. The socket is blocking. who prefixes the messages. 0 and *out (-1 on failure),
 * or CT_ETIMEDOUT, CT_EIO (resolve), CT_EPROTO (no port), a negative errno. */
int ct__tcp_connect(const char *hostport, int bufsize, int64_t deadline, const char *who, int *out);

/* Secrets (token.c): 128-bit random tokens as CT_TOKEN_LEN lower-case hex digits + NUL.
 * new: 0, or a negative errno when getrandom fails (message set). valid: exactly that format.
 * eq: both valid and equal, compared in constant time (a token is a credential). */
#define CT_TOKEN_LEN 32
int ct__token_new(char out[CT_TOKEN_LEN + 1]);
bool ct__token_valid(const char *t);
bool ct__token_eq(const char *a, const char *b);

/* Defensive branches (SQLite's ALWAYS/NEVER): conditions believed always/never true. */
#define CT_ALWAYS(x) (__builtin_expect(!!(x), 1))
#define CT_NEVER(x) (__builtin_expect(!!(x), 0))

#define CT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#ifdef __cplusplus
}
#endif
#endif
