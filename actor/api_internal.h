/* actor/api_internal.h — what the files of libct's driver API (actor/api_*.c) share: the
 * process-wide client state (one head connection, the actor handles, the event queue, the object
 * store client), its lock, and the functions one file offers the others. Not public API
 * (include/ct/ct.h is); not for the node (node.c) or the actor loop (worker.c).
 *
 * The files: api_transport.c (the head connection: requests, replies by request id, events,
 * sleeping without the lock), api_embedded.c (the embedded cluster of ct_init(NULL)),
 * api_init.c (ct_init, ct_shutdown, the driver's heartbeats and death watch), api_actors.c (the
 * class registry, the program's own command line, actor handles, calls and futures), api_cluster.c
 * (events, KV, placement groups, cluster resources), api_objects.c (ct_put / ct_get and code
 * shipping). */
#ifndef CT_ACTOR_API_INTERNAL_H
#define CT_ACTOR_API_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "actor/zmtp.h"
#include "common/common.h"
#include "ct/ct.h"
#include "objectstore/store.h"
#include "proto/msg.h"

struct ct_future {
    ct_actor *a;
    uint64_t req;
    bool done;
    int rc;
    void *res;
    size_t len;
    char err[256];
    ct_future *next, *prev;
};

struct ct_actor {
    char id[32], node[32], addr[160];
    int pid;
    ct__zconn zc; /* ZMTP connection to the actor (zmtp.c), no libzmq involved */
    bool dead;
    ct_future *pending;
    ct_actor *next, *prev;
};

struct ct_placement_group {
    char id[32];
};

/* An object a remote driver is creating (ct_object_create): its bytes until the seal. */
struct rbuf {
    ct_object_id id;
    void *data;
    size_t len;
    struct rbuf *next;
};

#define EVQ 1024
struct ct__client_state {
    pthread_mutex_t mu;
    bool inited;
    bool lazy; /* an actor: connect to the head on first use */
    void *ctx, *head;
    char addr[160];
    char sender[64];
    char job[CT_TOKEN_LEN + 1]; /* this job's token: every message to the head carries it */
    char self_actor[32], self_node[32];
    uint64_t next_req;
    unsigned sub_mask;
    pid_t head_pid, node_pid;
    int watch_wr;
    pthread_t hb_thread; /* driver liveness heartbeats (own socket: sockets are per thread) */
    int hb_stop[2];      /* pipe: closing [1] stops the thread */
    bool hb_running;
    int head_fd;           /* ZMQ_FD of head (edge-triggered), for waiting without the lock */
    int death_fd;          /* the head's death watch (head/watch.h): open while this driver lives */
    atomic_int resub;      /* the head restarted (the heartbeat thread saw it): subscribe again */
    atomic_uint head_lost; /* the heartbeat thread saw the head's death watch end this often */
    unsigned head_lost_seen; /* ... and the head socket was replaced this often (drain) */
    struct hwait *waits;     /* requests waiting for head replies (any thread) */
    ct_event q[EVQ];
    int qh, qn;
    ct_actor *actors;
    char (*owned)[32]; /* ids of the actors this process created and not yet seen dead */
    int nowned, capowned;
    char exe[PATH_MAX];
    char *cmdline;
    size_t cmdline_len;
    /* object store: this process's node shard, found on first use */
    ct_store_client *store;
    ct_store_client *old_stores[8]; /* clients of nodes that went away: kept mapped (views and
                                       buffers of other threads may still point into them) */
    int nold;
    char store_node[32];
    /* a remote driver: no node on this host (host ids differ, or CT_REMOTE_DRIVER=1), so
     * objects go to and come from nodes' data ports; created objects wait here until sealed */
    bool remote;
    struct rbuf *creating;
    char emb_node[32];   /* the embedded node's id */
    ct_object_id exe_id; /* code shipping: SHA-1 of /proc/self/exe */
    int exe_state;       /* 0 not tried, 1 in the store, -1 could not */
};

/* The one client of this process (api_transport.c). Guarded by its mutex (LOCK/UNLOCK) but for
 * the fields the heartbeat thread reads (ctx, addr, sender, job, hb_stop), set before it starts. */
extern struct ct__client_state ct__client;

#define LOCK() pthread_mutex_lock(&ct__client.mu)
#define UNLOCK() pthread_mutex_unlock(&ct__client.mu)

/* A thread waiting for head replies to request ids lo..hi (into slots[id - lo]). Whichever
 * thread reads the head socket files replies into the waiter they belong to. req (lo == hi,
 * may be NULL): the request, sent again to a restarted head while unanswered. */
typedef struct hwait {
    uint64_t lo, hi;
    Ct__Envelope **slots;
    Ct__Envelope *req;
    struct hwait *next;
} hwait;

/* ---- api_transport.c: the head connection (lock held unless said) ---- */
void ct__client_wait_add(hwait *w);
void ct__client_wait_remove(hwait *w);
#define SLEEP_MAX_FDS 64 /* fds one sleep watches */
/* Releases the lock while sleeping until the head socket, fds or a kick wakes it, at most ms. */
void ct__client_sleep_fds(const int *fds, int nfds, int64_t ms);
void ct__client_sleep(int fd, int64_t ms);
void ct__client_kick(void); /* wakes the threads asleep in ct__client_sleep */
int ct__client_send(Ct__Envelope *e);
int ct__client_sock_opts(void *s); /* a head socket's options (bounds, CURVE client keys) */
int ct__client_connect(const char *addr, const char *sender);
void ct__client_close(void);
/* Files what waits on the head socket: replies to ids lo..hi into slots, the rest to waiters. */
void ct__client_drain(uint64_t lo, uint64_t hi, Ct__Envelope **slots);
int ct__client_ensure(void); /* the head connection (an actor makes it on first use) */
/* Sends req and waits for its reply (timeout_ms <= 0: forever); caller frees *rep. */
int ct__client_request(Ct__Envelope *req, Ct__Envelope **rep, int timeout_ms);
void ct__future_complete(ct_future *f, int rc, const void *res, size_t len, const char *err);
void ct__actor_mark_dead(ct_actor *a, const char *why);
void ct__actor_drain(ct_actor *a); /* reads a's replies into its futures */

/* ---- api_embedded.c ---- */
/* Starts the embedded head and node (children that die with this process); the head's
 * address into addr. */
int ct__embedded_start(const ct_init_opts *o, int timeout_ms, char *addr, size_t cap);
void ct__embedded_stop(void);

/* ---- api_actors.c ---- */
int ct__client_read_self(void);   /* ct__client.exe and .cmdline: what CreateActor carries */
void ct__actor_free(ct_actor *a); /* its futures cancelled, its connection closed */
/* Resource list of a request: CPU, GPU and custom into r / rp; their count. */
int ct__client_fill_res(Ct__Resource *r, Ct__Resource **rp, double cpu, double gpu,
                        const ct_resource *custom, int ncustom);

/* ---- api_objects.c ---- */
void ct__objects_ship_exe(void); /* /proc/self/exe into the store (code shipping) */
void ct__objects_reset(void);    /* ct_shutdown: store clients, objects being created */

#endif
