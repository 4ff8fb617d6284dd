/* actor/api_objects.c — objects: through the shard of this process's node (ct_store_client),
 * or, in a driver whose host has no node, through the nodes' data ports (put_remote /
 * get_remote; the lock is released while bytes move); code shipping (the executable put into
 * the store, so nodes start actors from it). Not in here: the store (objectstore/), the
 * node's object side (objnode.c), the head's directory (head/objdir.c). */
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
#include "common/env.h"
#include "head/head.h"
#include "objectstore/store.h"
#include "objectstore/transfer.h"
#include "proto/msg.h"

/* ---- objects ---- */

/* The shard's node went away: keep the client mapped (until ct_shutdown) and find another. */
static void retire_store(void)
{
    if (ct__client.nold == (int)(sizeof ct__client.old_stores / sizeof ct__client.old_stores[0]))
        ct_store_client_destroy(&ct__client.old_stores[--ct__client.nold]);
    memmove(ct__client.old_stores + 1, ct__client.old_stores,
            ct__client.nold * sizeof ct__client.old_stores[0]);
    ct__client.old_stores[0] = ct__client.store;
    ct__client.nold++;
    ct__client.store = NULL;
    ct__client.store_node[0] = 0;
}

/* The head's list of live nodes with a store (ObjNodesReply). Lock held (released while
 * waiting). */
static int obj_nodes(Ct__Envelope **rep)
{
    Ct__Envelope e;
    Ct__ObjNodes q = CT__OBJ_NODES__INIT;
    ct__env_init(&e, 0, ct__client.sender, 5000);
    e.body_case = CT__ENVELOPE__BODY_OBJ_NODES;
    e.obj_nodes = &q;
    int rc = ct__client_request(&e, rep, 5000);
    if (!rc)
        rc = ct__msg_expect(*rep, CT__ENVELOPE__BODY_OBJ_NODES_REPLY, "obj_nodes");
    return rc;
}

/* Connects this process to the object store: its own node's shard (actors), the embedded
 * node's, else that of a node on its host (same ct__host_id: the shard's /dev/shm is ours).
 * A driver on a host with no node (or with CT_REMOTE_DRIVER=1) is a *remote driver*: it maps
 * nothing and moves objects through the nodes' data ports (put_remote, get_remote). A node
 * that has just joined registers its shard a moment later, so an empty answer is asked again
 * for up to STORE_WAIT_MS before it is an error. Lock held. */
#define STORE_WAIT_MS 2000
static int ensure_store(void)
{
    if (ct__client.store || ct__client.remote)
        return 0;
    int rc = ct__client_ensure();
    if (rc)
        return rc;
    char me[128];
    ct__host_id(me, sizeof me);
    const char *ev = ct__env(CT__ENV_REMOTE_DRIVER);
    int64_t until = ct__now_ms() + STORE_WAIT_MS;
    for (;;) {
        Ct__Envelope *rep = NULL;
        if ((rc = obj_nodes(&rep))) {
            ct__msg_free(rep);
            return rc;
        }
        Ct__ObjNodesReply *r = rep->obj_nodes_reply;
        const char *want = ct__client.self_node[0]  ? ct__client.self_node
                           : ct__client.emb_node[0] ? ct__client.emb_node
                                                    : NULL;
        bool force_remote = !want && ev && !strcmp(ev, "1");
        int elsewhere = 0;
        char here[32] = ""; /* a node on this host whose shard could not be mapped */
        for (size_t i = 0; i < r->n_nodes && !ct__client.store; i++) {
            Ct__ObjNodeInfo *ni = r->nodes[i];
            if (want && strcmp(ni->node_id, want))
                continue;
            /* a node that reports no host id (an older one) is tried as before */
            if (!want && (force_remote || (ni->host_id[0] && strcmp(ni->host_id, me)))) {
                elsewhere += ni->data_port != 0;
                continue;
            }
            ct__client.store = ct_store_client_new(ni->store_name);
            if (ct__client.store)
                snprintf(ct__client.store_node, sizeof ct__client.store_node, "%s", ni->node_id);
            else
                snprintf(here, sizeof here, "%s", ni->node_id);
        }
        size_t listed = r->n_nodes;
        ct__msg_free(rep);
        if (ct__client.store ||
            ct__client.remote) /* ours, or another thread's while the lock was released */
            return 0;
        if (elsewhere) {
            ct__client.remote = true;
            CT_LOG(CT_LOG_INFO, "client",
                   "%s: objects go through the data ports of the cluster's nodes",
                   force_remote ? "CT_REMOTE_DRIVER=1" : "no ct-node runs on this host");
            return 0;
        }
        if (ct__now_ms() >= until) {
            if (want)
                return ct__error(CT_ENOENT,
                                 "object store: node %s has no shard this process can reach", want);
            if (here[0])
                return ct__error(CT_ENOENT,
                                 "object store: node %s runs on this host (host id %s) but its "
                                 "shard cannot be mapped here",
                                 here, me);
            if (!listed)
                return ct__error(CT_ENOENT,
                                 "object store: the head at %s lists no ct-node with an object "
                                 "store (objects live on nodes: start a ct-node)",
                                 ct__client.addr);
            return ct__error(CT_ENOENT,
                             "object store: no ct-node with an object store runs on this host, "
                             "and no node of the %zu the head lists has a data port to put "
                             "through",
                             listed);
        }
        ct__client_sleep(-1, 20);
    }
}

static int put_done(const ct_object_id *id, uint64_t size, const ct_put_opts *o,
                    const char *node_id)
{
    int wait = o && o->timeout_ms > 0 ? o->timeout_ms : 60000;
    Ct__Envelope e, *rep = NULL;
    Ct__ObjPutDone d = CT__OBJ_PUT_DONE__INIT;
    ct__env_init(&e, 0, ct__client.sender, 0);
    d.object_id.data = (uint8_t *)id->b;
    d.object_id.len = CT_OBJECT_ID_LEN;
    d.size = size;
    d.node_id = (char *)node_id;
    d.replicas = o && o->replicas > 0 ? o->replicas : 1;
    d.preferred_node = (char *)(o && o->node ? o->node : "");
    d.wait_ms = wait;
    e.body_case = CT__ENVELOPE__BODY_OBJ_PUT_DONE;
    e.obj_put_done = &d;
    int rc = ct__client_request(&e, &rep, wait + 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "obj_put_done");
    ct__msg_free(rep);
    return rc;
}

/* A remote driver's put: uploads the bytes to one node (opts.node first, then the one with the
 * most room: shard memory less what the directory lists on it; the next on a refusal), then
 * registers it there with put_done exactly as a local put does. The lock is released during
 * the upload. CT_EEXIST from the node is success when exist_ok. Lock held. */
static int put_remote(const ct_object_id *id, const void *data, size_t len, const ct_put_opts *o,
                      bool exist_ok)
{
    Ct__Envelope *rep = NULL;
    int rc = obj_nodes(&rep);
    if (rc) {
        ct__msg_free(rep);
        return rc;
    }
    Ct__ObjNodesReply *r = rep->obj_nodes_reply;
    size_t n = r->n_nodes;
    Ct__ObjNodeInfo **order = calloc(n ? n : 1, sizeof *order);
    if (!order) {
        ct__msg_free(rep);
        return ct__error(CT_ENOMEM, "ct_put: out of memory");
    }
    memcpy(order, r->nodes, n * sizeof *order);
    for (size_t i = 0; i < n; i++) /* preferred first, then most room (selection sort) */
        for (size_t j = i + 1; j < n; j++) {
            Ct__ObjNodeInfo *a = order[i], *b = order[j];
            uint64_t ra = a->memory_cap > a->bytes_held ? a->memory_cap - a->bytes_held : 0;
            uint64_t rb = b->memory_cap > b->bytes_held ? b->memory_cap - b->bytes_held : 0;
            bool pa = o && o->node && !strcmp(a->node_id, o->node);
            bool pb = o && o->node && !strcmp(b->node_id, o->node);
            if ((pb && !pa) || (pa == pb && rb > ra)) {
                order[i] = b;
                order[j] = a;
            }
        }
    char why[768] = "", node[32] = "";
    rc = CT_ENOENT;
    for (size_t i = 0; i < n && !node[0]; i++) {
        Ct__ObjNodeInfo *ni = order[i];
        size_t k = strlen(why);
        if (!ni->data_port) {
            snprintf(why + k, sizeof why - k, "%s%s: no data port", k ? "; " : "", ni->node_id);
            continue;
        }
        UNLOCK();
        rc = ct_xfer_push(ni->xfer_address, (uint16_t)ni->data_port, id, data, len, 60000);
        LOCK();
        if (!rc || (rc == CT_EEXIST && exist_ok))
            snprintf(node, sizeof node, "%s", ni->node_id);
        else
            snprintf(why + k, sizeof why - k, "%s%s: %s", k ? "; " : "", ni->node_id,
                     ct_last_error());
    }
    free(order);
    ct__msg_free(rep);
    if (!node[0])
        return ct__error(rc ? rc : CT_ENOENT, "ct_put: no node took the object (%zu bytes): %s",
                         len, n ? why : "the head lists no node with an object store");
    return put_done(id, len, o, node);
}

/* create + copy + seal in this node's shard, then register (and replicate). Lock held.
 * CT_EEXIST from the shard is success when exist_ok (content-addressed ids). */
static int put_id(const ct_object_id *id, const void *data, size_t len, const ct_put_opts *o,
                  bool exist_ok)
{
    int rc = ensure_store();
    if (rc)
        return rc;
    if (ct__client.remote)
        return put_remote(id, data, len, o, exist_ok);
    void *p = NULL;
    rc = ct_store_client_create(ct__client.store, id, len, &p);
    if (rc == CT_ECONNRESET) { /* the node went away: use another one */
        retire_store();
        if ((rc = ensure_store()))
            return rc;
        rc = ct_store_client_create(ct__client.store, id, len, &p);
    }
    if (rc == CT_EEXIST && exist_ok) {
        rc = 0;
    } else if (!rc) {
        if (len)
            memcpy(p, data, len);
        rc = ct_store_client_seal(ct__client.store, id);
        if (rc)
            ct_store_client_abort(ct__client.store, id);
    }
    if (!rc)
        rc = put_done(id, len, o, ct__client.store_node);
    return rc;
}

int ct_put(const void *data, size_t len, const ct_put_opts *opts, ct_object_id *id)
{
    if (!id || (len && !data))
        return ct__error(CT_EINVAL, "ct_put: %s is NULL", !id ? "id" : "data");
    if (opts && opts->replicas < 0)
        return ct__error(CT_EINVAL, "ct_put: opts.replicas %d < 0", opts->replicas);
    if (getrandom(id->b, sizeof id->b, 0) != (ssize_t)sizeof id->b)
        return ct__error(CT_EIO, "ct_put: getrandom: %s", strerror(errno));
    LOCK();
    int rc = put_id(id, data, len, opts, false);
    UNLOCK();
    return rc;
}

int ct_put_file(const char *path, const ct_put_opts *opts, ct_object_id *id)
{
    if (!path || !id)
        return ct__error(CT_EINVAL, "ct_put_file: %s is NULL", !path ? "path" : "id");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ct__error(-errno, "ct_put_file: %s: %s", path, strerror(errno));
    struct stat st;
    void *m = NULL;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = ct__error(-errno, "ct_put_file: %s: %s", path, strerror(errno));
        goto out;
    }
    if (st.st_size > 0) {
        m = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            m = NULL;
            rc = ct__error(-errno, "ct_put_file: mmap %s: %s", path, strerror(errno));
            goto out;
        }
    }
    rc = ct_put(m, (size_t)st.st_size, opts, id);
out:
    if (m)
        munmap(m, st.st_size);
    close(fd);
    return rc;
}

int ct_object_create(size_t len, ct_object_id *id, void **data)
{
    if (!id || !data)
        return ct__error(CT_EINVAL, "ct_object_create: %s is NULL", !id ? "id" : "data");
    *data = NULL;
    if (getrandom(id->b, sizeof id->b, 0) != (ssize_t)sizeof id->b)
        return ct__error(CT_EIO, "ct_object_create: getrandom: %s", strerror(errno));
    LOCK();
    int rc = ensure_store();
    if (!rc && ct__client.remote) { /* a private buffer until the seal uploads it */
        struct rbuf *b = calloc(1, sizeof *b);
        if (b && !(b->data = malloc(len ? len : 1))) {
            free(b);
            b = NULL;
        }
        if (b) {
            b->id = *id;
            b->len = len;
            b->next = ct__client.creating;
            ct__client.creating = b;
            *data = b->data;
        } else {
            rc = ct__error(CT_ENOMEM, "ct_object_create: no memory for %zu bytes", len);
        }
        UNLOCK();
        return rc;
    }
    if (!rc)
        rc = ct_store_client_create(ct__client.store, id, len, data);
    if (rc == CT_ECONNRESET) {
        retire_store();
        if (!(rc = ensure_store()))
            rc = ct_store_client_create(ct__client.store, id, len, data);
    }
    UNLOCK();
    return rc;
}

/* Takes a remote driver's object being created out of the list (caller owns it), or NULL. */
static struct rbuf *take_creating(const ct_object_id *id)
{
    for (struct rbuf **pp = &ct__client.creating; *pp; pp = &(*pp)->next)
        if (!memcmp((*pp)->id.b, id->b, CT_OBJECT_ID_LEN)) {
            struct rbuf *b = *pp;
            *pp = b->next;
            return b;
        }
    return NULL;
}

int ct_object_seal(const ct_object_id *id, const ct_put_opts *opts)
{
    if (!id)
        return ct__error(CT_EINVAL, "ct_object_seal: id is NULL");
    LOCK();
    struct rbuf *b = take_creating(id);
    if (b) {
        int rc = put_remote(id, b->data, b->len, opts, false);
        UNLOCK();
        free(b->data);
        free(b);
        return rc;
    }
    uint64_t size = 0;
    int rc = ct__client.store ? ct_store_client_seal(ct__client.store, id)
                              : ct__error(CT_ENOENT, "ct_object_seal: no object being created");
    if (!rc) {
        ct_store_view sv = {0};
        if (!(rc = ct_store_client_get(ct__client.store, id, &sv))) {
            size = sv.size;
            ct_store_client_release(ct__client.store, &sv);
        }
    }
    if (!rc)
        rc = put_done(id, size, opts, ct__client.store_node);
    UNLOCK();
    return rc;
}

int ct_object_abort(const ct_object_id *id)
{
    if (!id)
        return ct__error(CT_EINVAL, "ct_object_abort: id is NULL");
    LOCK();
    struct rbuf *b = take_creating(id);
    if (b) {
        UNLOCK();
        free(b->data);
        free(b);
        return 0;
    }
    int rc = ct__client.store ? ct_store_client_abort(ct__client.store, id)
                              : ct__error(CT_ENOENT, "ct_object_abort: no object being created");
    UNLOCK();
    return rc;
}

static void to_view(const ct_store_view *sv, ct_object_view *v)
{
    v->data = sv->data;
    v->size = sv->size;
    v->id = sv->id;
    v->priv_[0] = sv->obj_;
    v->priv_[1] = sv->map_;
    v->priv_[2] = (void *)(uintptr_t)sv->maplen_;
}

static int locate(const ct_object_id *ids, int n, Ct__Envelope **rep);
static char remote_view; /* ct_object_view.priv_[0] of a remote driver's copy */

/* A remote driver's get: waits up to timeout_ms for a holder (as ObjFetch does for a node),
 * then pulls the bytes from the holders' data ports into a private buffer (the nodes' puller,
 * CRC-32C checked, failing over between holders). The lock is released during the pull.
 * Lock held. */
static int get_remote(const ct_object_id *id, int timeout_ms, ct_object_view *view)
{
    char hx[41];
    ct_object_id_hex(id, hx);
    int64_t until = ct__now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        Ct__Envelope *lrep = NULL, *nrep = NULL;
        int rc = locate(id, 1, &lrep);
        Ct__ObjLocation *l = rc ? NULL : lrep->obj_locate_reply->objects[0];
        if (!rc && l->found)
            rc = obj_nodes(&nrep);
        if (!rc && l->found) {
            Ct__ObjNodesReply *r = nrep->obj_nodes_reply;
            const char *holders[16];
            uint16_t ports[16];
            int nh = 0;
            for (size_t i = 0; i < l->n_node_ids && nh < 16; i++)
                for (size_t j = 0; j < r->n_nodes; j++)
                    if (!strcmp(r->nodes[j]->node_id, l->node_ids[i])) {
                        holders[nh] = r->nodes[j]->xfer_address;
                        ports[nh++] = (uint16_t)r->nodes[j]->data_port;
                        break;
                    }
            ct_xfer_pull_opts po = {.size_known = 1, .size = l->size, .data_ports = ports};
            void *data = NULL;
            uint64_t size = 0;
            UNLOCK();
            rc = ct_xfer_pull_mem(id, holders, nh, &po, &data, &size, NULL);
            LOCK();
            if (!rc) {
                view->data = data;
                view->size = size;
                view->id = *id;
                view->priv_[0] = &remote_view;
                view->priv_[1] = data;
            }
        } else if (!rc) {
            rc = CT_ENOENT; /* not put yet */
        }
        ct__msg_free(lrep);
        ct__msg_free(nrep);
        if (rc != CT_ENOENT && rc != CT_ERETRY)
            return rc;
        if (ct__now_ms() >= until)
            return rc == CT_ENOENT ? ct__error(CT_ENOENT, "ct_get: object %s: no node holds it", hx)
                                   : rc;
        ct__client_sleep(-1, 10);
    }
}

int ct_get(const ct_object_id *id, int timeout_ms, ct_object_view *view)
{
    if (!id || !view)
        return ct__error(CT_EINVAL, "ct_get: %s is NULL", !id ? "id" : "view");
    memset(view, 0, sizeof *view);
    char hx[41];
    ct_object_id_hex(id, hx);
    LOCK();
    ct_store_view sv = {0};
    Ct__Envelope *rep = NULL;
    int rc = ensure_store();
    if (rc)
        goto out;
    if (ct__client.remote) {
        rc = get_remote(id, timeout_ms, view);
        UNLOCK();
        return rc;
    }
    rc = ct_store_client_get(ct__client.store, id, &sv);
    if (rc == CT_ECONNRESET) { /* the node went away: use another one */
        retire_store();
        if ((rc = ensure_store()))
            goto out;
        rc = ct_store_client_get(ct__client.store, id, &sv);
    }
    if (rc != CT_ENOENT)
        goto out;
    /* not here: the head has this node pull it, then it is local */
    Ct__Envelope e;
    Ct__ObjFetch f = CT__OBJ_FETCH__INIT;
    ct__env_init(&e, 0, ct__client.sender, 0);
    f.object_id.data = (uint8_t *)id->b;
    f.object_id.len = CT_OBJECT_ID_LEN;
    f.node_id = ct__client.store_node;
    f.wait_ms = timeout_ms > 0 ? timeout_ms : 0;
    e.body_case = CT__ENVELOPE__BODY_OBJ_FETCH;
    e.obj_fetch = &f;
    rc = ct__client_request(&e, &rep, (timeout_ms > 0 ? timeout_ms : 60000) + 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OBJ_LOCATE_REPLY, "obj_fetch");
    if (rc)
        goto out;
    rc = ct_store_client_get(ct__client.store, id, &sv);
    if (rc == CT_ENOENT)
        rc = ct__error(CT_ENOENT, "ct_get: object %s vanished from node %s (freed?)", hx,
                       ct__client.store_node);
out:
    ct__msg_free(rep);
    if (!rc)
        to_view(&sv, view);
    UNLOCK();
    return rc;
}

void ct_object_release(ct_object_view *v)
{
    if (!v || !v->priv_[0])
        return;
    if (v->priv_[0] == &remote_view) { /* a remote driver's own copy */
        free(v->priv_[1]);
        memset(v, 0, sizeof *v);
        return;
    }
    ct_store_view sv = {0};
    sv.data = v->data;
    sv.size = v->size;
    sv.id = v->id;
    sv.obj_ = v->priv_[0];
    sv.map_ = v->priv_[1];
    sv.maplen_ = (uint64_t)(uintptr_t)v->priv_[2];
    LOCK();
    if (ct__client.store && sv.obj_ == (void *)ct__client.store)
        ct_store_client_release(ct__client.store, &sv);
    for (int i = 0; i < ct__client.nold; i++)
        if (sv.obj_ == (void *)ct__client.old_stores[i])
            ct_store_client_release(ct__client.old_stores[i], &sv);
    UNLOCK();
    memset(v, 0, sizeof *v);
}

static int locate(const ct_object_id *ids, int n, Ct__Envelope **rep)
{
    ProtobufCBinaryData *b = calloc(n ? n : 1, sizeof *b);
    if (!b)
        return ct__error(CT_ENOMEM, "ct_wait: out of memory");
    for (int i = 0; i < n; i++) {
        b[i].data = (uint8_t *)ids[i].b;
        b[i].len = CT_OBJECT_ID_LEN;
    }
    Ct__Envelope e;
    Ct__ObjLocate l = CT__OBJ_LOCATE__INIT;
    ct__env_init(&e, 0, ct__client.sender, 5000);
    l.n_object_ids = n;
    l.object_ids = b;
    e.body_case = CT__ENVELOPE__BODY_OBJ_LOCATE;
    e.obj_locate = &l;
    int rc = ct__client_request(&e, rep, 5000);
    if (!rc)
        rc = ct__msg_expect(*rep, CT__ENVELOPE__BODY_OBJ_LOCATE_REPLY, "obj_locate");
    if (!rc && (*rep)->obj_locate_reply->n_objects != (size_t)n)
        rc = ct__error(CT_EPROTO, "obj_locate: %zu answers for %d ids",
                       (*rep)->obj_locate_reply->n_objects, n);
    free(b);
    return rc;
}

int ct_wait(const ct_object_id *ids, int n, int num_ready, int timeout_ms)
{
    if (!ids || n <= 0 || num_ready < 0 || num_ready > n)
        return ct__error(CT_EINVAL, "ct_wait: need ids, n > 0 and 0 <= num_ready <= n");
    int64_t until = ct__now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        Ct__Envelope *rep = NULL;
        LOCK();
        int rc = locate(ids, n, &rep);
        UNLOCK();
        int ready = 0;
        for (int i = 0; !rc && i < n; i++)
            ready += rep->obj_locate_reply->objects[i]->found;
        ct__msg_free(rep);
        if (rc)
            return rc;
        if (ready >= num_ready)
            return ready;
        if (ct__now_ms() >= until)
            return ct__error(CT_ETIMEDOUT, "ct_wait: %d of %d objects ready, %d wanted", ready, n,
                             num_ready);
        usleep(2000);
    }
}

int ct_free(const ct_object_id *id)
{
    if (!id)
        return ct__error(CT_EINVAL, "ct_free: id is NULL");
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__ObjFree f = CT__OBJ_FREE__INIT;
    ct__env_init(&e, 0, ct__client.sender, 5000);
    f.object_id.data = (uint8_t *)id->b;
    f.object_id.len = CT_OBJECT_ID_LEN;
    e.body_case = CT__ENVELOPE__BODY_OBJ_FREE;
    e.obj_free = &f;
    int rc = ct__client_request(&e, &rep, 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "obj_free");
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

int ct_object_nodes(const ct_object_id *id, char (*nodes)[32], int cap, int *n, uint64_t *size)
{
    if (!id)
        return ct__error(CT_EINVAL, "ct_object_nodes: id is NULL");
    if (n)
        *n = 0;
    LOCK();
    Ct__Envelope *rep = NULL;
    int rc = locate(id, 1, &rep);
    if (!rc) {
        Ct__ObjLocation *l = rep->obj_locate_reply->objects[0];
        if (!l->found) {
            char hx[41];
            rc = ct__error(CT_ENOENT, "object %s: no node holds it", ct_object_id_hex(id, hx));
        }
        for (size_t i = 0; !rc && i < l->n_node_ids && (int)i < cap && nodes; i++)
            snprintf(nodes[i], 32, "%s", l->node_ids[i]);
        if (!rc && n)
            *n = (int)l->n_node_ids;
        if (!rc && size)
            *size = l->size;
    }
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

int ct_object_store_nodes(void)
{
    LOCK();
    Ct__Envelope *rep = NULL;
    int rc = obj_nodes(&rep);
    if (!rc) {
        Ct__ObjNodesReply *r = rep->obj_nodes_reply;
        for (size_t i = 0; i < r->n_nodes; i++)
            rc += r->nodes[i]->xfer_address && r->nodes[i]->xfer_address[0];
    }
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

const char *ct_object_node(void)
{
    return ct__client.store_node;
}

int ct_object_id_from_args(const void *args, size_t len, int i, ct_object_id *id)
{
    if (!args || !id || i < 0 || (size_t)(i + 1) * CT_OBJECT_ID_LEN > len)
        return ct__error(CT_EINVAL, "ct_object_id_from_args: args of %zu bytes hold no id #%d", len,
                         i);
    memcpy(id->b, (const uint8_t *)args + (size_t)i * CT_OBJECT_ID_LEN, CT_OBJECT_ID_LEN);
    return 0;
}

/* Code shipping: puts /proc/self/exe into this node's shard under its SHA-1 (once per
 * process), so nodes start actors from their cached copy. On failure (no shard reachable)
 * actors are started from the executable's path as before. Lock held. */
void ct__objects_ship_exe(void)
{
    ct__client.exe_state = 2; /* in progress: ct__client_request releases the lock */
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    struct stat st;
    void *m = MAP_FAILED;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0)
        goto out;
    m = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        goto out;
    ct__sha1(m, st.st_size, ct__client.exe_id.b);
    if (put_id(&ct__client.exe_id, m, st.st_size, NULL, true)) {
        CT_LOG(CT_LOG_WARN, "client", "cannot ship the executable (actors start from %s): %s",
               ct__client.exe, ct_last_error());
        goto out;
    }
    ct__client.exe_state = 1;
out:
    if (ct__client.exe_state == 2)
        ct__client.exe_state = -1;
    if (m != MAP_FAILED)
        munmap(m, st.st_size);
    if (fd >= 0)
        close(fd);
}

void ct__objects_reset(void)
{
    ct_store_client_destroy(&ct__client.store);
    for (int i = 0; i < ct__client.nold; i++)
        ct_store_client_destroy(&ct__client.old_stores[i]);
    ct__client.nold = 0;
    ct__client.store_node[0] = 0;
    ct__client.remote = false;
    while (ct__client.creating) {
        struct rbuf *b = ct__client.creating;
        ct__client.creating = b->next;
        free(b->data);
        free(b);
    }
    ct__client.exe_state = 0;
}
