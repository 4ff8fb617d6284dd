/* head/head_internal.h — what the head's files share: limits, tables, the head's struct, the
 * handler table's types, and the functions one file offers the others. Everything runs on the
 * head's one thread. Not for outside head/ (head.h is the head's entry point).
 *
 * The files: loop.c (the loop, the handler table and its token rules, timers), reply.c
 * (replies and refusals), slots.c (the tables' slots: lookups by id, new and freed slots, the
 * dead forgotten), nodes.c (nodes, drivers, heartbeats, the death watch's verdicts), actors.c
 * (actors and the scheduler), pgroups.c (placement groups), kv.c (the KV store and waiting gets),
 * events.c (event pushes and subscriptions), status.c (the status reply), resources.c
 * (resource vectors), objdir.c (the object directory's messages; objdir_table.c its tables,
 * objdir_internal.h), train.c (training jobs' reports), metrics.c
 * (the HTTP endpoint's pages; http.c serves them on its own thread, reading no table), index.c
 * (the key -> slot index of the nodes and objects, index.h). */
#ifndef CT_HEAD_HEAD_INTERNAL_H
#define CT_HEAD_HEAD_INTERNAL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "common/common.h"
#include "head/head.h"
#include "head/index.h"
#include "head/watch.h"
#include "proto/msg.h"

#define MAX_RES 16
#define ID_LEN 32
#define NODE_ID_HEX 12 /* random hex digits in a node id: "node-" and 12, 18 bytes with the NUL */
#define TOK_SIZE (CT_TOKEN_LEN + 1)
/* "not yours": a negated errno like ct/error.h's codes (which has no CT_EPERM yet) */
#define HEAD_EPERM (-EPERM)

/* Limits on what peers can make the head hold, small enough that no flood exhausts the head.
 * Each is refused with an Error naming the field. The tables a cluster's size drives (nodes,
 * actors, placement groups, objects, KV keys, subscribers) are configuration (h->lim,
 * ct_head_limits in head.h, sized for 10,000 nodes by default); the rest are per message. */
#define HEAD_MAX_MSG (2 << 20) /* bytes in one message (ZMQ_MAXMSGSIZE: the peer is cut off) */
#define HEAD_RCVHWM 100        /* messages queued per peer; then TCP pushes back (no loss) */
#define HEAD_SNDHWM 100000     /* messages queued to one peer; then they are dropped */
/* connections waiting to be accepted (the kernel caps it at net.core.somaxconn): with ZeroMQ's
 * default of 100, 2,000 nodes connecting at once lost SYNs and took 7 s to register, retrying */
#define HEAD_BACKLOG 4096
#define DECODE_FLOOR (256 << 10)    /* what decoding a message of n bytes may allocate: */
#define DECODE_MULT 8               /* min(DECODE_MAX, DECODE_FLOOR + DECODE_MULT * n) bytes */
#define DECODE_MAX (1 << 20)        /* (proto/msg.h); room for the largest KV value */
#define MAX_PENDING 16384           /* creations waiting for room (each keeps its request) */
#define MAX_PENDING_MEM (128 << 20) /* their requests' memory */
#define MAX_ARGV 1024               /* create_actor.argv entries */
#define MAX_PATH 4096               /* create_actor.exe_path bytes */
#define MAX_BUNDLES 4096            /* bundles in one group (in all: 4 * h->lim.pgs) */
#define MAX_KV_KEY 4096             /* bytes in a key */
#define MAX_KV_VALUE (512 << 10)    /* bytes in a value */
#define MAX_KV_BYTES (128 << 20)    /* keys and values in all */
#define MAX_WAITERS 16384           /* KV gets and placement group waits waiting */
#define MAX_DRIVERS 4096            /* heartbeating drivers */
#define MAX_AMOUNT 1e9              /* largest amount of one resource */
#define GONE_AFTER_MS 60000         /* dead nodes and actors are listed this long */
#define HEAD_HB_MS 100              /* default heartbeat period */
#define HEAD_DEAD_MS 10000          /* default silence before a node or driver is dead */
#define HEAD_HB_RATE 20000          /* default --heartbeat-rate: heartbeats a second, sized for */
#define HEAD_HB_MSGS 2              /* heartbeats a node sends a period (main loop, liveness) */
#define HEAD_DEAD_PERIODS 10        /* the dead-after time is at least this many periods */
#define REFUSALS_LOGGED 20          /* refusals logged per second; the rest are counted */
#define MAX_TRAIN 256               /* training jobs' reports kept (train.c) */
#define TRAIN_REASONS 8             /* retry (or drain) reasons in one report */
#define TRAIN_POINTS 512            /* a training job's loss curve: its newest steps kept */
#define TRAIN_REPORT_POINTS 64      /* steps in one report (CT_TRAIN_POINTS, actor/runtime.h) */
#define TRAIN_CKPTS 16              /* a training job's newest checkpoints listed */
#define TRAIN_HISTS 4               /* histograms in one report (CT_TRAIN_HISTS) */
#define TRAIN_HIST_BOUNDS 32        /* bounds of one (CT_TRAIN_HIST_BOUNDS) */
#define HEAD_EVENTS 256             /* recent events kept for the dashboard (events.c) */
#define PUBLISH_MS 500              /* the HTTP endpoint's pages are rendered this often */
#define PUBLISH_IDLE_MS 5000        /* ... when asked for since the last time, else this often */
#define DEADLINE_SCAN_MS 200        /* pending creations' deadlines are checked this often */

/* A resource vector: name -> amount. */
typedef struct res {
    int n;
    char name[MAX_RES][32];
    double amt[MAX_RES];
} res;

enum { A_PENDING, A_STARTING, A_ALIVE, A_DEAD };
/* PG_FREE: an unused slot (a removed group no actor refers to any more) */
enum { PG_PENDING, PG_READY, PG_REMOVED, PG_FREE };

/* A node's last NodeStats (nodes.c keeps it, metrics.c shows it); known: one came. */
#define NODE_GPUS 16
typedef struct node_stats {
    bool known;
    double cpu;                    /* the host's busy fraction, 0..1; NaN: not yet */
    uint64_t mem_total, mem_avail; /* bytes; 0: not read */
    uint64_t store_used, spilled_bytes, spilled_objects;
    int ngpu;
    struct node_gpu {
        unsigned index;
        uint64_t used, total;
        double util; /* percent; NaN: not reported */
    } gpu[NODE_GPUS];
} node_stats;

typedef struct node {
    char id[ID_LEN];
    char token[TOK_SIZE]; /* its secret: a message that speaks for it carries it */
    ct__rid rid;          /* its main connection: where its orders go */
    char host[64];
    int pid;
    res total, free;
    int64_t silent;        /* ms of silence counted against it (check_heartbeats) */
    int64_t dead_at;       /* when it was declared dead */
    char ticket[TOK_SIZE]; /* its death-watch ticket, until its connection says hello */
    uint64_t watch;        /* its death-watch connection (head/watch.h); 0: none */
    bool used;             /* the slot holds a node, alive or dead but not yet forgotten */
    bool alive;
    bool draining; /* told to stop (Heartbeat.draining): nothing more is placed there */
    int nactors;
    int first_actor;  /* its live actors' list (actor.node_prev/next): a slot + 1; 0: none */
    node_stats stats; /* what it last measured of its host and shard (Heartbeat.stats) */
    int hb_told;      /* the heartbeat period it was last given (ct__head_scale_heartbeat) */
} node;

typedef struct actor {
    char id[ID_LEN];
    uint64_t seq; /* N of its id "actor-N" */
    char cls[64];
    int node; /* -1 until placed */
    /* its node's list of live (STARTING, ALIVE) actors, node.first_actor: slots + 1; 0: none
     * (actor_link, actor_unlink; ct__head_forget_dead moves them with the actor) */
    int node_prev, node_next;
    int pid;
    int state;
    char addr[128];
    res need;
    int strategy;
    int pg, bundle; /* -1: none / bundle chosen when placed */
    int want_bundle;
    ct__rid owner;
    char owner_name[64];
    char job[TOK_SIZE];  /* the job that created it: it may kill it */
    uint64_t create_req; /* 0 once answered */
    int64_t create_deadline;
    Ct__Envelope *req; /* the create request, kept until the node is asked to start it */
    size_t req_bytes;  /* its memory (estimated), counted in pending_bytes */
    int exit_status, term_signal;
    int64_t dead_at;
} actor;

typedef struct bundle {
    res need, free;
    int node;
    int pick;          /* place_pg's choice, before it commits */
    char want[ID_LEN]; /* loaded (state.c): the node it was reserved on, until that comes back */
} bundle;

typedef struct pgroup {
    char id[ID_LEN];
    char job[TOK_SIZE]; /* the job that created it: it may use and remove it */
    int strategy;
    int state;
    int nb;
    bundle *b;
} pgroup;

enum { W_KV, W_PG };
typedef struct waiter {
    int kind;
    ct__rid rid;
    uint64_t req_id;
    int64_t deadline; /* ct__now_ms */
    char *key;        /* W_KV */
    int pg;           /* W_PG */
} waiter;

typedef struct kv {
    char *key;
    void *val;
    size_t len;
    char job[TOK_SIZE]; /* the job that may change it; "" released (on_kv_put) */
} kv;

typedef struct sub {
    ct__rid rid;
    uint32_t mask;
    char job[TOK_SIZE]; /* the subscriber's job ("" none): dropped when its driver is gone */
} sub;

typedef struct driver {
    char name[64];
    char job[TOK_SIZE];
    int64_t silent;        /* ms of silence counted against it (check_heartbeats) */
    char ticket[TOK_SIZE]; /* its death-watch ticket, until its connection says hello */
    uint64_t watch;        /* its death-watch connection; 0: none */
} driver;

typedef struct train_point {
    int64_t step;
    double loss, sps;
} train_point;

/* Counts by reason ([a-z_], 1-31 bytes), as a TrainReport brings its retries and drains. */
typedef struct train_reasons {
    int n;
    char reason[TRAIN_REASONS][32];
    uint64_t count[TRAIN_REASONS];
} train_reasons;

/* A training job's last report (TrainReport, train.c), for the metrics. */
typedef struct train_job {
    char job[TOK_SIZE]; /* its job token (never shown) */
    char label[64];     /* what the metrics call it: TrainReport.job or the driver's name */
    int64_t step, epoch;
    double loss, sps, mfu; /* mfu < 0: unknown */
    int replicas;
    train_reasons retries;   /* retries spent, by reason */
    bool done;               /* its trainer_train returned */
    int64_t ended_at;        /* when its driver was gone; 0: alive. Forgotten GONE_AFTER_MS later */
    double val_loss;         /* NaN: no validation yet */
    double eta;              /* seconds left, as the driver estimates them; NaN: unknown */
    int64_t epochs;          /* trainer_train's; 0: unknown */
    uint64_t drains;         /* groups a node's drain ended ... */
    train_reasons drains_by; /* ... by reason (mid_epoch, segment_end) */
    uint64_t live;           /* replicas lost that the survivors went on without (no retry) */
    uint64_t heals;          /* replacements healed from a live peer */
    int64_t ckpts;           /* checkpoints taken */
    int nck; /* the newest TRAIN_CKPTS of them: steps, wall-clock ms when heard of */
    int64_t ck_step[TRAIN_CKPTS], ck_ms[TRAIN_CKPTS];
    int nh; /* histograms of seconds, as last reported (cumulative) */
    struct train_hist {
        char name[32];
        int nb;
        double bound[TRAIN_HIST_BOUNDS];
        uint64_t counts[TRAIN_HIST_BOUNDS]; /* per bound, not cumulative */
        uint64_t count;
        double sum;
    } hist[TRAIN_HISTS];
    train_point *pts; /* the loss curve: a ring of TRAIN_POINTS (NULL: none yet) */
    int npts, pts_next;
} train_job;

/* A recent event for the dashboard (/api/events): deaths, drains, joins, retries, restarts. */
typedef struct head_event {
    uint64_t seq;     /* 1, 2, ... in this head's life */
    int64_t wall_ms;  /* CLOCK_REALTIME, ms */
    char kind[24];    /* "node_dead", "actor_dead", "node_draining", "retry", "heal", ... */
    char subject[72]; /* the node, actor or training job it is about */
    char reason[200];
} head_event;

typedef struct head {
    void *ctx, *sock;
    bool zap;         /* a ZAP handler runs in ctx (stopped before ctx ends) */
    ct__watch *watch; /* the death-watch port (NULL: none, heartbeats only) */
    driver *drivers;
    int ndrivers;
    /* the heartbeat period and dead-after time in force (ct__head_scale_heartbeat), and the
     * configured ones (--heartbeat-ms, --dead-after-ms): their floor */
    int hb_ms, dead_ms;
    int hb_floor_ms, dead_floor_ms;
    int hb_rate;           /* node heartbeats a second the period is sized for (--heartbeat-rate) */
    int64_t last_check_ms; /* when check_heartbeats last ran */
    int64_t last_deadline_scan; /* when expire last read the actor table (head.c) */
    node *nodes;
    int nnodes, cap_nodes;  /* slots ever used (free ones: !used), allocated */
    ct__index *node_ids;    /* used slots by node id (nodes.c) */
    ct__index *node_tokens; /* used slots by node token (the token rules' lookup) */
    int node_free_hint;     /* no free slot below it (node_slot) */
    res *frees;             /* place_pg's scratch, cap_nodes each */
    int *load;              /* its bundles per node; -1: node untouched (frees[i] not copied) */
    actor *actors;          /* in creation order (resumed ones appended as they come back) */
    int nactors, cap_actors;
    ct__index *actor_ids; /* actors' slots by id (actors.c) */
    int npending;         /* actors waiting for room (holding their request) */
    /* room may have come since the scheduler last tried the waiting actors: resources freed on
     * a node or in a bundle, a node joined, a bundle reserved, a group removed (each sets it;
     * ct__head_schedule clears it once it tried them). While false no waiting actor can fit:
     * each was tried, and since then resources were only taken. */
    bool room;
    size_t pending_bytes; /* those requests' memory */
    pgroup *pgs;
    int npgs, cap_pgs;
    ct__index *pg_ids; /* slots not PG_FREE by group id (pgroups.c) */
    int pg_free_hint;  /* no PG_FREE slot below it (ct__head_pg_slot) */
    int nbundles;      /* in all group slots */
    waiter *w;
    int nw, cap_w;
    kv *kv;
    int nkv, cap_kv;
    size_t kv_bytes; /* keys and values */
    sub *subs;
    int nsubs;
    uint64_t actor_seq, pg_seq; /* the N of the next "actor-N", "pg-N" (node ids are random) */
    int64_t last_gc;
    int64_t refuse_window;              /* ct__head_refuse's rate limit: this second's start, */
    int refuse_logged, refuse_unlogged; /* lines logged in it, refusals not logged */
    struct objdir *od;                  /* the object directory (objdir.c) */
    int state_fd;                       /* the write-ahead file (state.c); -1: none */
    int64_t started_ms;                 /* when it started serving */
    bool waits_over;                    /* loaded groups stopped waiting for their nodes */
    struct ct__http *http;              /* the HTTP endpoint (http.h); NULL: none */
    int64_t last_publish;               /* when its pages were last rendered */
    int restarts;                       /* times the supervisor started this head again */
    uint64_t jobs_ended;                /* drivers gone since this head started */
    train_job *train;                   /* training jobs' reports (train.c) */
    int ntrain;
    head_event *evlog;  /* a ring of HEAD_EVENTS recent events (events.c) */
    uint64_t evseq;     /* events noted so far (the newest one's seq) */
    ct_head_limits lim; /* the tables' limits (head.h), defaults filled in */
} head;

/* Protobuf views of a res; pointers into r, valid while r lives. */
typedef struct res_pb {
    Ct__Resource r[MAX_RES];
    Ct__Resource *p[MAX_RES];
} res_pb;

/* ---- the handler table (loop.c) ----
 * Each message kind is one row: {body case, check, token rule, field, handler}. The loop runs
 * the row's check (the message's own fields, where a row has one: a malformed request is told
 * what is malformed before who may send it), then the token rule, and refuses the message (an
 * Error naming field, -EPERM) when the rule fails; only then the handler, which checks what
 * the rule cannot know (which node, which job owns what). */
enum {
    RULE_OPEN,  /* every peer: reads (status, KV gets, locations, fetches, events), registration */
    RULE_JOB,   /* a job token (Envelope.token): creates or changes shared state */
    RULE_NODE,  /* the token of a live node: speaks for that node (its reports, its actors') */
    RULE_TOKEN, /* a node's or a job's token (heartbeats, kills: by the host or by the job) */
};

/* What the loop learned about the sender before calling the handler. */
typedef struct ct__head_from {
    int node;            /* the live node whose token the message carries: its slot; -1 none
                            (looked up for RULE_NODE and RULE_TOKEN rows only) */
    const char *node_id; /* that node's id; NULL none */
    const char *job;     /* the message's token when it has a well-formed one; NULL none */
    bool keep;           /* the handler set it: it keeps the envelope (the loop frees it not) */
} ct__head_from;

/* A handler: borrows e (unless it sets f->keep), answers with ct__head_send, never blocks. */
typedef void ct__head_handler(head *h, const ct__rid *rid, Ct__Envelope *e, ct__head_from *f);
/* A check: whether e's own fields are valid; it refuses e, naming the field, when not. */
typedef bool ct__head_check(head *h, const ct__rid *rid, Ct__Envelope *e);

/* ---- reply.c: replies, refusals ---- */
#define REPLY_ERR(h, rid, req, code, field, ...)                                                   \
    ct__msg_send_error((h)->sock, (rid), (req), "head", (code), (field), __VA_ARGS__)
void ct__head_ok(head *h, const ct__rid *rid, uint64_t req);
/* Sends e to the peer rid (a reply: e->req_id is the request's). 0 or a CT_E* code. */
int ct__head_send(head *h, const ct__rid *rid, Ct__Envelope *e);
/* An Error (code, field, message) to the sender, and a log line (at most a few a second: a
 * flood is counted, not logged line by line); rid and e may be NULL. */
void ct__head_refuse(head *h, const ct__rid *rid, const Ct__Envelope *e, int code,
                     const char *field, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Logs how many refusals the last second did not log (the loop's timer, every second). */
void ct__head_flush_refusals(head *h);
bool ct__head_may_change(const char *owner, const char *job); /* "" owner: anyone */

/* ---- loop.c ---- */
/* Handles what waits on the head socket, at most 1000 messages. */
void ct__head_drain(head *h);

/* ---- slots.c: the tables' slots ---- */
int ct__head_find_node(head *h, const char *id); /* its slot, -1 */
void ct__head_forget_node(head *h, int ni);
int ct__head_pg_slot(head *h, int nb); /* a group slot for nb bundles, or CT_E* */
/* the slot of the group (not PG_FREE) whose id is the n bytes at id, -1; a slot's id set (into
 * the index: 0 or CT_ENOMEM); a slot freed (bundles, index entry; PG_FREE) */
int ct__head_find_pg(head *h, const char *id, size_t n);
int ct__head_pg_named(head *h, int gi);
void ct__head_pg_freed(head *h, int gi);
void ct__head_free_removed_pgs(head *h);
/* Forgets the actors and nodes dead for max_age ms or longer, then freed groups' slots. */
void ct__head_forget_dead(head *h, int64_t max_age);

static inline bool ct__rid_eq(const ct__rid *a, const ct__rid *b)
{
    return a->len == b->len && !memcmp(a->id, b->id, a->len);
}

/* ---- state.c: the write-ahead file of what only the head knows (KV, jobs, groups) ---- */
void ct__head_state_kv_put(head *h, const char *key, const void *val, size_t len, const char *job);
void ct__head_state_kv_del(head *h, const char *key);
void ct__head_state_job(head *h, const char *job, bool attached);
void ct__head_state_pg(head *h, const pgroup *g); /* as it is now (removed: its X record) */
void ct__head_state_obj(head *h, const uint8_t *id, size_t len, const char *job, int want);
void ct__head_state_obj_gone(head *h, const uint8_t *id, size_t len);
/* ---- restore.c: the write-ahead file read back at start ---- */
int ct__head_state_open(head *h, const char *dir); /* loads DIR/head.wal; NULL dir: none */
void ct__head_state_close(head *h);
void ct__head_state_give_up_waits(head *h);
/* kv.c, for the replay: set (taking over ownership) and remove a key */
void ct__head_kv_set(head *h, const char *key, const void *val, size_t len, const char *job);
void ct__head_kv_unset(head *h, const char *key);
/* nodes.c: follow a job (attached) as a driver without a name until its driver heartbeats; or
 * (!attached) its driver is gone: its keys released */
void ct__head_expect_job(head *h, const char *job, bool attached);
/* pgroups.c: node ni registered again: loaded groups' bundles that wait for it are reserved */
void ct__head_pg_node_back(head *h, int ni);

/* ---- actors.c (resumed actors) ---- */
int ct__head_resume_actor(head *h, int ni, const Ct__ResumedActor *r);

/* ---- resources.c ---- */
int ct__rv_check(Ct__Resource **r, size_t n, const char *list, char *field, size_t fcap, char *msg,
                 size_t mcap);
void ct__rv_from_pb(res *r, Ct__Resource **pb, size_t n);
double ct__rv_get(const res *r, const char *name);
bool ct__rv_fits(const res *have, const res *need);
void ct__rv_sub(res *have, const res *need, double sign); /* sign 1: have -= need; -1: += */
double ct__rv_sum(const res *r);
void ct__rv_fmt(const res *r, char *buf, size_t cap);
void ct__rv_to_pb(res *r, res_pb *o);

/* ---- nodes.c ---- */
/* silent hosts, the failure detector (the loop's timer): silence since the last check counted,
 * whether someone is overdue; after the loop's wait for heartbeats on their way (waited ms),
 * that wait counted and the silent declared gone */
bool ct__head_count_silence(head *h, int64_t now);
void ct__head_end_silent(head *h, int64_t waited);
/* The heartbeat period for the live nodes (grown or shrunk) and the nodes told a new one. */
void ct__head_scale_heartbeat(head *h);
void ct__head_watch_hello(void *user, uint64_t conn, const char *ticket);
void ct__head_watch_closed(void *user, uint64_t conn, bool left);
ct__head_handler ct__head_on_register_node, ct__head_on_heartbeat;

/* ---- actors.c ---- */
void ct__head_drop_req(head *h, actor *a);
/* The slots of node ni's live actors, ascending (creation order), into *out (malloc'd; NULL
 * when none or out of memory); their number. */
int ct__head_node_actors(head *h, int ni, int **out);
void ct__head_create_error(head *h, actor *a, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void ct__head_actor_dead(head *h, actor *a, int pid, int status, int sig, const char *reason);
bool ct__head_place_pg(head *h, pgroup *g);
void ct__head_schedule(head *h);
void ct__head_kill_on_node(head *h, actor *a);
ct__head_check ct__head_check_create_actor;
ct__head_handler ct__head_on_create_actor, ct__head_on_actor_ready, ct__head_on_start_failed,
    ct__head_on_actor_exited, ct__head_on_kill_actor;

/* ---- kv.c ---- */
int ct__head_add_waiter(head *h, waiter *w); /* CT_ENOSPC, CT_ENOMEM */
void ct__head_refuse_waiter(head *h, const ct__rid *rid, Ct__Envelope *e, int rc,
                            const char *field);
ct__head_check ct__head_check_kv_put;
ct__head_handler ct__head_on_kv_put, ct__head_on_kv_get, ct__head_on_kv_del;

/* ---- pgroups.c ---- */
ct__head_check ct__head_check_pg_create;
ct__head_handler ct__head_on_pg_create, ct__head_on_pg_wait, ct__head_on_pg_remove;

/* ---- events.c: the recent events' ring, for the dashboard ---- */
/* Notes an event (kind, what it is about, why) in the ring; the oldest goes when it is full.
 * Never fails the caller (out of memory: not noted). */
void ct__head_note(head *h, const char *kind, const char *subject, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- train.c: training jobs' reports; metrics.c: the HTTP endpoint's pages ---- */
ct__head_check ct__head_check_train_report;
ct__head_handler ct__head_on_train_report;
void ct__head_train_job_gone(head *h, const char *job); /* its driver is gone */
void ct__head_train_forget(head *h, int64_t max_age);   /* reports of jobs gone that long */
/* Renders /metrics and the /api pages from the tables; pages[i] malloc'd (NULL: out of
 * memory), for ct__http_publish. */
void ct__head_render(head *h, char **pages);

/* ---- events.c, status.c ---- */
void ct__head_push_event(head *h, Ct__Event *ev, const ct__rid *owner);
ct__head_handler ct__head_on_subscribe, ct__head_on_status;

/* ---- objdir.c: the object directory, h->od ---- */
struct objdir *ct__objdir_new(int max_objects); /* NULL: out of memory */
void ct__objdir_free(struct objdir **od);
/* Up to cap transfer addresses of live nodes holding id (borrowed until the next message). */
int ct__objdir_holders(head *h, const uint8_t *id, size_t len, char **addrs, int cap);
/* Store facts of a node for the status reply (zeros and "" when it has no shard). */
void ct__objdir_node_usage(head *h, const char *node_id, const char **xfer_address,
                           uint64_t *capacity, uint64_t *objects, uint64_t *bytes);
void ct__objdir_node_dead(head *h, const char *node_id);
void ct__objdir_tick(head *h); /* waits past their deadline */
/* Object owners across a restart: state.c loads them (O and F records) before any node reports
 * its objects; an object that a node reports takes its loaded owner; after the nodes' time to
 * come back, owners of objects reported by none are forgotten (give_up). each_owner calls fn for
 * every owned object, listed or loaded, until fn returns nonzero (which it returns). */
void ct__objdir_owner_loaded(head *h, const uint8_t *id, size_t len, const char *job, int want);
void ct__objdir_owner_forget(head *h, const uint8_t *id, size_t len);
int ct__objdir_each_owner(head *h, int (*fn)(void *, const uint8_t *, size_t, const char *, int),
                          void *ctx);
void ct__objdir_owners_give_up(head *h);
ct__head_check ct__objdir_check_put_done, ct__objdir_check_free;
ct__head_handler ct__objdir_on_node_info, ct__objdir_on_added, ct__objdir_on_removed,
    ct__objdir_on_pull_done, ct__objdir_on_put_done, ct__objdir_on_fetch, ct__objdir_on_locate,
    ct__objdir_on_free, ct__objdir_on_nodes;

#endif
