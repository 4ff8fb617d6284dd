/* actor/objnode.c — the object-store side of a ct-node: the node's shard (objectstore/store.h)
 * and transfer server, the pulls the head asks for, deletes, the executable cache of code
 * shipping, and the cleanup of what killed nodes left behind.
 *
 * Names: the shard is "node.<pid>" (shm "/dev/shm/ct.node.<pid>.arena"), so nodes on one host
 * never clash; the node's own directory is "/tmp/ct-node.<pid>.XXXXXX", made by mkdtemp (0700,
 * so a directory planted by another user is never taken for it; default spill dir, and exe/
 * for cached executables), removed at exit. A --spill-dir is made 0700 when missing, and
 * refused when it is a symlink, not the node's uid's, or group/other-writable. A node killed
 * with SIGKILL leaves both behind: the next node started on the host
 * (ct__objnode_purge_leftovers) or the driver that embedded it removes them, and only
 * directories of its own uid and of its own PID namespace: a node notes its namespace in
 * <dir>/pidns, since a pid means nothing in another one (a container, or cluster_slurm's
 * namespace, sharing /tmp would otherwise take every live node outside for dead). A cached
 * executable runs only when its SHA-1 is its id (checked when pulled and again when its file
 * changed since).
 *
 * Messages: ObjNodeInfo (with the host id, ct__host_id, by which a driver tells whether it can
 * map this shard) to the head once registered (on the node's own head socket, so the
 * head learns its routing id); ObjAdded/ObjRemoved (from the shard's on_event hook, on any
 * thread) and ObjPullDone (from pull threads) go on a second head connection of this module,
 * guarded by a mutex. ObjPull and ObjDelete come from the head through the node's loop: their
 * checks and handlers are rows of node.c's table (declared in runtime.h).
 * Pulls run one thread each; a pull of an id already in flight on this node is not started
 * twice (its completion answers both).
 *
 * Not in here: the directory (head/objdir.c), the client API (api_objects.c). Threads: start/stop
 * and the handlers run on the node's thread; the rest is internal. */
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
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zmq.h>
#include "actor/runtime.h"
#include "common/auth.h"
#include "common/common.h"
#include "common/env.h"
#include "objectstore/store.h"
#include "objectstore/transfer.h"
#include "proto/msg.h"

#define MAX_PULLS 256

static struct {
    bool on;
    bool detached; /* ct__objnode_start_detached: handlers only, no pulls */
    char node_id[32];
    char host[64];                /* the address actors and the transfer server bind to */
    char token[CT_TOKEN_LEN + 1]; /* the node's: its reports carry it */
    char dir[256];
    void *ctx;
    void *main; /* the node's own head connection (borrowed; node thread only) */
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
    e->token = O.token;
    if (O.sock)
        ct__msg_send(O.sock, NULL, e, ZMQ_DONTWAIT);
    /* replies (errors only) are dropped */
    zmq_msg_t m;
    zmq_msg_init(&m);
    while (O.sock && zmq_msg_recv(&m, O.sock, ZMQ_DONTWAIT) >= 0)
        ;
    zmq_msg_close(&m);
}

/* Sends e on the node's own head connection (the node's thread). */
static void send_main(Ct__Envelope *e)
{
    e->token = O.token;
    if (ct__msg_send(O.main, NULL, e, ZMQ_DONTWAIT))
        CT_LOG(CT_LOG_WARN, "node", "send %s: %s", ct__msg_body_name(e->body_case),
               ct_last_error());
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

/* A node with its own --spill-dir notes it in <its dir>/spill_dir, so that the shard's spill
 * files can be removed after the node is killed. */
static void purge_spill_note(const char *nodedir, int pid)
{
    char note[320], dir[4096];
    snprintf(note, sizeof note, "%s/spill_dir", nodedir);
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

/* The pid of a node directory's name in /tmp ("ct-node.<pid>.XXXXXX", or the older
 * "ct-node.<pid>"); 0 when name is not one. */
static int nodedir_pid(const char *name)
{
    int pid = 0, len = 0;
    if (sscanf(name, "ct-node.%d%n", &pid, &len) != 1 || pid <= 0)
        return 0;
    if (name[len] == 0 || (name[len] == '.' && strlen(name + len + 1) == 6))
        return pid;
    return 0;
}

/* This process's PID namespace ("pid:[4026531836]"), "" when /proc cannot say. */
static void pidns_name(char *buf, size_t cap)
{
    ssize_t n = readlink("/proc/self/ns/pid", buf, cap - 1);
    buf[n > 0 ? n : 0] = 0;
}

/* Whether node directory path was made in this PID namespace: its pidns note says so, or it
 * has none (a directory from before the note, or /proc unreadable when it was made). */
static bool same_pidns(const char *path)
{
    char note[320], theirs[64] = "", ours[64];
    snprintf(note, sizeof note, "%s/pidns", path);
    FILE *f = fopen(note, "r");
    if (!f)
        return true;
    bool read = fgets(theirs, sizeof theirs, f) != NULL;
    fclose(f);
    theirs[strcspn(theirs, "\n")] = 0;
    pidns_name(ours, sizeof ours);
    return !read || !ours[0] || !strcmp(theirs, ours);
}

/* Removes the node directories in /tmp of dead nodes (only of pid when pid > 0): only real
 * directories (lstat: no symlink) of this process's uid and PID namespace; another user's, or
 * another namespace's, are left alone. */
static void purge_dirs(int only_pid)
{
    DIR *d = opendir("/tmp");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        int pid = nodedir_pid(de->d_name);
        if (!pid || (only_pid > 0 && pid != only_pid) || (only_pid <= 0 && !pid_dead(pid)))
            continue;
        char path[300];
        struct stat sb;
        snprintf(path, sizeof path, "/tmp/%s", de->d_name);
        if (lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid() ||
            !same_pidns(path))
            continue;
        purge_spill_note(path, pid);
        rm_rf(path);
    }
    if (d)
        closedir(d);
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
    purge_dirs(0);
}

void ct__objnode_purge_pid(int pid)
{
    char name[64];
    snprintf(name, sizeof name, "node.%d", pid);
    ct_store_purge(name);
    if (pid > 0)
        purge_dirs(pid);
}

/* runtime.h. Makes dir 0700 when missing, then accepts it only as a real directory (lstat: not a
 * symlink) owned by this uid and writable by nobody else: another user could otherwise plant
 * or read the files the node keeps there. 0 or CT_EINVAL naming the reason. */
int ct__objnode_check_dir(const char *dir)
{
    struct stat sb;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return ct__error(CT_EINVAL, "node: spill dir %s: cannot create it: %s", dir,
                         strerror(errno));
    if (lstat(dir, &sb) != 0)
        return ct__error(CT_EINVAL, "node: spill dir %s: %s", dir, strerror(errno));
    if (S_ISLNK(sb.st_mode))
        return ct__error(CT_EINVAL, "node: spill dir %s is a symlink; refused", dir);
    if (!S_ISDIR(sb.st_mode))
        return ct__error(CT_EINVAL, "node: spill dir %s is not a directory; refused", dir);
    if (sb.st_uid != geteuid())
        return ct__error(CT_EINVAL,
                         "node: spill dir %s belongs to uid %d, not this node's %d; "
                         "refused",
                         dir, (int)sb.st_uid, (int)geteuid());
    if (sb.st_mode & (S_IWGRP | S_IWOTH))
        return ct__error(CT_EINVAL,
                         "node: spill dir %s is group/other-writable (mode %03o); "
                         "refused",
                         dir, (int)(sb.st_mode & 0777));
    return 0;
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

bool ct__objnode_check_pull(ct__node *n, const Ct__Envelope *e)
{
    (void)n;
    return e->obj_pull->object_id.len == CT_OBJECT_ID_LEN && e->obj_pull->n_holders;
}

void ct__objnode_on_pull(ct__node *n, Ct__Envelope *e)
{
    (void)n;
    Ct__ObjPull *p = e->obj_pull;
    if (!O.on)
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
    if (O.detached) { /* everything but the pull (which would connect to the holders) */
        pthread_mutex_unlock(&O.mu);
        pulljob_free(j);
        pull_done(&id, CT_ENOSYS, "no pulls in a detached node", 0);
        return;
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

bool ct__objnode_check_delete(ct__node *n, const Ct__Envelope *e)
{
    (void)n;
    return e->obj_delete->object_id.len == CT_OBJECT_ID_LEN;
}

void ct__objnode_on_delete(ct__node *n, Ct__Envelope *e)
{
    (void)n;
    Ct__ObjDelete *d = e->obj_delete;
    if (!O.on)
        return;
    ct_object_id id;
    memcpy(id.b, d->object_id.data, CT_OBJECT_ID_LEN);
    ct_store_delete(O.store, &id); /* CT_ENOENT: not here (any more) */
}

/* ---- code shipping ---- */

/* Cached executables whose SHA-1 was checked, with the file's identity then: a file that
 * changed since (another inode, size or ctime) is hashed again before it runs. The node's
 * thread only. */
#define MAX_VERIFIED 16
static struct verified {
    ct_object_id id;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec ctime;
} verified[MAX_VERIFIED];
static int nverified;

static bool same_file(const struct verified *v, const ct_object_id *id, const struct stat *sb)
{
    return !memcmp(v->id.b, id->b, CT_OBJECT_ID_LEN) && v->dev == sb->st_dev &&
           v->ino == sb->st_ino && v->size == sb->st_size &&
           v->ctime.tv_sec == sb->st_ctim.tv_sec && v->ctime.tv_nsec == sb->st_ctim.tv_nsec;
}

static void remember_verified(const ct_object_id *id, const struct stat *sb)
{
    struct verified *v = &verified[nverified < MAX_VERIFIED ? nverified++ : 0];
    v->id = *id;
    v->dev = sb->st_dev;
    v->ino = sb->st_ino;
    v->size = sb->st_size;
    v->ctime = sb->st_ctim;
}

/* Whether the cached file path holds executable id: 1 yes (*fd: the file, open, checked
 * through that descriptor), 0 no file, or CT_EPROTO (file removed) when it is not a regular
 * file or its SHA-1 is not id. Hashing and running the same open file, not the path twice,
 * leaves no moment in which a file renamed over the path runs unchecked. */
static int check_cached(const char *path, const ct_object_id *id, const char *hx, int *fd)
{
    struct stat sb;
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (*fd < 0 && errno == ENOENT)
        return 0;
    bool ok = *fd >= 0 && fstat(*fd, &sb) == 0 && S_ISREG(sb.st_mode);
    for (int i = 0; ok && i < nverified; i++)
        if (same_file(&verified[i], id, &sb))
            return 1;
    void *m =
        ok && sb.st_size > 0 ? mmap(NULL, sb.st_size, PROT_READ, MAP_PRIVATE, *fd, 0) : MAP_FAILED;
    ok = false;
    if (m != MAP_FAILED) {
        uint8_t sum[20];
        ct__sha1(m, sb.st_size, sum);
        ok = !memcmp(sum, id->b, CT_OBJECT_ID_LEN);
        munmap(m, sb.st_size);
    }
    if (!ok) {
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        unlink(path);
        return ct__error(CT_EPROTO,
                         "start_actor: cached executable %s does not match its SHA-1 %s; removed "
                         "it, refused to run it",
                         path, hx);
    }
    remember_verified(id, &sb);
    return 1;
}

int ct__objnode_exe(const uint8_t *idb, size_t idlen, char *const *holders, size_t nh, char *path,
                    size_t cap, int *exe_fd)
{
    *exe_fd = -1;
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
    int rc = check_cached(path, &id, hx, exe_fd);
    if (rc)
        return rc < 0 ? rc : 0;
    int fd = -1;
    char tmp[320];
    uint8_t sum[20];
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
    /* the id is the SHA-1 of the bytes: anything else is not the driver's executable */
    ct__sha1(v.data, v.size, sum);
    if (memcmp(sum, id.b, CT_OBJECT_ID_LEN)) {
        ct_store_release(O.store, &v);
        memset(&v, 0, sizeof v);
        ct_store_delete(O.store, &id);
        rc = ct__error(CT_EPROTO,
                       "start_actor: executable %s: the bytes pulled do not match their SHA-1; "
                       "refused to run them",
                       hx);
        goto out;
    }
    char dir[300];
    snprintf(dir, sizeof dir, "%s/exe", O.dir);
    mkdir(dir, 0700);
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0700);
    if (fd < 0) {
        rc = ct__error(-errno, "node: %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (ct__write_all(fd, v.data, v.size) < 0) {
        rc = ct__error(CT_EIO, "node: write %s: %s", tmp, strerror(errno));
        goto out;
    }
    /* what runs is this file, open before the name is published: not whatever the path later
     * names (a file open for writing cannot be executed, so the writer closes first) */
    int rfd = open(tmp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat sb;
    close(fd);
    fd = -1;
    if (rfd < 0 || fstat(rfd, &sb) != 0) {
        rc = ct__error(CT_EIO, "node: reopen %s: %s", tmp, strerror(errno));
        if (rfd >= 0)
            close(rfd);
        unlink(tmp);
    } else if (rename(tmp, path) != 0) {
        rc = ct__error(-errno, "node: rename %s: %s", tmp, strerror(errno));
        close(rfd);
        unlink(tmp);
    } else {
        remember_verified(&id, &sb);
        *exe_fd = rfd;
        CT_LOG(CT_LOG_INFO, "objnode", "cached executable %s (%llu bytes)", hx,
               (unsigned long long)v.size);
    }
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

/* Tells the head the shard's store and transfer addresses (ObjNodeInfo). Its transfer address. */
static const char *send_node_info(void)
{
    ct_store_stats st;
    ct_store_get_stats(O.store, &st);
    Ct__Envelope e;
    Ct__ObjNodeInfo ni = CT__OBJ_NODE_INFO__INIT;
    ct__env_init(&e, 0, O.node_id, 0);
    ni.node_id = O.node_id;
    ni.store_name = (char *)ct_store_name(O.store);
    ni.xfer_address = (char *)ct_xfer_server_endpoint(O.srv);
    ni.data_port = ct_xfer_server_data_port(O.srv);
    ni.memory_cap = st.memory_cap;
    ni.host = O.host;
    char hid[128];
    ct__host_id(hid, sizeof hid);
    ni.host_id = hid;
    e.body_case = CT__ENVELOPE__BODY_OBJ_NODE_INFO;
    e.obj_node_info = &ni;
    send_main(&e);
    return ni.xfer_address;
}

void ct__objnode_resume(void)
{
    if (!O.on)
        return;
    send_node_info();
    ct_store_entry *ents = NULL;
    size_t n = 0;
    if (ct_store_list(O.store, &ents, &n)) {
        CT_LOG(CT_LOG_WARN, "objnode", "cannot list the shard: %s", ct_last_error());
        return;
    }
    for (size_t i = 0; i < n; i++) {
        Ct__Envelope e;
        Ct__ObjAdded a = CT__OBJ_ADDED__INIT;
        ct__env_init(&e, 0, O.node_id, 0);
        a.node_id = O.node_id;
        a.object_id.data = ents[i].id.b;
        a.object_id.len = CT_OBJECT_ID_LEN;
        a.size = ents[i].size;
        e.body_case = CT__ENVELOPE__BODY_OBJ_ADDED;
        e.obj_added = &a;
        send_main(&e);
    }
    CT_LOG(CT_LOG_INFO, "objnode", "told the head %zu objects again", n);
    free(ents);
}

int ct__objnode_start(const ct__objnode_opts *o)
{
    int rc = 0;
    const char *spill_dir = o->spill_dir, *host = o->host;
    uint64_t memory = o->memory;
    ct__objnode_purge_leftovers();
    snprintf(O.node_id, sizeof O.node_id, "%s", o->node_id);
    snprintf(O.host, sizeof O.host, "%s", host);
    snprintf(O.token, sizeof O.token, "%s", o->token);
    O.main = o->head_sock;
    if (spill_dir && *spill_dir && (rc = ct__objnode_check_dir(spill_dir)))
        return rc;
    /* a fresh directory of the node's own (mkdtemp: 0700, a name nobody could plant) */
    snprintf(O.dir, sizeof O.dir, "/tmp/ct-node.%d.XXXXXX", (int)getpid());
    if (!mkdtemp(O.dir)) {
        rc = ct__error(-errno, "node: mkdtemp %s: %s", O.dir, strerror(errno));
        O.dir[0] = 0;
        return rc;
    }
    char ns[64], note[300];
    pidns_name(ns, sizeof ns);
    snprintf(note, sizeof note, "%s/pidns", O.dir);
    FILE *nf = ns[0] ? fopen(note, "w") : NULL;
    if (nf) {
        fprintf(nf, "%s\n", ns);
        fclose(nf);
    }
    char name[64];
    snprintf(name, sizeof name, "node.%d", (int)getpid());
    if (spill_dir && *spill_dir) {
        char abs[4096];
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
    const char *ev = ct__env(CT__ENV_STORE_POPULATE_AHEAD_MB); /* override; 0 = off */
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
    if ((rc = ct__auth_zmq_client(O.sock)))
        goto fail;
    char ep[200];
    snprintf(ep, sizeof ep, "tcp://%s", o->head);
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
    O.on = true;
    O.stopping = 0;
    ct_store_stats st;
    ct_store_get_stats(O.store, &st);
    const char *xfer = send_node_info();
    CT_LOG(CT_LOG_INFO, "objnode", "store %s (%llu MiB, spill %s), transfer %s", name,
           (unsigned long long)(st.memory_cap >> 20), so.spill_dir, xfer);
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
    O.main = NULL;
    zmq_close(O.sock);
    O.sock = NULL;
    pthread_mutex_unlock(&O.mu);
    ct_xfer_server_destroy(&O.srv);
    ct_store_destroy(&O.store);
    zmq_ctx_term(O.ctx);
    O.ctx = NULL;
    rm_rf(O.dir);
}

void ct__objnode_start_detached(ct_store *store)
{
    snprintf(O.node_id, sizeof O.node_id, "detached");
    O.store = store;
    O.detached = true;
    O.on = true;
}

void ct__objnode_stop_detached(void)
{
    O.on = false;
    O.detached = false;
    O.store = NULL;
}

void ct__host_id(char *buf, size_t cap)
{
    char boot[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f))
            boot[0] = 0;
        fclose(f);
    }
    boot[strcspn(boot, "\n")] = 0;
    struct stat net = {0}, shm = {0};
    if (stat("/proc/self/ns/net", &net) != 0)
        net.st_ino = 0;
    if (stat("/dev/shm", &shm) != 0)
        shm.st_dev = 0;
    snprintf(buf, cap, "%s/net:%llu/shm:%llu", boot, (unsigned long long)net.st_ino,
             (unsigned long long)shm.st_dev);
}

const char *ct__objnode_store_name(void)
{
    return O.store ? ct_store_name(O.store) : "";
}

bool ct__objnode_stats(ct_store_stats *st)
{
    if (!O.on || !O.store)
        return false;
    ct_store_get_stats(O.store, st);
    return true;
}
