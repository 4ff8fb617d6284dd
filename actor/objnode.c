/* actor/objnode.c — the object-store side of a ct-node: the node's shard (objectstore/store.h)
 * and transfer server, the pulls the head asks for, deletes, the executable cache of code
 * shipping, and the cleanup of what killed nodes left behind.
 *
 * Names: the shard is "node.<pid>" (shm "/dev/shm/ct.node.<pid>.arena"), so nodes on one host
 * never clash; the node's own directory is "/tmp/ct-node.<pid>" (default spill dir, and exe/
 * for cached executables), removed at exit. A node killed with SIGKILL leaves both behind: the
 * next node started on the host (ct__objnode_purge_leftovers) or the driver that embedded it
 * removes them.
 *
 * Messages: ObjNodeInfo to the head once registered (on the node's own head socket, so the
 * head learns its routing id); ObjAdded/ObjRemoved (from the shard's on_event hook, on any
 * thread) and ObjPullDone (from pull threads) go on a second head connection of this module,
 * guarded by a mutex. ObjPull and ObjDelete come from the head through the node's loop.
 * Pulls run one thread each; a pull of an id already in flight on this node is not started
 * twice (its completion answers both).
 *
 * Not in here: the directory (head/objdir.c), the client API (api.c). Threads: start/stop and
 * the handlers run on the node's thread; the rest is internal. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zmq.h>
#include "actor/runtime.h"
#include "common/common.h"
#include "objectstore/store.h"
#include "objectstore/transfer.h"
#include "proto/msg.h"

#define MAX_PULLS 256

static struct {
    bool on;
    char node_id[32];
    char dir[256];
    void *ctx;
    void *sock; /* second head connection, guarded by mu */
    pthread_mutex_t mu;
    ct_store *store;
    ct_xfer_server *srv;
    /* pulls in flight */
    ct_object_id pulling[MAX_PULLS];
    int npulling;
    int running; /* pull threads alive */
    pthread_cond_t cv;
    volatile int stopping;
} O = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void send_locked(Ct__Envelope *e)
{
    if (O.sock)
        ct__msg_send(O.sock, NULL, e, ZMQ_DONTWAIT);
    /* replies (errors only) are dropped */
    zmq_msg_t m;
    zmq_msg_init(&m);
    while (O.sock && zmq_msg_recv(&m, O.sock, ZMQ_DONTWAIT) >= 0)
        ;
    zmq_msg_close(&m);
}

static void on_store_event(void *arg, int event, const ct_object_id *id, uint64_t size)
{
    (void)arg;
    Ct__Envelope e;
    Ct__ObjAdded a = CT__OBJ_ADDED__INIT;
    Ct__ObjRemoved r = CT__OBJ_REMOVED__INIT;
    ct__env_init(&e, 0, O.node_id, 0);
    if (event == CT_STORE_SEALED) {
        a.node_id = O.node_id;
        a.object_id.data = (uint8_t *)id->b;
        a.object_id.len = CT_OBJECT_ID_LEN;
        a.size = size;
        e.body_case = CT__ENVELOPE__BODY_OBJ_ADDED;
        e.obj_added = &a;
    } else {
        r.node_id = O.node_id;
        r.object_id.data = (uint8_t *)id->b;
        r.object_id.len = CT_OBJECT_ID_LEN;
        e.body_case = CT__ENVELOPE__BODY_OBJ_REMOVED;
        e.obj_removed = &r;
    }
    pthread_mutex_lock(&O.mu);
    send_locked(&e);
    pthread_mutex_unlock(&O.mu);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void rm_rf(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static bool pid_dead(int pid)
{
    return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

/* A node with its own --spill-dir notes it in /tmp/ct-node.<pid>/spill_dir, so that the
 * shard's spill files can be removed after the node is killed. */
static void purge_spill_note(int pid)
{
    char note[96], dir[4096];
    snprintf(note, sizeof note, "/tmp/ct-node.%d/spill_dir", pid);
    FILE *f = fopen(note, "r");
    if (!f)
        return;
    if (fgets(dir, sizeof dir - 64, f) && dir[0] == '/') {
        dir[strcspn(dir, "\n")] = 0;
        size_t n = strlen(dir);
        snprintf(dir + n, sizeof dir - n, "/ct.node.%d", pid);
        rm_rf(dir);
    }
    fclose(f);
}

void ct__objnode_purge_leftovers(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        int pid = 0;
        char tail[32] = "";
        if (sscanf(de->d_name, "ct.node.%d%31s", &pid, tail) == 2 && !strcmp(tail, ".arena") &&
            pid_dead(pid)) {
            char name[64];
            snprintf(name, sizeof name, "node.%d", pid);
            if (!ct_store_purge(name))
                CT_LOG(CT_LOG_INFO, "objnode", "removed the shard a killed node left: %s", name);
        }
    }
    if (d)
        closedir(d);
    d = opendir("/tmp");
    while (d && (de = readdir(d))) {
        int pid = 0;
        char extra;
        if (sscanf(de->d_name, "ct-node.%d%c", &pid, &extra) == 1 && pid_dead(pid)) {
            char path[300];
            purge_spill_note(pid);
            snprintf(path, sizeof path, "/tmp/%s", de->d_name);
            rm_rf(path);
        }
    }
    if (d)
        closedir(d);
}

void ct__objnode_purge_pid(int pid)
{
    char name[64], path[64];
    purge_spill_note(pid);
    snprintf(name, sizeof name, "node.%d", pid);
    ct_store_purge(name);
    snprintf(path, sizeof path, "/tmp/ct-node.%d", pid);
    rm_rf(path);
}

/* ---- pulls ---- */

typedef struct pulljob {
    ct_object_id id;
    int nh;
    char **holders;
    /* from the head's directory when it sent them: the size and each holder's data port */
    int size_known;
    uint64_t size;
    uint16_t *data_ports;
} pulljob;

static void pulljob_free(pulljob *j)
{
    for (int i = 0; i < j->nh; i++)
        free(j->holders[i]);
    free(j->holders);
    free(j->data_ports);
    free(j);
}

static int cancel_cb(void *arg, int holder, uint64_t done, uint64_t n)
{
    (void)arg, (void)holder, (void)done, (void)n;
    return O.stopping;
}

static void pull_done(const ct_object_id *id, int rc, const char *msg, uint64_t size)
{
    Ct__Envelope e;
    Ct__ObjPullDone d = CT__OBJ_PULL_DONE__INIT;
    ct__env_init(&e, 0, O.node_id, 0);
    d.node_id = O.node_id;
    d.object_id.data = (uint8_t *)id->b;
    d.object_id.len = CT_OBJECT_ID_LEN;
    d.code = rc;
    d.message = (char *)(msg ? msg : "");
    d.size = size;
    e.body_case = CT__ENVELOPE__BODY_OBJ_PULL_DONE;
    e.obj_pull_done = &d;
    pthread_mutex_lock(&O.mu);
    send_locked(&e);
    pthread_mutex_unlock(&O.mu);
}

static void *pull_main(void *arg)
{
    pulljob *j = arg;
    ct_xfer_pull_opts po = {.zmq_ctx = O.ctx,
                            .total_timeout_ms = 300000,
                            .on_chunk = cancel_cb,
                            .size_known = j->size_known,
                            .size = j->size,
                            .data_ports = j->data_ports};
    ct_xfer_pull_stats st = {0};
    int64_t t0 = ct__now_ns();
    int rc = ct_xfer_pull(O.store, &j->id, (const char *const *)j->holders, j->nh, &po, &st);
    double ms = (ct__now_ns() - t0) / 1e6;
    char hx[41];
    ct_object_id_hex(&j->id, hx);
    uint64_t size = 0;
    if (!rc)
        ct_store_size(O.store, &j->id, &size);
    if (rc)
        CT_LOG(CT_LOG_WARN, "objnode", "pull of %s failed: %s", hx, ct_last_error());
    else if (st.crc_failures)
        CT_LOG(CT_LOG_WARN, "objnode",
               "pulled %s (%llu bytes): %llu bad chunks (checksum) were fetched again", hx,
               (unsigned long long)size, (unsigned long long)st.crc_failures);
    else
        CT_LOG(CT_LOG_DEBUG, "objnode", "pulled %s (%llu bytes) in %.2f ms", hx,
               (unsigned long long)size, ms);
    pull_done(&j->id, rc, rc ? ct_last_error() : "", size);
    pthread_mutex_lock(&O.mu);
    for (int i = 0; i < O.npulling; i++)
        if (!memcmp(&O.pulling[i], &j->id, sizeof j->id)) {
            O.pulling[i] = O.pulling[--O.npulling];
            break;
        }
    O.running--;
    pthread_cond_broadcast(&O.cv);
    pthread_mutex_unlock(&O.mu);
    pulljob_free(j);
    return NULL;
}

static void on_pull(Ct__Envelope *e, void *user)
{
    (void)user;
    Ct__ObjPull *p = e->obj_pull;
    if (!O.on || p->object_id.len != CT_OBJECT_ID_LEN || !p->n_holders)
        return;
    ct_object_id id;
    memcpy(id.b, p->object_id.data, CT_OBJECT_ID_LEN);
    if (ct_store_contains(O.store, &id)) {
        uint64_t size = 0;
        ct_store_size(O.store, &id, &size);
        pull_done(&id, 0, "", size);
        return;
    }
    pthread_mutex_lock(&O.mu);
    bool dup = false;
    for (int i = 0; i < O.npulling && !dup; i++)
        dup = !memcmp(&O.pulling[i], &id, sizeof id);
    if (dup || O.npulling == MAX_PULLS) {
        pthread_mutex_unlock(&O.mu);
        if (!dup)
            pull_done(&id, CT_EBUSY, "too many pulls in flight on this node", 0);
        return;
    }
    pulljob *j = calloc(1, sizeof *j);
    if (j)
        j->holders = calloc(p->n_holders, sizeof *j->holders);
    if (!j || !j->holders) {
        pthread_mutex_unlock(&O.mu);
        free(j);
        pull_done(&id, CT_ENOMEM, "node out of memory", 0);
        return;
    }
    j->id = id;
    if (p->n_data_ports == p->n_holders &&
        (j->data_ports = calloc(p->n_holders, sizeof *j->data_ports))) {
        j->size_known = 1;
        j->size = p->size;
    }
    for (size_t i = 0; i < p->n_holders; i++)
        if ((j->holders[j->nh] = strdup(p->holders[i] ? p->holders[i] : ""))) {
            if (j->data_ports)
                j->data_ports[j->nh] = p->data_ports[i] <= 65535 ? (uint16_t)p->data_ports[i] : 0;
            j->nh++;
        }
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, pull_main, j)) {
        pthread_attr_destroy(&at);
        pthread_mutex_unlock(&O.mu);
        pulljob_free(j);
        pull_done(&id, CT_ENOMEM, "cannot start a pull thread", 0);
        return;
    }
    pthread_attr_destroy(&at);
    O.pulling[O.npulling++] = id;
    O.running++;
    pthread_mutex_unlock(&O.mu);
}

static void on_delete(Ct__Envelope *e, void *user)
{
    (void)user;
    Ct__ObjDelete *d = e->obj_delete;
    if (!O.on || d->object_id.len != CT_OBJECT_ID_LEN)
        return;
    ct_object_id id;
    memcpy(id.b, d->object_id.data, CT_OBJECT_ID_LEN);
    ct_store_delete(O.store, &id); /* CT_ENOENT: not here (any more) */
}

/* ---- code shipping ---- */

int ct__objnode_exe(const uint8_t *idb, size_t idlen, char *const *holders, size_t nh, char *path,
                    size_t cap)
{
    if (!O.on)
        return ct__error(CT_EINVAL, "node: no object store to fetch the executable from");
    if (idlen != CT_OBJECT_ID_LEN)
        return ct__error(CT_EINVAL, "start_actor.exe_object_id: %zu bytes, expected %d", idlen,
                         CT_OBJECT_ID_LEN);
    ct_object_id id;
    memcpy(id.b, idb, CT_OBJECT_ID_LEN);
    char hx[41];
    ct_object_id_hex(&id, hx);
    snprintf(path, cap, "%s/exe/%s", O.dir, hx);
    if (access(path, X_OK) == 0)
        return 0;
    int rc = 0, fd = -1;
    char tmp[320];
    ct_store_view v = {0};
    if (!ct_store_contains(O.store, &id)) {
        ct_xfer_pull_opts po = {.zmq_ctx = O.ctx, .total_timeout_ms = 60000};
        if (!nh) {
            rc = ct__error(CT_ENOENT, "start_actor: executable %s is on no node", hx);
            goto out;
        }
        rc = ct_xfer_pull(O.store, &id, (const char *const *)holders, (int)nh, &po, NULL);
        if (rc)
            goto out;
    }
    if ((rc = ct_store_get(O.store, &id, &v)))
        goto out;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/exe", O.dir);
    mkdir(dir, 0700);
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0700);
    if (fd < 0) {
        rc = ct__error(-errno, "node: %s: %s", tmp, strerror(errno));
        goto out;
    }
    const char *p = v.data;
    uint64_t left = v.size;
    while (left) {
        ssize_t w = write(fd, p, left > (1u << 30) ? (1u << 30) : left);
        if (w <= 0) {
            rc = ct__error(CT_EIO, "node: write %s: %s", tmp, strerror(errno));
            goto out;
        }
        p += w;
        left -= (uint64_t)w;
    }
    close(fd);
    fd = -1;
    if (rename(tmp, path) != 0)
        rc = ct__error(-errno, "node: rename %s: %s", tmp, strerror(errno));
    else
        CT_LOG(CT_LOG_INFO, "objnode", "cached executable %s (%llu bytes)", hx,
               (unsigned long long)v.size);
out:
    if (fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    ct_store_release(O.store, &v);
    return rc;
}

/* ---- start / stop ---- */

uint64_t ct__objnode_default_memory(void)
{
    uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t m = ram / 4;
    if (m > (2ull << 30))
        m = 2ull << 30;
    struct statvfs sv;
    if (statvfs("/dev/shm", &sv) == 0) {
        uint64_t shm = (uint64_t)sv.f_bavail * sv.f_frsize / 2;
        if (shm && m > shm)
            m = shm;
    }
    if (m < (64ull << 20))
        m = 64ull << 20;
    return m;
}

int ct__objnode_start(const char *node_id, const char *head, const char *host, uint64_t memory,
                      const char *spill_dir)
{
    int rc = 0;
    ct__objnode_purge_leftovers();
    snprintf(O.node_id, sizeof O.node_id, "%s", node_id);
    snprintf(O.dir, sizeof O.dir, "/tmp/ct-node.%d", (int)getpid());
    rm_rf(O.dir);
    if (mkdir(O.dir, 0700) != 0 && errno != EEXIST)
        return ct__error(-errno, "node: mkdir %s: %s", O.dir, strerror(errno));
    char name[64];
    snprintf(name, sizeof name, "node.%d", (int)getpid());
    if (spill_dir && *spill_dir) {
        char note[300], abs[4096];
        snprintf(note, sizeof note, "%s/spill_dir", O.dir);
        FILE *f = fopen(note, "w");
        if (f && realpath(spill_dir, abs))
            fprintf(f, "%s\n", abs);
        if (f)
            fclose(f);
    }
    uint64_t cap = memory ? memory : ct__objnode_default_memory();
    /* Pages for incoming pulls and puts ready ahead of need: a pull into never-used arena
     * pages measured 2-2.5x slower than into reused ones (the kernel allocating and
     * zeroing them); a quarter of the shard, at most 256 MiB, is kept populated past use. */
    uint64_t ahead = cap / 4 < (256ull << 20) ? cap / 4 : (256ull << 20);
    const char *ev = getenv("CT_STORE_POPULATE_AHEAD_MB"); /* override; 0 = off */
    if (ev && *ev)
        ahead = strtoull(ev, NULL, 10) << 20;
    ct_store_opts so = {.name = name,
                        .memory_cap = cap,
                        .spill_dir = spill_dir && *spill_dir ? spill_dir : O.dir,
                        .populate_ahead = ahead,
                        .on_event = on_store_event};
    O.ctx = zmq_ctx_new();
    if (!O.ctx)
        return ct__error(CT_EZMQ, "node: zmq_ctx_new: %s", zmq_strerror(errno));
    O.sock = zmq_socket(O.ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(O.sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(O.sock, ZMQ_SNDHWM, &zero, sizeof zero);
    char ep[200];
    snprintf(ep, sizeof ep, "tcp://%s", head);
    if (zmq_connect(O.sock, ep) != 0) {
        rc = ct__error(CT_EZMQ, "node: connect %s: %s", ep, zmq_strerror(errno));
        goto fail;
    }
    if (!(O.store = ct_store_new(&so))) {
        rc = CT_EIO;
        goto fail;
    }
    char bind[120];
    snprintf(bind, sizeof bind, "tcp://%s:*", host);
    ct_xfer_server_opts xo = {.bind = bind, .sender = O.node_id, .zmq_ctx = O.ctx};
    if (!(O.srv = ct_xfer_server_new(O.store, &xo))) {
        rc = CT_EZMQ;
        goto fail;
    }
    ct__node_add_handler(CT__ENVELOPE__BODY_OBJ_PULL, on_pull, NULL);
    ct__node_add_handler(CT__ENVELOPE__BODY_OBJ_DELETE, on_delete, NULL);
    O.on = true;
    O.stopping = 0;
    ct_store_stats st;
    ct_store_get_stats(O.store, &st);
    Ct__Envelope e;
    Ct__ObjNodeInfo ni = CT__OBJ_NODE_INFO__INIT;
    ct__env_init(&e, 0, O.node_id, 0);
    ni.node_id = O.node_id;
    ni.store_name = name;
    ni.xfer_address = (char *)ct_xfer_server_endpoint(O.srv);
    ni.data_port = ct_xfer_server_data_port(O.srv);
    ni.memory_cap = st.memory_cap;
    ni.host = (char *)host;
    e.body_case = CT__ENVELOPE__BODY_OBJ_NODE_INFO;
    e.obj_node_info = &ni;
    ct__node_send_head(&e);
    CT_LOG(CT_LOG_INFO, "objnode", "store %s (%llu MiB, spill %s), transfer %s", name,
           (unsigned long long)(st.memory_cap >> 20), so.spill_dir, ni.xfer_address);
    return 0;
fail : {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ct_last_error());
    ct_xfer_server_destroy(&O.srv);
    ct_store_destroy(&O.store);
    if (O.sock)
        zmq_close(O.sock);
    O.sock = NULL;
    zmq_ctx_term(O.ctx);
    O.ctx = NULL;
    rm_rf(O.dir);
    return ct__error(rc, "%s", msg);
}
}

void ct__objnode_stop(void)
{
    if (!O.on)
        return;
    pthread_mutex_lock(&O.mu);
    O.stopping = 1;
    while (O.running)
        pthread_cond_wait(&O.cv, &O.mu);
    O.on = false;
    zmq_close(O.sock);
    O.sock = NULL;
    pthread_mutex_unlock(&O.mu);
    ct_xfer_server_destroy(&O.srv);
    ct_store_destroy(&O.store);
    zmq_ctx_term(O.ctx);
    O.ctx = NULL;
    rm_rf(O.dir);
}

const char *ct__objnode_store_name(void)
{
    return O.store ? ct_store_name(O.store) : "";
}
