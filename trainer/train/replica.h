/* trainer/train/replica.h — the replica actor's state (struct replica) and what its files
 * share: replica.c (build, setup, training, validation) and replica_live.c (live recovery's
 * "regroup", and a replacement's "snapshot" / "heal"). Not a public header; the driver never
 * sees it. */
#ifndef CT_TRAINER_TRAIN_REPLICA_H
#define CT_TRAINER_TRAIN_REPLICA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ct/collective.h"
#include "internal.h"
#include "trainer/backend/backend.h"

typedef struct replica replica;

/* What model i's gradient-ready hook gets: its replica and index. */
typedef struct grad_hook {
    replica *r;
    int model;
} grad_hook;

struct replica {
    tr_spec spec;
    tr_setup_args setup;
    trainer_ctx ctx;
    tr_state st;
    ct_loader *loader;
    ct_rendezvous *rdv;
    ct_comm *comm;  /* the CPU ring: host collectives, and the gradients off CUDA */
    ct_comm *ncomm; /* CUDA: NCCL, for the gradients only (as torch keeps gloo beside nccl) */
    ct_bucketer *bucketers[TR_MAX_MODELS]; /* one per model: reduces only its gradients */
    int nparams[TR_MAX_MODELS];
    grad_hook hooks[TR_MAX_MODELS];
    bool first_step_done;
    trainer_step_fn train_step, validate_step;
    uint64_t validations;
    bool pos_valid;               /* the loader is at (pos_epoch, pos_batch): a segment ended */
    int64_t pos_epoch, pos_batch; /* there, so the next segment goes on without a seek */
    tr_val_result *vals;          /* validations run during the current segment */
    int nvals, capvals;
    tr_recorder rec;  /* per-step records for the driver (records.c) */
    ct_device device; /* where the model trains (tr_spec.device) */
    int bound_here;   /* replicas of the group bound to this machine's CPUs with this one (0: not
                         bound) */
    const ct__backend *bk;  /* its backend; NULL on the CPU */
    tr_uploader up_x, up_y; /* batches to the device (upload.c) */
    bool draining;          /* this replica's node was told to stop (NODE_DRAINING, drain_heard) */
    bool healed;            /* a newcomer that loaded a live peer's snapshot ("heal"): no
                               communicator yet, it joins at the next "regroup" */
    int64_t pos_offset;     /* with pos_epoch / pos_batch: the loader's offset (tr_state.offset) */
    tr_grad_log log;        /* a heal's serving peer: its averaged gradients since the snapshot */
    /* where the last segment failed, when it failed inside a step because the communicator
     * broke (a peer died): what "regroup" goes on from (live recovery) */
    struct {
        bool ok;
        bool clean; /* ... or the last segment ended well (or none ran): at its end */
        int64_t epoch, offset, index; /* the failed step's first batch, under offset */
        int64_t step0;                /* st.step when the segment began */
        tr_report rep;                /* the segment's sums up to the last completed step */
    } live;
};

/* ---- replica.c ---- */

/* The training loader for r's rank and world (r->loader). 0 or an error. */
int ct__replica_loader_new(replica *r);
/* Buckets over model m's parameters' gradients, driven by its gradient-ready hook. */
int ct__replica_bucketer_new(replica *r, int m);
/* The hash of all models' weights (one over all; on a device through host memory). */
int ct__replica_weights_hash(replica *r, uint64_t *out);
/* The group's ring communicator (r->comm) for r->setup's group, rank and world. */
int ct__replica_open_ring(replica *r);

/* ---- replica_live.c: actor methods (ct_actor_class signature) ---- */

/* "regroup": a survivor (or a healed newcomer) joins the new group and agrees on the state. */
int ct__replica_regroup(void *state, const void *args, size_t len, void **res, size_t *rlen);
/* "snapshot": a serving peer's whole state into the store toward the newcomer's node. */
int ct__replica_snapshot(void *state, const void *args, size_t len, void **res, size_t *rlen);
/* "heal": a newcomer loads a serving peer's snapshot, checked. */
int ct__replica_heal(void *state, const void *args, size_t len, void **res, size_t *rlen);

#endif
