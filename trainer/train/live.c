/* trainer/train/live.c — live recovery, the driver's side (trainer_opts.recovery "live"):
 * after a segment failed because replicas died, the survivors regroup under a new group id,
 * agree on the last completed step, discard the one in flight and go on with the epoch's rest
 * dealt over the smaller world. Not here: the replicas' side of the regroup (replica_live.c),
 * the replacement that later heals from a survivor (heal.c), restart recovery (trainer.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "driver.h"

/* After a segment failed: when replicas died (their node's death watch reported them) and every
 * survivor failed inside a step (its communicator broke), the survivors go on without them: a
 * new group of the survivors (a new group id, the next generation; ranks in the old order)
 * agrees on the last completed step, discards the one in flight and re-shards the rest of the
 * epoch (replica.c, "regroup"); on_world_size is told, its lr factor goes with the next
 * train_epoch. *done_steps: the optimizer steps the failed segment completed (of its budget
 * `steps`). 0, or a negative code when the driver must restart the group instead (nothing
 * died, fewer than min_replicas left, a survivor that failed otherwise: logged); then, when the
 * dead were already let go (*why non-empty: what died), the group left is the survivors. */
int ct__live_recover(trainer *t, const trainer_train_opts *o, int64_t steps, int64_t *done_steps,
                     char *why, size_t cap)
{
    int64_t t0 = ct__now_ns(), until = ct__now_ms() + LIVE_DEATH_WAIT_MS;
    int n = 0, old = t->world, rc, failed = -1;
    char key[128];
    void *v = NULL;
    size_t vlen = 0;
    ct__driver_abort_heal(t, "a replica of the group died"); /* its copy's log died with the step */
    snprintf(key, sizeof key, "trainer/%s/error", t->group); /* replica.c, epoch_failed */
    if (ct_kv_get(key, &v, &vlen, 0) == 0) { /* a replica failed by itself: no death */
        CT_LOG(CT_LOG_INFO, "trainer",
               "recovery: a replica failed by itself (%.*s): restarting the group from the last "
               "checkpoint",
               (int)(vlen < 300 ? vlen : 300), v ? (const char *)v : "");
        free(v);
        return CT_EINVAL;
    }
    for (;;) { /* the survivors saw the death first: wait for the head's word on it */
        n = 0;
        for (int i = 0; i < old; i++)
            n += !ct_actor_is_dead(t->actors[i]);
        if (n < old || ct__now_ms() >= until)
            break;
        usleep(1000);
    }
    if (n == old) {
        CT_LOG(CT_LOG_INFO, "trainer",
               "recovery: no replica died (a replica's own error, or a peer too slow for "
               "comm_timeout_ms): restarting the group from the last checkpoint");
        return CT_EINVAL;
    }
    if (n < t->min_replicas) {
        CT_LOG(CT_LOG_WARN, "trainer",
               "recovery: %d of %d replicas survive, fewer than min_replicas %d: no live "
               "recovery; restarting from the last checkpoint",
               n, old, t->min_replicas);
        return CT_EINVAL;
    }
    ct_actor **alive = calloc((size_t)n, sizeof *alive);
    tr_regroup_args *ra = calloc((size_t)n, sizeof *ra);
    void **res = calloc((size_t)n, sizeof *res);
    char group[64], msg[600] = "";
    if (!alive || !ra || !res) {
        free(alive);
        free(ra);
        free(res);
        return CT_ENOMEM;
    }
    snprintf(group, sizeof group, "g%d-%d-%lld", (int)getpid(), ++t->groups,
             (long long)(ct__now_ns() / 1000));
    char dead[120] = ""; /* the first replica that died, in words, for the head's event */
    for (int i = 0, k = 0; i < old; i++) {
        if (ct_actor_is_dead(t->actors[i])) {
            if (!dead[0])
                snprintf(dead, sizeof dead, "replica %d (node %s) died", i,
                         ct_actor_node(t->actors[i]));
            snprintf(why, cap, "replica %d (actor %s, pid %d, node %s) died", i,
                     ct_actor_id(t->actors[i]), ct_actor_pid(t->actors[i]),
                     ct_actor_node(t->actors[i]));
            CT_LOG(CT_LOG_WARN, "trainer", "recovery: %s; %d survivors go on live (group %s)", why,
                   n, group);
            ct_actor_release(&t->actors[i]);
            continue;
        }
        ra[k] = (tr_regroup_args){.rank = k, .world = n};
        memcpy(ra[k].group, group, sizeof group);
        alive[k++] = t->actors[i];
    }
    free(t->actors);
    t->actors = alive;
    t->world = n;
    t->stats.replicas = n;
    ct__report_replicas(&t->report, n);
    rc = ct__driver_call_all(t, "regroup", ra, sizeof *ra, sizeof *ra, res, &failed, msg,
                             sizeof msg);
    tr_report *r0 = res[0];
    for (int i = 0; rc == 0 && i < n; i++) {
        tr_report *r = res[i];
        if (r->steps != r0->steps || r->end_offset != r0->end_offset ||
            r->weights_hash != r0->weights_hash || r->epoch != r0->epoch)
            rc = ct__error(CT_EPROTO,
                           "recovery: survivors disagree after regrouping (rank %d: step +%lld, "
                           "offset %lld; rank 0: +%lld, %lld)",
                           i, (long long)r->steps, (long long)r->end_offset, (long long)r0->steps,
                           (long long)r0->end_offset);
    }
    if (rc == 0 && steps > 0 && r0->steps >= steps)
        rc = ct__error(CT_EPROTO, "recovery: the segment's %lld steps were done already",
                       (long long)steps);
    if (rc < 0) {
        CT_LOG(CT_LOG_WARN, "trainer",
               "recovery: the survivors could not go on live (%s): restarting from the last "
               "checkpoint",
               msg[0] ? msg : ct_last_error());
        size_t l = strlen(why);
        snprintf(why + l, cap - l, "; live recovery failed: %s", msg[0] ? msg : ct_last_error());
        goto out;
    }
    /* the failed segment's sums up to its last completed step (the survivors'; the dead
     * replicas' part of them is lost with them) */
    for (int i = 0; i < n; i++) {
        tr_report *r = res[i];
        ct__trainer_metrics_add(&t->acc.m, &r->metrics);
        t->acc.loss += r->loss_sum;
        t->acc.samples += r->samples;
    }
    *done_steps = r0->steps;
    t->local.step += r0->steps;
    t->local.epoch = r0->epoch;
    t->local.batch = 0;
    t->local.offset = r0->end_offset;
    memcpy(t->group, group, sizeof group);
    t->group_fresh = true;
    t->stats.live_recoveries++;
    t->live_fresh = true;
    if (!t->heal_to) {
        t->heal_to = old;
        t->heal_refused = 0;
    }
    t->stats.group_start_step = t->local.step;
    t->stats.group_start_ns = t0;
    CT_LOG(CT_LOG_INFO, "trainer",
           "recovery: %d replicas go on live from step %lld (epoch %lld, after %lld samples of "
           "it), in %.1f ms",
           n, (long long)t->local.step, (long long)t->local.epoch, (long long)t->local.offset,
           (ct__now_ns() - t0) / 1e6);
    if (old - n > 1)
        snprintf(dead + strlen(dead), sizeof dead - strlen(dead), ", and %d more", old - n - 1);
    ct__report_live(&t->report, "%s; %d survivor%s go%s on live from step %lld", dead, n,
                    n == 1 ? "" : "s", n == 1 ? "es" : "", (long long)t->local.step);
    ct__report_send(&t->report, true);
    snprintf(t->shrink_why, sizeof t->shrink_why, "%s", dead);
    t->shrink_live = true;
    ct__driver_note_group_size(t, n);
    /* on_world_size sees the new size; its factor applies to the survivors' current rates, and
     * for a restart from the current checkpoint, to that one's on top of what was asked */
    double keep = t->lr_scale;
    t->lr_scale = 1;
    rc = ct__driver_tell_world_size(t, o, n);
    t->live_lr = t->lr_scale;
    t->lr_scale = keep * t->live_lr;
out:
    for (int i = 0; i < n; i++)
        free(res[i]);
    free(res);
    free(ra);
    return rc;
}
