/* trainer/train/heal.c — healing a replacement from a live peer, the driver's side: at a step
 * boundary after a live recovery shrank the group, a new replica is created and built, a
 * serving peer (round-robin) snapshots its state into the object store toward the newcomer's
 * node, the newcomer loads and checks it, and the group regroups one larger. Where the steps
 * can be replayed, the survivors train on while the newcomer copies (the overlap: it enters
 * HEAL_OVERLAP_STEPS later and replays the serving peer's averaged gradients of those steps). A
 * serving peer or survivor that dies meanwhile is dropped (a live recovery of its own); a
 * newcomer that dies in the quorum is given up at once; fewer than min_replicas left ends the
 * group. Not here: the replicas' "snapshot" and "heal" methods (replica_live.c),
 * the survivors going on after a death (live.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "driver.h"

#define HEAL_CALL_MS 60000     /* a replacement's build, a snapshot, its fetch and load */
#define HEAL_FREE_WAIT_MS 3000 /* for a failed replacement's resources to be free again */
/* replacements in a row that may fail to get in before the driver stops healing the group:
 * a refusal that repeats (a build that fails on the free node, a snapshot the newcomer keeps
 * refusing) would otherwise start and kill a replica at every step boundary, for ever */
#define HEAL_MAX_REFUSED 3

/* Waits up to HEAL_FREE_WAIT_MS, while the group goes on, until a replica fits (the resources
 * of one that died or was let go during a heal are free again: a death is seen by the call
 * first, the head frees its resources after). */
static void wait_for_room(trainer *t)
{
    int more = 0;
    for (int64_t until = ct__now_ms() + HEAL_FREE_WAIT_MS;
         t->actors && t->world >= t->min_replicas && ct__now_ms() < until &&
         (ct__driver_replicas_that_fit(t, &more) < 0 || more < 1);)
        usleep(2000);
}

/* Kills and releases a newcomer that did not get in (its snapshot too); the group goes on.
 * Then waits for its resources (wait_for_room), so that the next step boundary's replacement
 * fits where this one did; a node lost with it keeps them: the wait ends unmet. The
 * HEAL_MAX_REFUSED-th in a row ends the heals of this group, with an error line saying why. */
static void drop_newcomer(trainer *t, ct_actor **a, tr_snapshot *snap, const char *what)
{
    char err[400];
    snprintf(err, sizeof err, "%s", ct_last_error());
    CT_LOG(CT_LOG_WARN, "trainer",
           "heal: the replacement did not get in (%s: %s); the group goes on without it", what,
           err);
    if (++t->heal_refused >= HEAL_MAX_REFUSED) {
        CT_LOG(CT_LOG_ERROR, "trainer",
               "heal: %d replacements in a row did not get in (the last: %s: %s); no more "
               "heals: the group of %d goes on, and grows back at its next checkpoint by a "
               "restart from it when replicas fit",
               t->heal_refused, what, err, t->world);
        t->heal_to = 0;
        t->heal_refused = 0;
    }
    ct_actor_kill(*a);
    for (int64_t until = ct__now_ms() + 10000; !ct_actor_is_dead(*a) && ct__now_ms() < until;)
        usleep(2000);
    ct_actor_release(a);
    if (snap && snap->size)
        ct_free(&snap->id);
    wait_for_room(t);
}

/* Replica i of the group died during a heal (the others were idle at the step boundary): they
 * go on without it, a live recovery (the heal's regroup deals the epoch's rest over them and
 * the newcomer). Returns the group's size now. */
static int drop_dead_peer(trainer *t, int i, const char *who)
{
    int n = t->world;
    t->stats.failure_seen_ns = ct__now_ns();
    CT_LOG(CT_LOG_WARN, "trainer",
           "heal: %s, replica %d (actor %s, pid %d, node %s), died during the heal; %d survivors "
           "go on",
           who, i, ct_actor_id(t->actors[i]), ct_actor_pid(t->actors[i]),
           ct_actor_node(t->actors[i]), n - 1);
    char node[64];
    snprintf(node, sizeof node, "%s", ct_actor_node(t->actors[i]));
    ct_actor_release(&t->actors[i]);
    memmove(&t->actors[i], &t->actors[i + 1], sizeof *t->actors * (size_t)(n - 1 - i));
    t->world = --n;
    t->stats.replicas = n;
    t->stats.live_recoveries++;
    ct__report_live(&t->report,
                    "replica %d (node %s), %s of a heal, died; %d survivor%s go%s on live from "
                    "step %lld",
                    i, node, who, n, n == 1 ? "" : "s", n == 1 ? "es" : "",
                    (long long)t->local.step);
    ct__report_send(&t->report, true);
    wait_for_room(t); /* for the next replacement, its own too */
    return n;
}

/* Fewer than min_replicas left during a heal: the newcomer is let go and the group ended (the
 * driver restarts from the checkpoint). CT_EDEAD, why set. */
static int too_few_left(trainer *t, ct_actor **newcomer, char *why, size_t cap)
{
    ct__error(CT_EDEAD, "%d replicas left", t->world);
    drop_newcomer(t, newcomer, NULL, "no serving peer left");
    snprintf(why, cap, "heal: replicas died; %d left, min_replicas %d", t->world, t->min_replicas);
    ct__driver_end_group(t, NULL, 0, -1, 0, NULL);
    t->fail_reason = "replica_died";
    return CT_EDEAD;
}

/* The newcomer, last of the t->world actors, died in the quorum: the survivors, waiting for it
 * in the new group's rendezvous (group), are told to give it up (trainer/<group>/abandon:
 * replica_live.c's rendezvous of a regroup), stand where they stood, and meet again at once
 * without it under another group id, as in a live recovery of survivors idle at a step
 * boundary. 0 (the group of the survivors goes on), or a negative code. */
static int meet_without_newcomer(trainer *t, const char *group)
{
    int n = t->world - 1, failed = -1, rc;
    char key[128], msg[600] = "", g[64];
    snprintf(key, sizeof key, "trainer/%s/abandon", group);
    if ((rc = ct_kv_put(key, "1", 1)) < 0)
        return rc;
    tr_regroup_args *ra = calloc((size_t)n, sizeof *ra);
    void **rep = calloc((size_t)n, sizeof *rep);
    if (!ra || !rep) {
        free(ra);
        free(rep);
        return CT_ENOMEM;
    }
    t->world = n;
    snprintf(g, sizeof g, "g%d-%d-%lld", (int)getpid(), ++t->groups,
             (long long)(ct__now_ns() / 1000));
    for (int i = 0; i < n; i++) {
        ra[i] = (tr_regroup_args){.rank = i, .world = n};
        memcpy(ra[i].group, g, sizeof g);
    }
    rc = ct__driver_call_all(t, "regroup", ra, sizeof *ra, sizeof *ra, rep, &failed, msg,
                             sizeof msg);
    tr_report *r0 = rep[0];
    for (int i = 0; rc == 0 && i < n; i++) {
        tr_report *r = rep[i];
        if (r->steps != 0 || r->end_offset != r0->end_offset ||
            r->weights_hash != r0->weights_hash || r->epoch != r0->epoch)
            rc = ct__error(CT_EPROTO, "heal: survivor %d differs when they meet again", i);
    }
    if (rc == 0) {
        t->local.batch = 0;
        t->local.offset = r0->end_offset;
        memcpy(t->group, g, sizeof g);
        t->group_fresh = true;
    } else if (msg[0]) {
        ct__error(rc, "%s", msg);
    }
    for (int i = 0; i < n; i++)
        free(rep[i]);
    free(rep);
    free(ra);
    ct_kv_del(key);
    return rc;
}

/* The newcomer a, whose "heal" call (of snap, from replica peer) returned rc with res: when
 * its copy checked out, the survivors and it (last) "regroup" under a new group id at world
 * n+1; when the group went on since the snapshot (heal overlap), the serving peer's log of
 * averaged gradients is replayed by the newcomer there (replica_live.c). A newcomer that failed
 * is dropped (0); a failed regroup: a negative code, why set, the group ended. */
static int heal_in(trainer *t, const trainer_train_opts *o, ct_actor *a, tr_snapshot *sp, int peer,
                   int rc, void *res, size_t rlen, int64_t t0, int64_t t1, char *why, size_t cap)
{
    int n = t->world, failed = -1;
    tr_snapshot snap = *sp, *got = res;
    char group[64], msg[600] = "";
    if (rc < 0 || rlen != sizeof *got || got->hash != snap.hash) {
        free(res);
        drop_newcomer(t, &a, &snap, "heal");
        return 0;
    }
    int64_t t2 = ct__now_ns();
    t->stats.heal_copy_ns = snap.put_ns + got->get_ns;
    t->stats.heal_bytes = (int64_t)snap.size;
    CT_LOG(CT_LOG_INFO, "trainer",
           "heal: replacement %s (node %s) loaded replica %d's state at step %lld (%llu bytes, "
           "CRC-32C %08x): put %.1f ms, fetch and load %.1f ms",
           ct_actor_id(a), ct_actor_node(a), peer, (long long)snap.step,
           (unsigned long long)snap.size, snap.crc, snap.put_ns / 1e6, got->get_ns / 1e6);
    free(res);
    res = NULL;
    ct_free(&snap.id);
    for (int i = 0; i < n;) /* a survivor that died meanwhile is not waited for */
        if (ct_actor_is_dead(t->actors[i])) {
            n = drop_dead_peer(t, i, "a survivor");
            peer = i < peer ? peer - 1 : i == peer ? -1 : peer;
        } else {
            i++;
        }
    if (n < 1 || n < t->min_replicas)
        return too_few_left(t, &a, why, cap);
    /* the quorum of the next step: the survivors and the newcomer, last */
    ct_actor **all = realloc(t->actors, sizeof *all * (size_t)(n + 1));
    tr_regroup_args *ra = calloc((size_t)n + 1, sizeof *ra);
    void **rep = calloc((size_t)n + 1, sizeof *rep);
    if (!all || !ra || !rep) {
        if (all)
            t->actors = all;
        free(ra);
        free(rep);
        drop_newcomer(t, &a, NULL, "out of memory");
        return 0;
    }
    t->actors = all;
    t->actors[n] = a;
    t->world = n + 1;
    snprintf(group, sizeof group, "g%d-%d-%lld", (int)getpid(), ++t->groups,
             (long long)(ct__now_ns() / 1000));
    /* the steps the survivors went on since the snapshot: the newcomer replays the serving
     * peer's log of them (gone with that peer: it takes the whole state instead) */
    int64_t behind = t->local.step - snap.step;
    for (int i = 0; i <= n; i++) {
        ra[i] = (tr_regroup_args){.rank = i, .world = n + 1};
        ra[i].log_from = behind > 0 && peer >= 0 ? peer + 1 : 0;
        memcpy(ra[i].group, group, sizeof group);
    }
    rc = ct__driver_call_all(t, "regroup", ra, sizeof *ra, sizeof *ra, rep, &failed, msg,
                             sizeof msg);
    if (rc < 0 && failed == n) { /* the newcomer's call failed first: did it die? */
        for (int64_t until = ct__now_ms() + LIVE_DEATH_WAIT_MS;
             !ct_actor_is_dead(a) && ct__now_ms() < until;)
            usleep(1000);
        bool others = true;
        for (int i = 0; i < n; i++)
            others &= !ct_actor_is_dead(t->actors[i]);
        if (ct_actor_is_dead(a) && others) {
            CT_LOG(CT_LOG_WARN, "trainer",
                   "heal: the replacement died in the quorum (%s); the %d survivors give it up "
                   "and meet again without it",
                   msg, n);
            if ((rc = meet_without_newcomer(t, group)) == 0) {
                t->actors[n] = NULL;
                ct__error(CT_EDEAD, "it died in the quorum's rendezvous");
                drop_newcomer(t, &a, NULL, "the quorum");
                goto out;
            }
            snprintf(msg, sizeof msg, "%s", ct_last_error());
            t->world = n + 1; /* ended below with the newcomer */
        }
    }
    tr_report *r0 = rep[0];
    for (int i = 0; rc == 0 && i <= n; i++) {
        tr_report *r = rep[i];
        /* the newcomer (last) went on from the snapshot's step to the group's */
        if (r->steps != (i == n ? behind : 0) || r->end_offset != r0->end_offset ||
            r->weights_hash != (behind ? r0->weights_hash : snap.hash) || r->epoch != r0->epoch)
            rc = ct__error(CT_EPROTO,
                           "heal: rank %d differs at the quorum (steps +%lld, offset %lld, "
                           "weights %016llx; rank 0's %016llx, the snapshot's %016llx)",
                           i, (long long)r->steps, (long long)r->end_offset,
                           (unsigned long long)r->weights_hash,
                           (unsigned long long)r0->weights_hash, (unsigned long long)snap.hash);
    }
    if (rc < 0) {
        snprintf(why, cap, "heal: the group of %d with the replacement could not meet: %s", n + 1,
                 msg[0] ? msg : ct_last_error());
        CT_LOG(CT_LOG_WARN, "trainer", "%s: restarting from the last checkpoint", why);
        ct__driver_end_group(t, NULL, 0, -1, 0, NULL);
        t->fail_reason = "other";
        goto out;
    }
    t->local.batch = 0;
    t->local.offset = r0->end_offset;
    t->stats.heal_replayed_steps = ((tr_report *)rep[n])->replayed;
    memcpy(t->group, group, sizeof group);
    t->group_fresh = true;
    t->stats.replicas = n + 1;
    t->stats.heals++;
    ct__report_heal(&t->report,
                    "a replacement (node %s) healed from rank %d in %.0f ms; world %d%s",
                    ct_actor_node(a), peer, (ct__now_ns() - t0) / 1e6, n + 1,
                    t->world >= t->heal_to ? " again" : "");
    t->heal_refused = 0;
    if (t->world >= t->heal_to) /* back to its size: a checkpoint may grow it further */
        t->heal_to = 0;
    t->stats.heal_ns = ct__now_ns() - (t->stats.failure_seen_ns ? t->stats.failure_seen_ns : t0);
    t->stats.group_start_step = t->local.step;
    ct__report_replicas(&t->report, n + 1);
    ct__report_send(&t->report, true);
    CT_LOG(CT_LOG_INFO, "trainer",
           "heal: %d replicas from step %lld (epoch %lld, after %lld samples of it): replacement "
           "in %.1f ms (start and build %.1f, copy %.1f, quorum %.1f)",
           n + 1, (long long)t->local.step, (long long)t->local.epoch, (long long)t->local.offset,
           (ct__now_ns() - t0) / 1e6, (t1 - t0) / 1e6, (t2 - t1) / 1e6, (ct__now_ns() - t2) / 1e6);
    ct__driver_note_group_size(t, n + 1);
    double keep = t->lr_scale;
    t->lr_scale = 1;
    rc = ct__driver_tell_world_size(t, o, n + 1);
    t->live_lr = t->lr_scale;
    t->lr_scale = keep * t->live_lr;
out:
    for (int i = 0; i <= n; i++)
        free(rep[i]);
    free(rep);
    free(ra);
    return rc;
}

static int heal_enter(trainer *t, const trainer_train_opts *o, char *why, size_t cap);

/* At a step boundary between two segments (every replica idle), after a live recovery shrank
 * the group: when a replica fits again, a replacement heals from a live peer and the group
 * grows back by one without a restart. The newcomer is created and built; the serving peer
 * (round-robin over the group) puts its state into the store sealed toward the newcomer's node
 * ("snapshot"); the newcomer fetches and loads it, checked by CRC-32C and weights hash ("heal"),
 * while the survivors train HEAL_OVERLAP_STEPS more steps when the snapshot allows it (returns
 * 0 then; the boundary of its step calls heal_enter); then the survivors and the newcomer
 * (last) "regroup" under a new group id at world n+1 (the newcomer replaying the steps), agree
 * (same steps and weights), and the epoch's rest is dealt over n+1 from the exact offset;
 * on_world_size is told. A newcomer or serving peer that fails before the regroup is dropped
 * and the group goes on as it was (a dead serving peer is the next segment's live recovery);
 * returns 0 then too. A failed regroup: a negative code, why set, the group ended. */
int ct__heal_replacement(trainer *t, const trainer_train_opts *o, char *why, size_t cap)
{
    int n = t->world, n0 = n, more = 0, rc;
    if (t->heal_job.a) /* a replacement copying: it enters at its step */
        return t->local.step >= t->heal_job.enter_step ? heal_enter(t, o, why, cap) : 0;
    if (!t->actors || !t->heal_to || n >= t->heal_to || t->group_fresh)
        return 0;
    if (ct__driver_replicas_that_fit(t, &more) < 0 || more < 1)
        return 0;
    int64_t t0 = ct__now_ns();
    ct_actor *a = NULL;
    tr_snapshot snap = {0};
    void *res = NULL;
    size_t rlen = 0;
    ct_resources cres = {.cpu = t->cpus,
                         .gpu = t->gpus,
                         .strategy = t->placement,
                         .timeout_ms = o->create_timeout_ms > 0 ? o->create_timeout_ms : 30000};
    if ((rc = ct_actor_create(TR_REPLICA_CLASS, &cres, &t->spec, sizeof t->spec, &a)) < 0) {
        CT_LOG(CT_LOG_INFO, "trainer", "heal: no replacement started: %s", ct_last_error());
        return 0;
    }
    tr_setup_args sa = {.rank = n, .world = n + 1, .start_epoch = t->local.epoch};
    snprintf(sa.driver_node, sizeof sa.driver_node, "%s", ct_object_node());
    if ((rc = ct_actor_call(a, "build", &sa, sizeof sa, NULL, NULL, HEAL_CALL_MS)) < 0) {
        drop_newcomer(t, &a, NULL, "build");
        return 0;
    }
    tr_snapshot_args qa = {{0}};
    snprintf(qa.node, sizeof qa.node, "%s", ct_actor_node(a) ? ct_actor_node(a) : "");
    int64_t t1 = ct__now_ns();
    int peer;
    for (;;) { /* a serving peer that dies: the newcomer asks the next one */
        peer = t->heal_next++ % n;
        rc = ct_actor_call(t->actors[peer], "snapshot", &qa, sizeof qa, &res, &rlen, HEAL_CALL_MS);
        if (rc == 0 && rlen == sizeof snap)
            break;
        free(res);
        res = NULL;
        for (int64_t until = ct__now_ms() + LIVE_DEATH_WAIT_MS;
             !ct_actor_is_dead(t->actors[peer]) && ct__now_ms() < until;)
            usleep(1000);
        if (!ct_actor_is_dead(t->actors[peer])) {
            drop_newcomer(t, &a, NULL, "the serving peer's snapshot");
            return 0;
        }
        n = drop_dead_peer(t, peer, "the serving peer");
        t->heal_next = peer;
        if (n < 1 || n < t->min_replicas)
            return too_few_left(t, &a, why, cap);
    }
    memcpy(&snap, res, sizeof snap);
    free(res);
    res = NULL;
    if (snap.step != t->local.step || snap.epoch != t->local.epoch) {
        ct__error(CT_EPROTO, "serving peer %d at step %lld epoch %lld, the driver at %lld, %lld",
                  peer, (long long)snap.step, (long long)snap.epoch, (long long)t->local.step,
                  (long long)t->local.epoch);
        drop_newcomer(t, &a, &snap, "position");
        return 0;
    }
    /* the overlap: only with the group as it was (a serving peer that died broke the others'
     * ring: they meet again with the newcomer at once) */
    if (snap.replay_ok && snap.steps_left > HEAL_OVERLAP_STEPS && n == n0) {
        /* the survivors go on while it copies; the serving peer records their averaged
         * gradients (run_segment), which the newcomer replays as it enters (heal_enter) */
        if (ct_actor_call_async(a, "heal", &snap, sizeof snap, &t->heal_job.f) < 0) {
            drop_newcomer(t, &a, &snap, "heal");
            return 0;
        }
        t->heal_job.a = a;
        t->heal_job.snap = snap;
        t->heal_job.peer = peer;
        t->heal_job.enter_step = snap.step + HEAL_OVERLAP_STEPS;
        t->heal_job.t0 = t0;
        t->heal_job.t1 = t1;
        CT_LOG(CT_LOG_INFO, "trainer",
               "heal: replacement %s (node %s) copies replica %d's state of step %lld while the "
               "group of %d goes on; it enters at step %lld",
               ct_actor_id(a), ct_actor_node(a), peer, (long long)snap.step, n,
               (long long)t->heal_job.enter_step);
        return 0;
    }
    if (!snap.replay_ok)
        CT_LOG(CT_LOG_INFO, "trainer",
               "heal: the survivors wait while the replacement copies: with %s, their steps "
               "cannot be replayed from their averaged gradients",
               snap.replay_why);
    rc = ct_actor_call(a, "heal", &snap, sizeof snap, &res, &rlen, HEAL_CALL_MS);
    return heal_in(t, o, a, &snap, peer, rc, res, rlen, t0, t1, why, cap);
}

/* At the step a replacement copying while the survivors went on enters (t->heal_job): waits
 * for the rest of its copy, then lets it in (heal_in). */
static int heal_enter(trainer *t, const trainer_train_opts *o, char *why, size_t cap)
{
    ct_actor *a = t->heal_job.a;
    tr_snapshot snap = t->heal_job.snap;
    int peer = t->heal_job.peer;
    int64_t t0 = t->heal_job.t0, t1 = t->heal_job.t1, w0 = ct__now_ns();
    void *res = NULL;
    size_t rlen = 0;
    int rc = ct_future_wait(t->heal_job.f, HEAL_CALL_MS, &res, &rlen);
    ct_future_destroy(&t->heal_job.f);
    memset(&t->heal_job, 0, sizeof t->heal_job);
    CT_LOG(CT_LOG_INFO, "trainer",
           "heal: at step %lld, %lld steps after its snapshot, the survivors waited %.1f ms for "
           "the replacement's copy",
           (long long)t->local.step, (long long)(t->local.step - snap.step),
           (ct__now_ns() - w0) / 1e6);
    return heal_in(t, o, a, &snap, peer, rc, res, rlen, t0, t1, why, cap);
}
