/* actor/node.c — the node daemon: registers its resources with the head, heartbeats, starts
 * actor processes through a per-executable zygote, reaps them (SIGCHLD via signalfd, waitpid)
 * and reports every exit to the head at once.
 *
 * Process tree: node -> zygote (the driver's executable exec'd in zygote mode, once per
 * executable+argv) -> actor. The zygote clones each actor with CLONE_PARENT, so actors are the
 * node's children: the node reaps them and sees their exit status, and an actor's PR_SET_PDEATHSIG
 * fires when the node dies. Actors report ready/failed over the zygote's socketpair and the
 * node forwards that to the head (so an actor needs no head connection to start).
 *
 * Creation is the hot path (thousands of actors at once): a new executable gets one zygote per
 * CPU (at most 4) at once, so bursts fork on every core; start requests wait in a FIFO and go to
 * the least busy zygote, at most ZYG_INFLIGHT each, never blocking on its socket (a node blocked
 * there deadlocked with a zygote blocked sending back, and missed its heartbeats); actors are
 * found by id through a hash index. The floor under all this is fork itself (page tables and
 * VMAs of every mapped library: bench/actor_calls/fork_floor.c).
 *
 * Head loss: a node whose head is gone keeps its actors and objects for a grace time
 * (--head-grace-ms, default CT_NODE_HEAD_GRACE_MS, 60 s) and waits for a restarted head. The
 * main loop counts the head as heard when anything arrives on its socket, and pings it when it
 * was silent for a heartbeat period (the head answers every Ping); after 3 silent periods it
 * sends pings only. A head that does not know the node (restarted) refuses its next heartbeat:
 * the node registers again under its id and token with the actors it runs, and its shard
 * lists its objects (resume). Silent for longer than the grace time, counted only over time the
 * node itself ran (count_silence) and checked only after the socket was drained, so that a node
 * that was itself stalled reads the answers queued meanwhile first: the node logs it, SIGKILLs
 * its actors and zygotes by pid, and ct__node_run returns CT_EDEAD (ct-node exits 1).
 *
 * Death watch and rejoin: once registered, the node keeps one TCP connection to the head's
 * death-watch port (head/watch.h), so that the head sees it die at once. A node the head
 * declared dead while it lived (stopped or cut off past the head's dead-after time) hears it
 * from that connection ('D') or from the answer to its next heartbeat (then the head refuses
 * its registering again under its id): it kills its actors (the head counted them lost) and
 * zygotes, empties its store and registers again as a new node (rejoin).
 *
 * Starting and ending zygotes: a zygote's stderr is a pipe until it serves (read_err), so that
 * one dying before it serves (a missing shared library) fails its starts with its last lines,
 * for good (StartFailed.permanent) when it exited 126/127; an actor's stderr is a memfd until it
 * reports (report_exit quotes it). JobEnded from the head, or an idle time, ends zygotes.
 *
 * A detached node (ct__node_new_detached, runtime.h) runs the same handlers on bytes, without a
 * head or processes: fuzz/fuzz_node.c drives it.
 *
 * Not in here: the zygote and actor loops (worker.c), scheduling (head). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>
#include "actor/runtime.h"
#include "common/auth.h"
#include "common/common.h"
#include "head/watch.h"
#include "proto/msg.h"

extern char **environ;

#define MAX_ZYG 16
#define MAX_EARLY 256
#define MAX_GPUS 64 /* GPU indices a node hands out (a bit each in nactor.gpus) */
/* actors' stderr memfds held at once: a burst of thousands of creations keeps the node's
 * descriptors for its sockets and files (those beyond start without a quoted stderr) */
#define MAX_ERR_FDS 128

#define ZYG_TAIL 512 /* bytes of a starting zygote's stderr kept for its failure report */
typedef struct zygote {
    char *key; /* job token + exe path + NUL-joined argv */
    size_t keylen;
    pid_t pid;
    int fd;
    int outstanding; /* start requests sent, spawn not yet reported */
    int64_t last_used;
    int peer_fd; /* detached node only: the zygote's end of the socketpair (no process) */
    int err_fd;  /* the pipe on its stderr until it serves (copied to the node's), -1: closed */
    char tail[ZYG_TAIL]; /* the last bytes read from err_fd */
    int tail_len;
    bool served; /* it sent a record: it got to its loop (a death is no start failure of its) */
} zygote;

typedef struct nactor {
    char id[32];
    pid_t pid; /* 0 until the zygote tells */
    int zyg_pid;
    bool kill_pending;
    bool reported;    /* its ready/failed record came (so its zygote may go) */
    uint64_t gpus;    /* the GPU indices it holds, bit i for index i */
    double gpu_share; /* how much of each of them (1: whole; < 1: shared) */
    int err_fd;       /* its stderr (a memfd) until it reports, from its zygote; -1: none */
    /* what a re-registration tells a restarted head (RegisterNode.actors) */
    char cls[64];
    char job[CT_TOKEN_LEN + 1];
    char addr[128]; /* its call address, once ready */
    char pg[32];    /* its placement group ("" none) and bundle */
    int bundle;
    int nres;
    char rname[16][32];
    double ramt[16];
} nactor;

typedef struct early {
    pid_t pid;
    int status;
} early;

/* A start request not yet handed to a zygote: a zygote gets at most ZYG_INFLIGHT at once and
 * the node never blocks on its socket, so a burst of thousands of creations neither deadlocks
 * node and zygote (both sending into full socket buffers) nor starves the heartbeat. */
#define ZYG_INFLIGHT 32
typedef struct qreq {
    char *buf; /* ct__zreq + args */
    size_t len;
    char *key; /* the zygote key it needs */
    size_t keylen;
    char id[32];
} qreq;

typedef struct nodest {
    const ct_node_opts *o;
    void *ctx, *sock;
    char id[32];
    char token[CT_TOKEN_LEN + 1]; /* from the head: every message that speaks for id carries it */
    char host[64];
    char head[128];
    zygote z[MAX_ZYG];
    int nz, max_zyg;
    nactor *a;
    int na, cap;
    int *ix; /* open-addressing index actor id -> 1 + position in a; 0 empty */
    int ixcap;
    qreq *q; /* FIFO q[qh..qn) */
    int qh, qn, qcap;
    early early[MAX_EARLY];
    int nearly;
    pid_t retired[MAX_EARLY]; /* zygotes the node killed, not reaped yet (no early exits) */
    int nretired;
    int zyg_idle_ms; /* a zygote without actors here and unused this long ends */
    int nerr_fds;    /* actors' err_fd held */
    uint64_t req;
    bool detached;              /* ct__node_new_detached: no fork, no exec, no kill */
    int ngpu;                   /* GPU indices 0..ngpu-1 given to actors */
    double gpu_used[MAX_GPUS];  /* each index's share held by actors */
    char gpu_dev[MAX_GPUS][64]; /* index i's name in an actor's CUDA_VISIBLE_DEVICES */
    int watch_fd;               /* the head's death watch (head/watch.h); -1: none */
    /* drain (a first SIGTERM): 0 none, 1 asked the head, 2 waits for its actors to exit, 3 stop */
    int drain;
    int64_t drain_asked, drain_until;
} nodest;

/* extension point (runtime.h) */
#define MAX_EXT 16
static struct {
    ct__node_hook on_start, on_stop;
    void *user;
} hooks[MAX_EXT];
static int nhooks;
static struct {
    int body_case;
    ct__node_handler fn;
    void *user;
} handlers[MAX_EXT];
static int nhandlers;
static nodest *current; /* the node this process runs, for ct__node_send_head */

int ct__node_add_hooks(ct__node_hook on_start, ct__node_hook on_stop, void *user)
{
    if (nhooks == MAX_EXT)
        return ct__error(CT_ENOSPC, "node: more than %d hooks", MAX_EXT);
    hooks[nhooks].on_start = on_start;
    hooks[nhooks].on_stop = on_stop;
    hooks[nhooks++].user = user;
    return 0;
}

int ct__node_add_handler(int body_case, ct__node_handler fn, void *user)
{
    for (int i = 0; i < nhandlers; i++)
        if (handlers[i].body_case == body_case)
            return ct__error(CT_EEXIST, "node: body case %d already has a handler", body_case);
    if (nhandlers == MAX_EXT || !fn)
        return ct__error(CT_EINVAL, "node: cannot add a handler for body case %d", body_case);
    handlers[nhandlers].body_case = body_case;
    handlers[nhandlers].fn = fn;
    handlers[nhandlers++].user = user;
    return 0;
}

static int send_head(nodest *n, Ct__Envelope *e);
int ct__node_send_head(Ct__Envelope *e)
{
    if (!current)
        return ct__error(CT_EINVAL, "ct__node_send_head: no node runs in this process");
    return send_head(current, e);
}

/* The token the head gave this node ("" before it registered), for objnode.c's connection. */
const char *ct__node_token(void)
{
    return current ? current->token : "";
}

/* Set by SIGTERM/SIGINT, which the kernel may deliver to any thread (libzmq's I/O threads
 * too): an atomic, not a volatile sig_atomic_t, which is safe only within one thread (a data
 * race ThreadSanitizer reported). Lock-free, so async-signal-safe. */
static atomic_int node_stop;
/* A first SIGTERM asks for a drain (drain_step): the node's jobs may save their work before its
 * actors end. SIGINT, or a second SIGTERM, stops at once. */
static atomic_int node_terms;
static void on_term(int sig)
{
    if (sig == SIGTERM && atomic_fetch_add(&node_terms, 1) == 0)
        return;
    node_stop = 1;
}

int ct__parse_resources(const char *s, ct_resource *out, int cap, int *n, char **store)
{
    *n = 0;
    *store = NULL;
    if (!s || !*s)
        return 0;
    char *copy = strdup(s);
    if (!copy)
        return ct__error(CT_ENOMEM, "resources: out of memory");
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        char *end = NULL;
        double v = eq ? strtod(eq + 1, &end) : 0;
        if (!eq || eq == tok || !end || *end || end == eq + 1 || v < 0) {
            int rc = ct__error(CT_EINVAL, "resources: '%s' is not name=number (>= 0)", tok);
            free(copy);
            return rc;
        }
        if (*n == cap) {
            free(copy);
            return ct__error(CT_EINVAL, "resources: more than %d entries", cap);
        }
        *eq = 0;
        out[*n].name = tok;
        out[(*n)++].amount = v;
    }
    *store = copy;
    return 0;
}

/* The local address that routes to the head's host. */
static void detect_host(const char *head, char *out, size_t cap)
{
    snprintf(out, cap, "127.0.0.1");
    char h[128];
    snprintf(h, sizeof h, "%s", head);
    char *colon = strrchr(h, ':');
    if (!colon)
        return;
    *colon = 0;
    if (!strncmp(h, "127.", 4) || !strcmp(h, "localhost"))
        return;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *ai = NULL;
    if (getaddrinfo(h, colon + 1, &hints, &ai) || !ai)
        return;
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    if (s >= 0 && !connect(s, ai->ai_addr, ai->ai_addrlen) &&
        !getsockname(s, (struct sockaddr *)&me, &len))
        inet_ntop(AF_INET, &me.sin_addr, out, cap);
    if (s >= 0)
        close(s);
    freeaddrinfo(ai);
}

static int send_head(nodest *n, Ct__Envelope *e)
{
    e->token = n->token;
    int rc = ct__msg_send(n->sock, NULL, e, ZMQ_DONTWAIT);
    if (rc)
        CT_LOG(CT_LOG_WARN, "node", "send %s: %s", ct__msg_body_name(e->body_case),
               ct_last_error());
    return rc;
}

static void tail_lines(const char *tail, int len, char *out, size_t cap);

/* Tells the head that actor a ended (pid, wait status). One that died before its record (in
 * its class's create) brings the last lines of its stderr, the memfd its zygote gave the node,
 * which is also copied to the node's stderr (the actor, dead, did not put it there). */
static void report_exit(nodest *n, const nactor *a, pid_t pid, int status)
{
    char tail[400] = "", buf[4096];
    if (a->err_fd >= 0 && !a->reported) {
        ssize_t k;
        off_t end = 0;
        for (; (k = pread(a->err_fd, buf, sizeof buf, end)) > 0; end += k)
            (void)!write(STDERR_FILENO, buf, k);
        off_t from = end > ZYG_TAIL ? end - ZYG_TAIL : 0;
        if ((k = pread(a->err_fd, buf, end - from, from)) > 0)
            tail_lines(buf, (int)k, tail, sizeof tail);
    }
    Ct__Envelope e;
    Ct__ActorExited x = CT__ACTOR_EXITED__INIT;
    ct__env_init(&e, 0, n->id, 0);
    x.actor_id = (char *)a->id;
    x.pid = pid;
    x.stderr_tail = tail;
    if (WIFSIGNALED(status))
        x.term_signal = WTERMSIG(status);
    else
        x.exit_status = WEXITSTATUS(status);
    e.body_case = CT__ENVELOPE__BODY_ACTOR_EXITED;
    e.actor_exited = &x;
    send_head(n, &e);
    CT_LOG(CT_LOG_INFO, "node", "actor %s (pid %d) ended: status %d signal %d", a->id, (int)pid,
           x.exit_status, x.term_signal);
}

/* permanent: it would fail the same way again (the head answers CT_ESTART, not retried) */
static void report_start_failed(nodest *n, const char *actor_id, const char *reason, bool permanent)
{
    Ct__Envelope e;
    Ct__StartFailed f = CT__START_FAILED__INIT;
    ct__env_init(&e, 0, n->id, 0);
    f.actor_id = (char *)actor_id;
    f.reason = (char *)reason;
    f.permanent = permanent;
    e.body_case = CT__ENVELOPE__BODY_START_FAILED;
    e.start_failed = &f;
    send_head(n, &e);
}

/* SIGKILLs pid: never a process group or every process (pid <= 0), nothing when detached. */
static void kill_pid(nodest *n, pid_t pid)
{
    if (pid > 0 && !n->detached)
        kill(pid, SIGKILL);
}

/* ---- the actor index (thousands of actors start at once: no linear scans per record) ---- */

static unsigned id_hash(const char *id)
{
    unsigned h = 2166136261u;
    for (; *id; id++)
        h = (h ^ (unsigned char)*id) * 16777619u;
    return h;
}

static int ix_find(nodest *n, const char *id)
{
    if (!n->ixcap)
        return -1;
    for (unsigned h = id_hash(id) & (n->ixcap - 1);; h = (h + 1) & (n->ixcap - 1)) {
        int v = n->ix[h];
        if (!v)
            return -1;
        if (!strcmp(n->a[v - 1].id, id))
            return v - 1;
    }
}

static void ix_set(nodest *n, int i)
{
    unsigned h = id_hash(n->a[i].id) & (n->ixcap - 1);
    while (n->ix[h] && strcmp(n->a[n->ix[h] - 1].id, n->a[i].id))
        h = (h + 1) & (n->ixcap - 1);
    n->ix[h] = i + 1;
}

/* Removes a[i]'s slot (backward-shift deletion keeps probe chains whole). */
static void ix_del(nodest *n, int i)
{
    unsigned m = n->ixcap - 1, h = id_hash(n->a[i].id) & m;
    while (n->ix[h] != i + 1) {
        if (!n->ix[h])
            return; /* not indexed (a duplicate id took its slot) */
        h = (h + 1) & m;
    }
    for (unsigned j = (h + 1) & m; n->ix[j]; j = (j + 1) & m) {
        unsigned home = id_hash(n->a[n->ix[j] - 1].id) & m;
        /* move j back into the hole h unless its home lies cyclically in (h, j] */
        if ((j > h && (home <= h || home > j)) || (j < h && home <= h && home > j)) {
            n->ix[h] = n->ix[j];
            h = j;
        }
    }
    n->ix[h] = 0;
}

/* Room for one more actor in a and its index. */
static int grow_actors(nodest *n)
{
    if (n->na == n->cap) {
        int cap = n->cap ? 2 * n->cap : 64;
        nactor *na = realloc(n->a, cap * sizeof *na);
        if (!na)
            return ct__error(CT_ENOMEM, "node: out of memory");
        n->a = na;
        n->cap = cap;
    }
    if (2 * (n->na + 1) > n->ixcap) {
        int cap = n->ixcap ? 2 * n->ixcap : 128;
        int *ix = calloc(cap, sizeof *ix);
        if (!ix)
            return ct__error(CT_ENOMEM, "node: out of memory");
        free(n->ix);
        n->ix = ix;
        n->ixcap = cap;
        for (int i = 0; i < n->na; i++)
            ix_set(n, i);
    }
    return 0;
}

/* ---- GPUs: which devices each actor sees (its CUDA_VISIBLE_DEVICES) ----
 * The head counts GPUs as one amount per node, so it places two 0.5-GPU actors on a 1-GPU node:
 * a demand under 1 therefore shares an index with other such demands (up to a sum of 1), and a
 * demand d >= 1 takes ceil(d) indices of its own, the lowest with room. When no index has room
 * (the head's sum fits but the shares do not pack, e.g. three 0.6 on 2 GPUs), the least used
 * one is shared rather than the start failed. */

/* Names the node's GPU indices and returns the GPU amount to register. With the node's own
 * CUDA_VISIBLE_DEVICES, index i is its i-th entry (an actor sees the device the node was
 * given) and there are no more indices than entries; NVML counts every GPU of the machine, so
 * a detected count is cut to the entries too. */
static double gpu_setup(nodest *n, double gpus, bool detected)
{
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    int listed = 0;
    char *copy = vis ? strdup(vis) : NULL, *save = NULL;
    for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t && listed < MAX_GPUS;
         t = strtok_r(NULL, ",", &save))
        snprintf(n->gpu_dev[listed++], sizeof n->gpu_dev[0], "%s", t);
    free(copy);
    if (vis && detected && gpus > listed)
        gpus = listed;
    n->ngpu = gpus < MAX_GPUS ? (int)gpus : MAX_GPUS;
    if (vis && n->ngpu > listed) {
        CT_LOG(CT_LOG_WARN, "node", "%g GPUs offered, CUDA_VISIBLE_DEVICES lists %d: actors get %d",
               gpus, listed, listed);
        n->ngpu = listed;
    }
    for (int i = 0; !vis && i < n->ngpu; i++)
        snprintf(n->gpu_dev[i], sizeof n->gpu_dev[0], "%d", i);
    return gpus;
}

/* Gives a the GPU indices for demand d; their names, comma-separated, in out ("" for none). */
static void gpu_take(nodest *n, nactor *a, double d, char *out, size_t cap)
{
    out[0] = 0;
    if (!(d > 0) || !n->ngpu) /* also NaN */
        return;
    int k = d < 1 ? 1 : d >= n->ngpu ? n->ngpu : (int)d + (d > (int)d);
    a->gpu_share = d < 1 ? d : 1;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n->ngpu && best < 0; i++)
            if (!(a->gpus >> i & 1) && n->gpu_used[i] + a->gpu_share <= 1 + 1e-9)
                best = i;
        if (best < 0) {
            for (int i = 0; i < n->ngpu; i++)
                if (!(a->gpus >> i & 1) && (best < 0 || n->gpu_used[i] < n->gpu_used[best]))
                    best = i;
            CT_LOG(CT_LOG_WARN, "node", "actor %s shares GPU index %d beyond its capacity", a->id,
                   best);
        }
        a->gpus |= 1ull << best;
        n->gpu_used[best] += a->gpu_share;
    }
    size_t off = 0;
    for (int i = 0; i < n->ngpu; i++) {
        if (!(a->gpus >> i & 1))
            continue;
        int w = snprintf(out + off, cap - off, "%s%s", off ? "," : "", n->gpu_dev[i]);
        if (w < 0 || (size_t)w >= cap - off) { /* whole names only: a cut one names another */
            out[off] = 0;
            break;
        }
        off += w;
    }
    CT_LOG(CT_LOG_DEBUG, "node", "actor %s: CUDA_VISIBLE_DEVICES=%s", a->id, out);
}

static void gpu_give_back(nodest *n, nactor *a)
{
    for (int i = 0; i < n->ngpu; i++)
        if ((a->gpus >> i & 1) && (n->gpu_used[i] -= a->gpu_share) < 1e-9)
            n->gpu_used[i] = 0;
    a->gpus = 0;
}

/* Every way an actor leaves the node (exit, kill, its zygote's death, a failed start) ends
 * here, which gives its GPUs back. */
static void remove_actor(nodest *n, int i)
{
    gpu_give_back(n, &n->a[i]);
    if (n->a[i].err_fd >= 0) {
        close(n->a[i].err_fd);
        n->nerr_fds--;
    }
    ix_del(n, i);
    if (i != --n->na) {
        ix_del(n, n->na);
        n->a[i] = n->a[n->na];
        ix_set(n, i);
    }
}

/* ---- a zygote's stderr while it starts ----
 * A zygote runs the user's program up to ct_init() and can die there (a missing shared library,
 * an exec error, the program's own message): its stderr is a pipe the node copies to its own
 * stderr, keeping the last ZYG_TAIL bytes, which a death before serving quotes to the creator.
 * The zygote puts its own stderr back when it serves (worker.c), which ends the pipe. */

/* Reads what zygote zi wrote to the pipe so far; closes it at its end. */
static void read_err(nodest *n, int zi)
{
    zygote *z = &n->z[zi];
    char buf[4096];
    while (z->err_fd >= 0) {
        ssize_t got = read(z->err_fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (got <= 0) {
            close(z->err_fd);
            z->err_fd = -1;
            return;
        }
        (void)!write(STDERR_FILENO, buf, got); /* where it went before; none: the tail only */
        if (got >= ZYG_TAIL) {
            memcpy(z->tail, buf + got - ZYG_TAIL, ZYG_TAIL);
            z->tail_len = ZYG_TAIL;
            continue;
        }
        int keep = ZYG_TAIL - (int)got;
        if (z->tail_len > keep) {
            memmove(z->tail, z->tail + z->tail_len - keep, keep);
            z->tail_len = keep;
        }
        memcpy(z->tail + z->tail_len, buf, got);
        z->tail_len += (int)got;
    }
}

/* The last lines (at most 3, 300 bytes) of the len bytes at tail on one line, " | " between
 * them. */
static void tail_lines(const char *tail, int len, char *out, size_t cap)
{
    int end = len, nl = 0;
    while (end > 0 && (tail[end - 1] == '\n' || tail[end - 1] == ' '))
        end--;
    int start = end;
    while (start > 0 && !(tail[start - 1] == '\n' && ++nl == 3))
        start--;
    if (end - start > 300)
        start = end - 300;
    size_t o = 0;
    for (int i = start; i < end && o + 4 < cap; i++) {
        char c = tail[i];
        if (c == '\n') {
            memcpy(out + o, " | ", 3);
            o += 3;
        } else {
            out[o++] = (unsigned char)c < 32 || c == 127 ? ' ' : c;
        }
    }
    out[o] = 0;
}

/* Takes zygote zi out of the table (its process ended or was killed). The actors it was to
 * start fail with why, and so do those queued for its executable when no zygote of it is left
 * or when the failure is permanent (its siblings fail the same way). */
static void zygote_remove(nodest *n, int zi, const char *why, bool permanent)
{
    zygote *z = &n->z[zi];
    for (int i = 0; i < n->na; i++)
        if (n->a[i].pid == 0 && n->a[i].zyg_pid == z->pid) {
            report_start_failed(n, n->a[i].id, why, permanent);
            remove_actor(n, i--);
        }
    bool sibling = false;
    for (int i = 0; i < n->nz && !sibling; i++)
        sibling = i != zi && n->z[i].keylen == z->keylen && !memcmp(n->z[i].key, z->key, z->keylen);
    for (int j = n->qh; j < n->qn && (permanent || !sibling); j++) {
        int ai = ix_find(n, n->q[j].id);
        if (ai >= 0 && n->q[j].keylen == z->keylen && !memcmp(n->q[j].key, z->key, z->keylen)) {
            report_start_failed(n, n->q[j].id, why, permanent);
            remove_actor(n, ai); /* dispatch drops the request */
        }
    }
    if (z->err_fd >= 0)
        close(z->err_fd);
    close(z->fd);
    if (z->peer_fd >= 0)
        close(z->peer_fd);
    free(z->key);
    n->z[zi] = n->z[--n->nz];
}

/* Zygote zi's process ended (wait status; -1: unknown). One that never served tells how it
 * ended and the end of its stderr; one that exited 126 or 127 before serving (an exec or a
 * dynamic loader's failure: a missing shared library) fails for good. */
static void zygote_gone(nodest *n, int zi, int status)
{
    zygote *z = &n->z[zi];
    read_err(n, zi);
    char how[96], tail[400], why[600];
    if (status == -1)
        snprintf(how, sizeof how, "ended");
    else if (WIFSIGNALED(status))
        snprintf(how, sizeof how, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
    bool permanent = false;
    if (z->served) {
        snprintf(why, sizeof why, "the zygote process died (pid %d %s)", (int)z->pid, how);
    } else {
        permanent = status != -1 && WIFEXITED(status) &&
                    (WEXITSTATUS(status) == 126 || WEXITSTATUS(status) == 127);
        tail_lines(z->tail, z->tail_len, tail, sizeof tail);
        snprintf(why, sizeof why, "the zygote (pid %d) %s before serving%s%s", (int)z->pid, how,
                 tail[0] ? "; its stderr: " : " (nothing on its stderr)", tail);
    }
    CT_LOG(CT_LOG_WARN, "node", "%s", why);
    zygote_remove(n, zi, why, permanent);
}

/* Ends zygote zi (SIGKILL, reaped as no actor's exit); what waits on it fails with why. Its
 * actors are the node's children and live on. */
static void retire_zygote(nodest *n, int zi, const char *why)
{
    zygote *z = &n->z[zi];
    CT_LOG(CT_LOG_INFO, "node", "retiring zygote %d: %s", (int)z->pid, why);
    if (!n->detached && z->pid > 0) {
        kill_pid(n, z->pid);
        if (n->nretired == MAX_EARLY)
            memmove(n->retired, n->retired + 1, --n->nretired * sizeof *n->retired);
        n->retired[n->nretired++] = z->pid;
    }
    zygote_remove(n, zi, why, false);
}

/* Ends the least recently used zygote that nothing waits on (no spawn outstanding, every actor
 * it made has reported); its actors are the node's children and live on. */
static int evict_zygote(nodest *n)
{
    int best = -1;
    for (int i = 0; i < n->nz; i++) {
        if (n->z[i].outstanding)
            continue;
        bool queued = false; /* start requests wait for this executable */
        for (int j = n->qh; j < n->qn && !queued; j++)
            queued = n->q[j].keylen == n->z[i].keylen &&
                     !memcmp(n->q[j].key, n->z[i].key, n->z[i].keylen);
        if (queued)
            continue;
        bool waiting = false;
        for (int j = 0; j < n->na && !waiting; j++)
            waiting = n->a[j].zyg_pid == n->z[i].pid && !n->a[j].reported;
        if (!waiting && (best < 0 || n->z[i].last_used < n->z[best].last_used))
            best = i;
    }
    if (best < 0)
        return ct__error(CT_EBUSY, "node: all %d zygotes are busy", n->nz);
    retire_zygote(n, best, "room for another executable's");
    return 0;
}

/* The head says a job's driver is gone: the job's zygotes end (its actors get KillActor each). */
static void on_job_ended(nodest *n, const Ct__JobEnded *j)
{
    const char *tok = j->job_token ? j->job_token : "";
    size_t tl = strlen(tok) + 1; /* a zygote's key starts with its job's token and a NUL */
    if (!ct__token_valid(tok))
        return;
    for (int i = n->nz - 1; i >= 0; i--)
        if (n->z[i].keylen >= tl && !memcmp(n->z[i].key, tok, tl))
            retire_zygote(n, i, "its job ended");
}

/* Zygotes unused for zyg_idle_ms with no actor of theirs here and nothing queued for their
 * executable end: a job whose end the head could not tell this node (its actors here were
 * forgotten) leaves none for ever. */
static void retire_idle(nodest *n)
{
    int64_t now = ct__now_ms();
    for (int i = n->nz - 1; i >= 0; i--) {
        zygote *z = &n->z[i];
        bool busy = z->outstanding || now - z->last_used < n->zyg_idle_ms;
        for (int j = 0; j < n->na && !busy; j++)
            busy = n->a[j].zyg_pid == z->pid;
        for (int j = n->qh; j < n->qn && !busy; j++)
            busy = n->q[j].keylen == z->keylen && !memcmp(n->q[j].key, z->key, z->keylen);
        if (!busy)
            retire_zygote(n, i, "idle");
    }
}

/* Whether a zygote has this pid already. */
static bool zygote_pid_used(const nodest *n, pid_t pid)
{
    for (int i = 0; i < n->nz; i++)
        if (n->z[i].pid == pid)
            return true;
    return false;
}

/* Records a started zygote (pid, the node's end fd; peer_fd: detached only, else -1; err_fd: the
 * pipe on its stderr, or -1). Its index, or CT_ENOMEM with the zygote killed and the fds closed. */
static int add_zygote(nodest *n, const char *exe, const char *key, size_t keylen, pid_t pid, int fd,
                      int peer_fd, int err_fd)
{
    zygote *z = &n->z[n->nz];
    z->key = malloc(keylen);
    if (!z->key) {
        kill_pid(n, pid);
        close(fd);
        if (peer_fd >= 0)
            close(peer_fd);
        if (err_fd >= 0)
            close(err_fd);
        return ct__error(CT_ENOMEM, "node: out of memory");
    }
    memcpy(z->key, key, keylen);
    z->keylen = keylen;
    z->outstanding = 0;
    z->last_used = ct__now_ms();
    if (n->detached) /* a pid of its own, which no kill ever reaches */
        for (pid = 1000000; zygote_pid_used(n, pid); pid++)
            ;
    z->pid = pid;
    z->fd = fd;
    z->peer_fd = peer_fd;
    z->err_fd = err_fd;
    z->tail_len = 0;
    z->served = false;
    n->nz++;
    CT_LOG(CT_LOG_INFO, "node", "zygote %d for %s", (int)z->pid, exe);
    return n->nz - 1;
}

static int spawn_zygote(nodest *n, Ct__StartActor *s, const char *exe, int exe_fd, const char *key,
                        size_t keylen, bool may_evict)
{
    if (exe_fd < 0 && access(exe, X_OK) != 0)
        return ct__error(CT_ENOENT, "start_actor.exe_path: %s: %s", exe, strerror(errno));
    if (n->nz >= n->max_zyg) {
        int rc = may_evict ? evict_zygote(n) : CT_EBUSY;
        if (rc)
            return rc;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return ct__error(-errno, "node: socketpair: %s", strerror(errno));
    int big = 1 << 20;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    if (n->detached) /* everything but the process: the fuzzer plays the zygote on sv[1] */
        return add_zygote(n, exe, key, keylen, -1, sv[0], sv[1], -1);
    /* everything the child needs is built before fork: the node has threads */
    size_t nenv = 0;
    while (environ[nenv])
        nenv++;
    char vars[12][300]; /* the zygote's own variables, after the inherited ones, then NULL */
    char **env = calloc(nenv + CT_ARRAY_LEN(vars) + 1, sizeof *env);
    char **argv = calloc(s->n_argv + 2, sizeof *argv);
    if (!env || !argv) {
        free(env);
        free(argv);
        close(sv[0]);
        close(sv[1]);
        return ct__error(CT_ENOMEM, "node: out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < nenv; i++)
        if (strncmp(environ[i], "CT_", 3) || !strncmp(environ[i], "CT_LOG_LEVEL=", 13))
            env[k++] = environ[i];
    snprintf(vars[0], sizeof vars[0], "CT_MODE=zygote");
    snprintf(vars[1], sizeof vars[1], "CT_ZYGOTE_FD=%d", sv[1]);
    snprintf(vars[2], sizeof vars[2], "CT_HEAD=%s", n->head);
    snprintf(vars[3], sizeof vars[3], "CT_NODE_ID=%s", n->id);
    snprintf(vars[4], sizeof vars[4], "CT_NODE_HOST=%s", n->host);
    snprintf(vars[5], sizeof vars[5], "CT_NODE_PID=%d", (int)getpid());
    /* the job's token, which its actors present to the head (one zygote per job: the key) */
    snprintf(vars[6], sizeof vars[6], "CT_JOB_TOKEN=%s",
             ct__token_valid(s->job_token) ? s->job_token : "");
    /* every symbol bound once in the zygote: otherwise each actor resolves (and dirties the GOT
     * pages of) every function it calls for the first time, ~25% of an actor's start */
    int nv = 7;
    /* the cluster secret through a pipe the zygote inherits, never in the environment (which
     * any process of this user can read in /proc) */
    int secret_fd = -1;
    if (ct__auth_off()) {
        snprintf(vars[nv++], sizeof vars[0], "CT_AUTH=off");
    } else {
        secret_fd = ct__auth_secret_pipe();
        if (secret_fd < 0) {
            free(env);
            free(argv);
            close(sv[0]);
            close(sv[1]);
            return secret_fd;
        }
        snprintf(vars[nv++], sizeof vars[0], "CT_SECRET_FD=%d", secret_fd);
    }
    if (!getenv("LD_BIND_NOW")) {
        snprintf(vars[nv++], sizeof vars[0], "LD_BIND_NOW=1");
        snprintf(vars[nv++], sizeof vars[0], "CT_ZYGOTE_BIND_NOW=1");
    }
    /* its stderr is a pipe until it serves (read_err); CT_STDERR_FD is the node's own stderr,
     * which it then puts back. Without a pipe it just has the node's. */
    int errp[2] = {-1, -1}, keep_err = -1;
    if (pipe2(errp, O_CLOEXEC) == 0) {
        keep_err = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
        if (keep_err < 0)
            keep_err = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (keep_err < 0) {
            close(errp[0]);
            close(errp[1]);
            errp[0] = errp[1] = -1;
        } else {
            fcntl(errp[0], F_SETFL, O_NONBLOCK);
            snprintf(vars[nv++], sizeof vars[0], "CT_STDERR_FD=%d", keep_err);
        }
    }
    char execmsg[600]; /* an exec failure's message, written by the child to the pipe */
    int execlen = snprintf(execmsg, sizeof execmsg, "ct-node: cannot execute %s: ", exe);
    if (execlen < 0 || execlen >= (int)sizeof execmsg)
        execlen = 0;
    for (int i = 0; i < nv; i++)
        env[k++] = vars[i];
    env[k] = NULL;
    for (size_t i = 0; i < s->n_argv; i++)
        argv[i] = s->argv[i];
    if (!s->n_argv)
        argv[0] = (char *)exe;
    /* Test hook: a spare zygote (one that no start waits for) execs this much later, as it may
     * on a busy machine */
    const char *late = may_evict ? NULL : getenv("CT_NODE_TEST_SPARE_EXEC_DELAY_MS");
    struct timespec late_ts = {0, 0};
    if (late && atoi(late) > 0)
        late_ts = (struct timespec){atoi(late) / 1000, (long)(atoi(late) % 1000) * 1000000};
    pid_t me = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != me)
            _exit(1);
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        fcntl(sv[1], F_SETFD, 0); /* keep the zygote's end across exec */
        if (secret_fd >= 0)
            fcntl(secret_fd, F_SETFD, 0);
        if (errp[1] >= 0) {
            fcntl(keep_err, F_SETFD, 0);
            dup2(errp[1], STDERR_FILENO);
        }
        if (late_ts.tv_sec || late_ts.tv_nsec)
            nanosleep(&late_ts, NULL);
        if (exe_fd >= 0) /* the checked file itself (an ELF: its descriptor closes on exec) */
            fexecve(exe_fd, argv, env);
        else
            execve(exe, argv, env);
        /* only async-signal-safe calls here (the node has threads); strerrordesc_np is a
         * table lookup */
        const char *desc = strerrordesc_np(errno);
        (void)!write(STDERR_FILENO, execmsg, execlen);
        (void)!write(STDERR_FILENO, desc ? desc : "error", desc ? strlen(desc) : 5);
        (void)!write(STDERR_FILENO, "\n", 1);
        _exit(127);
    }
    int fork_errno = errno;
    free(env);
    free(argv);
    close(sv[1]);
    if (secret_fd >= 0)
        close(secret_fd);
    if (errp[1] >= 0) {
        close(errp[1]);
        close(keep_err);
    }
    if (pid < 0) {
        close(sv[0]);
        if (errp[0] >= 0)
            close(errp[0]);
        return ct__error(-fork_errno, "node: fork: %s", strerror(fork_errno));
    }
    return add_zygote(n, exe, key, keylen, pid, sv[0], -1, errp[0]);
}

static void qreq_pop(nodest *n)
{
    free(n->q[n->qh].buf);
    free(n->q[n->qh].key);
    if (++n->qh == n->qn)
        n->qh = n->qn = 0;
}

/* Hands queued start requests, oldest first, to the least busy zygote of their executable
 * while one has fewer than ZYG_INFLIGHT outstanding and its socket takes them without
 * blocking. A request whose executable has no zygote left fails. */
static void dispatch(nodest *n)
{
    while (n->qh < n->qn) {
        qreq *qr = &n->q[n->qh];
        int ai = ix_find(n, qr->id);
        if (ai < 0) { /* gone meanwhile */
            qreq_pop(n);
            continue;
        }
        int zi = -1;
        for (int i = 0; i < n->nz; i++)
            if (n->z[i].keylen == qr->keylen && !memcmp(n->z[i].key, qr->key, qr->keylen) &&
                (zi < 0 || n->z[i].outstanding < n->z[zi].outstanding))
                zi = i;
        if (zi < 0) {
            report_start_failed(n, qr->id, "the zygote process died", false);
            remove_actor(n, ai);
            qreq_pop(n);
            continue;
        }
        zygote *z = &n->z[zi];
        if (z->outstanding >= ZYG_INFLIGHT)
            return; /* its SPAWNED records call again */
        ssize_t w = send(z->fd, qr->buf, qr->len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return; /* its SPAWNED records, or the next turn of the loop, call again */
        if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
            return; /* it died: its end (zygote_gone) fails or moves what waits, saying why */
        if (w != (ssize_t)qr->len) {
            char why[200];
            snprintf(why, sizeof why, "node: zygote %d: %s", (int)z->pid,
                     w < 0 ? strerror(errno) : "short send");
            report_start_failed(n, qr->id, why, false);
            remove_actor(n, ai);
            qreq_pop(n);
            continue;
        }
        z->outstanding++;
        z->last_used = ct__now_ms();
        n->a[ai].zyg_pid = z->pid;
        qreq_pop(n);
    }
}

static void on_start_actor(nodest *n, Ct__StartActor *s)
{
    char key[4096];
    size_t kl = 0;
    int rc = 0;
    bool permanent = false; /* the executable cannot run here */
    char why[512];
    char cached[512];
    const char *exe = s->exe_path ? s->exe_path : "";
    int exe_fd = -1; /* code shipping: the cached copy, checked, that the zygotes exec */
    /* Test hook: a main loop busy this long per start (as a slow code fetch would keep it);
     * the liveness thread must keep the node alive meanwhile. */
    const char *stall = getenv("CT_NODE_TEST_STALL_MS");
    if (stall && atoi(stall) > 0)
        usleep((useconds_t)atoi(stall) * 1000);
    if (s->exe_object_id.len) {
        /* code shipping: run the node's cached copy of the driver's executable */
        rc = n->detached
                 ? ct__error(CT_EPROTO, "node: no code shipping in a detached node")
                 : ct__objnode_exe(s->exe_object_id.data, s->exe_object_id.len, s->exe_holders,
                                   s->n_exe_holders, cached, sizeof cached, &exe_fd);
        if (!rc)
            exe = cached;
        else if (rc != CT_EPROTO && access(exe, X_OK) == 0) /* e.g. every holder died */
            CT_LOG(CT_LOG_WARN, "node", "shipped executable unavailable (%s); running %s",
                   ct_last_error(), exe);
        else
            goto fail;
        rc = 0;
    }
    /* the job token first (a long argv may be cut off the key): jobs never share a zygote */
    kl += snprintf(key, sizeof key, "%s", s->job_token ? s->job_token : "") + 1;
    kl += snprintf(key + kl, sizeof key - kl, "%s", exe) + 1;
    for (size_t i = 0; i < s->n_argv && kl < sizeof key; i++)
        kl += snprintf(key + kl, sizeof key - kl, "%s", s->argv[i]) + 1;
    if (kl > sizeof key)
        kl = sizeof key;
    if (!s->actor_id || strlen(s->actor_id) >= 32 || !s->class_name ||
        strlen(s->class_name) >= 64) {
        rc = ct__error(CT_EINVAL, "start_actor: bad actor_id or class_name");
        goto fail;
    }
    if (s->args.len > CT_ZYGOTE_MAX_ARGS) {
        rc = ct__error(CT_EINVAL, "start_actor.args: %zu bytes, at most %d", s->args.len,
                       CT_ZYGOTE_MAX_ARGS);
        goto fail;
    }
    /* the least busy zygote of this executable; another one (up to one per CPU, at most 4)
     * when all are busy, so that bursts of creations fork in parallel */
    int zi = -1, same = 0;
    for (int i = 0; i < n->nz; i++)
        if (n->z[i].keylen == kl && !memcmp(n->z[i].key, key, kl)) {
            same++;
            if (zi < 0 || n->z[i].outstanding < n->z[zi].outstanding)
                zi = i;
        }
    /* sysconf reads /sys on every call: once per node */
    static long ncpu;
    if (!ncpu)
        ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int max_same = ncpu < 1 ? 1 : ncpu > 4 ? 4 : (int)ncpu;
    if (zi < 0 || (n->z[zi].outstanding > 0 && same < max_same && n->nz < n->max_zyg)) {
        int nzi = spawn_zygote(n, s, exe, exe_fd, key, kl, zi < 0);
        if (nzi >= 0)
            zi = nzi;
        else if (zi < 0) {
            rc = nzi;
            permanent = rc == CT_ENOENT; /* spawn_zygote's access(exe, X_OK) */
            goto fail;
        }
        /* a new executable: its sibling zygotes start now, while this one is loading, so that
         * a burst of creations does not pay for their exec and dynamic linking */
        for (same++; same < max_same && n->nz < n->max_zyg; same++)
            if (spawn_zygote(n, s, exe, exe_fd, key, kl, false) < 0)
                break;
    }
    if ((rc = grow_actors(n)))
        goto fail;
    if (n->qn == n->qcap) {
        if (n->qh > 0) { /* compact before growing */
            memmove(n->q, n->q + n->qh, (n->qn - n->qh) * sizeof *n->q);
            n->qn -= n->qh;
            n->qh = 0;
        } else {
            int cap = n->qcap ? 2 * n->qcap : 64;
            qreq *nq = realloc(n->q, cap * sizeof *nq);
            if (!nq) {
                rc = ct__error(CT_ENOMEM, "node: out of memory");
                goto fail;
            }
            n->q = nq;
            n->qcap = cap;
        }
    }
    size_t len = sizeof(ct__zreq) + s->args.len;
    char *buf = malloc(len);
    char *kcopy = malloc(kl);
    if (!buf || !kcopy) {
        free(buf);
        free(kcopy);
        rc = ct__error(CT_ENOMEM, "node: out of memory");
        goto fail;
    }
    ct__zreq *r = (ct__zreq *)buf;
    memset(r, 0, sizeof *r);
    snprintf(r->actor_id, sizeof r->actor_id, "%s", s->actor_id);
    snprintf(r->cls, sizeof r->cls, "%s", s->class_name);
    r->args_len = (unsigned)s->args.len;
    if (s->args.len)
        memcpy(buf + sizeof *r, s->args.data, s->args.len);
    memcpy(kcopy, key, kl);
    qreq *qr = &n->q[n->qn++];
    qr->buf = buf;
    qr->len = len;
    qr->key = kcopy;
    qr->keylen = kl;
    snprintf(qr->id, sizeof qr->id, "%s", s->actor_id);
    nactor *a = &n->a[n->na++];
    memset(a, 0, sizeof *a);
    a->err_fd = -1;
    snprintf(a->id, sizeof a->id, "%s", s->actor_id);
    snprintf(a->cls, sizeof a->cls, "%s", s->class_name);
    snprintf(a->job, sizeof a->job, "%s", s->job_token ? s->job_token : "");
    snprintf(a->pg, sizeof a->pg, "%s", s->pg_id ? s->pg_id : "");
    a->bundle = s->bundle_index;
    for (size_t i = 0; i < s->n_resources && a->nres < 16; i++)
        if (s->resources[i]->name && strlen(s->resources[i]->name) < 32) {
            snprintf(a->rname[a->nres], 32, "%s", s->resources[i]->name);
            a->ramt[a->nres++] = s->resources[i]->amount;
        }
    ix_set(n, n->na - 1);
    gpu_take(n, a, s->gpus, r->cuda_devices, sizeof r->cuda_devices);
    if (exe_fd >= 0)
        close(exe_fd);
    return;
fail:
    if (exe_fd >= 0)
        close(exe_fd);
    snprintf(why, sizeof why, "%s", ct_last_error());
    report_start_failed(n, s->actor_id ? s->actor_id : "", why, permanent);
}

static void forward_ready(nodest *n, nactor *na, const ct__zrep *r)
{
    snprintf(na->addr, sizeof na->addr, "%.127s", r->text);
    Ct__Envelope e;
    Ct__ActorReady a = CT__ACTOR_READY__INIT;
    ct__env_init(&e, 0, n->id, 0);
    a.actor_id = (char *)r->actor_id;
    a.address = (char *)r->text;
    a.pid = r->pid;
    e.body_case = CT__ENVELOPE__BODY_ACTOR_READY;
    e.actor_ready = &a;
    send_head(n, &e);
}

/* Receives one record from a zygote's socket; the descriptor that came with it (an actor's
 * stderr memfd) in *efd, -1 for none. */
static ssize_t recv_rep(int fd, ct__zrep *r, int *efd)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } c;
    struct iovec io = {r, sizeof *r};
    struct msghdr m = {
        .msg_iov = &io, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof c.buf};
    *efd = -1;
    ssize_t got = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    for (struct cmsghdr *h = got >= 0 ? CMSG_FIRSTHDR(&m) : NULL; h; h = CMSG_NXTHDR(&m, h))
        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
            h->cmsg_len >= CMSG_LEN(sizeof(int)) && *efd < 0)
            memcpy(efd, CMSG_DATA(h), sizeof *efd);
    return got;
}

static void on_zygote_reply(nodest *n, int zi)
{
    for (int k = 0; k < 256; k++) {
        ct__zrep r;
        int efd;
        ssize_t got = recv_rep(n->z[zi].fd, &r, &efd);
        if (got != sizeof r && efd >= 0)
            close(efd);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
            /* every end of its socketpair closed: the zygote is exiting; its status, now */
            int st = -1;
            pid_t pid = n->z[zi].pid;
            if (!n->detached && pid > 0) {
                kill_pid(n, pid);
                if (waitpid(pid, &st, 0) != pid)
                    st = -1;
            }
            zygote_gone(n, zi, st);
            return;
        }
        if (got != sizeof r)
            return;
        n->z[zi].served = true;
        r.actor_id[sizeof r.actor_id - 1] = 0;
        r.text[sizeof r.text - 1] = 0;
        if (r.kind == CT_ZREP_SPAWNED && n->z[zi].outstanding > 0)
            n->z[zi].outstanding--;
        int i = ix_find(n, r.actor_id);
        nactor *a = i >= 0 ? &n->a[i] : NULL;
        if (a && efd >= 0 && r.kind == CT_ZREP_SPAWNED && !a->reported && a->err_fd < 0 &&
            n->nerr_fds < MAX_ERR_FDS) {
            a->err_fd = efd; /* until it reports (READY or FAILED below) */
            n->nerr_fds++;
            efd = -1;
        }
        if (efd >= 0)
            close(efd);
        if (!a)
            continue;
        if (r.kind != CT_ZREP_SPAWNED && a->err_fd >= 0) {
            close(a->err_fd); /* it reported: its stderr is its own again (worker.c) */
            a->err_fd = -1;
            n->nerr_fds--;
        }
        if (r.kind == CT_ZREP_READY) {
            a->reported = true;
            forward_ready(n, a, &r);
        } else if (r.kind == CT_ZREP_FAILED) {
            a->reported = true;
            report_start_failed(n, a->id, r.text, false);
            gpu_give_back(n, a); /* the head frees them now too; the process only exits */
        } else if (r.pid <= 0) {
            report_start_failed(n, a->id, "the zygote could not fork", false);
            remove_actor(n, i);
            continue;
        } else if (r.text[0] && !a->reported) {
            /* SPAWNED with an address: a class without create serves as soon as it runs
             * (its listener was made by the zygote): this record is its readiness too */
            a->reported = true;
            forward_ready(n, a, &r);
        }
        if (a->pid)
            continue;
        a->pid = r.pid;
        int j;
        for (j = 0; j < n->nearly; j++)
            if (n->early[j].pid == r.pid)
                break;
        if (j < n->nearly) {
            report_exit(n, a, r.pid, n->early[j].status);
            n->early[j] = n->early[--n->nearly];
            remove_actor(n, i);
            continue;
        }
        if (a->kill_pending)
            kill_pid(n, a->pid);
    }
}

static void reap(nodest *n)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        bool found = false;
        for (int i = 0; i < n->nretired && !found; i++)
            if (n->retired[i] == pid) {
                n->retired[i] = n->retired[--n->nretired];
                found = true;
            }
        for (int i = 0; i < n->nz && !found; i++)
            if (n->z[i].pid == pid) {
                zygote_gone(n, i, status);
                found = true;
            }
        for (int i = 0; i < n->na && !found; i++)
            if (n->a[i].pid == pid) {
                report_exit(n, &n->a[i], pid, status);
                remove_actor(n, i);
                found = true;
            }
        if (!found) {
            /* an actor whose pid the zygote has not told yet, or an orphan of an actor */
            if (n->nearly == MAX_EARLY)
                n->nearly--;
            n->early[n->nearly].pid = pid;
            n->early[n->nearly++].status = status;
        }
    }
}

static void on_kill_actor(nodest *n, Ct__KillActor *k)
{
    int i = k->actor_id ? ix_find(n, k->actor_id) : -1;
    if (i >= 0) {
        if (n->a[i].pid > 0)
            kill_pid(n, n->a[i].pid);
        else
            n->a[i].kill_pending = true;
    }
}

/* Asks the head for an answer (Ok), so that a quiet head is heard from. */
static void ping_head(nodest *n)
{
    Ct__Envelope e;
    Ct__Ping pg = CT__PING__INIT;
    ct__env_init(&e, 0, n->id, 0);
    e.body_case = CT__ENVELOPE__BODY_PING;
    e.ping = &pg;
    send_head(n, &e);
}

/* The head's silence (*silent, ms; reset when anything arrives from it) counts only over time
 * this node ran its loop: each count adds the time since the previous one, but at most one
 * heartbeat period. A turn of the loop takes at most that (its poll's timeout) when the node
 * runs; what a turn took beyond it (the node stopped, starved, or busy in a handler such as a
 * code fetch) is not the head's silence. */
static void count_silence(int64_t *silent, int64_t *last_count, int hb_ms)
{
    int64_t now = ct__now_ms(), d = now - *last_count;
    *silent += d < hb_ms ? d : hb_ms;
    *last_count = now;
}

/* Whether the head has been silent for longer than dead_ms (the caller drained the socket),
 * counting only the node's running time (count_silence). */
static bool head_lost(nodest *n, int64_t *silent_ms, int64_t *last_count, int hb_ms, int dead_ms)
{
    count_silence(silent_ms, last_count, hb_ms);
    int64_t silent = *silent_ms;
    if (silent <= dead_ms)
        return false;
    ct__error(CT_EDEAD,
              "node: the head %s did not answer for %lld ms of this node's running time "
              "(its grace time, --head-dead-after-ms, is %d ms): "
              "killing the node's actors and exiting",
              n->head, (long long)silent, dead_ms);
    CT_LOG(CT_LOG_ERROR, "node", "%s", ct_last_error());
    return true;
}

/* The drain a first SIGTERM asked for: the node tells the head (Heartbeat.draining), which
 * places nothing more here, pushes NODE_DRAINING, and answers whether a job that listens has
 * actors here (DrainReply.wait): then the node waits until its actors exited (the trainer
 * ends its replicas once it took a checkpoint) or drain_ms passed, else it stops at once, as
 * it does when the head does not answer within 3 s. True when the node should stop now. */
static bool drain_step(nodest *n, int drain_ms)
{
    int64_t now = ct__now_ms();
    if (n->drain == 0) {
        Ct__Envelope e;
        Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
        ct__env_init(&e, 1, n->id, 0);
        hb.node_id = n->id;
        hb.draining = 1;
        e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
        e.heartbeat = &hb;
        CT_LOG(CT_LOG_INFO, "node", "SIGTERM: draining (%d actors; a second SIGTERM stops now)",
               n->na);
        if (send_head(n, &e))
            return true;
        n->drain = 1;
        n->drain_asked = now;
        n->drain_until = now + (drain_ms > 0 ? drain_ms : 60000);
    }
    if (n->drain == 1 && now - n->drain_asked > 3000)
        CT_LOG(CT_LOG_WARN, "node", "draining: the head did not answer; stopping");
    if (n->drain == 2 && n->na && now >= n->drain_until)
        CT_LOG(CT_LOG_WARN, "node", "draining: %d actors still run after %d ms; stopping", n->na,
               drain_ms > 0 ? drain_ms : 60000);
    if (n->drain == 2 && !n->na)
        CT_LOG(CT_LOG_INFO, "node", "drained: its actors exited; stopping");
    return n->drain == 3 || (n->drain == 1 && now - n->drain_asked > 3000) ||
           (n->drain == 2 && (!n->na || now >= n->drain_until));
}

static void heartbeat(nodest *n)
{
    Ct__Envelope e;
    Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
    ct__env_init(&e, 0, n->id, 0);
    hb.node_id = n->id;
    e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
    e.heartbeat = &hb;
    send_head(n, &e);
}

/* The liveness thread: heartbeats the head from a socket of its own every hb_ms, so that a
 * main loop busy for a while (fetching the shipped executable, forking a zygote, a machine
 * starved of CPU) does not get the node declared dead. The main loop heartbeats too, which
 * keeps the head's route to it. Ends when live_stop[1] is closed. */
typedef struct liveness {
    void *ctx;
    char head[128], id[32], token[CT_TOKEN_LEN + 1];
    int hb_ms;
    int stop_fd;
    int stop[2]; /* live_start / live_stop: the pipe whose close ends the thread */
    pthread_t th;
    bool on;
} liveness;

static void *liveness_main(void *arg)
{
    liveness *l = arg;
    void *s = zmq_socket(l->ctx, ZMQ_DEALER);
    if (!s)
        return NULL;
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (ct__auth_zmq_client(s)) {
        CT_LOG(CT_LOG_ERROR, "node", "liveness thread: %s", ct_last_error());
        zmq_close(s);
        return NULL;
    }
    char ep[160];
    snprintf(ep, sizeof ep, "tcp://%s", l->head);
    zmq_connect(s, ep);
    for (;;) {
        Ct__Envelope e;
        Ct__Heartbeat hb = CT__HEARTBEAT__INIT;
        ct__env_init(&e, 0, l->id, 0);
        hb.node_id = l->id;
        hb.liveness_only = 1;
        e.token = l->token;
        e.body_case = CT__ENVELOPE__BODY_HEARTBEAT;
        e.heartbeat = &hb;
        ct__msg_send(s, NULL, &e, ZMQ_DONTWAIT);
        zmq_msg_t m; /* replies (errors only) are the main loop's business: drop them */
        zmq_msg_init(&m);
        while (zmq_msg_recv(&m, s, ZMQ_DONTWAIT) >= 0)
            ;
        zmq_msg_close(&m);
        struct pollfd p = {l->stop_fd, POLLIN, 0};
        if (poll(&p, 1, l->hb_ms) != 0)
            break;
    }
    zmq_close(s);
    return NULL;
}

/* Starts the liveness thread for n's current id and token (nothing when it cannot: the main
 * loop still heartbeats). */
static void live_start(liveness *l, nodest *n, int hb_ms)
{
    *l = (liveness){.ctx = n->ctx, .hb_ms = hb_ms, .stop_fd = -1, .stop = {-1, -1}};
    snprintf(l->head, sizeof l->head, "%s", n->head);
    snprintf(l->id, sizeof l->id, "%s", n->id);
    snprintf(l->token, sizeof l->token, "%s", n->token);
    if (pipe2(l->stop, O_CLOEXEC) == 0) {
        l->stop_fd = l->stop[0];
        l->on = pthread_create(&l->th, NULL, liveness_main, l) == 0;
    }
}

static void live_stop(liveness *l)
{
    if (l->stop[1] >= 0)
        close(l->stop[1]);
    if (l->on)
        pthread_join(l->th, NULL);
    if (l->stop[0] >= 0)
        close(l->stop[0]);
    l->stop[0] = l->stop[1] = -1;
    l->on = false;
}

/* Opens the death-watch connection the registration's reply offered (head/watch.h). Without
 * one the node still runs: its death is then found by heartbeats alone. */
static void watch_open(nodest *n, unsigned port, const char *ticket)
{
    if (n->watch_fd >= 0)
        close(n->watch_fd);
    n->watch_fd = -1;
    if (!port || !ticket || !*ticket)
        return;
    int fd = ct__watch_dial(n->head, port, ticket, 10000);
    if (fd < 0)
        CT_LOG(CT_LOG_WARN, "node", "no death watch (heartbeats only): %s", ct_last_error());
    n->watch_fd = fd < 0 ? -1 : fd;
}

/* Registers with the head: as a new node, or (resume) again under n's id and token with the
 * actors it runs (RegisterNode.node_id, 1.4), when a head that does not know it (restarted)
 * answered its heartbeat. 0; CT_EDEAD when the head refused the resume (it declared this node
 * dead: the caller rejoins as new); another CT_E* code when it got no answer. */
static int do_register(nodest *n, int *hb_ms, bool resume)
{
    const ct_node_opts *o = n->o;
    ct_resource custom[32];
    int nc = 0;
    char *store = NULL;
    int rc = ct__parse_resources(o->resources, custom, 32, &nc, &store);
    if (rc)
        return rc;
    Ct__Resource r[34];
    Ct__Resource *rp[34];
    int nr = 0;
    /* detected: the CPUs this process may run on (a cpuset, --cpuset, taskset), else online */
    cpu_set_t mine;
    double cpus = o->cpus >= 0 ? o->cpus
                  : sched_getaffinity(0, sizeof mine, &mine) == 0
                      ? (double)CPU_COUNT(&mine)
                      : (double)sysconf(_SC_NPROCESSORS_ONLN);
    double gpus = gpu_setup(n, o->gpus >= 0 ? o->gpus : (double)ct__gpu_count(), o->gpus < 0);
    const char *names[2] = {"CPU", "GPU"};
    double amts[2] = {cpus, gpus};
    for (int i = 0; i < 2; i++) {
        ct__resource__init(&r[nr]);
        r[nr].name = (char *)names[i];
        r[nr].amount = amts[i];
        rp[nr] = &r[nr];
        nr++;
    }
    for (int i = 0; i < nc; i++) {
        ct__resource__init(&r[nr]);
        r[nr].name = (char *)custom[i].name;
        r[nr].amount = custom[i].amount;
        rp[nr] = &r[nr];
        nr++;
    }
    Ct__Envelope e;
    Ct__RegisterNode reg = CT__REGISTER_NODE__INIT;
    ct__env_init(&e, ++n->req, "node", 10000);
    reg.host = n->host;
    reg.n_resources = nr;
    reg.resources = rp;
    reg.pid = getpid();
    e.body_case = CT__ENVELOPE__BODY_REGISTER_NODE;
    e.register_node = &reg;
    Ct__ResumedActor *ra = NULL, **rap = NULL;
    Ct__Resource *rr = NULL, **rrp = NULL;
    if (resume) {
        reg.node_id = n->id;
        reg.node_token = n->token;
        ra = calloc(n->na + 1, sizeof *ra);
        rap = calloc(n->na + 1, sizeof *rap);
        rr = calloc(16 * (n->na + 1), sizeof *rr);
        rrp = calloc(16 * (n->na + 1), sizeof *rrp);
        if (!ra || !rap || !rr || !rrp) {
            rc = ct__error(CT_ENOMEM, "node: out of memory");
            goto sent;
        }
        for (int i = 0; i < n->na; i++) {
            nactor *a = &n->a[i];
            if (a->kill_pending || !a->job[0])
                continue;
            Ct__ResumedActor *x = &ra[reg.n_actors];
            ct__resumed_actor__init(x);
            x->actor_id = a->id;
            x->class_name = a->cls;
            x->job_token = a->job;
            x->pid = a->pid;
            x->address = a->addr;
            x->pg_id = a->pg;
            x->bundle_index = a->bundle;
            x->resources = &rrp[16 * i];
            for (int k = 0; k < a->nres; k++) {
                ct__resource__init(&rr[16 * i + k]);
                rr[16 * i + k].name = a->rname[k];
                rr[16 * i + k].amount = a->ramt[k];
                rrp[16 * i + k] = &rr[16 * i + k];
            }
            x->n_resources = a->nres;
            rap[reg.n_actors++] = x;
        }
        reg.actors = rap;
    }
    rc = ct__msg_send(n->sock, NULL, &e, 0);
sent:
    free(ra);
    free(rap);
    free(rr);
    free(rrp);
    free(store);
    if (rc)
        return rc;
    int64_t until = ct__now_ms() + 10000;
    for (;;) {
        int64_t left = until - ct__now_ms();
        zmq_pollitem_t it = {n->sock, 0, ZMQ_POLLIN, 0};
        if (left <= 0 || node_stop || node_terms)
            return ct__error(CT_ETIMEDOUT,
                             "node: head %s did not answer registration (is it up, and does "
                             "it hold this node's cluster secret?)",
                             n->head);
        /* slices of 100 ms: a SIGTERM run by another thread interrupts no poll here */
        if (zmq_poll(&it, 1, left < 100 ? left : 100) <= 0)
            continue;
        Ct__Envelope *rep;
        rc = ct__msg_recv(n->sock, NULL, &rep, 0, "node");
        if (rc) {
            ct__msg_free(rep);
            return rc;
        }
        if (rep->req_id != n->req) {
            ct__msg_free(rep);
            continue;
        }
        bool refused = resume && rep->body_case == CT__ENVELOPE__BODY_ERROR && rep->error->field &&
                       !strcmp(rep->error->field, "register_node.node_id");
        rc = ct__msg_expect(rep, CT__ENVELOPE__BODY_REGISTER_NODE_REPLY, "register_node");
        if (refused)
            rc = CT_EDEAD;
        if (!rc && resume && strcmp(n->id, rep->register_node_reply->node_id)) {
            rc = ct__error(CT_EPROTO, "node: the head gave %s a new id when it registered again",
                           n->id);
        } else if (!rc) {
            snprintf(n->id, sizeof n->id, "%s", rep->register_node_reply->node_id);
            snprintf(n->token, sizeof n->token, "%s", rep->register_node_reply->token);
            *hb_ms = rep->register_node_reply->heartbeat_ms;
            watch_open(n, rep->register_node_reply->watch_port,
                       rep->register_node_reply->watch_ticket);
        }
        ct__msg_free(rep);
        return rc;
    }
}

/* Handles one envelope from the head (borrowed). CT_EDEAD when the head declared this node
 * dead (the caller stops), else 0. */
static int on_head(nodest *n, Ct__Envelope *e)
{
    switch (e->body_case) {
    case CT__ENVELOPE__BODY_START_ACTOR:
        on_start_actor(n, e->start_actor);
        break;
    case CT__ENVELOPE__BODY_KILL_ACTOR:
        on_kill_actor(n, e->kill_actor);
        break;
    case CT__ENVELOPE__BODY_JOB_ENDED:
        on_job_ended(n, e->job_ended);
        break;
    case CT__ENVELOPE__BODY_DRAIN_REPLY:
        if (n->drain == 1) {
            n->drain = e->drain_reply->wait ? 2 : 3;
            if (n->drain == 2)
                CT_LOG(CT_LOG_INFO, "node",
                       "draining: waiting up to %lld ms for %d actors, whose jobs save their "
                       "work first",
                       (long long)(n->drain_until - ct__now_ms()), n->na);
        }
        break;
    case CT__ENVELOPE__BODY_ERROR:
        CT_LOG(CT_LOG_WARN, "node", "head: %s", e->error->message);
        if (e->error->field && !strcmp(e->error->field, "heartbeat.node_id"))
            return CT_EDEAD;
        break;
    default:
        for (int i = 0; i < nhandlers; i++)
            if (handlers[i].body_case == (int)e->body_case)
                handlers[i].fn(e, handlers[i].user);
        break;
    }
    return 0;
}

/* The head declared this node dead while it lived (stopped, starved or cut off for longer than
 * the head's dead-after time): the head counted its actors as lost, so they are killed here,
 * and the node registers again as a new node (a new id, token and store; the old store's
 * objects were dropped from the head's directory). The zygotes go too: they hand the old node
 * id to the actors they fork. 0, or the registration's error (the node then exits, as when its
 * head is gone). */
static int rejoin(nodest *n, liveness *live, int *hb_ms)
{
    CT_LOG(CT_LOG_WARN, "node",
           "the head declared %s dead: killing its %d actors, registering again", n->id, n->na);
    live_stop(live);
    for (int i = 0; i < nhooks; i++)
        if (hooks[i].on_stop)
            hooks[i].on_stop(n->id, n->head, n->host, hooks[i].user);
    ct__objnode_stop();
    pid_t pids[256];
    int np = 0;
    for (int i = 0; i < n->na; i++) {
        kill_pid(n, n->a[i].pid);
        if (n->a[i].pid > 0 && np < 256)
            pids[np++] = n->a[i].pid;
    }
    for (int i = 0; i < n->nz; i++) {
        zygote *z = &n->z[i];
        kill_pid(n, z->pid);
        if (z->pid > 0 && np < 256)
            pids[np++] = z->pid;
        if (z->err_fd >= 0)
            close(z->err_fd);
        close(z->fd);
        free(z->key);
    }
    n->nz = 0;
    while (n->na)
        remove_actor(n, n->na - 1);
    while (n->qh < n->qn)
        qreq_pop(n);
    /* reaped here, so that their exits are not reported under the new id (the rest, if any,
     * end as unknown pids in reap) */
    int64_t until = ct__now_ms() + 2000;
    for (int i = 0; i < np; i++)
        while (waitpid(pids[i], NULL, WNOHANG) == 0 && ct__now_ms() < until)
            usleep(1000);
    ct__log_set_who("node");
    int rc = do_register(n, hb_ms, false);
    if (rc)
        return rc;
    if (*hb_ms <= 0)
        *hb_ms = 100;
    ct__log_set_who(n->id);
    CT_LOG(CT_LOG_INFO, "node", "registered again as %s", n->id);
    if ((rc = ct__objnode_start(n->id, n->head, n->host, n->o->store_memory, n->o->spill_dir)))
        return rc;
    for (int i = 0; i < nhooks; i++)
        if (hooks[i].on_start)
            hooks[i].on_start(n->id, n->head, n->host, hooks[i].user);
    live_start(live, n, *hb_ms);
    return 0;
}

/* A head that does not know this node answered its heartbeat: the head restarted (or stalled
 * past the node's patience and declared it dead). The node registers again under its id and
 * token with the actors it runs, and its shard lists its objects again (ObjNodeInfo, ObjAdded):
 * the restarted head rebuilds its tables from that, and the actors never stopped. A head that
 * declared this node dead refuses: the node rejoins as a new one (rejoin). 0, or the error of
 * a rejoin that failed (the node exits); a resume that got no answer is tried again at the
 * next refused heartbeat, until the head-dead time ends the node. */
static int resume(nodest *n, liveness *live, int *hb_ms)
{
    CT_LOG(CT_LOG_INFO, "node",
           "the head does not know %s (restarted?): registering again with "
           "its %d actors",
           n->id, n->na);
    int rc = do_register(n, hb_ms, true);
    if (rc == CT_EDEAD)
        return rejoin(n, live, hb_ms);
    if (rc) {
        CT_LOG(CT_LOG_WARN, "node", "registering again: %s", ct_last_error());
        return 0;
    }
    if (*hb_ms <= 0)
        *hb_ms = 100;
    ct__objnode_resume();
    CT_LOG(CT_LOG_INFO, "node", "registered again as %s, %d actors kept", n->id, n->na);
    return 0;
}

int ct__node_run(const ct_node_opts *o)
{
    nodest n = {.watch_fd = -1};
    int rc = 0, sfd = -1;
    n.o = o;
    if (!o->head || !strchr(o->head, ':'))
        return ct__error(CT_EINVAL, "node: head address '%s' is not host:port",
                         o->head ? o->head : "");
    snprintf(n.head, sizeof n.head, "%s", o->head);
    /* a spill dir the node may not trust: refused before it registers */
    if (o->spill_dir && *o->spill_dir && (rc = ct__objnode_check_dir(o->spill_dir)))
        return rc;
    /* zygotes kept at once (one per executable, up to one per CPU each); CT_MAX_ZYGOTES lowers
     * it (tests) */
    const char *mz = getenv("CT_MAX_ZYGOTES");
    n.max_zyg = mz && atoi(mz) > 0 && atoi(mz) < MAX_ZYG ? atoi(mz) : MAX_ZYG;
    /* a zygote idle this long with no actor here ends (JobEnded ends most sooner); default
     * 10 min, CT_ZYGOTE_IDLE_MS sets it (tests) */
    const char *zi_ms = getenv("CT_ZYGOTE_IDLE_MS");
    n.zyg_idle_ms = zi_ms && atoi(zi_ms) > 0 ? atoi(zi_ms) : 600000;
    if (o->host && *o->host)
        snprintf(n.host, sizeof n.host, "%s", o->host);
    else
        detect_host(o->head, n.host, sizeof n.host);
    ct__log_set_who("node");
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* SIGCHLD arrives through a signalfd; block it before any thread exists */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    n.ctx = zmq_ctx_new();
    n.sock = n.ctx ? zmq_socket(n.ctx, ZMQ_DEALER) : NULL;
    if (!n.sock || sfd < 0) {
        rc = ct__error(CT_EZMQ, "node: cannot create socket: %s", zmq_strerror(errno));
        goto out;
    }
    int zero = 0;
    zmq_setsockopt(n.sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(n.sock, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(n.sock, ZMQ_RCVHWM, &zero, sizeof zero);
    if ((rc = ct__auth_zmq_client(n.sock)))
        goto out;
    char ep[160];
    snprintf(ep, sizeof ep, "tcp://%s", o->head);
    if (zmq_connect(n.sock, ep) != 0) {
        rc = ct__error(CT_EINVAL, "node: head address %s: %s", o->head, zmq_strerror(errno));
        goto out;
    }
    int hb_ms = 100;
    if ((rc = do_register(&n, &hb_ms, false))) {
        if (node_stop || node_terms) /* SIGTERM while registering: a stop (exit 0) */
            rc = 0;
        goto out;
    }
    if (hb_ms <= 0)
        hb_ms = 100;
    ct__log_set_who(n.id);
    CT_LOG(CT_LOG_INFO, "node", "registered as %s, actors bind %s", n.id, n.host);
    current = &n;
    if ((rc = ct__objnode_start(n.id, n.head, n.host, o->store_memory, o->spill_dir)))
        goto out;
    for (int i = 0; i < nhooks; i++)
        if (hooks[i].on_start)
            hooks[i].on_start(n.id, n.head, n.host, hooks[i].user);
    if (o->ready_fd >= 0) {
        char line[64];
        int len = snprintf(line, sizeof line, "registered %s\n", n.id);
        if (write(o->ready_fd, line, len) != len)
            CT_LOG(CT_LOG_WARN, "node", "cannot report readiness");
    }
    liveness live;
    live_start(&live, &n, hb_ms);
    int64_t next_hb = ct__now_ms() + hb_ms;
    int64_t silent = 0;                /* ms since anything came from the head (count_silence) */
    int64_t last_count = ct__now_ms(); /* when silent was last counted */
    int dead_ms = o->head_dead_ms > 0 ? o->head_dead_ms : CT_NODE_HEAD_GRACE_MS;
    int64_t next_idle = ct__now_ms() + 1000;
    bool declared_dead = false; /* the head said so ('D'): rejoin */
    bool unknown = false;       /* the head does not know this node: resume */
    while (!node_stop) {
        if (node_terms && drain_step(&n, o->drain_ms))
            break;
        if (declared_dead || unknown) {
            rc = declared_dead ? rejoin(&n, &live, &hb_ms) : resume(&n, &live, &hb_ms);
            declared_dead = unknown = false;
            if (rc)
                break;
            next_hb = last_count = ct__now_ms();
            silent = 0;
        }
        if (ct__now_ms() >= next_idle) { /* here: it changes the zygote table polled below */
            retire_idle(&n);
            next_idle = ct__now_ms() + 1000;
        }
        zmq_pollitem_t it[4 + 2 * MAX_ZYG];
        int ni = 0;
        it[ni++] = (zmq_pollitem_t){n.sock, 0, ZMQ_POLLIN, 0};
        it[ni++] = (zmq_pollitem_t){NULL, sfd, ZMQ_POLLIN, 0};
        int watch_i = -1, dw_i = -1;
        if (o->watch_fd >= 0) {
            watch_i = ni;
            it[ni++] = (zmq_pollitem_t){NULL, o->watch_fd, ZMQ_POLLIN, 0};
        }
        if (n.watch_fd >= 0) {
            dw_i = ni;
            it[ni++] = (zmq_pollitem_t){NULL, n.watch_fd, ZMQ_POLLIN, 0};
        }
        int z0 = ni, nz = n.nz;
        for (int i = 0; i < nz; i++)
            it[ni++] = (zmq_pollitem_t){NULL, n.z[i].fd, ZMQ_POLLIN, 0};
        int e0 = ni, eidx[MAX_ZYG], ne = 0; /* starting zygotes' stderr pipes */
        for (int i = 0; i < nz; i++)
            if (n.z[i].err_fd >= 0) {
                eidx[ne++] = i;
                it[ni++] = (zmq_pollitem_t){NULL, n.z[i].err_fd, ZMQ_POLLIN, 0};
            }
        int64_t wait = next_hb - ct__now_ms();
        int r = zmq_poll(it, ni, wait < 0 ? 0 : wait);
        if (r < 0 && errno != EINTR) {
            rc = ct__error(CT_EZMQ, "node: poll: %s", zmq_strerror(errno));
            break;
        }
        count_silence(&silent, &last_count, hb_ms);
        if (ct__now_ms() >= next_hb) {
            /* a head silent for 3 periods (gone, or restarting) gets pings only: heartbeats
             * queued meanwhile would each be refused by a restarted head */
            if (silent < 3 * hb_ms)
                heartbeat(&n);
            if (silent >= hb_ms)
                ping_head(&n);
            next_hb = ct__now_ms() + hb_ms;
        }
        if (r <= 0) {
            dispatch(&n);
            if (head_lost(&n, &silent, &last_count, hb_ms,
                          dead_ms)) { /* nothing was queued: poll said so */
                rc = CT_EDEAD;
                break;
            }
            continue;
        }
        if (watch_i >= 0 && it[watch_i].revents) {
            CT_LOG(CT_LOG_INFO, "node", "parent gone, exiting");
            break;
        }
        /* stderr first: a zygote's death report quotes it (no zygote leaves the table here) */
        for (int k = 0; k < ne; k++)
            if (it[e0 + k].revents)
                read_err(&n, eidx[k]);
        if (dw_i >= 0 && it[dw_i].revents) {
            /* the head's death watch: 'D' when it declared this node dead; an end without it is
             * the head's (its silence then decides, as ever) */
            char b = 0;
            ssize_t got = recv(n.watch_fd, &b, 1, MSG_DONTWAIT);
            if (got == 1 && b == CT__WATCH_DEAD) {
                declared_dead = true;
                continue;
            }
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                CT_LOG(CT_LOG_WARN, "node", "the head closed the death-watch connection");
                close(n.watch_fd);
                n.watch_fd = -1;
            }
        }
        /* zygote replies before reaping, so that pids are known when exits are read */
        for (int i = nz - 1; i >= 0; i--)
            if (it[z0 + i].revents)
                on_zygote_reply(&n, i);
        dispatch(&n);
        if (it[1].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == sizeof si)
                ;
            reap(&n);
        }
        for (int k = 0; k < 1000; k++) {
            Ct__Envelope *e;
            int mr = ct__msg_recv(n.sock, NULL, &e, ZMQ_DONTWAIT, "node");
            if (mr == CT_ETIMEDOUT)
                break;
            silent = 0;
            if (mr) {
                CT_LOG(CT_LOG_WARN, "node", "%s", ct_last_error());
                ct__msg_free(e);
                if (mr == CT_EZMQ)
                    break;
                continue;
            }
            if (on_head(&n, e))
                unknown = true;
            ct__msg_free(e);
            if (unknown)
                break;
        }
        dispatch(&n);
        if (!node_stop && head_lost(&n, &silent, &last_count, hb_ms, dead_ms)) {
            rc = CT_EDEAD;
            break;
        }
    }
    live_stop(&live);
out:;
    char why[512] = ""; /* the cleanup below may set other errors */
    if (rc)
        snprintf(why, sizeof why, "%s", ct_last_error());
    if (current == &n)
        for (int i = 0; i < nhooks; i++)
            if (hooks[i].on_stop)
                hooks[i].on_stop(n.id, n.head, n.host, hooks[i].user);
    current = NULL;
    for (int i = 0; i < n.na; i++)
        kill_pid(&n, n.a[i].pid);
    for (int i = 0; i < n.nz; i++) {
        kill_pid(&n, n.z[i].pid);
        close(n.z[i].fd);
        if (n.z[i].err_fd >= 0)
            close(n.z[i].err_fd);
        free(n.z[i].key);
    }
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    ct__objnode_stop();
    while (n.qh < n.qn)
        qreq_pop(&n);
    free(n.q);
    free(n.ix);
    free(n.a);
    if (sfd >= 0)
        close(sfd);
    if (n.watch_fd >= 0)
        close(n.watch_fd);
    if (n.sock)
        zmq_close(n.sock);
    if (n.ctx)
        zmq_ctx_term(n.ctx);
    return rc ? ct__error(rc, "%s", why) : 0;
}

/* ---- detached mode (fuzz/fuzz_node.c): the handlers without sockets to a head or processes ----
 */

ct__node *ct__node_new_detached(void *sock)
{
    nodest *n = calloc(1, sizeof *n);
    if (!n) {
        ct__error(CT_ENOMEM, "node: out of memory");
        return NULL;
    }
    n->detached = true;
    n->sock = sock;
    n->watch_fd = -1;
    n->max_zyg = 4;
    n->zyg_idle_ms = 600000;
    snprintf(n->id, sizeof n->id, "detached");
    snprintf(n->host, sizeof n->host, "127.0.0.1");
    snprintf(n->head, sizeof n->head, "127.0.0.1:1");
    return n;
}

int ct__node_handle_bytes(ct__node *n, const uint8_t *data, size_t len)
{
    Ct__Envelope *e = NULL;
    int rc = ct__msg_decode(data, len, &e, "node");
    if (!rc) {
        rc = on_head(n, e);
        dispatch(n);
    }
    ct__msg_free(e);
    return rc;
}

int ct__node_zygote_bytes(ct__node *n, int zi, const uint8_t *data, size_t len)
{
    if (zi < 0 || zi >= n->nz)
        return ct__error(CT_EINVAL, "node: no zygote %d (%d running)", zi, n->nz);
    uint8_t sink[sizeof(ct__zreq) + CT_ZYGOTE_MAX_ARGS];
    while (recv(n->z[zi].peer_fd, sink, sizeof sink, MSG_DONTWAIT) > 0)
        ; /* the start requests the node sent this zygote */
    if (len && send(n->z[zi].peer_fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)len)
        return ct__error(CT_EIO, "node: zygote %d: send: %s", zi, strerror(errno));
    on_zygote_reply(n, zi);
    dispatch(n);
    return 0;
}

int ct__node_zygotes(const ct__node *n)
{
    return n->nz;
}

void ct__node_destroy_detached(ct__node **np)
{
    nodest *n = np ? *np : NULL;
    if (!n)
        return;
    for (int i = 0; i < n->nz; i++) {
        close(n->z[i].fd);
        close(n->z[i].peer_fd);
        free(n->z[i].key);
    }
    for (int i = 0; i < n->na; i++)
        if (n->a[i].err_fd >= 0)
            close(n->a[i].err_fd);
    while (n->qh < n->qn)
        qreq_pop(n);
    free(n->q);
    free(n->ix);
    free(n->a);
    free(n);
    *np = NULL;
}
