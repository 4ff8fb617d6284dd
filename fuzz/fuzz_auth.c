/* fuzz/fuzz_auth.c — libFuzzer target: the raw ports' challenge-response (common/auth.c) on
 * arbitrary bytes, alone and inside the actor call port's reader (actor/zmtp.c: the states
 * S_SAUTH1, S_SAUTH2, S_CWAIT), with a fixed cluster secret (ct__auth_set).
 *
 * Input: [mode: 1 byte][rest]. mode % 5:
 *   0  the four steps alone: C1 = rest[0,36) to server_answer, C2 = rest[36,68) to
 *      server_check, S1 = rest[68,136) to a fresh client's client_finish (short parts are
 *      zero-padded);
 *   1  rest as what a caller sends an actor's server (S_SAUTH1 first);
 *   2  an honest caller first (C1, then the C2 that answers the server's S1), then rest: the
 *      greeting and frames behind a passed handshake;
 *   3  rest as what an actor sends a driver's client (S_CWAIT first);
 *   4  an honest actor first (the S1 that answers the client's C1), then rest.
 * Each connection runs on one end of a socketpair; the other end is drained after each parse
 * (what the reader writes: S1, C2, greetings, PONGs). Complete messages go through the
 * envelope decoder as the actor's server does. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actor/zmtp.h"
#include "common/auth.h"
#include "proto/msg.h"

#define FUZZ_MAX_INPUT (64 << 10)

static void drain(int fd, uint8_t *keep, size_t want)
{
    uint8_t sink[4096];
    ssize_t k;
    if (keep && want) { /* the first want bytes are wanted (the peer's handshake message) */
        size_t got = 0;
        while (got < want && (k = recv(fd, keep + got, want - got, MSG_DONTWAIT)) > 0)
            got += (size_t)k;
    }
    while ((k = recv(fd, sink, sizeof sink, MSG_DONTWAIT)) > 0)
        ;
}

/* Appends b to c's read buffer, as ct__zconn_fill would; -1 when out of memory. */
static int append(ct__zconn *c, const uint8_t *b, size_t n)
{
    if (c->len + n > c->cap) {
        size_t cap = c->len + n;
        uint8_t *nb = realloc(c->buf, cap ? cap : 1);
        if (!nb)
            return -1;
        c->buf = nb;
        c->cap = cap;
    }
    if (n)
        memcpy(c->buf + c->len, b, n);
    c->len += n;
    return 0;
}

/* Appends b and parses all it can; -1 once the reader refused the peer. */
static int feed(ct__zconn *c, int peer, const uint8_t *b, size_t n)
{
    if (append(c, b, n))
        return -1;
    for (;;) {
        const uint8_t *msg = NULL;
        size_t len = 0;
        int r = ct__zconn_parse(c, &msg, &len);
        drain(peer, NULL, 0);
        if (r < 0)
            return -1;
        if (r == 0)
            return 0;
        if (r == 1) {
            Ct__Envelope *e = NULL;
            ct__msg_decode(msg, len, &e, "fuzz");
            ct__msg_free(e);
        }
    }
}

static void steps(const uint8_t *data, size_t size)
{
    uint8_t in[CT_AUTH_C1_LEN + CT_AUTH_C2_LEN + CT_AUTH_S1_LEN] = {0};
    memcpy(in, data, size < sizeof in ? size : sizeof in);
    uint8_t s1[CT_AUTH_S1_LEN], st[CT_AUTH_STATE_LEN], c1[CT_AUTH_C1_LEN], c2[CT_AUTH_C2_LEN];
    if (!ct__auth_server_answer(in, s1, st))
        ct__auth_server_check(st, in + CT_AUTH_C1_LEN);
    if (!ct__auth_client_start(c1, st))
        ct__auth_client_finish(st, in + CT_AUTH_C1_LEN + CT_AUTH_C2_LEN, c2);
}

static void conn(int mode, const uint8_t *data, size_t size)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
        return;
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    ct__zconn c;
    memset(&c, 0, sizeof c);
    c.fd = -1;
    bool server = mode <= 2;
    if (ct__zconn_start(&c, sv[0], server)) {
        close(sv[0]);
        close(sv[1]);
        return;
    }
    uint8_t c1[CT_AUTH_C1_LEN], s1[CT_AUTH_S1_LEN], c2[CT_AUTH_C2_LEN], st[CT_AUTH_STATE_LEN];
    if (mode == 2) { /* the caller's side, played honestly: C1, then the C2 answering S1 */
        const uint8_t *msg;
        size_t len;
        if (ct__auth_client_start(c1, st) || append(&c, c1, sizeof c1) ||
            ct__zconn_parse(&c, &msg, &len) != 0)
            goto out;
        uint8_t got[CT_AUTH_S1_LEN] = {0};
        drain(sv[1], got, sizeof got);
        if (ct__auth_client_finish(st, got, c2) || feed(&c, sv[1], c2, sizeof c2))
            goto out;
    }
    if (mode == 4) { /* the actor's side, played honestly: answer the client's C1 */
        uint8_t got[CT_AUTH_C1_LEN] = {0};
        drain(sv[1], got, sizeof got);
        if (!ct__auth_server_answer(got, s1, st))
            feed(&c, sv[1], s1, sizeof s1);
    }
    feed(&c, sv[1], data, size);
out:
    ct__zconn_close(&c);
    close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        static const uint8_t secret[CT_SECRET_LEN] = "ct-fuzz-secret-0123456789abcdef";
        ct__auth_set(secret);
        ready = 1;
    }
    if (size < 1 || size > FUZZ_MAX_INPUT)
        return 0;
    int mode = data[0] % 5;
    if (mode == 0)
        steps(data + 1, size - 1);
    else
        conn(mode, data + 1, size - 1);
    return 0;
}
