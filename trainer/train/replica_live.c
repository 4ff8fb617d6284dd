/* trainer/train/replica_live.c — live recovery, the replicas' side: "regroup" (after a peer's
 * death, a survivor leaves the broken communicator, joins the new group, agrees with the others
 * on the last completed step and weights, and deals the epoch's rest over the new world), and
 * healing a replacement: "snapshot" (a serving peer's state into the object store, checksummed)
 * and "heal" (a newcomer loads and checks it, then enters at the next "regroup"). Not here:
 * deciding who regroups or heals (the driver: live.c, heal.c), training (replica.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "common/fault.h"
#include "ct/collective.h"
#include "objectstore/crc32c.h"
#include "replica.h"

/* The test fault heal_hold=ROLE:PATH (common/fault.h): in the heal's copy, the replica of that
 * role ("newcomer": its fetched snapshot in hand, before the check and load; "peer": the bytes
 * written, before the seal sends them; "quorum": the healed newcomer in its "regroup", before it
 * joins the new group's rendezvous) writes its pid into PATH.held and waits while PATH
 * exists, so that a test lands a kill inside the copy however loaded the machine is. Once per
 * PATH: PATH.held, made by link(), is the token; a later heal does not wait. */
static void hold_in_copy(const replica *r, const char *role)
{
    char v[400], tmp[480], held[480], pid[24];
    if (!ct__fault(CT__FAULT_HEAL_HOLD, v, sizeof v))
        return;
    char *path = strchr(v, ':');
    if (!path || (size_t)(path - v) != strlen(role) || strncmp(v, role, strlen(role)))
        return;
    *path++ = 0;
    if (access(path, F_OK) != 0)
        return;
    snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    snprintf(held, sizeof held, "%s.held", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    bool ok = fputs(pid, f) >= 0;
    ok &= fclose(f) == 0;
    ok = ok && link(tmp, held) == 0; /* the first one holds */
    unlink(tmp);
    if (!ok)
        return;
    CT_LOG(CT_LOG_WARN, "trainer",
           "replica %d: held in the heal's copy as the %s while %s exists (test fault)",
           r->setup.rank, role, path);
    while (access(path, F_OK) == 0)
        usleep(20 * 1000);
}

/* How often a rank waiting in the new group's rendezvous looks for the driver's word that the
 * group will not meet (abandon_key) */
#define ABANDON_POLL_MS 20

/* The rendezvous of a regroup: the replica's KV one, whose waits give up (CT_ECANCELED) once
 * the driver put trainer/<group>/abandon: a newcomer died in the quorum, and the others go on
 * without it at once instead of after comm_timeout_ms (heal.c). */
typedef struct abandonable {
    ct_rendezvous r; /* first: what the communicator gets */
    const ct_rendezvous *kv;
    char key[128];
} abandonable;

static int abandonable_put(void *ctx, const char *key, const void *value, size_t len)
{
    const abandonable *a = ctx;
    return a->kv->put(a->kv->ctx, key, value, len);
}

static int abandonable_get(void *ctx, const char *key, void **value, size_t *len, int timeout_ms)
{
    const abandonable *a = ctx;
    for (int64_t until = timeout_ms > 0 ? ct__now_ms() + timeout_ms : INT64_MAX;;) {
        int64_t left = until - ct__now_ms();
        int slice = left < ABANDON_POLL_MS ? (left > 0 ? (int)left : 1) : ABANDON_POLL_MS;
        int rc = a->kv->get(a->kv->ctx, key, value, len, slice);
        if (rc != CT_ETIMEDOUT || ct__now_ms() >= until)
            return rc;
        void *v = NULL;
        size_t n = 0;
        if (ct_kv_get(a->key, &v, &n, 0) == 0) {
            free(v);
            return ct__error(CT_ECANCELED, "the driver gave up the group (%s): a member died",
                             a->key);
        }
    }
}

/* What each survivor says of itself when the new group meets. */
typedef struct live_pos {
    int64_t step, epoch, offset, index;
    uint64_t hash;
} live_pos;

/* Rank src's whole state (models, optimizers, scheduler, loss scaler, counters: a checkpoint's
 * bytes, in memory) to every rank of the new group. */
static int share_state(replica *r, int src)
{
    tr_ckpt_plan *p = NULL;
    uint64_t size = 0;
    void *buf = NULL;
    int rc = 0;
    if (r->setup.rank == src &&
        (rc = ct__ckpt_plan(&r->st, &r->spec, r->setup.world, NULL, &p)) == 0)
        size = ct__ckpt_size(p);
    if (rc == 0)
        rc = ct_comm_broadcast(r->comm, &size, 1, CT_I64, src, 0);
    if (rc == 0 && !(buf = malloc(size ? size : 1)))
        rc = CT_ENOMEM;
    if (rc == 0 && p)
        ct__ckpt_write(p, buf);
    if (rc == 0)
        rc = ct_comm_broadcast(r->comm, buf, size, CT_U8, src, 0);
    if (rc == 0 && r->setup.rank != src)
        rc = ct__ckpt_load(&r->st, &r->spec, buf, size);
    free(buf);
    ct__ckpt_plan_free(&p);
    return rc;
}

/* A replacement that healed from a snapshot older than the group's step (heal overlap): rank
 * src broadcasts its log of the averaged gradients since the snapshot (tr_grad_log), and each
 * rank that stands at the log's first step replays it (gradlog.c) and takes src's position;
 * *replayed: the steps replayed here. A local replay failure is logged, not returned: the
 * rank then differs, and live_agree gives it the whole state. */
static int replay_log(replica *r, live_pos *all, int src, int64_t *replayed)
{
    int k = r->setup.rank;
    int64_t hdr[2] = {0, 0}; /* the log's bytes and first step */
    if (k == src && r->log.on) {
        hdr[0] = (int64_t)r->log.len;
        hdr[1] = r->log.step0;
    }
    int rc = ct_comm_broadcast(r->comm, hdr, 2, CT_I64, src, 0);
    if (rc < 0 || hdr[0] == 0)
        return rc;
    unsigned char *buf = k == src ? r->log.buf : malloc((size_t)hdr[0]);
    if (!buf)
        return CT_ENOMEM;
    rc = ct_comm_broadcast(r->comm, buf, (size_t)hdr[0], CT_U8, src, 0);
    bool behind = all[k].step == hdr[1] && all[k].step < all[src].step;
    if (rc == 0 && behind) {
        int lrc = ct__gradlog_replay(&r->st, &r->spec, buf, (size_t)hdr[0], replayed);
        if (lrc == 0 && (lrc = ct__replica_weights_hash(r, &all[k].hash)) == 0) {
            all[k].step = r->st.step;
            all[k].epoch = all[src].epoch;
            all[k].offset = all[src].offset;
            all[k].index = all[src].index;
        }
        if (lrc < 0)
            CT_LOG(CT_LOG_WARN, "trainer",
                   "replica %d: replaying the survivors' gradients since step %lld failed (%s): "
                   "it takes the whole state",
                   k, (long long)hdr[1], ct_last_error());
    }
    if (k != src)
        free(buf);
    return rc;
}

/* The new group agrees where it stands: every survivor's last completed step and weights are
 * gathered; when they differ (a peer's death can let some ranks finish the step in flight and
 * not others), the lowest rank of the most steps gives its state to all. Then all go on from
 * the first batch after that step: the epoch's order from offset + index * batch * old_world
 * on, dealt over the new world (*src: the rank the position came from; *hash: the weights' hash
 * now, the same on every rank). */
static int live_agree(replica *r, int old_world, int log_from, int *src, uint64_t *hash,
                      int64_t *replayed, bool *moved)
{
    int w = r->setup.world, k = r->setup.rank, rc;
    live_pos *all = calloc((size_t)w, sizeof *all);
    if (!all)
        return CT_ENOMEM;
    all[k] = (live_pos){r->st.step, r->live.epoch, r->live.offset, r->live.index, 0};
    if ((rc = ct__replica_weights_hash(r, &all[k].hash)) < 0 ||
        (rc = ct_comm_allgather(r->comm, &all[k], all, sizeof *all, CT_U8, 0)) < 0)
        goto out;
    *src = 0;
    for (int i = 1; i < w; i++)
        if (all[i].step > all[*src].step)
            *src = i;
    bool same = true;
    for (int i = 0; i < w; i++)
        same &= !memcmp(&all[i], &all[*src], sizeof *all);
    if (!same && log_from > 0 && log_from <= w) { /* a replacement behind: the replay first */
        if ((rc = replay_log(r, all, log_from - 1, replayed)) < 0 ||
            (rc = ct_comm_allgather(r->comm, &all[k], all, sizeof *all, CT_U8, 0)) < 0)
            goto out;
        same = true;
        for (int i = 0; i < w; i++)
            same &= !memcmp(&all[i], &all[*src], sizeof *all);
        if (!same)
            *replayed = 0; /* not what it stands on: the whole state below */
        if (!same && k == *src)
            CT_LOG(CT_LOG_WARN, "trainer",
                   "replica %d: the replay of the survivors' gradients did not give their "
                   "weights (a train step that changes more than its optimizer steps?): rank "
                   "%d's whole state to all",
                   k, *src);
    }
    if (!same) {
        CT_LOG(CT_LOG_INFO, "trainer",
               "replica %d: the survivors differ after the failure (step %lld here, %lld on "
               "rank %d): rank %d's state to all",
               k, (long long)all[k].step, (long long)all[*src].step, *src, *src);
        *moved = *moved || k != *src;
        if ((rc = share_state(r, *src)) < 0 || (rc = ct__replica_weights_hash(r, hash)) < 0)
            goto out;
    } else {
        *hash = all[*src].hash;
    }
    const live_pos *p = &all[*src];
    int64_t n = ct_dataset_length(r->st.data.train);
    int64_t offset = p->offset + p->index * r->spec.batch * old_world;
    r->st.step = p->step;
    r->st.epoch = p->epoch;
    r->st.batch = 0;
    r->st.offset = offset < n ? offset : n;
out:
    free(all);
    return rc;
}

/* The "regroup" method (live recovery): after its segment failed inside a step because a peer
 * died, this survivor leaves the old communicator, joins the new group (a new group id: the
 * new membership's generation, so nothing of the old ring reaches it), agrees on the state and
 * position with the other survivors (live_agree), deals the rest of the epoch over the new
 * world (a new loader) and rebuilds its bucketers. Replies a tr_report: the failed segment's
 * sums up to its last completed step, steps: the steps done in it, end_offset: where the epoch
 * goes on (end_batch 0). A replica whose segment did not fail so refuses (CT_EINVAL): the
 * driver restarts the group from the checkpoint instead. */
int ct__replica_regroup(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    replica *r = state;
    /* (no communicator but live.ok: a regroup before failed in its rendezvous, state intact) */
    if (len != sizeof(tr_regroup_args) || (!r->comm && !r->healed && !r->live.ok))
        return ct__error(CT_EINVAL, "trainer replica: regroup before setup or bad args");
    bool newcomer = r->healed;
    r->healed = false;
    if (!r->live.ok && r->live.clean) { /* idle when the peer died: from where it stands */
        r->live.epoch = r->st.epoch;
        r->live.offset = r->st.offset;
        r->live.index = r->st.batch;
        r->live.step0 = r->st.step;
        r->live.rep = (tr_report){.magic = TR_REPORT_MAGIC};
        r->live.ok = true;
    }
    if (!r->live.ok)
        return ct__error(CT_EINVAL,
                         "trainer replica %d: its segment did not fail inside a step (a peer's "
                         "death): no live recovery",
                         r->setup.rank);
    tr_regroup_args a;
    memcpy(&a, args, sizeof a);
    int old_world = r->setup.world, old_rank = r->setup.rank, src = 0, rc;
    char old_group[sizeof r->setup.group];
    memcpy(old_group, r->setup.group, sizeof old_group);
    uint64_t hash = 0;
    int64_t replayed = 0;
    if (newcomer)
        hold_in_copy(r, "quorum");
    r->live.ok = r->live.clean = false;
    /* a device: the failed step's queued work (its backward, its batch's uploads) done before
     * the bucketers go (their destroy waits for their own streams); its gradients are
     * discarded (zeroed at the next step's start), the weights stay where they are */
    if (r->bk && (rc = r->bk->synchronize(NULL)) < 0)
        return ct__trainer_error_prefix(rc, "trainer replica %d: draining its device",
                                        r->setup.rank);
    for (int m = 0; m < r->st.nmodels; m++) {
        ct_module_on_grad_ready(r->st.models[m], NULL, NULL);
        ct_bucketer_destroy(&r->bucketers[m]); /* before the communicator it uses */
    }
    ct_comm_destroy(&r->comm);
    ct_loader_destroy(&r->loader);
    r->setup.rank = r->ctx.rank = a.rank;
    r->setup.world = r->ctx.world = a.world;
    memcpy(r->setup.group, a.group, sizeof r->setup.group);
    abandonable ab = {.r = {.put = abandonable_put, .get = abandonable_get, .ctx = &ab},
                      .kv = r->rdv};
    snprintf(ab.key, sizeof ab.key, "trainer/%s/abandon", a.group);
    ct_rendezvous *kv = r->rdv;
    r->rdv = &ab.r;
    rc = ct__replica_open_ring(r);
    r->rdv = kv;
    bool moved = false; /* this rank's state changed (the whole state, or a replay) */
    if (rc == 0)
        rc = live_agree(r, old_world, a.log_from, &src, &hash, &replayed, &moved);
    ct__gradlog_reset(&r->log); /* sent, or of a heal that did not get in */
    if (rc < 0 && !newcomer && !moved) {
        /* the group did not meet (a member died in it): this survivor stands where it stood,
         * for the driver's next "regroup" without the dead */
        ct_comm_destroy(&r->comm);
        r->setup.rank = r->ctx.rank = old_rank;
        r->setup.world = r->ctx.world = old_world;
        memcpy(r->setup.group, old_group, sizeof r->setup.group);
        r->live.ok = true;
        return rc;
    }
    if (rc == 0)
        rc = ct__replica_loader_new(r);
    if (rc < 0)
        return rc;
    /* the replicas bound on this machine still are: one bucket stays one bucket, when every
     * rank of the new group was bound with all of its old group (a replacement healed from a
     * peer never bound its CPUs): the bucket layout must be the same on every rank */
    int bound = r->bound_here > 0 && r->bound_here == old_world, *all = NULL;
    if (!(all = calloc((size_t)a.world, sizeof *all)))
        return CT_ENOMEM;
    all[a.rank] = bound;
    rc = ct_comm_allgather(r->comm, &all[a.rank], all, sizeof *all, CT_U8, 0);
    for (int i = 0; i < a.world; i++)
        bound &= all[i];
    free(all);
    if (rc < 0)
        return rc;
    r->bound_here = bound ? a.world : 0;
    for (int m = 0; m < r->st.nmodels && rc == 0; m++)
        rc = ct__replica_bucketer_new(r, m);
    if (rc < 0)
        return rc;
    r->pos_valid = false;
    r->first_step_done = false;
    r->live.clean = true; /* another death before the next segment: go on from here */
    tr_report rep = r->live.rep;
    rep.rank = a.rank;
    rep.world = a.world;
    snprintf(rep.group, sizeof rep.group, "%s", a.group);
    rep.epoch = r->st.epoch;
    rep.steps = r->st.step - r->live.step0;
    rep.end_batch = 0;
    rep.end_offset = r->st.offset;
    rep.first_step_ns = 0;
    rep.skipped_total = r->st.skipped;
    rep.loss_scale = r->st.scaler ? ct_grad_scaler_scale(r->st.scaler) : 0;
    rep.weights_hash = hash;
    rep.replayed = replayed;
    if (!(*res = malloc(sizeof rep)))
        return CT_ENOMEM;
    memcpy(*res, &rep, sizeof rep);
    *rlen = sizeof rep;
    return 0;
}

/* Why this replica's optimizer steps cannot be replayed from its averaged gradients alone
 * (gradlog.c), or NULL: the f16 loss scaler (its skips and scale), a plateau scheduler (it
 * steps on a metric), ZeRO-1 (a shard's step). A device's gradients are downloaded into the
 * log and uploaded by the replay (gradlog.c). */
static const char *replay_refusal(const replica *r)
{
    return r->st.scaler              ? "the f16 loss scaler"
           : r->st.plateau_metric[0] ? "a plateau scheduler"
           : r->spec.zero            ? "ZeRO-1"
                                     : NULL;
}

/* The "snapshot" method (a serving peer, idle between two segments of a live group): its whole
 * state (the checkpoint bytes of share_state) into the store, written in place and sealed toward
 * the newcomer's node (its data port pulls it in checksummed chunks), with the bytes' CRC-32C,
 * the weights' hash and the position (tr_snapshot). The driver frees the object. */
int ct__replica_snapshot(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    replica *r = state;
    if (len != sizeof(tr_snapshot_args) || !r->comm)
        return ct__error(CT_EINVAL, "trainer replica: snapshot before setup or bad args");
    if (!r->live.clean || r->live.ok)
        return ct__error(CT_EINVAL, "trainer replica %d: snapshot while not at a step boundary",
                         r->setup.rank);
    tr_snapshot_args a;
    memcpy(&a, args, sizeof a);
    a.node[sizeof a.node - 1] = 0;
    int64_t t0 = ct__now_ns();
    tr_snapshot snap = {.step = r->st.step,
                        .epoch = r->st.epoch,
                        .batch = r->st.batch,
                        .offset = r->st.offset,
                        .world = r->setup.world};
    int64_t k = r->spec.accumulate > 1 ? r->spec.accumulate : 1;
    int64_t nb = r->loader ? ct_loader_num_batches(r->loader) : 0;
    snap.steps_left = nb > r->st.batch ? (nb - r->st.batch) / k : 0;
    const char *why = replay_refusal(r);
    snap.replay_ok = !why;
    snprintf(snap.replay_why, sizeof snap.replay_why, "%s", why ? why : "");
    tr_ckpt_plan *p = NULL;
    void *dst = NULL;
    int rc = ct__ckpt_plan(&r->st, &r->spec, r->setup.world, NULL, &p);
    if (rc == 0) {
        snap.size = ct__ckpt_size(p);
        rc = ct_object_create(snap.size, &snap.id, &dst);
    }
    if (rc == 0) {
        snap.crc = ct__ckpt_write(p, dst);
        hold_in_copy(r, "peer");
        rc = ct_object_seal(&snap.id, &(ct_put_opts){.node = a.node[0] ? a.node : NULL});
        if (rc < 0)
            ct_object_abort(&snap.id);
    }
    ct__ckpt_plan_free(&p);
    if (rc == 0)
        rc = ct__replica_weights_hash(r, &snap.hash);
    if (rc < 0)
        return ct__trainer_error_prefix(rc, "trainer replica %d: snapshot", r->setup.rank);
    snap.put_ns = ct__now_ns() - t0;
    if (!(*res = malloc(sizeof snap)))
        return CT_ENOMEM;
    memcpy(*res, &snap, sizeof snap);
    *rlen = sizeof snap;
    return 0;
}

/* The "heal" method (a newcomer, after "build", instead of "setup"): fetches a live peer's
 * snapshot (args: its tr_snapshot), checks its size and CRC-32C, loads it and checks that the
 * weights' hash is the peer's; then it stands where the peer stood (step, epoch, batch under
 * offset, in a group of the peer's world), ready for the "regroup" that lets it in. Replies a
 * tr_snapshot: the hash here and get_ns. CT_EPROTO when the bytes or the weights differ. */
int ct__replica_heal(void *state, const void *args, size_t len, void **res, size_t *rlen)
{
    replica *r = state;
    if (len != sizeof(tr_snapshot) || !r->st.nmodels || r->comm)
        return ct__error(CT_EINVAL, "trainer replica: heal %s",
                         len != sizeof(tr_snapshot) ? "with bad args"
                         : !r->st.nmodels           ? "before build"
                                                    : "of a replica in a group");
    tr_snapshot snap, me = {0};
    memcpy(&snap, args, sizeof snap);
    int64_t t0 = ct__now_ns();
    ct_object_view v = {0};
    int rc = ct_get(&snap.id, 30000, &v);
    if (rc < 0)
        return ct__trainer_error_prefix(rc, "trainer replica %d: fetching the peer's snapshot",
                                        r->setup.rank);
    hold_in_copy(r, "newcomer");
    uint32_t crc = v.size == snap.size ? ct__crc32c(0, v.data, v.size) : 0;
    if (v.size != snap.size || crc != snap.crc)
        rc = ct__error(CT_EPROTO,
                       "trainer replica %d: the peer's snapshot has %llu bytes of CRC-32C %08x, "
                       "expected %llu of %08x",
                       r->setup.rank, (unsigned long long)v.size, crc,
                       (unsigned long long)snap.size, snap.crc);
    if (rc == 0)
        rc = ct__ckpt_load(&r->st, &r->spec, v.data, v.size);
    ct_object_release(&v);
    if (rc == 0)
        rc = ct__replica_weights_hash(r, &me.hash);
    if (rc == 0 && me.hash != snap.hash)
        rc = ct__error(CT_EPROTO,
                       "trainer replica %d: weights hash %016llx after loading the peer's "
                       "snapshot, the peer's is %016llx",
                       r->setup.rank, (unsigned long long)me.hash, (unsigned long long)snap.hash);
    if (rc == 0 && !r->rdv && !(r->rdv = ct_rendezvous_kv_new("trainer/")))
        rc = CT_ENOMEM;
    if (rc < 0)
        return rc;
    r->st.step = snap.step;
    r->st.epoch = snap.epoch;
    r->st.batch = snap.batch;
    r->st.offset = snap.offset;
    r->setup.world = r->ctx.world = snap.world; /* the group it enters from (live_agree) */
    r->healed = true;
    r->live.ok = false;
    r->live.clean = true; /* "regroup" goes on from where it stands */
    me.step = r->st.step;
    me.get_ns = ct__now_ns() - t0;
    if (!(*res = malloc(sizeof me)))
        return CT_ENOMEM;
    memcpy(*res, &me, sizeof me);
    *rlen = sizeof me;
    return 0;
}
