/* head/metrics.c — the HTTP endpoint's pages, rendered on the head's thread from its tables
 * (loop.c calls ct__head_render every PUBLISH_MS when a page was asked for since, else every
 * PUBLISH_IDLE_MS, and hands them to http.c):
 * - /metrics, Prometheus text format 0.0.4, Ray's naming style with ct_ names:
 *   cluster  ct_cluster_nodes{state}, ct_actors{state,class}, ct_jobs{state},
 *            ct_jobs_ended_total, ct_placement_groups{state}, ct_head_restarts_total,
 *            ct_head_uptime_seconds;
 *   per live node {node,host}: ct_node_cpus, ct_node_cpus_free, ct_node_gpus, _gpus_free,
 *            ct_node_resource{resource}, _resource_free{resource} (every resource, "memory"
 *            when registered; the totals not named _total, which Prometheus keeps for counters),
 *            ct_node_object_store_capacity_bytes, _used_bytes, _objects,
 *            ct_node_heartbeat_age_seconds (silence counted by the failure detector),
 *            ct_node_draining, ct_node_actors; what the node measured (Heartbeat.stats, once
 *            a second, absent before): ct_node_cpu_utilization, ct_node_memory_total_bytes,
 *            _available_bytes, _used_bytes, ct_node_object_store_arena_used_bytes,
 *            _spilled_bytes, _spilled_objects, and where NVML is there, by {gpu} index,
 *            ct_node_gpu_memory_used_bytes, _total_bytes, ct_node_gpu_utilization_percent;
 *   per training job {ct_job} (train.c; not "job", which Prometheus gives the scrape job and
 *            renames a target's to "exported_job"): ct_train_step, ct_train_epoch,
 *            ct_train_loss, ct_train_samples_per_second, ct_train_mfu_percent (when known),
 *            ct_train_retries_total{reason}, ct_train_replicas_alive, ct_train_done,
 *            ct_train_val_loss, ct_train_checkpoints_total,
 *            ct_train_drains_total{reason} (mid_epoch, segment_end),
 *            ct_train_last_checkpoint_step, ct_train_live_recoveries_total,
 *            ct_train_heals_total;
 *            histograms ct_train_step_seconds, ct_train_allreduce_seconds,
 *            ct_train_data_wait_seconds, ct_train_checkpoint_seconds (_bucket{le}, _sum,
 *            _count; the names the reports bring).
 * - /api/nodes, /api/actors, /api/jobs: the same tables as JSON arrays (a training job with its
 *   loss curve and newest checkpoints); /api/events: the recent events' ring (events.c).
 * Never shown: tokens (nodes' and jobs'), tickets, KV values. Jobs are named by their driver's
 * name. Not here: serving (http.c), the reports' table (train.c). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "head/head_internal.h"
#include "head/http.h"

#define MAX_ACTOR_SERIES 1000 /* (state, class) pairs; more classes are summed as "(other)" */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...)
{
    for (int tries = 0; !b->oom && tries < 2; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 16384;
        while (cap <= b->len + (size_t)n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* n bytes of s as they are. */
static void put_n(sbuf *b, const char *s, size_t n)
{
    if (b->oom || !n)
        return;
    if (b->len + n >= b->cap) {
        size_t cap = b->cap ? b->cap : 16384;
        while (cap <= b->len + n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

/* The buffer as a page (NULL when out of memory). */
static char *done(sbuf *b)
{
    if (b->oom || !b->p) {
        free(b->p);
        return NULL;
    }
    return b->p;
}

/* The length of the valid UTF-8 sequence at s (1 to 4 bytes), 0 when none starts there
 * (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut short). */
static int utf8_len(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    int n = s[0] >= 0xc2 && s[0] <= 0xdf   ? 2
            : s[0] >= 0xe0 && s[0] <= 0xef ? 3
            : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
                                           : 0;
    /* the second byte's range narrows for these leads */
    unsigned char lo = s[0] == 0xe0 ? 0xa0 : s[0] == 0xf0 ? 0x90 : 0x80;
    unsigned char hi = s[0] == 0xed ? 0x9f : s[0] == 0xf4 ? 0x8f : 0xbf;
    if (n && !(s[1] >= lo && s[1] <= hi))
        return 0;
    for (int i = 2; i < n; i++)
        if (!(s[i] >= 0x80 && s[i] <= 0xbf))
            return 0;
    return n;
}

/* A Prometheus label value: backslash, quote and newline escaped, and a byte that starts no
 * valid UTF-8 sequence written '?' (peer strings are not checked for UTF-8, and Prometheus
 * refuses a page with one such label whole); the runs between them copied whole: labels are
 * most of a page's bytes. */
static void put_label(sbuf *b, const char *s)
{
    while (*s) {
        size_t run = 0;
        while (s[run] && (unsigned char)s[run] < 0x80 && s[run] != '\\' && s[run] != '"' &&
               s[run] != '\n')
            run++;
        put_n(b, s, run);
        s += run;
        if (!*s)
            break;
        int n = utf8_len((const unsigned char *)s);
        if (*s == '\\' || *s == '"' || *s == '\n')
            put_n(b, *s == '\n' ? "\\n" : *s == '"' ? "\\\"" : "\\\\", 2);
        else if (n)
            put_n(b, s, (size_t)n);
        else
            put_n(b, "?", 1);
        s += n > 1 ? n : 1;
    }
}

/* A JSON string: quotes, backslashes and control bytes escaped, bytes past ASCII as '?' (peer
 * strings are not checked for UTF-8). */
static void put_json(sbuf *b, const char *s)
{
    put_n(b, "\"", 1);
    while (s && *s) {
        size_t run = 0; /* printable ASCII but quote and backslash: copied whole */
        while (s[run] >= 0x20 && s[run] < 0x7f && s[run] != '"' && s[run] != '\\')
            run++;
        put_n(b, s, run);
        s += run;
        if (!*s)
            break;
        unsigned char c = (unsigned char)*s++;
        if (c == '"' || c == '\\')
            put(b, "\\%c", c);
        else if (c < 0x20)
            put(b, "\\u%04x", c);
        else
            put_n(b, "?", 1);
    }
    put_n(b, "\"", 1);
}

/* A sample value: Prometheus spells the non-finite ones NaN, +Inf, -Inf. */
static void put_value(sbuf *b, double v)
{
    if (isnan(v))
        put(b, " NaN\n");
    else if (isinf(v))
        put(b, v > 0 ? " +Inf\n" : " -Inf\n");
    else
        put(b, " %.17g\n", v);
}

/* JSON has no NaN: null. */
static void put_jnum(sbuf *b, const char *key, double v)
{
    if (isfinite(v))
        put(b, ",\"%s\":%.17g", key, v);
    else
        put(b, ",\"%s\":null", key);
}

static void family(sbuf *b, const char *name, const char *type, const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static const char *actor_state[] = {"PENDING", "STARTING", "ALIVE", "DEAD"};
static const char *pg_state[] = {"PENDING", "READY", "REMOVED"};

/* name{k0="v0",k1="v1",..} value: the sample of n labels, kv their keys and values in turn
 * (the values escaped); every labelled sample of the page is written here. */
static void sample(sbuf *b, const char *name, const char *const *kv, int n, double v)
{
    put_n(b, name, strlen(name));
    for (int i = 0; i < n; i++) {
        put_n(b, i ? "," : "{", 1);
        put_n(b, kv[2 * i], strlen(kv[2 * i]));
        put_n(b, "=\"", 2);
        put_label(b, kv[2 * i + 1]);
        put_n(b, "\"", 1);
    }
    put_n(b, "}", n > 0);
    put_value(b, v);
}

/* name{node="..",host=".."} value, for a live node */
static void node_sample(sbuf *b, const char *name, const node *n, double v)
{
    sample(b, name, (const char *[]){"node", n->id, "host", n->host}, 2, v);
}

static void render_cluster(head *h, sbuf *b)
{
    int alive = 0, draining = 0, dead = 0;
    for (int i = 0; i < h->nnodes; i++) {
        const node *n = &h->nodes[i];
        if (!n->used)
            continue;
        if (!n->alive)
            dead++;
        else if (n->draining)
            draining++;
        else
            alive++;
    }
    family(b, "ct_cluster_nodes", "gauge",
           "Nodes by state: alive, draining (told to stop), dead (listed 60 s after).");
    put(b,
        "ct_cluster_nodes{state=\"alive\"} %d\nct_cluster_nodes{state=\"draining\"} %d\n"
        "ct_cluster_nodes{state=\"dead\"} %d\n",
        alive, draining, dead);

    /* actors by (state, class) */
    struct {
        int state;
        const char *cls;
        int n;
    } *ser = calloc(MAX_ACTOR_SERIES + 4, sizeof *ser);
    int nser = 0;
    for (int i = 0; ser && i < h->nactors; i++) {
        const actor *a = &h->actors[i];
        const char *cls = a->cls;
        int k = 0;
        while (k < nser && !(ser[k].state == a->state && !strcmp(ser[k].cls, cls)))
            k++;
        if (k == nser && nser >= MAX_ACTOR_SERIES) {
            cls = "(other)";
            k = 0;
            while (k < nser && !(ser[k].state == a->state && !strcmp(ser[k].cls, cls)))
                k++;
        }
        if (k == nser) {
            ser[nser].state = a->state;
            ser[nser].cls = cls;
            ser[nser++].n = 0;
        }
        ser[k].n++;
    }
    family(b, "ct_actors", "gauge", "Actors by state and class (dead ones listed 60 s after).");
    for (int k = 0; k < nser; k++) {
        put(b, "ct_actors{state=\"%s\",class=\"", actor_state[ser[k].state]);
        put_label(b, ser[k].cls);
        put(b, "\"} %d\n", ser[k].n);
    }
    free(ser);

    int running = 0, unattached = 0;
    for (int i = 0; i < h->ndrivers; i++) {
        if (h->drivers[i].name[0])
            running++;
        else
            unattached++;
    }
    family(b, "ct_jobs", "gauge",
           "Jobs by state: running (its driver heartbeats), unattached (its actors outlived a "
           "head restart; waiting for its driver).");
    put(b, "ct_jobs{state=\"running\"} %d\nct_jobs{state=\"unattached\"} %d\n", running,
        unattached);
    family(b, "ct_jobs_ended_total", "counter", "Jobs whose driver left or died, since start.");
    put(b, "ct_jobs_ended_total %llu\n", (unsigned long long)h->jobs_ended);

    int pgs[3] = {0};
    for (int i = 0; i < h->npgs; i++)
        if (h->pgs[i].state >= PG_PENDING && h->pgs[i].state <= PG_REMOVED)
            pgs[h->pgs[i].state]++;
    family(b, "ct_placement_groups", "gauge", "Placement groups by state.");
    for (int s = 0; s < 3; s++)
        put(b, "ct_placement_groups{state=\"%s\"} %d\n", pg_state[s], pgs[s]);
    family(b, "ct_head_restarts_total", "counter",
           "Times the head's supervisor (ct-head --supervise) started it again.");
    put(b, "ct_head_restarts_total %d\n", h->restarts);
    family(b, "ct_head_uptime_seconds", "gauge", "Seconds since this head process served.");
    put(b, "ct_head_uptime_seconds %.3f\n", (ct__now_ms() - h->started_ms) / 1000.0);
}

static void render_nodes(head *h, sbuf *b)
{
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"ct_node_cpus", "CPUs the node registered."},
        {"ct_node_cpus_free", "CPUs not held by actors or bundles."},
        {"ct_node_gpus", "GPUs the node registered."},
        {"ct_node_gpus_free", "GPUs not held by actors or bundles."},
        {"ct_node_object_store_capacity_bytes", "Memory of the node's object-store shard."},
        {"ct_node_object_store_used_bytes", "Bytes of the objects the directory lists on it."},
        {"ct_node_object_store_objects", "Objects the directory lists on it."},
        {"ct_node_heartbeat_age_seconds",
         "Silence counted against the node by the failure detector (0 just after a heartbeat)."},
        {"ct_node_draining", "1 when the node was told to stop and drains."},
        {"ct_node_actors", "Actors placed on the node."},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        family(b, fam[f].name, "gauge", fam[f].help);
        for (int i = 0; i < h->nnodes; i++) {
            const node *n = &h->nodes[i];
            if (!n->used || !n->alive)
                continue;
            const char *xa = "";
            uint64_t cap = 0, objs = 0, bytes = 0;
            if (f >= 4 && f <= 6)
                ct__objdir_node_usage(h, n->id, &xa, &cap, &objs, &bytes);
            double v = f == 0   ? ct__rv_get(&n->total, "CPU")
                       : f == 1 ? ct__rv_get(&n->free, "CPU")
                       : f == 2 ? ct__rv_get(&n->total, "GPU")
                       : f == 3 ? ct__rv_get(&n->free, "GPU")
                       : f == 4 ? (double)cap
                       : f == 5 ? (double)bytes
                       : f == 6 ? (double)objs
                       : f == 7 ? n->silent / 1000.0
                       : f == 8 ? (double)n->draining
                                : (double)n->nactors;
            node_sample(b, fam[f].name, n, v);
        }
    }
    for (int free_ = 0; free_ < 2; free_++) {
        const char *name = free_ ? "ct_node_resource_free" : "ct_node_resource";
        family(b, name, "gauge",
               free_ ? "Each resource's amount not held, by resource."
                     : "Each resource the node registered (CPU, GPU, memory, custom).");
        for (int i = 0; i < h->nnodes; i++) {
            const node *n = &h->nodes[i];
            const res *r = free_ ? &n->free : &n->total;
            for (int k = 0; n->used && n->alive && k < r->n; k++)
                sample(b, name,
                       (const char *[]){"node", n->id, "host", n->host, "resource", r->name[k]}, 3,
                       r->amt[k]);
        }
    }
}

/* What live nodes measured of their hosts and shards (Heartbeat.stats, once a second): absent
 * for a node until it reported, the CPU fraction until it had two samples, the GPUs without
 * NVML. */
static void render_node_stats(head *h, sbuf *b)
{
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"ct_node_cpu_utilization", "The node's host: busy fraction of all its CPUs, 0..1."},
        {"ct_node_memory_total_bytes", "The node's host: memory (MemTotal)."},
        {"ct_node_memory_available_bytes", "The node's host: memory available (MemAvailable)."},
        {"ct_node_memory_used_bytes", "The node's host: memory total less available."},
        {"ct_node_object_store_arena_used_bytes",
         "Bytes of the shard's shared-memory arena in use, as the node measured it."},
        {"ct_node_object_store_spilled_bytes", "Bytes of objects spilled to the node's disk."},
        {"ct_node_object_store_spilled_objects", "Objects spilled to the node's disk."},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        family(b, fam[f].name, "gauge", fam[f].help);
        for (int i = 0; i < h->nnodes; i++) {
            const node *n = &h->nodes[i];
            const node_stats *s = &n->stats;
            if (!n->used || !n->alive || !s->known || (f == 0 && isnan(s->cpu)) ||
                (f >= 1 && f <= 3 && !s->mem_total))
                continue;
            double v = f == 0   ? s->cpu
                       : f == 1 ? (double)s->mem_total
                       : f == 2 ? (double)s->mem_avail
                       : f == 3 ? (double)(s->mem_total - s->mem_avail)
                       : f == 4 ? (double)s->store_used
                       : f == 5 ? (double)s->spilled_bytes
                                : (double)s->spilled_objects;
            node_sample(b, fam[f].name, n, v);
        }
    }
    static const struct {
        const char *name, *help;
    } gfam[] = {
        {"ct_node_gpu_memory_used_bytes", "GPU memory in use (NVML), by GPU index."},
        {"ct_node_gpu_memory_total_bytes", "GPU memory (NVML), by GPU index."},
        {"ct_node_gpu_utilization_percent",
         "GPU busy percent of NVML's last sample period, by GPU index."},
    };
    for (size_t f = 0; f < sizeof gfam / sizeof gfam[0]; f++) {
        family(b, gfam[f].name, "gauge", gfam[f].help);
        for (int i = 0; i < h->nnodes; i++) {
            const node *n = &h->nodes[i];
            for (int g = 0; n->used && n->alive && g < n->stats.ngpu; g++) {
                const struct node_gpu *x = &n->stats.gpu[g];
                if (f == 2 && isnan(x->util))
                    continue;
                char gpu[16];
                snprintf(gpu, sizeof gpu, "%u", x->index);
                sample(b, gfam[f].name,
                       (const char *[]){"node", n->id, "host", n->host, "gpu", gpu}, 3,
                       f == 0   ? (double)x->used
                       : f == 1 ? (double)x->total
                                : x->util);
            }
        }
    }
}

static void train_sample(sbuf *b, const char *name, const train_job *t, double v)
{
    sample(b, name, (const char *[]){"ct_job", t->label}, 1, v);
}

/* A counter family by {ct_job, reason}: each job's retries, or its drains. */
static void render_reasons(head *h, sbuf *b, const char *name, const char *help, bool drains)
{
    family(b, name, "counter", help);
    for (int i = 0; i < h->ntrain; i++) {
        const train_job *t = &h->train[i];
        const train_reasons *rs = drains ? &t->drains_by : &t->retries;
        for (int k = 0; k < rs->n; k++)
            sample(b, name, (const char *[]){"ct_job", t->label, "reason", rs->reason[k]}, 2,
                   (double)rs->count[k]);
    }
}

static void render_train(head *h, sbuf *b)
{
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"ct_train_step", "gauge", "Optimizer steps done."},
        {"ct_train_epoch", "gauge", "The epoch being trained (0-based)."},
        {"ct_train_loss", "gauge", "The last reported training loss."},
        {"ct_train_samples_per_second", "gauge", "Training throughput of the group."},
        {"ct_train_mfu_percent", "gauge", "Model FLOPs utilization, when the trainer knows it."},
        {"ct_train_replicas_alive", "gauge", "Replicas of the running group (0 between groups)."},
        {"ct_train_done", "gauge", "1 once trainer_train returned."},
        {"ct_train_val_loss", "gauge", "The last validation's loss (absent before one)."},
        {"ct_train_checkpoints_total", "counter", "Checkpoints the job took."},
        {"ct_train_last_checkpoint_step", "gauge",
         "Optimizer steps of the job's newest checkpoint (absent before one)."},
        {"ct_train_live_recoveries_total", "counter",
         "Replicas lost that the survivors went on without, live (no retry, no step lost)."},
        {"ct_train_heals_total", "counter",
         "Replacements that healed from a live peer and joined the group."},
    };
    for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
        family(b, fam[f].name, fam[f].type, fam[f].help);
        for (int i = 0; i < h->ntrain; i++) {
            const train_job *t = &h->train[i];
            if ((f == 4 && !(t->mfu >= 0)) || (f == 7 && isnan(t->val_loss)) || (f == 9 && !t->nck))
                continue;
            double v = f == 0    ? (double)t->step
                       : f == 1  ? (double)t->epoch
                       : f == 2  ? t->loss
                       : f == 3  ? t->sps
                       : f == 4  ? t->mfu
                       : f == 5  ? (double)t->replicas
                       : f == 6  ? (double)t->done
                       : f == 7  ? t->val_loss
                       : f == 8  ? (double)t->ckpts
                       : f == 9  ? (double)t->ck_step[t->nck - 1]
                       : f == 10 ? (double)t->live
                                 : (double)t->heals;
            train_sample(b, fam[f].name, t, v);
        }
    }
    render_reasons(h, b, "ct_train_retries_total",
                   "Retries the trainer spent, by reason (node_lost, replica_killed, "
                   "replica_exited, replica_error, start_failed, other).",
                   false);
    render_reasons(h, b, "ct_train_drains_total",
                   "Groups that ended at a checkpoint because a node drained (its ct-node was "
                   "told to stop; no retry), by where the drain caught the group: mid_epoch (the "
                   "replica there checkpointed at its next step and left), segment_end (heard as "
                   "the segment ended).",
                   true);
}

/* ct_train_<name>_seconds_bucket{ct_job,le}, _sum, _count: Prometheus histograms, one family per
 * name, the jobs that reported it. */
static void render_train_hists(head *h, sbuf *b)
{
    const char *seen[TRAIN_HISTS * 4];
    int nseen = 0;
    for (int i = 0; i < h->ntrain; i++)
        for (int k = 0; k < h->train[i].nh; k++) {
            const char *name = h->train[i].hist[k].name;
            bool dup = false;
            for (int s = 0; s < nseen && !dup; s++)
                dup = !strcmp(seen[s], name);
            if (dup || nseen == (int)(sizeof seen / sizeof seen[0]))
                continue;
            seen[nseen++] = name;
            char fam[80], bucket[96], sum[96], count[96];
            snprintf(fam, sizeof fam, "ct_train_%s_seconds", name);
            snprintf(bucket, sizeof bucket, "%s_bucket", fam);
            snprintf(sum, sizeof sum, "%s_sum", fam);
            snprintf(count, sizeof count, "%s_count", fam);
            put(b, "# HELP %s Seconds per %s, as the trainer's driver measured them.\n", fam,
                !strcmp(name, "step")         ? "optimizer step (the slowest rank's)"
                : !strcmp(name, "allreduce")  ? "step waiting for averaged gradients"
                : !strcmp(name, "data_wait")  ? "step waiting for its batches"
                : !strcmp(name, "checkpoint") ? "checkpoint written"
                                              : name);
            put(b, "# TYPE %s histogram\n", fam);
            for (int j = 0; j < h->ntrain; j++)
                for (int q = 0; q < h->train[j].nh; q++) {
                    const struct train_hist *g = &h->train[j].hist[q];
                    if (strcmp(g->name, name))
                        continue;
                    const char *job = h->train[j].label;
                    uint64_t cum = 0;
                    char le[32];
                    for (int e = 0; e <= g->nb; e++) {
                        cum += e < g->nb ? g->counts[e] : 0;
                        snprintf(le, sizeof le, "%.6g", g->bound[e < g->nb ? e : 0]);
                        sample(b, bucket,
                               (const char *[]){"ct_job", job, "le", e < g->nb ? le : "+Inf"}, 2,
                               (double)(e < g->nb ? cum : g->count));
                    }
                    sample(b, sum, (const char *[]){"ct_job", job}, 1, g->sum);
                    sample(b, count, (const char *[]){"ct_job", job}, 1, (double)g->count);
                }
        }
}

static void json_res(sbuf *b, const char *key, const res *r)
{
    put(b, ",\"%s\":{", key);
    for (int k = 0; k < r->n; k++) {
        put(b, "%s", k ? "," : "");
        put_json(b, r->name[k]);
        put(b, ":%.17g", isfinite(r->amt[k]) ? r->amt[k] : 0);
    }
    put(b, "}");
}

/* ,"stats":{...} of a node that reported them: cpu_utilization (null before 2 samples), memory,
 * the shard's arena and spill, gpus [{index, memory_used_bytes, memory_total_bytes,
 * utilization_percent}] */
static void json_node_stats(sbuf *b, const node_stats *s)
{
    if (!s->known)
        return;
    put(b, ",\"stats\":{\"cpu_utilization\":");
    if (isfinite(s->cpu))
        put(b, "%.4f", s->cpu);
    else
        put(b, "null");
    put(b,
        ",\"memory_total_bytes\":%llu,\"memory_available_bytes\":%llu,"
        "\"object_store_arena_used_bytes\":%llu,\"object_store_spilled_bytes\":%llu,"
        "\"object_store_spilled_objects\":%llu,\"gpus\":[",
        (unsigned long long)s->mem_total, (unsigned long long)s->mem_avail,
        (unsigned long long)s->store_used, (unsigned long long)s->spilled_bytes,
        (unsigned long long)s->spilled_objects);
    for (int g = 0; g < s->ngpu; g++) {
        put(b, "%s{\"index\":%u,\"memory_used_bytes\":%llu,\"memory_total_bytes\":%llu",
            g ? "," : "", s->gpu[g].index, (unsigned long long)s->gpu[g].used,
            (unsigned long long)s->gpu[g].total);
        put_jnum(b, "utilization_percent", s->gpu[g].util);
        put(b, "}");
    }
    put(b, "]}");
}

static char *json_nodes(head *h)
{
    sbuf b = {0};
    put(&b, "[");
    int k = 0;
    for (int i = 0; i < h->nnodes; i++) {
        const node *n = &h->nodes[i];
        if (!n->used)
            continue;
        const char *xa = "";
        uint64_t cap = 0, objs = 0, bytes = 0;
        ct__objdir_node_usage(h, n->id, &xa, &cap, &objs, &bytes);
        put(&b, "%s{\"node_id\":", k++ ? "," : "");
        put_json(&b, n->id);
        put(&b, ",\"host\":");
        put_json(&b, n->host);
        put(&b, ",\"state\":\"%s\",\"pid\":%d,\"actors\":%d",
            !n->alive     ? "DEAD"
            : n->draining ? "DRAINING"
                          : "ALIVE",
            n->pid, n->nactors);
        json_res(&b, "resources_total", &n->total);
        json_res(&b, "resources_free", &n->free);
        put(&b,
            ",\"object_store_capacity_bytes\":%llu,\"object_store_used_bytes\":%llu,"
            "\"object_store_objects\":%llu,\"heartbeat_age_seconds\":%.3f",
            (unsigned long long)cap, (unsigned long long)bytes, (unsigned long long)objs,
            n->alive ? n->silent / 1000.0 : 0.0);
        json_node_stats(&b, &n->stats);
        put(&b, "}");
    }
    put(&b, "]\n");
    return done(&b);
}

static char *json_actors(head *h)
{
    sbuf b = {0};
    put(&b, "[");
    for (int i = 0; i < h->nactors; i++) {
        const actor *a = &h->actors[i];
        put(&b, "%s{\"actor_id\":", i ? "," : "");
        put_json(&b, a->id);
        put(&b, ",\"class\":");
        put_json(&b, a->cls);
        put(&b, ",\"state\":\"%s\",\"node_id\":", actor_state[a->state]);
        put_json(&b, a->node >= 0 ? h->nodes[a->node].id : "");
        put(&b, ",\"pid\":%d,\"owner\":", a->pid);
        put_json(&b, a->owner_name);
        put(&b, "}");
    }
    put(&b, "]\n");
    return done(&b);
}

/* ,"key":{"reason":count,...} */
static void json_reasons(sbuf *b, const char *key, const train_reasons *rs)
{
    put(b, ",\"%s\":{", key);
    for (int r = 0; r < rs->n; r++) {
        put(b, "%s", r ? "," : "");
        put_json(b, rs->reason[r]);
        put(b, ":%llu", (unsigned long long)rs->count[r]);
    }
    put(b, "}");
}

/* ,"val_loss":..,"checkpoints":[{"step":..,"time_ms":..}],"points":[[step,loss,sps],...]
 * (the loss curve, oldest first; a loss unknown is null) */
static void json_train_history(sbuf *b, const train_job *t)
{
    put_jnum(b, "val_loss", t->val_loss);
    put_jnum(b, "eta_seconds", t->eta);
    put(b, ",\"epochs\":%lld,\"drains\":%llu", (long long)t->epochs, (unsigned long long)t->drains);
    json_reasons(b, "drains_by_reason", &t->drains_by);
    put(b, ",\"live_recoveries\":%llu,\"heals\":%llu", (unsigned long long)t->live,
        (unsigned long long)t->heals);
    put(b, ",\"checkpoints_total\":%lld,\"checkpoints\":[", (long long)t->ckpts);
    for (int i = 0; i < t->nck; i++)
        put(b, "%s{\"step\":%lld,\"time_ms\":%lld}", i ? "," : "", (long long)t->ck_step[i],
            (long long)t->ck_ms[i]);
    put(b, "],\"points\":[");
    for (int i = 0; i < t->npts; i++) {
        const train_point *p = &t->pts[(t->pts_next - t->npts + i + TRAIN_POINTS) % TRAIN_POINTS];
        put(b, "%s[%lld,", i ? "," : "", (long long)p->step);
        if (isfinite(p->loss))
            put(b, "%.9g", p->loss);
        else
            put(b, "null");
        put(b, ",%.6g]", p->sps);
    }
    put(b, "]");
}

/* The recent events, oldest first: {"seq","time_ms","kind","subject","reason"}. */
static char *json_events(head *h)
{
    sbuf b = {0};
    put(&b, "[");
    uint64_t n = h->evseq < HEAD_EVENTS ? h->evseq : HEAD_EVENTS;
    for (uint64_t i = 0; h->evlog && i < n; i++) {
        const head_event *e = &h->evlog[(h->evseq - n + i) % HEAD_EVENTS];
        put(&b, "%s{\"seq\":%llu,\"time_ms\":%lld,\"kind\":", i ? "," : "",
            (unsigned long long)e->seq, (long long)e->wall_ms);
        put_json(&b, e->kind);
        put(&b, ",\"subject\":");
        put_json(&b, e->subject);
        put(&b, ",\"reason\":");
        put_json(&b, e->reason);
        put(&b, "}");
    }
    put(&b, "]\n");
    return done(&b);
}

static char *json_jobs(head *h)
{
    sbuf b = {0};
    put(&b, "[");
    int k = 0;
    for (int i = 0; i < h->ndrivers; i++) {
        const driver *d = &h->drivers[i];
        int na = 0;
        for (int j = 0; j < h->nactors; j++)
            na += h->actors[j].state != A_DEAD && ct__token_eq(h->actors[j].job, d->job);
        put(&b, "%s{\"driver\":", k++ ? "," : "");
        put_json(&b, d->name);
        put(&b, ",\"state\":\"%s\",\"actors_alive\":%d,\"train\":[",
            d->name[0] ? "RUNNING" : "UNATTACHED", na);
        int kt = 0;
        for (int j = 0; j < h->ntrain; j++) {
            const train_job *t = &h->train[j];
            if (t->ended_at || !ct__token_eq(t->job, d->job))
                continue;
            put(&b, "%s{\"job\":", kt++ ? "," : "");
            put_json(&b, t->label);
            put(&b, ",\"step\":%lld,\"epoch\":%lld", (long long)t->step, (long long)t->epoch);
            put_jnum(&b, "loss", t->loss);
            put_jnum(&b, "samples_per_second", t->sps);
            put_jnum(&b, "mfu_percent", t->mfu >= 0 ? t->mfu : NAN);
            put(&b, ",\"replicas_alive\":%d,\"done\":%s", t->replicas, t->done ? "true" : "false");
            json_reasons(&b, "retries", &t->retries);
            json_train_history(&b, t);
            put(&b, "}");
        }
        put(&b, "]}");
    }
    /* training jobs whose driver is gone, until forgotten */
    for (int j = 0; j < h->ntrain; j++) {
        const train_job *t = &h->train[j];
        if (!t->ended_at)
            continue;
        put(&b, "%s{\"driver\":null,\"state\":\"ENDED\",\"actors_alive\":0,\"train\":[{\"job\":",
            k++ ? "," : "");
        put_json(&b, t->label);
        put(&b, ",\"step\":%lld,\"epoch\":%lld", (long long)t->step, (long long)t->epoch);
        put_jnum(&b, "loss", t->loss);
        put(&b, ",\"done\":%s", t->done ? "true" : "false");
        json_train_history(&b, t);
        put(&b, "}]}");
    }
    put(&b, "]\n");
    return done(&b);
}

void ct__head_render(head *h, char **pages)
{
    sbuf b = {0};
    render_cluster(h, &b);
    render_nodes(h, &b);
    render_node_stats(h, &b);
    render_train(h, &b);
    render_train_hists(h, &b);
    pages[CT_PAGE_METRICS] = done(&b);
    pages[CT_PAGE_NODES] = json_nodes(h);
    pages[CT_PAGE_ACTORS] = json_actors(h);
    pages[CT_PAGE_JOBS] = json_jobs(h);
    pages[CT_PAGE_EVENTS] = json_events(h);
}
