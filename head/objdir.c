/* head/objdir.c — the head's object directory: object id -> holder nodes + size, the nodes'
 * shards (store name, transfer address), and the requests that wait on objects (a fetch waits
 * until its node holds the object; a replicated put waits until k nodes do).
 *
 * Fed by the nodes (ObjNodeInfo once registered, ObjAdded/ObjRemoved from their shards'
 * on_event hook, ObjPullDone when a pull the head asked for ends) and by clients (ObjPutDone,
 * ObjFetch, ObjLocate, ObjFree, ObjNodes). A node declared dead loses its holdings; an object
 * with no holder left is forgotten. The head never touches object bytes: it only tells a node
 * to pull (ObjPull with the holders' transfer addresses) or to delete (ObjDelete).
 *
 * Authority (loop.c's header; the handler table's rules): a node's reports (ObjNodeInfo, ObjAdded,
 * ObjRemoved, ObjPullDone) must carry that node's token, so a node reports only its own shard; an
 * object belongs to the job whose ObjPutDone registered it first, and only that job may free it.
 * Locations and fetches are open to every peer. Tables are bounded (MAX_*), like the head's.
 *
 * Not in here: the directory's tables and their bookkeeping, the owners loaded across a restart
 * (objdir_table.c, objdir_internal.h), the bytes (objectstore/), the node's side
 * (actor/objnode.c). Objects are found by
 * id through an index; each node keeps the slots of the objects it holds (dnode.held, each
 * holder entry its place there: dobj.hpos), so a node's death costs what it held, not the whole
 * directory (a walk of every object on each death cost 0.85 ms per 100,000 objects). Waiters
 * and pulls are flat arrays scanned linearly.
 * Threads: everything runs on the head's thread (handlers, ct__objdir_tick). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "head/head_internal.h"
#include "head/objdir_internal.h"
#include "proto/msg.h"

static int find_pull(objdir *D, const uint8_t *id, int ni)
{
    for (int i = 0; i < D->np; i++)
        if (D->p[i].node == ni && !memcmp(D->p[i].id, id, IDLEN))
            return i;
    return -1;
}

/* Asks node ni to pull object oi from its live holders (once per node and id). */
static int request_pull(head *h, int oi, int ni)
{
    objdir *D = h->od;
    dobj *o = &D->o[oi];
    if (ct__od_holds(o, ni) || find_pull(D, o->id, ni) >= 0)
        return 0;
    char *addrs[64];
    uint32_t ports[64];
    size_t na = 0;
    for (int i = 0; i < o->nh && na < 64; i++)
        if (D->n[o->h[i]].alive && D->n[o->h[i]].addr[0]) {
            ports[na] = D->n[o->h[i]].data_port;
            addrs[na++] = D->n[o->h[i]].addr;
        }
    if (!na)
        return CT_EDEAD;
    if (D->np == MAX_DPULLS)
        return CT_ENOSPC;
    if (D->np == D->capp) {
        int cap = D->capp ? 2 * D->capp : 16;
        dpull *np = realloc(D->p, cap * sizeof *np);
        if (!np)
            return CT_ENOMEM;
        D->p = np;
        D->capp = cap;
    }
    memcpy(D->p[D->np].id, o->id, IDLEN);
    D->p[D->np++].node = ni;
    Ct__Envelope e;
    Ct__ObjPull p = CT__OBJ_PULL__INIT;
    ct__env_init(&e, 0, "head", 0);
    p.object_id.data = o->id;
    p.object_id.len = IDLEN;
    p.n_holders = na;
    p.holders = addrs;
    p.size = o->size; /* with the ports: the node skips asking the holder */
    p.n_data_ports = na;
    p.data_ports = ports;
    e.body_case = CT__ENVELOPE__BODY_OBJ_PULL;
    e.obj_pull = &p;
    return ct__head_send(h, &D->n[ni].rid, &e);
}

static void fill_location(objdir *D, Ct__ObjLocation *l, const uint8_t *id, char **ids,
                          char **addrs)
{
    ct__obj_location__init(l);
    l->object_id.data = (uint8_t *)id;
    l->object_id.len = IDLEN;
    int oi = ct__od_find_obj(D, id);
    if (oi < 0)
        return;
    dobj *o = &D->o[oi];
    l->found = 1;
    l->size = o->size;
    for (int i = 0; i < o->nh && i < 64; i++) {
        ids[l->n_node_ids++] = D->n[o->h[i]].id;
        addrs[l->n_addresses++] = D->n[o->h[i]].addr;
    }
    l->node_ids = ids;
    l->addresses = addrs;
}

static void reply_location(head *h, const ct__rid *rid, uint64_t req, const uint8_t *id)
{
    objdir *D = h->od;
    char *ids[64], *addrs[64];
    Ct__ObjLocation l, *lp = &l;
    fill_location(D, &l, id, ids, addrs);
    Ct__Envelope e;
    Ct__ObjLocateReply r = CT__OBJ_LOCATE_REPLY__INIT;
    ct__env_init(&e, req, "head", 0);
    r.n_objects = 1;
    r.objects = &lp;
    e.body_case = CT__ENVELOPE__BODY_OBJ_LOCATE_REPLY;
    e.obj_locate_reply = &r;
    ct__head_send(h, rid, &e);
}

static void drop_wait(objdir *D, int i)
{
    D->w[i] = D->w[--D->nw];
}

static int add_wait(objdir *D, const dwait *w)
{
    if (D->nw == MAX_DWAITS)
        return CT_ENOSPC;
    if (D->nw == D->capw) {
        int cap = D->capw ? 2 * D->capw : 16;
        dwait *nw = realloc(D->w, cap * sizeof *nw);
        if (!nw)
            return CT_ENOMEM;
        D->w = nw;
        D->capw = cap;
    }
    D->w[D->nw++] = *w;
    return 0;
}

/* Live nodes with a store (each can hold one copy of an object). */
static int live_stores(objdir *D)
{
    int k = 0;
    for (int i = 0; i < D->nn; i++)
        k += D->n[i].alive && D->n[i].addr[0];
    return k;
}

static int live_holders(objdir *D, const dobj *o)
{
    int k = 0;
    for (int i = 0; i < o->nh; i++)
        k += D->n[o->h[i]].alive;
    return k;
}

/* Answers the waiters on id that are satisfied now; starts the pulls fetches need. */
static void progress(head *h, const uint8_t *id)
{
    objdir *D = h->od;
    int oi = ct__od_find_obj(D, id);
    for (int i = 0; i < D->nw; i++) {
        dwait *w = &D->w[i];
        if (memcmp(w->id, id, IDLEN))
            continue;
        if (oi < 0)
            continue;
        if (w->kind == W_FETCH) {
            if (ct__od_holds(&D->o[oi], w->node)) {
                reply_location(h, &w->rid, w->req, id);
                drop_wait(D, i--);
            } else if (request_pull(h, oi, w->node)) {
                REPLY_ERR(h, &w->rid, w->req, CT_EDEAD, "obj_fetch.object_id",
                          "object fetch: no live holder to pull from");
                drop_wait(D, i--);
            }
        } else if (live_holders(D, &D->o[oi]) >= w->need) {
            ct__head_ok(h, &w->rid, w->req);
            drop_wait(D, i--);
        }
    }
}

/* Answers a request whose wait could not be added (rc 0: nothing to do). */
static void refuse_wait(head *h, const ct__rid *rid, Ct__Envelope *e, int rc)
{
    if (rc == CT_ENOSPC)
        ct__head_refuse(h, rid, e, rc, ct__msg_body_name(e->body_case),
                        "%s: %d requests wait on objects already, the head's limit",
                        ct__msg_body_name(e->body_case), MAX_DWAITS);
    else if (rc)
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
}

static int check_id(head *h, const ct__rid *rid, uint64_t req, ProtobufCBinaryData *b,
                    const char *field)
{
    if (b->len == IDLEN)
        return 0;
    REPLY_ERR(h, rid, req, CT_EINVAL, field, "%s: %zu bytes, an object id has %d", field, b->len,
              IDLEN);
    return CT_EINVAL;
}

/* ---- handlers ---- */

static void put_run(head *h, const dput *p, int ni);

void ct__objdir_on_node_info(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    objdir *D = h->od;
    Ct__ObjNodeInfo *m = e->obj_node_info;
    if (!m->node_id || !*m->node_id || strlen(m->node_id) >= 32) {
        REPLY_ERR(h, rid, e->req_id, CT_EINVAL, "obj_node_info.node_id",
                  "obj_node_info.node_id: "
                  "empty or too long");
        return;
    }
    if (!f->node_id || strcmp(f->node_id, m->node_id)) { /* the node named must be the sender */
        ct__head_refuse(h, rid, e, HEAD_EPERM, "obj_node_info.node_id",
                        "obj_node_info.node_id: %s: the message does not carry that live node's "
                        "token",
                        m->node_id);
        return;
    }
    int ni = ct__od_find_node(D, m->node_id);
    for (int i = 0; ni < 0 && i < D->nn; i++)
        if (!D->n[i].alive) /* a dead node's slot: nothing refers to it (on_node_dead) */
            ni = i;
    if (ni < 0) {
        dnode *nn = realloc(D->n, (D->nn + 1) * sizeof *nn);
        if (!nn)
            return;
        D->n = nn;
        ni = D->nn++;
        memset(&D->n[ni], 0, sizeof D->n[ni]); /* (realloc's bytes: not a count to keep below) */
    }
    dnode *n = &D->n[ni];
    if (n->id[0]) /* a dead node's slot: its id leaves the index */
        ct__index_del(D->nix, n->id, strlen(n->id));
    /* what it is a holder of (none when it died) */
    uint64_t nobj = n->nobj, bytes = n->bytes;
    int *held = n->held, nheld = n->nheld, capheld = n->capheld;
    memset(n, 0, sizeof *n);
    n->nobj = nobj;
    n->bytes = bytes;
    n->held = held;
    n->nheld = nheld;
    n->capheld = capheld;
    snprintf(n->id, sizeof n->id, "%s", m->node_id);
    if (ct__index_put(&D->nix, n->id, strlen(n->id), ni)) {
        n->id[0] = 0; /* an unnamed dead slot: reused later */
        return;
    }
    snprintf(n->store, sizeof n->store, "%s", m->store_name ? m->store_name : "");
    snprintf(n->addr, sizeof n->addr, "%s", m->xfer_address ? m->xfer_address : "");
    snprintf(n->host, sizeof n->host, "%s", m->host ? m->host : "");
    snprintf(n->host_id, sizeof n->host_id, "%s", m->host_id ? m->host_id : "");
    n->cap = m->memory_cap;
    n->data_port = m->data_port <= 65535 ? m->data_port : 0;
    n->rid = *rid;
    n->alive = true;
    CT_LOG(CT_LOG_INFO, "objdir", "node %s: store %s, transfer %s", n->id, n->store, n->addr);
    for (int k = 0; k < D->npk; k++) /* the puts that waited for this node */
        if (!strcmp(D->pk[k].node, n->id)) {
            dput p = D->pk[k];
            D->pk[k--] = D->pk[--D->npk];
            put_run(h, &p, ni);
        }
}

/* Whether a node report speaks for its node_id: the loop let through only the token of a live
 * node (RULE_NODE), f->node_id, which must be the node named (field names it when refused). */
static bool node_report(head *h, const ct__rid *rid, Ct__Envelope *e, const ct__head_from *f,
                        const char *node_id, const char *field)
{
    if (f->node_id && node_id && !strcmp(f->node_id, node_id))
        return true;
    ct__head_refuse(h, rid, e, HEAD_EPERM, field,
                    "%s: %.64s: the message does not carry that live node's token", field,
                    node_id ? node_id : "");
    return false;
}

void ct__objdir_on_added(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    objdir *D = h->od;
    Ct__ObjAdded *m = e->obj_added;
    if (!node_report(h, rid, e, f, m->node_id, "obj_added.node_id") ||
        check_id(h, rid, e->req_id, &m->object_id, "obj_added.object_id"))
        return;
    int ni = ct__od_find_node(D, m->node_id);
    if (ni < 0 || !D->n[ni].alive)
        return;
    if (ct__od_add_holder(D, m->object_id.data, m->size, ni)) {
        ct__head_refuse(h, rid, e, CT_ENOSPC, "obj_added",
                        "obj_added: the directory lists %d objects, its limit", D->no);
        return;
    }
    progress(h, m->object_id.data);
}

void ct__objdir_on_removed(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    objdir *D = h->od;
    Ct__ObjRemoved *m = e->obj_removed;
    if (!node_report(h, rid, e, f, m->node_id, "obj_removed.node_id") ||
        check_id(h, rid, e->req_id, &m->object_id, "obj_removed.object_id"))
        return;
    int ni = ct__od_find_node(D, m->node_id);
    int oi = ni >= 0 ? ct__od_find_obj(D, m->object_id.data) : -1;
    if (oi >= 0)
        ct__od_remove_holder(h, oi, ni);
}

void ct__objdir_on_pull_done(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    objdir *D = h->od;
    Ct__ObjPullDone *m = e->obj_pull_done;
    if (!node_report(h, rid, e, f, m->node_id, "obj_pull_done.node_id") ||
        check_id(h, rid, e->req_id, &m->object_id, "obj_pull_done.object_id"))
        return;
    int ni = ct__od_find_node(D, m->node_id);
    if (ni < 0)
        return;
    const uint8_t *id = m->object_id.data;
    int pi = find_pull(D, id, ni);
    if (pi >= 0)
        D->p[pi] = D->p[--D->np];
    if (m->code == 0 && D->n[ni].alive) {
        ct__od_add_holder(D, id, m->size, ni);
        progress(h, id);
        return;
    }
    char hx[2 * IDLEN + 1];
    ct__hex(hx, id, IDLEN);
    CT_LOG(CT_LOG_WARN, "objdir", "pull of %s on %s failed: %s", hx, m->node_id,
           m->message ? m->message : "");
    for (int i = 0; i < D->nw; i++) {
        dwait *w = &D->w[i];
        if (memcmp(w->id, id, IDLEN) || (w->kind == W_FETCH && w->node != ni))
            continue;
        REPLY_ERR(h, &w->rid, w->req, m->code < 0 ? m->code : CT_EIO, "obj_fetch",
                  "object %s: pull on node %s failed: %s", hx, m->node_id,
                  m->message ? m->message : "");
        drop_wait(D, i--);
    }
}

/* Asks live nodes without a copy to pull object oi until holders and pulls in flight reach
 * need (round robin over the nodes, so copies spread). */
static void replicate(head *h, int oi, int need)
{
    objdir *D = h->od;
    int asked = live_holders(D, &D->o[oi]);
    for (int i = 0; i < D->np; i++)
        asked += !memcmp(D->p[i].id, D->o[oi].id, IDLEN) && D->n[D->p[i].node].alive;
    for (int k = 0; k < D->nn && asked < need; k++) {
        int j = (D->rr + k) % D->nn;
        if (!D->n[j].alive || !D->n[j].addr[0] || ct__od_holds(&D->o[oi], j) ||
            find_pull(D, D->o[oi].id, j) >= 0)
            continue;
        if (!request_pull(h, oi, j))
            asked++;
        D->rr = j + 1;
    }
}

/* obj_put_done's own fields (the handler table runs it before the token rule). */
bool ct__objdir_check_put_done(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    return !check_id(h, rid, e->req_id, &e->obj_put_done->object_id, "obj_put_done.object_id");
}

/* Runs put p on node ni, whose store the directory lists: ni holds the object; its copies are
 * asked for; the answer is Ok once enough live nodes hold it (now or by a W_PUT wait). */
static void put_run(head *h, const dput *p, int ni)
{
    objdir *D = h->od;
    char hx[2 * IDLEN + 1];
    int rc = ct__od_add_holder(D, p->id, p->size, ni);
    if (rc == CT_ENOSPC) {
        ct__hex(hx, p->id, IDLEN);
        REPLY_ERR(h, &p->rid, p->req, rc, "obj_put_done",
                  "obj_put_done: the directory lists %d objects, its limit (object %s)", D->no, hx);
        return;
    }
    if (rc) {
        REPLY_ERR(h, &p->rid, p->req, CT_ENOMEM, "", "head out of memory");
        return;
    }
    int oi = ct__od_find_obj(D, p->id);
    /* the first put makes its job the owner; another job putting the same (content-addressed)
     * id adds its copy but changes neither the owner nor the copies wanted */
    bool owned = D->o[oi].job[0];
    if (!owned)
        snprintf(D->o[oi].job, sizeof D->o[oi].job, "%s", p->job);
    bool mine = ct__token_eq(D->o[oi].job, p->job);
    int asked = p->replicas < 1 ? 1 : p->replicas; /* remembered: copies are made again */
    int alive = live_stores(D);
    int need = asked < alive ? asked : alive; /* best effort: one copy per live node at most */
    int have = live_holders(D, &D->o[oi]);
    int pref = ct__od_find_node(D, p->pref);
    if (pref >= 0 && D->n[pref].alive && D->n[pref].addr[0] && !ct__od_holds(&D->o[oi], pref)) {
        if (need < have + 1)
            need = have + 1;
        request_pull(h, oi, pref);
    }
    if (mine && (D->o[oi].want < asked || !owned)) {
        if (D->o[oi].want < asked)
            ct__od_set_want(D, oi, asked);
        ct__head_state_obj(h, D->o[oi].id, IDLEN, D->o[oi].job, D->o[oi].want);
    }
    replicate(h, oi, need);
    if (live_holders(D, &D->o[oi]) >= need) {
        ct__head_ok(h, &p->rid, p->req);
        return;
    }
    dwait w = {.kind = W_PUT, .rid = p->rid, .req = p->req, .need = need, .deadline = p->until};
    memcpy(w.id, p->id, IDLEN);
    rc = add_wait(D, &w);
    if (rc == CT_ENOSPC)
        REPLY_ERR(h, &p->rid, p->req, rc, "obj_put_done",
                  "obj_put_done: %d requests wait on objects already, the head's limit",
                  MAX_DWAITS);
    else if (rc)
        REPLY_ERR(h, &p->rid, p->req, CT_ENOMEM, "", "head out of memory");
}

/* Whether node id may still list its store here: it registered and its ObjNodeInfo is on the
 * way, or this head is within its dead-after time of starting and has not heard of it (a node
 * that outlived the previous head registers again then; *until is lowered to that time's end,
 * the latest a put parked for it waits). */
static bool node_may_come(head *h, const char *id, int64_t *until)
{
    int hn = ct__head_find_node(h, id);
    if (hn >= 0 && h->nodes[hn].alive)
        return true;
    if (hn < 0 && !h->waits_over) {
        int64_t end = h->started_ms + h->dead_ms;
        if (end < *until)
            *until = end;
        return true;
    }
    return false;
}

/* Answers parked put k with CT_ENOENT (its node did not list its store in time) and drops it. */
static void park_fail(head *h, int k, const char *why)
{
    objdir *D = h->od;
    dput *p = &D->pk[k];
    REPLY_ERR(h, &p->rid, p->req, CT_ENOENT, "obj_put_done.node_id",
              "obj_put_done.node_id: no live node %s with a store (%s)", p->node, why);
    D->pk[k] = D->pk[--D->npk];
}

void ct__objdir_on_put_done(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    objdir *D = h->od;
    Ct__ObjPutDone *m = e->obj_put_done;
    dput p = {.rid = *rid,
              .req = e->req_id,
              .size = m->size,
              .replicas = m->replicas,
              .until = ct__now_ms() + (m->wait_ms > 0 ? m->wait_ms : 60000)};
    memcpy(p.id, m->object_id.data, IDLEN);
    snprintf(p.node, sizeof p.node, "%s", m->node_id ? m->node_id : "");
    snprintf(p.pref, sizeof p.pref, "%s", m->preferred_node ? m->preferred_node : "");
    snprintf(p.job, sizeof p.job, "%s", f->job); /* RULE_JOB */
    int ni =
        m->node_id && strlen(m->node_id) < sizeof p.node ? ct__od_find_node(D, m->node_id) : -1;
    if (ni >= 0 && D->n[ni].alive) {
        put_run(h, &p, ni);
        return;
    }
    /* the node's store is not listed (yet): parked until it is, when the node may come (a head
     * restart; a put done refused here cost the trainer a retry) */
    int64_t end = p.until;
    if (!m->node_id || strlen(m->node_id) >= sizeof p.node || !node_may_come(h, p.node, &end) ||
        end <= ct__now_ms() || D->npk == MAX_DWAITS) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "obj_put_done.node_id",
                  "obj_put_done.node_id: no live node %s with a store", p.node);
        return;
    }
    if (D->npk == D->cappk) {
        int cap = D->cappk ? 2 * D->cappk : 16;
        dput *np = realloc(D->pk, cap * sizeof *np);
        if (!np) {
            REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
            return;
        }
        D->pk = np;
        D->cappk = cap;
    }
    D->pk[D->npk++] = p;
    char hx[2 * IDLEN + 1];
    ct__hex(hx, p.id, IDLEN);
    CT_LOG(CT_LOG_INFO, "objdir", "put of %s on %s waits for that node's store to register", hx,
           p.node);
}

void ct__objdir_on_fetch(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    (void)f;
    objdir *D = h->od;
    Ct__ObjFetch *m = e->obj_fetch;
    if (check_id(h, rid, e->req_id, &m->object_id, "obj_fetch.object_id"))
        return;
    int ni = ct__od_find_node(D, m->node_id);
    if (ni < 0 || !D->n[ni].alive) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "obj_fetch.node_id",
                  "obj_fetch.node_id: no live node %s with a store", m->node_id);
        return;
    }
    int oi = ct__od_find_obj(D, m->object_id.data);
    char hx[2 * IDLEN + 1];
    ct__hex(hx, m->object_id.data, IDLEN);
    if (oi < 0 && m->wait_ms <= 0) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "obj_fetch.object_id",
                  "object %s: unknown id (no node holds it)", hx);
        return;
    }
    if (oi >= 0 && ct__od_holds(&D->o[oi], ni)) {
        reply_location(h, rid, e->req_id, m->object_id.data);
        return;
    }
    if (oi >= 0 && request_pull(h, oi, ni)) {
        REPLY_ERR(h, rid, e->req_id, CT_EDEAD, "obj_fetch.object_id",
                  "object %s: no live holder to pull from", hx);
        return;
    }
    dwait w = {.kind = W_FETCH,
               .rid = *rid,
               .req = e->req_id,
               .node = ni,
               .deadline = ct__now_ms() + (m->wait_ms > 0 ? m->wait_ms : 60000)};
    memcpy(w.id, m->object_id.data, IDLEN);
    refuse_wait(h, rid, e, add_wait(D, &w));
}

void ct__objdir_on_locate(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    (void)f;
    objdir *D = h->od;
    Ct__ObjLocate *m = e->obj_locate;
    size_t n = m->n_object_ids, nh = 0;
    if (n > MAX_LOCATE) {
        ct__head_refuse(h, rid, e, CT_EINVAL, "obj_locate.object_ids",
                        "obj_locate.object_ids: %zu ids, at most %d", n, MAX_LOCATE);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (check_id(h, rid, e->req_id, &m->object_ids[i], "obj_locate.object_ids"))
            return;
        int oi = ct__od_find_obj(D, m->object_ids[i].data);
        nh += oi < 0 ? 0 : D->o[oi].nh < 64 ? D->o[oi].nh : 64; /* fill_location lists <= 64 */
    }
    Ct__ObjLocation *l = calloc(n ? n : 1, sizeof *l);
    Ct__ObjLocation **lp = calloc(n ? n : 1, sizeof *lp);
    char **ids = calloc(2 * nh + 1, sizeof *ids); /* node ids, then addresses */
    if (!l || !lp || !ids) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        goto out;
    }
    for (size_t i = 0, k = 0; i < n; i++) {
        fill_location(D, &l[i], m->object_ids[i].data, ids + k, ids + nh + k);
        k += l[i].n_node_ids;
        lp[i] = &l[i];
    }
    Ct__Envelope o;
    Ct__ObjLocateReply r = CT__OBJ_LOCATE_REPLY__INIT;
    ct__env_init(&o, e->req_id, "head", 0);
    r.n_objects = n;
    r.objects = lp;
    o.body_case = CT__ENVELOPE__BODY_OBJ_LOCATE_REPLY;
    o.obj_locate_reply = &r;
    ct__head_send(h, rid, &o);
out:
    free(l);
    free(lp);
    free(ids);
}

/* obj_free's own fields (run before the token rule). */
bool ct__objdir_check_free(head *h, const ct__rid *rid, Ct__Envelope *e)
{
    return !check_id(h, rid, e->req_id, &e->obj_free->object_id, "obj_free.object_id");
}

void ct__objdir_on_free(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    objdir *D = h->od;
    Ct__ObjFree *m = e->obj_free;
    int oi = ct__od_find_obj(D, m->object_id.data);
    char hx[2 * IDLEN + 1];
    ct__hex(hx, m->object_id.data, IDLEN);
    if (oi < 0) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOENT, "obj_free.object_id", "object %s: unknown id", hx);
        return;
    }
    const char *job = f->job; /* RULE_JOB */
    if (!ct__token_eq(D->o[oi].job, job)) {
        ct__head_refuse(h, rid, e, HEAD_EPERM, "obj_free.object_id",
                        "obj_free.object_id: object %s belongs to another job", hx);
        return;
    }
    Ct__Envelope d;
    Ct__ObjDelete del = CT__OBJ_DELETE__INIT;
    ct__env_init(&d, 0, "head", 0);
    del.object_id = m->object_id;
    d.body_case = CT__ENVELOPE__BODY_OBJ_DELETE;
    d.obj_delete = &del;
    dobj *o = &D->o[oi];
    for (int i = 0; i < o->nh; i++)
        if (D->n[o->h[i]].alive)
            ct__head_send(h, &D->n[o->h[i]].rid, &d);
    /* pulls in flight: the node deletes what arrives for a freed id only if told again, so
     * tell every node that is pulling it too */
    for (int i = 0; i < D->np; i++)
        if (!memcmp(D->p[i].id, o->id, IDLEN) && D->n[D->p[i].node].alive)
            ct__head_send(h, &D->n[D->p[i].node].rid, &d);
    ct__od_drop_obj(h, oi);
    for (int i = 0; i < D->nw; i++)
        if (!memcmp(D->w[i].id, m->object_id.data, IDLEN)) {
            REPLY_ERR(h, &D->w[i].rid, D->w[i].req, CT_ENOENT, "object_id", "object %s was freed",
                      hx);
            drop_wait(D, i--);
        }
    ct__head_ok(h, rid, e->req_id);
}

void ct__objdir_on_nodes(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f)
{
    (void)f;
    objdir *D = h->od;
    Ct__ObjNodeInfo *ni = calloc(D->nn ? D->nn : 1, sizeof *ni);
    Ct__ObjNodeInfo **np = calloc(D->nn ? D->nn : 1, sizeof *np);
    uint64_t *held = calloc(D->nn ? D->nn : 1, sizeof *held);
    size_t k = 0;
    if (!ni || !np || !held) {
        REPLY_ERR(h, rid, e->req_id, CT_ENOMEM, "", "head out of memory");
        goto out;
    }
    /* what each node holds, in one pass: a remote driver puts where there is room */
    for (int j = 0; j < D->no; j++)
        for (int q = 0; q < D->o[j].nh; q++)
            if (D->o[j].h[q] >= 0 && D->o[j].h[q] < D->nn)
                held[D->o[j].h[q]] += D->o[j].size;
    for (int i = 0; i < D->nn; i++) {
        if (!D->n[i].alive)
            continue;
        ct__obj_node_info__init(&ni[k]);
        ni[k].node_id = D->n[i].id;
        ni[k].store_name = D->n[i].store;
        ni[k].xfer_address = D->n[i].addr;
        ni[k].host = D->n[i].host;
        ni[k].memory_cap = D->n[i].cap;
        ni[k].data_port = D->n[i].data_port;
        ni[k].host_id = D->n[i].host_id;
        ni[k].bytes_held = held[i];
        np[k] = &ni[k];
        k++;
    }
    Ct__Envelope o;
    Ct__ObjNodesReply r = CT__OBJ_NODES_REPLY__INIT;
    ct__env_init(&o, e->req_id, "head", 0);
    r.n_nodes = k;
    r.nodes = np;
    o.body_case = CT__ENVELOPE__BODY_OBJ_NODES_REPLY;
    o.obj_nodes_reply = &r;
    ct__head_send(h, rid, &o);
out:
    free(ni);
    free(np);
    free(held);
}

void ct__objdir_node_dead(head *h, const char *node_id)
{
    objdir *D = h->od;
    for (int k = 0; k < D->npk; k++)
        if (!strcmp(D->pk[k].node, node_id))
            park_fail(h, k--, "it died");
    int ni = ct__od_find_node(D, node_id);
    if (ni < 0)
        return;
    D->n[ni].alive = false;
    /* what it held (its list: each removal takes its last entry out) */
    while (D->n[ni].nheld > 0)
        ct__od_remove_holder(h, D->n[ni].held[D->n[ni].nheld - 1], ni);
    for (int i = 0; i < D->np; i++)
        if (D->p[i].node == ni)
            D->p[i--] = D->p[--D->np];
    for (int i = 0; i < D->nw; i++) {
        dwait *w = &D->w[i];
        if (w->kind == W_FETCH && w->node == ni) {
            REPLY_ERR(h, &w->rid, w->req, CT_EDEAD, "obj_fetch.node_id", "node %s died", node_id);
            drop_wait(D, i--);
        }
    }
    /* Objects put with replicas=k that lost a copy get it back on another live node (from a
     * surviving holder), so a second failure does not lose them. */
    int alive = live_stores(D);
    /* A put waiting for k copies cannot count on the dead node's: it wants at most one copy per
     * live node now, asks the live ones, and is answered at once when that is met (it waited
     * for the whole deadline before: a trainer checkpoint stalled 60 s when the node holding
     * its second copy died). */
    for (int i = 0; i < D->nw; i++) {
        dwait *w = &D->w[i];
        if (w->kind != W_PUT)
            continue;
        int oi = ct__od_find_obj(D, w->id);
        if (w->need > alive)
            w->need = alive > 0 ? alive : 1;
        if (oi >= 0)
            replicate(h, oi, w->need);
        if (oi >= 0 && live_holders(D, &D->o[oi]) >= w->need) {
            ct__head_ok(h, &w->rid, w->req);
            drop_wait(D, i--);
        }
    }
    for (int i = 0; D->nwant && i < D->no; i++) { /* none wants copies: no walk */
        dobj *o = &D->o[i];
        int need = o->want < alive ? o->want : alive;
        if (o->want > 1 && live_holders(D, o) && live_holders(D, o) < need) {
            char hx[2 * IDLEN + 1];
            ct__hex(hx, o->id, IDLEN);
            CT_LOG(CT_LOG_INFO, "objdir",
                   "object %s: %d of %d copies left after node %s died; "
                   "copying it again",
                   hx, live_holders(D, o), need, node_id);
            replicate(h, i, need);
        }
    }
}

void ct__objdir_tick(head *h)
{
    objdir *D = h->od;
    int64_t now = ct__now_ms();
    for (int k = 0; k < D->npk; k++) {
        int64_t end = D->pk[k].until;
        if (!node_may_come(h, D->pk[k].node, &end) || end <= now)
            park_fail(h, k--, "it did not register in time");
    }
    for (int i = 0; i < D->nw; i++) {
        dwait *w = &D->w[i];
        if (w->deadline > now)
            continue;
        char hx[2 * IDLEN + 1];
        ct__hex(hx, w->id, IDLEN);
        if (w->kind == W_FETCH)
            REPLY_ERR(h, &w->rid, w->req, CT_ETIMEDOUT, "obj_fetch",
                      "object %s: not on node %s in time (%s)", hx, D->n[w->node].id,
                      ct__od_find_obj(D, w->id) < 0 ? "no node holds it" : "pull still running");
        else
            REPLY_ERR(h, &w->rid, w->req, CT_ETIMEDOUT, "obj_put_done.replicas",
                      "object %s: fewer than %d copies in time", hx, w->need);
        drop_wait(D, i--);
    }
}

int ct__objdir_holders(head *h, const uint8_t *id, size_t len, char **addrs, int cap)
{
    objdir *D = h->od;
    if (len != IDLEN)
        return 0;
    int oi = ct__od_find_obj(D, id), k = 0;
    for (int i = 0; oi >= 0 && i < D->o[oi].nh && k < cap; i++)
        if (D->n[D->o[oi].h[i]].alive && D->n[D->o[oi].h[i]].addr[0])
            addrs[k++] = D->n[D->o[oi].h[i]].addr;
    return k;
}

void ct__objdir_node_usage(head *h, const char *node_id, const char **xfer_address,
                           uint64_t *capacity, uint64_t *objects, uint64_t *bytes)
{
    objdir *D = h->od;
    *objects = *bytes = *capacity = 0;
    *xfer_address = "";
    int ni = ct__od_find_node(D, node_id);
    if (ni < 0)
        return;
    *xfer_address = D->n[ni].addr;
    *capacity = D->n[ni].cap;
    *objects = D->n[ni].nobj; /* counted as holders come and go: a status is O(nodes) */
    *bytes = D->n[ni].bytes;
}
