/* actor/api_cluster.c — the cluster as the driver sees it, through head requests: events
 * (subscriptions and the queue ct__client_drain fills), the KV store, placement groups, and
 * the cluster's resources. Not in here: the head's side (head/). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>
#include "actor/api_internal.h"
#include "actor/runtime.h"
#include "actor/zmtp.h"
#include "common/auth.h"
#include "common/common.h"
#include "head/head.h"
#include "objectstore/store.h"
#include "objectstore/transfer.h"
#include "proto/msg.h"

/* ---- events ---- */

int ct_events_subscribe(unsigned mask)
{
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__Subscribe s = CT__SUBSCRIBE__INIT;
    ct__env_init(&e, 0, ct__client.sender, 5000);
    s.mask = mask;
    e.body_case = CT__ENVELOPE__BODY_SUBSCRIBE;
    e.subscribe = &s;
    int rc = ct__client_request(&e, &rep, 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "subscribe");
    if (!rc)
        ct__client.sub_mask = mask;
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

int ct_events_next(ct_event *ev, int timeout_ms)
{
    if (!ev)
        return ct__error(CT_EINVAL, "ct_events_next: ev is NULL");
    LOCK();
    int rc = 0;
    int64_t until = ct__now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        if (ct__client.head)
            ct__client_drain(0, 0, NULL);
        if (ct__client.qn) {
            *ev = ct__client.q[ct__client.qh];
            ct__client.qh = (ct__client.qh + 1) % EVQ;
            ct__client.qn--;
            break;
        }
        int64_t left = until - ct__now_ms();
        if (left <= 0 || !ct__client.head) {
            rc = ct__error(CT_ETIMEDOUT, "ct_events_next: no event within %d ms", timeout_ms);
            break;
        }
        ct__client_sleep(-1, left);
    }
    UNLOCK();
    return rc;
}

/* ---- KV ---- */

int ct_kv_put(const char *key, const void *value, size_t len)
{
    if (!key || !*key || (len && !value))
        return ct__error(CT_EINVAL, "ct_kv_put: %s",
                         !key || !*key ? "key is empty" : "value is NULL");
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__KvPut p = CT__KV_PUT__INIT;
    ct__env_init(&e, 0, ct__client.sender, 10000);
    p.key = (char *)key;
    p.value.data = (uint8_t *)value;
    p.value.len = len;
    e.body_case = CT__ENVELOPE__BODY_KV_PUT;
    e.kv_put = &p;
    int rc = ct__client_request(&e, &rep, 10000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "kv_put");
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

int ct_kv_get(const char *key, void **value, size_t *len, int timeout_ms)
{
    if (!key || !*key || !value || !len)
        return ct__error(CT_EINVAL, "ct_kv_get: %s",
                         !key || !*key ? "key is empty" : "value or len is NULL");
    *value = NULL;
    *len = 0;
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__KvGet g = CT__KV_GET__INIT;
    ct__env_init(&e, 0, ct__client.sender, 0);
    g.key = (char *)key;
    g.wait_ms = timeout_ms > 0 ? timeout_ms : 0;
    e.body_case = CT__ENVELOPE__BODY_KV_GET;
    e.kv_get = &g;
    int rc = ct__client_request(&e, &rep, (timeout_ms > 0 ? timeout_ms : 0) + 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_KV_GET_REPLY, "kv_get");
    if (rc == CT_ENOENT && timeout_ms > 0)
        rc = CT_ETIMEDOUT;
    if (!rc) {
        size_t n = rep->kv_get_reply->value.len;
        *value = malloc(n ? n : 1);
        if (!*value) {
            rc = ct__error(CT_ENOMEM, "ct_kv_get: out of memory");
        } else {
            memcpy(*value, rep->kv_get_reply->value.data, n);
            *len = n;
        }
    }
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

int ct_kv_del(const char *key)
{
    if (!key || !*key)
        return ct__error(CT_EINVAL, "ct_kv_del: key is empty");
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__KvDel d = CT__KV_DEL__INIT;
    ct__env_init(&e, 0, ct__client.sender, 10000);
    d.key = (char *)key;
    e.body_case = CT__ENVELOPE__BODY_KV_DEL;
    e.kv_del = &d;
    int rc = ct__client_request(&e, &rep, 10000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "kv_del");
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

/* ---- placement groups and cluster view ---- */

int ct_placement_group_create(const ct_bundle *bundles, int n, ct_strategy strategy,
                              ct_placement_group **out)
{
    if (!out || !bundles || n <= 0 || n > 4096)
        return ct__error(CT_EINVAL, "ct_placement_group_create: need 1..4096 bundles and out");
    *out = NULL;
    Ct__Bundle *b = calloc(n, sizeof *b);
    Ct__Bundle **bp = calloc(n, sizeof *bp);
    Ct__Resource *r = calloc((size_t)n * 10, sizeof *r);
    Ct__Resource **rp = calloc((size_t)n * 10, sizeof *rp);
    ct_placement_group *pg = calloc(1, sizeof *pg);
    Ct__Envelope *rep = NULL;
    int rc = 0;
    LOCK();
    if (!b || !bp || !r || !rp || !pg) {
        rc = ct__error(CT_ENOMEM, "ct_placement_group_create: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        ct__bundle__init(&b[i]);
        b[i].n_resources = ct__client_fill_res(r + 10 * i, rp + 10 * i, bundles[i].cpu,
                                               bundles[i].gpu, bundles[i].custom, 8);
        b[i].resources = rp + 10 * i;
        bp[i] = &b[i];
    }
    Ct__Envelope e;
    Ct__PgCreate p = CT__PG_CREATE__INIT;
    ct__env_init(&e, 0, ct__client.sender, 10000);
    p.n_bundles = n;
    p.bundles = bp;
    p.strategy = strategy == CT_SPREAD ? CT__STRATEGY__SPREAD : CT__STRATEGY__PACK;
    e.body_case = CT__ENVELOPE__BODY_PG_CREATE;
    e.pg_create = &p;
    if ((rc = ct__client_request(&e, &rep, 10000)))
        goto out;
    if ((rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_PG_CREATE_REPLY, "pg_create")))
        goto out;
    snprintf(pg->id, sizeof pg->id, "%s", rep->pg_create_reply->pg_id);
    *out = pg;
    pg = NULL;
out:
    UNLOCK();
    ct__msg_free(rep);
    free(b);
    free(bp);
    free(r);
    free(rp);
    free(pg);
    return rc;
}

int ct_placement_group_wait(ct_placement_group *pg, int timeout_ms)
{
    if (!pg)
        return ct__error(CT_EINVAL, "ct_placement_group_wait: pg is NULL");
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__PgWait w = CT__PG_WAIT__INIT;
    ct__env_init(&e, 0, ct__client.sender, 0);
    w.pg_id = pg->id;
    w.wait_ms = timeout_ms > 0 ? timeout_ms : 0;
    e.body_case = CT__ENVELOPE__BODY_PG_WAIT;
    e.pg_wait = &w;
    int rc = ct__client_request(&e, &rep, (timeout_ms > 0 ? timeout_ms : 0) + 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "pg_wait");
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

int ct_placement_group_remove(ct_placement_group **ppg)
{
    if (!ppg || !*ppg)
        return ct__error(CT_EINVAL, "ct_placement_group_remove: pg is NULL");
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__PgRemove r = CT__PG_REMOVE__INIT;
    ct__env_init(&e, 0, ct__client.sender, 5000);
    r.pg_id = (*ppg)->id;
    e.body_case = CT__ENVELOPE__BODY_PG_REMOVE;
    e.pg_remove = &r;
    int rc = ct__client_request(&e, &rep, 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "pg_remove");
    ct__msg_free(rep);
    UNLOCK();
    free(*ppg);
    *ppg = NULL;
    return rc;
}

const char *ct_placement_group_id(const ct_placement_group *pg)
{
    return pg ? pg->id : "";
}

/* The head's status (nodes, actors, groups) into *rep, which the caller frees
 * (ct__msg_free); called with the API lock held. */
static int status_locked(Ct__Envelope **rep)
{
    Ct__Envelope e;
    Ct__Status s = CT__STATUS__INIT;
    ct__env_init(&e, 0, ct__client.sender, 5000);
    e.body_case = CT__ENVELOPE__BODY_STATUS;
    e.status = &s;
    int rc = ct__client_request(&e, rep, 5000);
    if (!rc)
        rc = ct__msg_expect(*rep, CT__ENVELOPE__BODY_STATUS_REPLY, "status");
    return rc;
}

int ct_cluster_nodes(ct_node_resources *out, int cap, int *n)
{
    if (!n || cap < 0 || (cap > 0 && !out))
        return ct__error(CT_EINVAL, "ct_cluster_nodes: %s", !n ? "n is NULL" : "bad out / cap");
    LOCK();
    Ct__Envelope *rep = NULL;
    int rc = status_locked(&rep);
    if (!rc) {
        int k = 0;
        for (size_t i = 0; i < rep->status_reply->n_nodes; i++) {
            Ct__NodeInfo *ni = rep->status_reply->nodes[i];
            if (!ni->alive || ni->draining) /* as ct_cluster_resources: takes no new actors */
                continue;
            if (k < cap) {
                ct_node_resources *o = &out[k];
                snprintf(o->node_id, sizeof o->node_id, "%s", ni->node_id);
                o->cpu_total = ct__res_get(ni->total, ni->n_total, "CPU");
                o->cpu_free = ct__res_get(ni->free, ni->n_free, "CPU");
                o->gpu_total = ct__res_get(ni->total, ni->n_total, "GPU");
                o->gpu_free = ct__res_get(ni->free, ni->n_free, "GPU");
            }
            k++;
        }
        *n = k;
    }
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

int ct_cluster_resources(const char *name, double *total, double *free_amount)
{
    if (!name)
        return ct__error(CT_EINVAL, "ct_cluster_resources: name is NULL");
    LOCK();
    Ct__Envelope *rep = NULL;
    int rc = status_locked(&rep);
    if (!rc) {
        double t = 0, f = 0;
        for (size_t i = 0; i < rep->status_reply->n_nodes; i++) {
            Ct__NodeInfo *n = rep->status_reply->nodes[i];
            if (!n->alive || n->draining) /* a draining node takes no new actors */
                continue;
            t += ct__res_get(n->total, n->n_total, name);
            f += ct__res_get(n->free, n->n_free, name);
        }
        if (total)
            *total = t;
        if (free_amount)
            *free_amount = f;
    }
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

/* rs's counts as TrainRetries entries in m, pointed at by mp. */
static void reasons_msg(const ct__train_reasons *rs, Ct__TrainRetries *m, Ct__TrainRetries **mp)
{
    for (int i = 0; i < rs->n; i++) {
        ct__train_retries__init(&m[i]);
        m[i].reason = (char *)rs->reason[i];
        m[i].count = rs->count[i];
        mp[i] = &m[i];
    }
}

int ct__report_train(const ct__train_report *r)
{
    if (!r || r->retries.n < 0 || r->retries.n > CT_TRAIN_REASONS || r->drains_by.n < 0 ||
        r->drains_by.n > CT_TRAIN_REASONS || r->npoints < 0 || r->npoints > CT_TRAIN_POINTS ||
        r->nhist < 0 || r->nhist > CT_TRAIN_HISTS)
        return ct__error(CT_EINVAL, "train report: bad arguments");
    Ct__TrainHistogram hs[CT_TRAIN_HISTS], *hp[CT_TRAIN_HISTS];
    for (int i = 0; i < r->nhist; i++) {
        ct__train_histogram__init(&hs[i]);
        hs[i].name = (char *)r->hist[i].name;
        hs[i].n_bounds = (size_t)r->hist[i].nbounds;
        hs[i].bounds = (double *)r->hist[i].bounds;
        hs[i].n_counts = (size_t)r->hist[i].nbounds;
        hs[i].counts = (uint64_t *)r->hist[i].counts;
        hs[i].count = r->hist[i].count;
        hs[i].sum = r->hist[i].sum;
        hp[i] = &hs[i];
    }
    Ct__TrainPoint pt[CT_TRAIN_POINTS], *pp[CT_TRAIN_POINTS];
    for (int i = 0; i < r->npoints; i++) {
        ct__train_point__init(&pt[i]);
        pt[i].step = r->point_step[i];
        pt[i].loss = r->point_loss[i];
        pt[i].samples_per_second = r->point_sps[i];
        pp[i] = &pt[i];
    }
    Ct__TrainRetries rr[CT_TRAIN_REASONS], *rp[CT_TRAIN_REASONS];
    Ct__TrainRetries dr[CT_TRAIN_REASONS], *dp[CT_TRAIN_REASONS];
    reasons_msg(&r->retries, rr, rp);
    reasons_msg(&r->drains_by, dr, dp);
    Ct__TrainReport p = CT__TRAIN_REPORT__INIT;
    p.job = (char *)(r->job ? r->job : "");
    p.step = r->step;
    p.epoch = r->epoch;
    p.loss = r->loss;
    p.samples_per_second = r->samples_per_s;
    p.mfu_percent = r->mfu_pct;
    p.replicas_alive = r->replicas;
    p.done = r->done;
    p.n_retries = (size_t)r->retries.n;
    p.retries = rp;
    p.n_drains_by_reason = (size_t)r->drains_by.n;
    p.drains_by_reason = dp;
    p.n_points = (size_t)r->npoints;
    p.points = pp;
    p.val_loss = r->val_loss;
    p.checkpoints = r->checkpoints;
    p.checkpoint_step = r->checkpoint_step;
    p.eta_seconds = r->eta_s;
    p.epochs = r->epochs;
    p.drains = r->drains;
    p.live_recoveries = r->live_recoveries;
    p.heals = r->heals;
    p.live_recovery_what = (char *)(r->live_what ? r->live_what : "");
    p.heal_what = (char *)(r->heal_what ? r->heal_what : "");
    p.n_histograms = (size_t)r->nhist;
    p.histograms = hp;
    LOCK();
    int rc = ct__client_ensure();
    if (!rc) {
        Ct__Envelope e;
        ct__env_init(&e, 0, ct__client.sender, 0);
        e.body_case = CT__ENVELOPE__BODY_TRAIN_REPORT;
        e.train_report = &p;
        rc = ct__client_send(&e); /* no answer but a refusal, which the drain drops */
    }
    UNLOCK();
    return rc;
}
