/* head/reply.c — how every handler answers: a reply to a peer, an Ok, a refusal (an Error naming
 * the field, and a log line, rate-limited so that a flood is counted, not logged line by line),
 * and the ownership rule shared by the handlers (ct__head_may_change). Everything the head's
 * files send goes through here; none of it calls back into the loop (loop.c). */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>
#include "common/auth.h"
#include "common/common.h"
#include "head/head_internal.h"
#include "proto/msg.h"

int ct__head_send(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    int rc = ct__msg_send(h->sock, rid, e, ZMQ_DONTWAIT);
    if (rc)
        CT_LOG(CT_LOG_WARN, "head", "send %s: %s", ct__msg_body_name(e->body_case),
               ct_last_error());
    return rc;
}

void ct__head_ok(head *h, const ct__rid *rid, uint64_t req)
{
    Ct__Envelope e;
    Ct__Ok ok = CT__OK__INIT;
    ct__env_init(&e, req, "head", 0);
    e.body_case = CT__ENVELOPE__BODY_OK;
    e.ok = &ok;
    ct__head_send(h, rid, &e);
}

/* A peer's string made fit for a log line: printable ASCII, at most cap - 1 bytes. */
static const char *printable(const char *s, char *buf, size_t cap)
{
    size_t i = 0;
    for (; s && s[i] && i + 1 < cap; i++)
        buf[i] = (unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x7f ? s[i] : '?';
    buf[i] = 0;
    return buf;
}

void ct__head_flush_refusals(head *h)
{
    if (h->refuse_unlogged)
        CT_LOG(CT_LOG_WARN, "head", "refused %d more messages (not logged one by one)",
               h->refuse_unlogged);
    h->refuse_window = ct__now_ms();
    h->refuse_logged = h->refuse_unlogged = 0;
}

void ct__head_refuse(ct__head *h, const ct__rid *rid, const Ct__Envelope *e, int code,
                     const char *field, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (rid && rid->len)
        ct__msg_send_error(h->sock, rid, e ? e->req_id : 0, "head", code, field ? field : "", "%s",
                           msg);
    if (ct__now_ms() - h->refuse_window >= 1000)
        ct__head_flush_refusals(h);
    if (h->refuse_logged == REFUSALS_LOGGED) {
        h->refuse_unlogged++;
        return;
    }
    h->refuse_logged++;
    char who[80], text[600];
    CT_LOG(CT_LOG_WARN, "head", "refused %s from %s: %s",
           e ? ct__msg_body_name(e->body_case) : "a message",
           printable(e && e->sender && *e->sender ? e->sender : "(unnamed peer)", who, sizeof who),
           printable(msg, text, sizeof text));
}

bool ct__head_may_change(const char *owner, const char *job)
{
    return !owner[0] || ct__token_eq(owner, job);
}
