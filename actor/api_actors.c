/* actor/api_actors.c — actors as the driver sees them: the class registry (written before
 * ct_init, read-only after; registration closes at ct_serve_if_worker), this program's
 * executable and command line (what CreateActor carries), creating actors (one or many at once,
 * through the head), their handles, direct calls over ZMTP (zmtp.c) and futures. Not in here: the
 * actor's own serve loop (worker.c), placement groups (api_cluster.c). */
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

#define MAX_CLASSES 128
/* How long a waiting call reads its actor's socket before it sleeps (see wait_locked). */
#define CALL_SPIN_NS 50000
#define HANDSHAKE_MS 60000 /* an actor's create may run this long before it answers */
static struct {
    char name[64];
    ct_actor_class cls;
} classes[MAX_CLASSES];
static int nclasses;
/* Set once ct_serve_if_worker (ct_init calls it) returned in this process: an actor stops
 * there, so registrations after it are not seen by this program's actors. Main thread only. */
static bool registration_closed;

void ct__registration_close(void)
{
    registration_closed = true;
}

bool ct__registration_closed(void)
{
    return registration_closed;
}

int ct_actor_class_register(const char *name, const ct_actor_class *cls)
{
    if (!name || !*name || strlen(name) >= sizeof classes[0].name)
        return ct__error(CT_EINVAL, "ct_actor_class_register: name empty or longer than 63");
    if (!cls)
        return ct__error(CT_EINVAL, "ct_actor_class_register(%s): cls is NULL", name);
    if (ct__class_find(name))
        return ct__error(CT_EEXIST, "ct_actor_class_register: %s already registered", name);
    /* an actor is this program run again up to ct_init, where it starts serving: it would
     * never see a later registration */
    if (ct__registration_closed())
        return ct__error(CT_EINVAL,
                         "ct_actor_class_register(\"%s\"): called after ct_init(); register "
                         "every actor class before ct_init() (actors run the program only up to "
                         "ct_init(), so they would never know this class)",
                         name);
    if (nclasses == MAX_CLASSES)
        return ct__error(CT_ENOSPC, "ct_actor_class_register: more than %d classes", MAX_CLASSES);
    snprintf(classes[nclasses].name, sizeof classes[0].name, "%s", name);
    classes[nclasses++].cls = *cls;
    return 0;
}

const ct_actor_class *ct__class_find(const char *name)
{
    for (int i = 0; i < nclasses; i++)
        if (!strcmp(classes[i].name, name))
            return &classes[i].cls;
    return NULL;
}

/* ---- actors ---- */

int ct__client_read_self(void)
{
    ssize_t n = readlink("/proc/self/exe", ct__client.exe, sizeof ct__client.exe - 1);
    if (n <= 0)
        return ct__error(CT_EIO, "ct_init: readlink /proc/self/exe: %s", strerror(errno));
    ct__client.exe[n] = 0;
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f)
        return ct__error(CT_EIO, "ct_init: /proc/self/cmdline: %s", strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + len, 1, cap - len, f)) > 0) {
        len += r;
        if (len == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    fclose(f);
    if (!buf)
        return ct__error(CT_ENOMEM, "ct_init: out of memory");
    ct__client.cmdline = buf;
    ct__client.cmdline_len = len;
    return 0;
}

void ct__actor_free(ct_actor *a)
{
    while (a->pending) {
        ct_future *f = a->pending;
        ct__future_complete(f, CT_ECANCELED, NULL, 0, "actor handle released");
        f->a = NULL;
    }
    if (a->prev)
        a->prev->next = a->next;
    else if (ct__client.actors == a)
        ct__client.actors = a->next;
    if (a->next)
        a->next->prev = a->prev;
    ct__zconn_close(&a->zc);
    free(a);
}

int ct__client_fill_res(Ct__Resource *r, Ct__Resource **rp, double cpu, double gpu,
                        const ct_resource *custom, int ncustom)
{
    int n = 0;
    if (cpu > 0) {
        ct__resource__init(&r[n]);
        r[n].name = "CPU";
        r[n].amount = cpu;
        rp[n] = &r[n];
        n++;
    }
    if (gpu > 0) {
        ct__resource__init(&r[n]);
        r[n].name = "GPU";
        r[n].amount = gpu;
        rp[n] = &r[n];
        n++;
    }
    for (int i = 0; i < ncustom && custom[i].name; i++) {
        ct__resource__init(&r[n]);
        r[n].name = (char *)custom[i].name;
        r[n].amount = custom[i].amount;
        rp[n] = &r[n];
        n++;
    }
    return n;
}

/* Checks create arguments; fills the resource list. */
static int create_check(const char *cls, const ct_resources *res, const void *args, size_t len,
                        ct_resources *r)
{
    if (!cls || !*cls)
        return ct__error(CT_EINVAL, "ct_actor_create: class name is empty");
    if (!ct__class_find(cls))
        return ct__error(CT_ENOENT, "ct_actor_create: class %s is not registered", cls);
    if (len && !args)
        return ct__error(CT_EINVAL, "ct_actor_create: args is NULL with len %zu", len);
    if (len > CT_ZYGOTE_MAX_ARGS)
        return ct__error(CT_EINVAL, "ct_actor_create: args of %zu bytes, at most %d", len,
                         CT_ZYGOTE_MAX_ARGS);
    *r = res ? *res : (ct_resources){.bundle = -1};
    if (r->cpu < 0 || r->gpu < 0)
        return ct__error(CT_EINVAL, "ct_actor_create: negative cpu or gpu");
    for (int i = 0; i < 8 && r->custom[i].name; i++)
        if (r->custom[i].amount < 0 || !*r->custom[i].name)
            return ct__error(CT_EINVAL, "ct_actor_create: custom[%d] (%s): empty or negative", i,
                             r->custom[i].name);
    return 0;
}

/* Sends one CreateActor; its request id in *req. Lock held. */
static int create_send(const char *cls, const ct_resources *r, const void *args, size_t len,
                       int timeout, uint64_t *req)
{
    Ct__Resource rr[10];
    Ct__Resource *rp[10];
    int nr = ct__client_fill_res(rr, rp, r->cpu, r->gpu, r->custom, 8);
    if (!ct__client.cmdline) { /* an actor creating actors: learn its own executable now */
        int rc = ct__client_read_self();
        if (rc)
            return rc;
    }
    /* argv from /proc/self/cmdline: NUL-separated */
    char *argv[256];
    size_t nargv = 0;
    for (size_t off = 0; off < ct__client.cmdline_len && nargv < 256;
         off += strlen(ct__client.cmdline + off) + 1)
        argv[nargv++] = ct__client.cmdline + off;
    Ct__Envelope e;
    Ct__CreateActor c = CT__CREATE_ACTOR__INIT;
    ct__env_init(&e, ++ct__client.next_req, ct__client.sender, timeout);
    c.class_name = (char *)cls;
    c.n_resources = nr;
    c.resources = rp;
    c.args.data = (uint8_t *)args;
    c.args.len = len;
    c.exe_path = ct__client.exe;
    c.n_argv = nargv;
    c.argv = argv;
    c.strategy = r->strategy == CT_SPREAD ? CT__STRATEGY__SPREAD : CT__STRATEGY__PACK;
    c.pg_id = r->pg ? r->pg->id : "";
    c.bundle_index = r->pg ? r->bundle : -1;
    if (ct__client.exe_state == 1) {
        c.exe_object_id.data = ct__client.exe_id.b;
        c.exe_object_id.len = CT_OBJECT_ID_LEN;
    }
    e.body_case = CT__ENVELOPE__BODY_CREATE_ACTOR;
    e.create_actor = &c;
    *req = e.req_id;
    return ct__client_send(&e);
}

/* Turns a CreateActor reply into a connected handle. Lock held. */
static int create_finish(Ct__Envelope *rep, ct_actor **out)
{
    int rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_CREATE_ACTOR_REPLY, "create_actor");
    if (rc)
        return rc;
    ct_actor *a = calloc(1, sizeof *a);
    if (!a)
        return ct__error(CT_ENOMEM, "ct_actor_create: out of memory");
    Ct__CreateActorReply *cr = rep->create_actor_reply;
    if (ct__client.nowned == ct__client.capowned) {
        int cap = ct__client.capowned ? 2 * ct__client.capowned : 64;
        char(*no)[32] = realloc(ct__client.owned, cap * sizeof *no);
        if (!no) {
            free(a);
            return ct__error(CT_ENOMEM, "ct_actor_create: out of memory");
        }
        ct__client.owned = no;
        ct__client.capowned = cap;
    }
    snprintf(ct__client.owned[ct__client.nowned++], sizeof ct__client.owned[0], "%s", cr->actor_id);
    snprintf(a->id, sizeof a->id, "%s", cr->actor_id);
    snprintf(a->node, sizeof a->node, "%s", cr->node_id);
    snprintf(a->addr, sizeof a->addr, "%s", cr->address);
    a->pid = cr->pid;
    if ((rc = ct__zconn_connect(&a->zc, a->addr))) {
        free(a);
        return ct__error(CT_EDEAD, "ct_actor_create: actor %s at %s: %s", cr->actor_id, cr->address,
                         ct_last_error());
    }
    a->next = ct__client.actors;
    if (ct__client.actors)
        ct__client.actors->prev = a;
    ct__client.actors = a;
    *out = a;
    return 0;
}

int ct_actor_create_many(const char *cls, const ct_resources *res, const void *args, size_t len,
                         int n, ct_actor **out)
{
    if (!out || n <= 0)
        return ct__error(CT_EINVAL, "ct_actor_create: out is NULL or n <= 0");
    memset(out, 0, n * sizeof *out);
    ct_resources r;
    int rc = create_check(cls, res, args, len, &r);
    if (rc)
        return rc;
    int timeout = r.timeout_ms > 0 ? r.timeout_ms : 30000;
    Ct__Envelope **reps = calloc(n, sizeof *reps);
    if (!reps)
        return ct__error(CT_ENOMEM, "ct_actor_create: out of memory");
    LOCK();
    uint64_t first = 0, req = 0;
    if ((rc = ct__client_ensure()))
        goto out;
    if (!ct__client.exe_state)
        ct__objects_ship_exe();
    while (ct__client.exe_state == 2) /* another thread is shipping it */
        ct__client_sleep(-1, 5);
    for (int i = 0; i < n; i++) {
        if ((rc = create_send(cls, &r, args, len, timeout, &req)))
            goto out;
        if (i == 0)
            first = req;
    }
    /* each actor is connected as soon as its reply is in, while later ones still start, so
     * that the connects overlap the forks instead of trailing them */
    int got = 0, first_err = 0;
    char first_msg[1024] = ""; /* first_err's message (a later failure would overwrite it) */
    int64_t until = ct__now_ms() + timeout + 1000;
    hwait w = {.lo = first, .hi = req, .slots = reps};
    ct__client_wait_add(&w);
    for (int scan = 0; got < n;) {
        ct__client_drain(0, 0, NULL);
        for (int i = scan; i < n; i++)
            if (reps[i] && reps[i]->req_id) {
                int r1 = create_finish(reps[i], &out[i]);
                /* the first failure, or one that will not pass on a retry (CT_ESTART) */
                if (r1 && (!first_err || (r1 == CT_ESTART && first_err != CT_ESTART))) {
                    first_err = r1;
                    snprintf(first_msg, sizeof first_msg, "%s", ct_last_error());
                }
                reps[i]->req_id = 0; /* finished (out[i] stays NULL on failure) */
                got++;
            }
        while (scan < n && reps[scan]) /* everything before scan is finished */
            scan++;
        if (got == n)
            break;
        int64_t left = until - ct__now_ms();
        if (left <= 0 || !ct__client.head) {
            ct__client_wait_remove(&w);
            rc = ct__error(CT_ETIMEDOUT, "ct_actor_create: %d of %d actors not created in %d ms",
                           n - got, n, timeout);
            goto out;
        }
        ct__client_sleep(-1, left);
    }
    ct__client_wait_remove(&w);
    rc = first_err ? ct__error(first_err, "%s", first_msg) : 0;
out:
    for (int i = 0; i < n; i++)
        ct__msg_free(reps[i]);
    free(reps);
    UNLOCK();
    return rc;
}

int ct_actor_create(const char *cls, const ct_resources *res, const void *args, size_t len,
                    ct_actor **out)
{
    if (!out)
        return ct__error(CT_EINVAL, "ct_actor_create: out is NULL");
    return ct_actor_create_many(cls, res, args, len, 1, out);
}

/* Completes the connection's challenge-response (zmtp.c) so that the held-back call leaves now:
 * a caller may send to several actors before it waits on any. The actor answers once its
 * create ran (its serve loop is not running before). Lock held; released while polling. */
static int finish_handshake(ct_actor *a, const char *method)
{
    int64_t until = ct__now_ms() + HANDSHAKE_MS;
    while (ct__zconn_held(&a->zc) && !a->dead) {
        int64_t left = until - ct__now_ms();
        if (left <= 0)
            return ct__error(CT_ETIMEDOUT,
                             "ct_actor_call(%s): actor %s did not answer the handshake in %d ms",
                             method, a->id, HANDSHAKE_MS);
        int fd = a->zc.fd;
        UNLOCK();
        struct pollfd p = {fd, POLLIN, 0};
        poll(&p, 1, left > 100 ? 100 : (int)left);
        LOCK();
        ct__actor_drain(a);
    }
    return a->dead ? CT_EDEAD : 0;
}

static int send_call(ct_actor *a, const char *method, const void *args, size_t len, ct_future *f)
{
    Ct__Envelope e;
    Ct__Call c = CT__CALL__INIT;
    ct__env_init(&e, ++ct__client.next_req, ct__client.sender, 0);
    c.method = (char *)method;
    c.args.data = (uint8_t *)args;
    c.args.len = len;
    e.body_case = CT__ENVELOPE__BODY_CALL;
    e.call = &c;
    memset(f, 0, sizeof *f);
    f->a = a;
    f->req = e.req_id;
    size_t n = ct__envelope__get_packed_size(&e);
    uint8_t stack[2048];
    uint8_t *buf = n <= sizeof stack ? stack : malloc(n);
    if (!buf)
        return ct__error(CT_ENOMEM, "ct_actor_call(%s): out of memory for %zu bytes", method, n);
    ct__envelope__pack(&e, buf);
    int rc = ct__zconn_send(&a->zc, buf, n, true);
    if (buf != stack)
        free(buf);
    if (!rc && ct__zconn_held(&a->zc) && (rc = finish_handshake(a, method)) == CT_ETIMEDOUT)
        return rc;
    if (rc) {
        ct__actor_mark_dead(a, "connection to the actor lost");
        return ct__error(CT_EDEAD, "ct_actor_call(%s): actor %s is gone", method, a->id);
    }
    f->next = a->pending;
    if (a->pending)
        a->pending->prev = f;
    a->pending = f;
    return 0;
}

/* Waits for f; the lock is held on entry and exit and released while sleeping. f must not be
 * destroyed meanwhile by another thread. */
static int wait_locked(ct_future *f, int timeout_ms, void **result, size_t *result_len)
{
    int64_t until = timeout_ms > 0 ? ct__now_ms() + timeout_ms : INT64_MAX;
    /* A warm actor answers in tens of microseconds, less than a sleep and wake-up costs when
     * the CPUs are idle: read its socket for a moment before sleeping. */
    for (int64_t spin_end = ct__now_ns() + CALL_SPIN_NS;
         !f->done && f->a && !f->a->dead && ct__now_ns() < spin_end;)
        ct__actor_drain(f->a);
    while (!f->done) {
        if (!f->a)
            return ct__error(CT_ECANCELED, "ct_future_wait: the actor handle was released");
        ct__actor_drain(f->a);
        if (f->done)
            break;
        if (ct__client.head)
            ct__client_drain(0, 0, NULL);
        if (f->done)
            break;
        int64_t left = until - ct__now_ms();
        if (left <= 0)
            return ct__error(CT_ETIMEDOUT, "actor %s: no reply within %d ms", f->a->id, timeout_ms);
        ct__client_sleep(f->a->zc.fd, left);
    }
    if (f->rc)
        return ct__error(f->rc, "%s", f->err[0] ? f->err : ct_strerror(f->rc));
    if (result) {
        *result = f->res;
        f->res = NULL;
    }
    if (result_len)
        *result_len = f->len;
    return 0;
}

/* The first of fs[0, n) that is done (a NULL handle counts as done), -1 when none. */
static int first_done(ct_future *const *fs, int n)
{
    for (int i = 0; i < n; i++)
        if (fs[i] && (fs[i]->done || !fs[i]->a))
            return i;
    return -1;
}

int ct_future_wait_any(ct_future *const *fs, int n, int timeout_ms)
{
    if (!fs || n < 0)
        return ct__error(CT_EINVAL, "ct_future_wait_any: %s", !fs ? "fs is NULL" : "n < 0");
    int64_t until = timeout_ms > 0 ? ct__now_ms() + timeout_ms : INT64_MAX;
    int rc;
    LOCK();
    for (;;) {
        int fds[SLEEP_MAX_FDS], nfds = 0, pending = 0;
        for (int i = 0; i < n; i++)
            if (fs[i] && fs[i]->a && !fs[i]->done) {
                ct__actor_drain(fs[i]->a);
                pending++;
                if (nfds < SLEEP_MAX_FDS)
                    fds[nfds++] = fs[i]->a->zc.fd;
            }
        if (ct__client.head)
            ct__client_drain(0, 0, NULL); /* death events complete futures too */
        if ((rc = first_done(fs, n)) >= 0)
            break;
        if (!pending) {
            rc = ct__error(CT_ENOENT, "ct_future_wait_any: no future given");
            break;
        }
        int64_t left = until - ct__now_ms();
        if (left <= 0) {
            rc = ct__error(CT_ETIMEDOUT, "ct_future_wait_any: none of %d calls done within %d ms",
                           pending, timeout_ms);
            break;
        }
        ct__client_sleep_fds(fds, nfds, left);
    }
    UNLOCK();
    return rc;
}

int ct_actor_call(ct_actor *a, const char *method, const void *args, size_t len, void **result,
                  size_t *result_len, int timeout_ms)
{
    if (result)
        *result = NULL;
    if (result_len)
        *result_len = 0;
    if (!a || !method || (len && !args))
        return ct__error(CT_EINVAL, "ct_actor_call: %s is NULL",
                         !a        ? "actor"
                         : !method ? "method"
                                   : "args");
    LOCK();
    int rc;
    ct_future f;
    if (a->dead) {
        rc = ct__error(CT_EDEAD, "ct_actor_call(%s): actor %s is dead", method, a->id);
        goto out;
    }
    if ((rc = send_call(a, method, args, len, &f)))
        goto out;
    rc = wait_locked(&f, timeout_ms, result, result_len);
    if (!f.done)
        ct__future_complete(&f, CT_ECANCELED, NULL, 0, NULL); /* unlink */
    free(f.res);
out:
    UNLOCK();
    return rc;
}

int ct_actor_call_async(ct_actor *a, const char *method, const void *args, size_t len,
                        ct_future **out)
{
    if (!out)
        return ct__error(CT_EINVAL, "ct_actor_call_async: out is NULL");
    *out = NULL;
    if (!a || !method || (len && !args))
        return ct__error(CT_EINVAL, "ct_actor_call_async: %s is NULL",
                         !a        ? "actor"
                         : !method ? "method"
                                   : "args");
    ct_future *f = malloc(sizeof *f);
    if (!f)
        return ct__error(CT_ENOMEM, "ct_actor_call_async: out of memory");
    LOCK();
    int rc = 0;
    if (a->dead) {
        rc = ct__error(CT_EDEAD, "ct_actor_call_async(%s): actor %s is dead", method, a->id);
        free(f);
        goto out;
    }
    if ((rc = send_call(a, method, args, len, f))) {
        free(f);
        goto out;
    }
    *out = f;
out:
    UNLOCK();
    return rc;
}

int ct_future_wait(ct_future *f, int timeout_ms, void **result, size_t *result_len)
{
    if (result)
        *result = NULL;
    if (result_len)
        *result_len = 0;
    if (!f)
        return ct__error(CT_EINVAL, "ct_future_wait: future is NULL");
    LOCK();
    int rc = wait_locked(f, timeout_ms, result, result_len);
    UNLOCK();
    return rc;
}

void ct_future_destroy(ct_future **pf)
{
    if (!pf || !*pf)
        return;
    ct_future *f = *pf;
    LOCK();
    if (!f->done)
        ct__future_complete(f, CT_ECANCELED, NULL, 0, NULL);
    UNLOCK();
    free(f->res);
    free(f);
    *pf = NULL;
}

int ct_actor_kill(ct_actor *a)
{
    if (!a)
        return ct__error(CT_EINVAL, "ct_actor_kill: actor is NULL");
    LOCK();
    Ct__Envelope e, *rep = NULL;
    Ct__KillActor k = CT__KILL_ACTOR__INIT;
    ct__env_init(&e, 0, ct__client.sender, 5000);
    k.actor_id = a->id;
    e.body_case = CT__ENVELOPE__BODY_KILL_ACTOR;
    e.kill_actor = &k;
    int rc = ct__client_request(&e, &rep, 5000);
    if (!rc)
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_OK, "kill_actor");
    ct__msg_free(rep);
    UNLOCK();
    return rc;
}

void ct_actor_release(ct_actor **pa)
{
    if (!pa || !*pa)
        return;
    LOCK();
    ct__actor_free(*pa);
    UNLOCK();
    *pa = NULL;
}

const char *ct_actor_id(const ct_actor *a)
{
    return a ? a->id : "";
}

const char *ct_actor_node(const ct_actor *a)
{
    return a ? a->node : "";
}

const char *ct_actor_address(const ct_actor *a)
{
    return a ? a->addr : "";
}

int ct_actor_pid(const ct_actor *a)
{
    return a ? a->pid : 0;
}

int ct_actor_is_dead(const ct_actor *a)
{
    if (!a)
        return 0;
    LOCK();
    if (ct__client.head)
        ct__client_drain(0, 0, NULL);
    int d = a->dead;
    UNLOCK();
    return d;
}
