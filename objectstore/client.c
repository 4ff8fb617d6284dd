/* objectstore/client.c — ct_store_client: another process's handle on a node's shard.
 *
 * Connects to the shard's abstract unix socket, maps the arena read-only once, and turns
 * get/release into pin/unpin requests; the bytes are read straight from the shared mapping.
 * Writes (create/seal) map the arena read-write on first use. Not here: the shard side. */
#define _GNU_SOURCE
#include "objectstore/store.h"
#include "objectstore/store_wire.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/common.h"

struct ct_store_client {
    char name[CT_STORE_NAME_MAX + 1];
    char shm_name[256];
    int fd;
    uint64_t cap;
    unsigned char *ro; /* arena, read-only */
    unsigned char *rw; /* arena, read-write, mapped on the first create */
    pthread_mutex_t mu;
};

/* One request, one reply (none for RELEASE). Caller holds c->mu. */
static int call(ct_store_client *c, uint32_t op, const ct_object_id *id, uint64_t size,
                ct__store_rep *rp)
{
    ct__store_req rq = {.op = op, .size = size};
    if (id)
        rq.id = *id;
    if (send(c->fd, &rq, sizeof rq, MSG_NOSIGNAL) != sizeof rq)
        return ct__error(CT_ECONNRESET, "store client %s: send: %s", c->name, strerror(errno));
    if (op == CT__STORE_OP_RELEASE)
        return 0;
    ssize_t n;
    do
        n = recv(c->fd, rp, sizeof *rp, 0);
    while (n < 0 && errno == EINTR);
    if (n != sizeof *rp)
        return ct__error(CT_ECONNRESET, "store client %s: shard closed the connection", c->name);
    rp->err[sizeof rp->err - 1] = '\0';
    rp->path[sizeof rp->path - 1] = '\0';
    if (rp->status)
        return ct__error(rp->status, "%s", rp->err);
    return 0;
}

ct_store_client *ct_store_client_new(const char *store_name)
{
    if (ct__store_check_name(store_name))
        return NULL;
    ct_store_client *c = calloc(1, sizeof *c);
    if (!c) {
        ct__error(CT_ENOMEM, "ct_store_client_new: out of memory");
        return NULL;
    }
    snprintf(c->name, sizeof c->name, "%s", store_name);
    c->ro = c->rw = MAP_FAILED;
    pthread_mutex_init(&c->mu, NULL);
    struct sockaddr_un sa;
    socklen_t salen = ct__store_sockaddr(&sa, store_name);
    c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, salen) != 0) {
        ct__error(errno == ECONNREFUSED ? CT_ENOENT : -errno, "store client: no store '%s': %s",
                  store_name, strerror(errno));
        goto err;
    }
    ct__store_rep rp;
    if (call(c, CT__STORE_OP_HELLO, NULL, 0, &rp))
        goto err;
    snprintf(c->shm_name, sizeof c->shm_name, "%s", rp.path);
    c->cap = rp.size;
    int fd = shm_open(c->shm_name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) {
        ct__error(-errno, "store client %s: shm_open %s: %s", store_name, c->shm_name,
                  strerror(errno));
        goto err;
    }
    c->ro = mmap(NULL, c->cap, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (c->ro == MAP_FAILED) {
        ct__error(-e, "store client %s: mmap: %s", store_name, strerror(e));
        goto err;
    }
    return c;
err:
    ct_store_client_destroy(&c);
    return NULL;
}

void ct_store_client_destroy(ct_store_client **cp)
{
    if (!cp || !*cp)
        return;
    ct_store_client *c = *cp;
    if (c->fd >= 0)
        close(c->fd);
    if (c->ro != MAP_FAILED)
        munmap(c->ro, c->cap);
    if (c->rw != MAP_FAILED)
        munmap(c->rw, c->cap);
    pthread_mutex_destroy(&c->mu);
    free(c);
    *cp = NULL;
}

int ct_store_client_get(ct_store_client *c, const ct_object_id *id, ct_store_view *view)
{
    if (!c || !id || !view)
        return ct__error(CT_EINVAL, "ct_store_client_get: NULL argument");
    memset(view, 0, sizeof *view);
    ct__store_rep rp;
    pthread_mutex_lock(&c->mu);
    int rc = call(c, CT__STORE_OP_GET, id, 0, &rp);
    if (rc)
        goto out;
    view->id = *id;
    view->size = rp.size;
    view->obj_ = c; /* marks the view as pinned */
    if (rp.kind == CT__STORE_KIND_FILE) {
        rc = ct__map_file(rp.path, rp.size, &view->map_, &view->maplen_);
        if (rc) {
            call(c, CT__STORE_OP_RELEASE, id, 0, &rp);
            memset(view, 0, sizeof *view);
            goto out;
        }
        view->data = view->map_ ? view->map_ : (const void *)"";
    } else if (rp.off + rp.size > c->cap) {
        rc = ct__error(CT_EPROTO, "store client %s: object outside the arena", c->name);
        call(c, CT__STORE_OP_RELEASE, id, 0, &rp);
        memset(view, 0, sizeof *view);
    } else {
        view->data = c->ro + rp.off;
    }
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void ct_store_client_release(ct_store_client *c, ct_store_view *view)
{
    if (!c || !view || !view->obj_)
        return;
    if (view->map_)
        munmap(view->map_, view->maplen_);
    ct__store_rep rp;
    pthread_mutex_lock(&c->mu);
    call(c, CT__STORE_OP_RELEASE, &view->id, 0, &rp);
    pthread_mutex_unlock(&c->mu);
    memset(view, 0, sizeof *view);
}

int ct_store_client_create(ct_store_client *c, const ct_object_id *id, uint64_t size, void **data)
{
    if (!c || !id || !data)
        return ct__error(CT_EINVAL, "ct_store_client_create: NULL argument");
    ct__store_rep rp;
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (c->rw == MAP_FAILED) {
        int fd = shm_open(c->shm_name, O_RDWR | O_CLOEXEC, 0);
        if (fd < 0) {
            rc = ct__error(-errno, "store client %s: shm_open %s: %s", c->name, c->shm_name,
                           strerror(errno));
            goto out;
        }
        c->rw = mmap(NULL, c->cap, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        int e = errno;
        close(fd);
        if (c->rw == MAP_FAILED) {
            rc = ct__error(-e, "store client %s: mmap: %s", c->name, strerror(e));
            goto out;
        }
    }
    rc = call(c, CT__STORE_OP_CREATE, id, size, &rp);
    if (!rc)
        *data = c->rw + rp.off;
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int simple(ct_store_client *c, uint32_t op, const ct_object_id *id, ct__store_rep *rp)
{
    if (!c || !id)
        return ct__error(CT_EINVAL, "ct_store_client: NULL argument");
    pthread_mutex_lock(&c->mu);
    int rc = call(c, op, id, 0, rp);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int ct_store_client_seal(ct_store_client *c, const ct_object_id *id)
{
    ct__store_rep rp;
    return simple(c, CT__STORE_OP_SEAL, id, &rp);
}

int ct_store_client_abort(ct_store_client *c, const ct_object_id *id)
{
    ct__store_rep rp;
    return simple(c, CT__STORE_OP_ABORT, id, &rp);
}

int ct_store_client_delete(ct_store_client *c, const ct_object_id *id)
{
    ct__store_rep rp;
    return simple(c, CT__STORE_OP_DELETE, id, &rp);
}

int ct_store_client_contains(ct_store_client *c, const ct_object_id *id)
{
    ct__store_rep rp;
    int rc = simple(c, CT__STORE_OP_CONTAINS, id, &rp);
    return rc ? rc : rp.size ? 1 : 0;
}
