/* head/objdir_internal.h — the object directory's tables (h->od), shared by its two files:
 * objdir.c (the nodes' and clients' messages, pulls, waits, a node's death) and objdir_table.c
 * (the tables' bookkeeping: objects and their holders, each node's list of what it holds, the
 * owners loaded across a restart). Not for outside head/objdir*.c. Everything runs on the head's
 * thread. */
#ifndef CT_HEAD_OBJDIR_INTERNAL_H
#define CT_HEAD_OBJDIR_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include "common/common.h"
#include "head/head_internal.h"

#define IDLEN 20
#define MAX_DPULLS 65536 /* pulls the head asked for and waits on */
#define MAX_DWAITS 16384 /* fetches and replicated puts waiting */
#define MAX_LOCATE 4096  /* ids in one ObjLocate */

typedef struct dnode {
    char id[32];
    ct__rid rid;
    char store[96];
    char addr[160];
    char host[64];
    char host_id[128];
    uint64_t cap;
    uint32_t data_port; /* its transfer server's raw TCP port, 0: none */
    bool alive;
    uint64_t nobj, bytes; /* objects listed with it as a holder, their bytes (the status) */
    int *held;            /* the slots of the objects it is a holder of (held_add, held_del) */
    int nheld, capheld;
} dnode;

typedef struct dobj {
    uint8_t id[IDLEN];
    uint64_t size;
    int want; /* copies its owner asked for (ObjPutDone.replicas); kept up when holders die */
    char job[CT_TOKEN_LEN + 1]; /* its owner: the job that put it ("" until its put is done) */
    int *h;                     /* holder node indexes */
    int *hpos;                  /* per holder: its place in that node's held list */
    int nh, caph;
} dobj;

/* An owner loaded from the state file (state.c's O records) whose object no node has reported
 * yet: it becomes the object's when a node does (ct__od_add_holder). */
typedef struct downer {
    uint8_t id[IDLEN];
    int want;
    char job[CT_TOKEN_LEN + 1];
} downer;

typedef struct dpull {
    uint8_t id[IDLEN];
    int node;
} dpull;

/* What an ObjPutDone asks. Kept (parked) while the node it names has not listed its store
 * here yet: a node registering again after a head restart, whose actors' puts (sealed while
 * the head was away, or sent again by the drivers) reach the new head before the node does. */
typedef struct dput {
    ct__rid rid;
    uint64_t req;
    uint8_t id[IDLEN];
    uint64_t size;
    char node[32], pref[32];
    char job[CT_TOKEN_LEN + 1];
    int replicas;
    int64_t until; /* its deadline: arrival + ObjPutDone.wait_ms, parked time included */
} dput;

enum { W_FETCH, W_PUT };
typedef struct dwait {
    int kind;
    ct__rid rid;
    uint64_t req;
    uint8_t id[IDLEN];
    int node; /* W_FETCH: the node that must hold it */
    int need; /* W_PUT: holders wanted */
    int64_t deadline;
} dwait;

/* The directory's tables (h->od): one per head. */
struct objdir {
    dnode *n;
    int nn;
    dobj *o;
    int no, capo;
    dpull *p;
    int np, capp;
    dwait *w;
    int nw, capw;
    int rr;     /* round-robin start for replica placement */
    downer *lo; /* owners loaded from the state file, their objects not reported yet */
    int nlo, caplo;
    dput *pk; /* puts parked until their node lists its store (ct__objdir_on_put_done) */
    int npk, cappk;
    int max_objects; /* objects listed (and owners loaded): the head's limit */
    int nwant;       /* objects whose owner wants more than one copy (a death checks them) */
    ct__index *nix;  /* n's slots by node id (head/index.h) */
    ct__index *oix;  /* o's slots by object id */
};
typedef struct objdir objdir;

/* ---- objdir_table.c: the tables' bookkeeping ---- */
/* n's slot of node id / o's slot of object id (IDLEN bytes), -1 */
int ct__od_find_node(objdir *D, const char *id);
int ct__od_find_obj(objdir *D, const uint8_t *id);
bool ct__od_holds(const dobj *o, int ni); /* whether node ni is a holder of o */
/* Object oi's copies wanted (its owner's ObjPutDone.replicas), D->nwant kept. */
void ct__od_set_want(objdir *D, int oi, int want);
/* Forgets object oi (freed, or no holder left); an owned one leaves the state file too. The
 * last object moves into slot oi. */
void ct__od_drop_obj(head *h, int oi);
/* Node ni (live, listed) holds object id of size bytes (listed when new, its loaded owner
 * taken): 0, CT_ENOSPC (max_objects listed) or CT_ENOMEM. */
int ct__od_add_holder(objdir *D, const uint8_t *id, uint64_t size, int ni);
/* Node ni holds object oi no more; an object with no holder left is forgotten (drop_obj). */
void ct__od_remove_holder(head *h, int oi, int ni);

#endif
