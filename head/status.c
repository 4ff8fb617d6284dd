/* head/status.c — the status reply: every node (with its object store's use, objdir.c), actor,
 * placement group and training job's progress (train.c), as ctup status and
 * ct_cluster_resources read them. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "head/head_internal.h"
#include "proto/msg.h"

static const char *actor_state_names[] = {"PENDING", "STARTING", "ALIVE", "DEAD"};

/* rs as TrainRetries entries in m, pointed at by mp (borrowed while rs lives). */
static void reasons_msg(const train_reasons *rs, Ct__TrainRetries *m, Ct__TrainRetries **mp)
{
    for (int k = 0; k < rs->n; k++) {
        ct__train_retries__init(&m[k]);
        m[k].reason = (char *)rs->reason[k];
        m[k].count = rs->count[k];
        mp[k] = &m[k];
    }
}

void ct__head_on_status(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    int nn = h->nnodes, na = h->nactors, np = h->npgs;
    Ct__NodeInfo *ni = calloc(nn + 1, sizeof *ni);
    Ct__NodeInfo **nip = calloc(nn + 1, sizeof *nip);
    res_pb *tot = calloc(nn + 1, sizeof *tot), *fre = calloc(nn + 1, sizeof *fre);
    Ct__ActorInfo *ai = calloc(na + 1, sizeof *ai);
    Ct__ActorInfo **aip = calloc(na + 1, sizeof *aip);
    Ct__PgInfo *pi = calloc(np + 1, sizeof *pi);
    Ct__PgInfo **pip = calloc(np + 1, sizeof *pip);
    char **bn = NULL;
    size_t nbn = 0;
    int nt = h->ntrain;
    Ct__TrainReport *tr = NULL, **trp = NULL;
    Ct__TrainRetries *rr = NULL, **rrp = NULL;
    for (int i = 0; i < np; i++)
        nbn += h->pgs[i].state != PG_FREE ? h->pgs[i].nb : 0;
    bn = calloc(nbn + 1, sizeof *bn);
    if (!ni || !nip || !tot || !fre || !ai || !aip || !pi || !pip || !bn) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        goto out;
    }
    size_t k = 0;
    for (int j = 0; j < nn; j++) {
        node *n = &h->nodes[j];
        if (!n->used)
            continue;
        size_t i = k++;
        ct__node_info__init(&ni[i]);
        ni[i].node_id = n->id;
        ni[i].host = n->host;
        ni[i].alive = n->alive;
        ni[i].pid = n->pid;
        ni[i].draining = n->draining;
        ct__rv_to_pb(&n->total, &tot[i]);
        ct__rv_to_pb(&n->free, &fre[i]);
        ni[i].n_total = n->total.n;
        ni[i].total = tot[i].p;
        ni[i].n_free = n->free.n;
        ni[i].free = fre[i].p;
        const char *xa = "";
        ct__objdir_node_usage(h, n->id, &xa, &ni[i].store_capacity, &ni[i].store_objects,
                              &ni[i].store_bytes);
        ni[i].xfer_address = (char *)xa;
        nip[i] = &ni[i];
    }
    for (int i = 0; i < na; i++) {
        actor *a = &h->actors[i];
        ct__actor_info__init(&ai[i]);
        ai[i].actor_id = a->id;
        ai[i].class_name = a->cls;
        ai[i].node_id = a->node >= 0 ? h->nodes[a->node].id : "";
        ai[i].pid = a->pid;
        ai[i].state = (char *)actor_state_names[a->state];
        ai[i].address = a->addr;
        aip[i] = &ai[i];
    }
    nn = (int)k;
    k = 0;
    size_t kp = 0;
    for (int j = 0; j < np; j++) {
        pgroup *g = &h->pgs[j];
        if (g->state == PG_FREE)
            continue;
        size_t i = kp++;
        ct__pg_info__init(&pi[i]);
        pi[i].pg_id = g->id;
        pi[i].state = g->state == PG_READY     ? "READY"
                      : g->state == PG_PENDING ? "PENDING"
                                               : "REMOVED";
        pi[i].bundle_nodes = &bn[k];
        for (int b = 0; b < g->nb; b++)
            bn[k++] = g->state != PG_REMOVED && g->b[b].node >= 0 ? h->nodes[g->b[b].node].id : "";
        pi[i].n_bundle_nodes = g->nb;
        pip[i] = &pi[i];
    }
    /* training jobs' progress (train.c): their last reports, without points or histograms */
    tr = calloc(nt + 1, sizeof *tr);
    trp = calloc(nt + 1, sizeof *trp);
    rr = calloc((size_t)nt * 2 * TRAIN_REASONS + 1, sizeof *rr); /* retries, drains */
    rrp = calloc((size_t)nt * 2 * TRAIN_REASONS + 1, sizeof *rrp);
    if (!tr || !trp || !rr || !rrp) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        goto out;
    }
    for (int i = 0; i < nt; i++) {
        const train_job *t = &h->train[i];
        ct__train_report__init(&tr[i]);
        tr[i].job = (char *)t->label;
        tr[i].step = t->step;
        tr[i].epoch = t->epoch;
        tr[i].epochs = t->epochs;
        tr[i].drains = t->drains;
        tr[i].live_recoveries = t->live;
        tr[i].heals = t->heals;
        tr[i].loss = t->loss;
        tr[i].samples_per_second = t->sps;
        tr[i].mfu_percent = t->mfu;
        tr[i].replicas_alive = t->replicas;
        tr[i].done = t->done;
        tr[i].val_loss = t->val_loss;
        tr[i].eta_seconds = isnan(t->eta) ? -1 : t->eta;
        tr[i].checkpoints = t->ckpts;
        tr[i].checkpoint_step = t->nck ? t->ck_step[t->nck - 1] : 0;
        tr[i].n_retries = (size_t)t->retries.n;
        tr[i].retries = &rrp[2 * i * TRAIN_REASONS];
        reasons_msg(&t->retries, &rr[2 * i * TRAIN_REASONS], tr[i].retries);
        tr[i].n_drains_by_reason = (size_t)t->drains_by.n;
        tr[i].drains_by_reason = &rrp[(2 * i + 1) * TRAIN_REASONS];
        reasons_msg(&t->drains_by, &rr[(2 * i + 1) * TRAIN_REASONS], tr[i].drains_by_reason);
        trp[i] = &tr[i];
    }
    Ct__Envelope o;
    Ct__StatusReply sr = CT__STATUS_REPLY__INIT;
    ct__env_init(&o, e->req_id, "head", 0);
    sr.n_nodes = nn;
    sr.nodes = nip;
    sr.n_actors = na;
    sr.actors = aip;
    sr.n_pgs = kp;
    sr.pgs = pip;
    sr.n_train = (size_t)nt;
    sr.train = trp;
    o.body_case = CT__ENVELOPE__BODY_STATUS_REPLY;
    o.status_reply = &sr;
    ct__head_send(h, rid, &o);
out:
    free(ni);
    free(nip);
    free(tot);
    free(fre);
    free(ai);
    free(aip);
    free(pi);
    free(pip);
    free(bn);
    free(tr);
    free(trp);
    free(rr);
    free(rrp);
}
