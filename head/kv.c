/* head/kv.c — the KV store: keys owned by the job that wrote them, gets that wait for a key
 * (rendezvous), and the waiters' table that placement group waits share. Not in here: the
 * driver's side (actor/api_cluster.c). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "head/head_internal.h"
#include "proto/msg.h"

static kv *kv_find(head *h, const char *key)
{
    for (int i = 0; i < h->nkv; i++)
        if (!strcmp(h->kv[i].key, key))
            return &h->kv[i];
    return NULL;
}

static void reply_kv(head *h, const ct__rid *rid, uint64_t req, kv *k)
{
    Ct__Envelope o;
    Ct__KvGetReply r = CT__KV_GET_REPLY__INIT;
    ct__env_init(&o, req, "head", 0);
    r.value.data = k->val;
    r.value.len = k->len;
    o.body_case = CT__ENVELOPE__BODY_KV_GET_REPLY;
    o.kv_get_reply = &r;
    ct__head_send(h, rid, &o);
}

static void kv_remove(head *h, kv *k)
{
    h->kv_bytes -= strlen(k->key) + 1 + k->len;
    free(k->key);
    free(k->val);
    *k = h->kv[--h->nkv];
}

/* KV ownership. A key belongs to the job that created it (Envelope.token: a driver's token,
 * which the actors it created share). Every peer may read any key and wait for it; only the
 * owning job may overwrite or delete it, so one job cannot move another's rendezvous addresses
 * or error reports. When the owning job's driver is gone (its heartbeats stopped, driver_gone)
 * its keys are released: they stay readable, any job may change them, and the next job that
 * writes one owns it. */
/* kv_put's own fields: the key and the value's size (run before the token rule) */
bool ct__head_check_kv_put(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    Ct__KvPut *p = e->kv_put;
    if (!p->key || !*p->key || strlen(p->key) >= MAX_KV_KEY) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "kv_put.key",
                        "kv_put.key: empty or longer than %d bytes", MAX_KV_KEY - 1);
        return false;
    }
    if (p->value.len > MAX_KV_VALUE) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "kv_put.value", "kv_put.value: %zu bytes, at most %d",
                        p->value.len, MAX_KV_VALUE);
        return false;
    }
    return true;
}

void ct__head_on_kv_put(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    Ct__KvPut *p = e->kv_put;
    const char *job = f->job; /* RULE_JOB */
    kv *k = kv_find(h, p->key);
    if (k && !ct__head_may_change(k->job, job)) {
        ct__head_refuse(h, rid, e, HEAD_EPERM, "kv_put.key",
                        "kv_put.key: %.200s belongs to another job", p->key);
        return;
    }
    size_t klen = strlen(p->key) + 1;
    size_t after = h->kv_bytes + p->value.len + (k ? 0 : klen) - (k ? k->len : 0);
    if ((!k && h->nkv == h->lim.kv_keys) || after > MAX_KV_BYTES) {
        ct__head_refuse(h, rid, e, CT_ENOSPC, "kv_put",
                        "kv_put: the KV holds %d keys and %zu bytes (at most %d and %d)", h->nkv,
                        h->kv_bytes, h->lim.kv_keys, MAX_KV_BYTES);
        return;
    }
    void *val = malloc(p->value.len ? p->value.len : 1);
    if (!val) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "kv_put.value", "kv_put.value: out of memory");
        return;
    }
    if (p->value.len) /* an empty value has data NULL (found by fuzz/fuzz_envelope.c) */
        memcpy(val, p->value.data, p->value.len);
    if (!k) {
        if (h->nkv == h->cap_kv) {
            int cap = h->cap_kv ? 2 * h->cap_kv : 64;
            kv *nk = realloc(h->kv, cap * sizeof *nk);
            if (nk) {
                h->kv = nk;
                h->cap_kv = cap;
            }
        }
        char *key = h->nkv < h->cap_kv ? strdup(p->key) : NULL;
        if (!key) {
            free(val);
            REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "kv_put", "kv_put: out of memory");
            return;
        }
        k = &h->kv[h->nkv++];
        k->key = key;
        k->val = NULL;
        k->len = 0;
        h->kv_bytes += klen;
    }
    free(k->val);
    h->kv_bytes += p->value.len - k->len;
    k->val = val;
    k->len = p->value.len;
    snprintf(k->job, sizeof k->job, "%s", job); /* a released key is taken over */
    ct__head_state_kv_put(h, k->key, k->val, k->len, k->job);
    ct__head_ok(h, rid, e->req_id);
    for (int i = 0; i < h->nw; i++) {
        if (h->w[i].kind == W_KV && !strcmp(h->w[i].key, k->key)) {
            reply_kv(h, &h->w[i].rid, h->w[i].req_id, k);
            free(h->w[i].key);
            h->w[i] = h->w[--h->nw];
            i--;
        }
    }
}

/* CT_ENOSPC when MAX_WAITERS wait already, CT_ENOMEM. */
int ct__head_add_waiter(head *h, waiter *w)
{
    if (h->nw == MAX_WAITERS)
        return CT_ENOSPC;
    if (h->nw == h->cap_w) {
        int cap = h->cap_w ? 2 * h->cap_w : 64;
        waiter *nw = realloc(h->w, cap * sizeof *nw);
        if (!nw)
            return CT_ENOMEM;
        h->w = nw;
        h->cap_w = cap;
    }
    h->w[h->nw++] = *w;
    return 0;
}

void ct__head_refuse_waiter(head *h, const ct__rid *rid, Ct__Envelope *e, int rc, const char *field)
{
    if (rc == CT_ENOSPC)
        ct__head_refuse(h, rid, e, rc, field, "%s: %d requests wait already, the head's limit",
                        field, MAX_WAITERS);
    else
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
}

void ct__head_on_kv_get(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    Ct__KvGet *g = e->kv_get;
    if (!g->key || !*g->key || strlen(g->key) >= MAX_KV_KEY) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "kv_get.key",
                        "kv_get.key: empty or longer than %d bytes", MAX_KV_KEY - 1);
        return;
    }
    kv *k = kv_find(h, g->key);
    if (k) {
        reply_kv(h, rid, e->req_id, k);
        return;
    }
    if (g->wait_ms <= 0) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "kv_get.key", "kv_get.key: no key %s", g->key);
        return;
    }
    waiter w = {.kind = W_KV,
                .rid = *rid,
                .req_id = e->req_id,
                .deadline = ct__now_ms() + g->wait_ms,
                .key = strdup(g->key)};
    int rc = w.key ? ct__head_add_waiter(h, &w) : CT_ENOMEM;
    if (rc) {
        free(w.key);
        ct__head_refuse_waiter(h, rid, e, rc, "kv_get.wait_ms");
    }
}

void ct__head_on_kv_del(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    kv *k = kv_find(h, e->kv_del->key ? e->kv_del->key : "");
    if (!k) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "kv_del.key", "kv_del.key: no key %.200s",
                  e->kv_del->key);
        return;
    }
    const char *job = f->job; /* RULE_JOB */
    if (!ct__head_may_change(k->job, job)) {
        ct__head_refuse(h, rid, e, HEAD_EPERM, "kv_del.key",
                        "kv_del.key: %.200s belongs to another job", k->key);
        return;
    }
    ct__head_state_kv_del(h, k->key);
    kv_remove(h, k);
    ct__head_ok(h, rid, e->req_id);
}

void ct__head_kv_set(head *h, const char *key, const void *val, size_t len, const char *job)
{
    kv *k = kv_find(h, key);
    void *v = malloc(len ? len : 1);
    if (!v)
        return;
    if (len)
        memcpy(v, val, len);
    if (!k) {
        if (h->nkv == h->lim.kv_keys || h->nkv == h->cap_kv) {
            int cap = h->cap_kv ? 2 * h->cap_kv : 64;
            kv *nk = h->nkv < h->lim.kv_keys ? realloc(h->kv, cap * sizeof *nk) : NULL;
            if (!nk) {
                free(v);
                return;
            }
            h->kv = nk;
            h->cap_kv = cap;
        }
        char *kc = strdup(key);
        if (!kc) {
            free(v);
            return;
        }
        k = &h->kv[h->nkv++];
        k->key = kc;
        k->val = NULL;
        k->len = 0;
        h->kv_bytes += strlen(key) + 1;
    }
    free(k->val);
    h->kv_bytes += len - k->len;
    k->val = v;
    k->len = len;
    snprintf(k->job, sizeof k->job, "%s", job);
}

void ct__head_kv_unset(head *h, const char *key)
{
    kv *k = kv_find(h, key);
    if (k)
        kv_remove(h, k);
}
