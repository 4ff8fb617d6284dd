/* trainer/train/fit.c — what fits the cluster: the driver asks the head for its live nodes and
 * counts the replicas of a shape (CPUs, GPUs) that fit in their free resources, and says what is
 * short, or that a request can never be met, naming the missing resource and the nodes there
 * are ("no node has a GPU; nodes: 2 x {CPU: 1}"). The driver (trainer.c) decides what to do. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct/ct.h"
#include "common/common.h"
#include "internal.h"

/* Replicas of (cpus, gpus) that fit in (cpu, gpu) of one node. */
static int fit_in(double cpus, int gpus, double cpu, double gpu)
{
    int n = (int)floor(cpu / cpus + 1e-9);
    if (gpus > 0) {
        int g = (int)floor(gpu / gpus + 1e-9);
        n = g < n ? g : n;
    }
    return n > 0 ? n : 0;
}

/* "{CPU: 8, GPU: 2}" */
static void node_shape(char *buf, size_t cap, double cpu, double gpu)
{
    if (gpu > 0)
        snprintf(buf, cap, "{CPU: %g, GPU: %g}", cpu, gpu);
    else
        snprintf(buf, cap, "{CPU: %g}", cpu);
}

/* Asks the head for its live nodes and counts the replicas that fit (tr_fit). */
int ct__fit_count(const tr_ask *t, tr_fit *f)
{
    ct_node_resources stack[64], *nr = stack;
    int n = 0, rc = ct_cluster_nodes(nr, 64, &n);
    if (rc == 0 && n > 64) { /* a big cluster: once more with room for all */
        if (!(nr = malloc(sizeof *nr * (size_t)n)))
            return ct__error(CT_ENOMEM, "trainer: out of memory");
        int cap = n;
        if ((rc = ct_cluster_nodes(nr, cap, &n)) == 0 && n > cap)
            n = cap;
    }
    memset(f, 0, sizeof *f);
    char shapes[8][48];
    int counts[8] = {0}, nshapes = 0, more = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        const ct_node_resources *x = &nr[i];
        f->nodes++;
        f->now += fit_in(t->cpus, t->gpus, x->cpu_free, x->gpu_free);
        f->now_cpu += fit_in(t->cpus, 0, x->cpu_free, 0);
        f->now_gpu += t->gpus > 0 ? (int)floor(x->gpu_free / t->gpus + 1e-9) : 0;
        f->empty += fit_in(t->cpus, t->gpus, x->cpu_total, x->gpu_total);
        f->cpu_max = x->cpu_total > f->cpu_max ? x->cpu_total : f->cpu_max;
        f->gpu_max = x->gpu_total > f->gpu_max ? x->gpu_total : f->gpu_max;
        f->cpu_free += x->cpu_free;
        f->gpu_free += x->gpu_free;
        char sh[48];
        node_shape(sh, sizeof sh, x->cpu_total, x->gpu_total);
        int k = 0;
        while (k < nshapes && strcmp(shapes[k], sh))
            k++;
        if (k == nshapes && nshapes < 8)
            snprintf(shapes[nshapes++], sizeof shapes[0], "%s", sh);
        if (k < nshapes)
            counts[k]++;
        else
            more++;
    }
    size_t used = 0;
    for (int k = 0; k < nshapes && used < sizeof f->desc; k++)
        used += (size_t)snprintf(f->desc + used, sizeof f->desc - used, "%s%d x %s", k ? ", " : "",
                                 counts[k], shapes[k]);
    if (more && used < sizeof f->desc)
        snprintf(f->desc + used, sizeof f->desc - used, ", %d more", more);
    if (!f->nodes)
        snprintf(f->desc, sizeof f->desc, "none");
    if (nr != stack)
        free(nr);
    return rc;
}

/* What a replica asks for: "1 CPU" or "2 CPUs and 1 GPU". */
void ct__fit_replica_shape(const tr_ask *t, char *buf, size_t cap)
{
    if (t->gpus > 0)
        snprintf(buf, cap, "%g CPU%s and %d GPU%s", t->cpus, t->cpus == 1 ? "" : "s", t->gpus,
                 t->gpus == 1 ? "" : "s");
    else
        snprintf(buf, cap, "%g CPU%s", t->cpus, t->cpus == 1 ? "" : "s");
}

/* What is short while fewer than min_replicas fit now: "free GPUs", "free CPUs", ... */
const char *ct__fit_short(const tr_ask *t, const tr_fit *f)
{
    bool cpu = f->now_cpu<t->min_replicas, gpu = t->gpus> 0 && f->now_gpu < t->min_replicas;
    return cpu && gpu ? "free CPUs and GPUs"
           : gpu      ? "free GPUs"
           : cpu      ? "free CPUs"
                      : "nodes with both CPUs and GPUs free";
}

/* A request no live node could meet even when empty: CT_EINVAL naming the missing resource and
 * the nodes there are, e.g. "no node has a GPU; nodes: 2 x {CPU: 1}". 0 when a node could hold a
 * replica, or when there is no live node to judge by (nodes may be joining). */
int ct__fit_never(const tr_ask *t, const tr_fit *f)
{
    if (f->empty > 0 || f->nodes == 0)
        return 0;
    char need[64], missing[160];
    ct__fit_replica_shape(t, need, sizeof need);
    bool cpu = f->cpu_max + 1e-9 < t->cpus, gpu = t->gpus > 0 && f->gpu_max + 1e-9 < t->gpus;
    if (gpu && f->gpu_max == 0)
        snprintf(missing, sizeof missing, "no node has a GPU");
    else if (gpu)
        snprintf(missing, sizeof missing, "no node has %d GPUs", t->gpus);
    else if (cpu)
        snprintf(missing, sizeof missing, "no node has %g CPUs", t->cpus);
    else
        snprintf(missing, sizeof missing, "no node has %g CPUs and %d GPUs together", t->cpus,
                 t->gpus);
    if (gpu && cpu)
        snprintf(missing + strlen(missing), sizeof missing - strlen(missing),
                 " and none has %g CPUs", t->cpus);
    return ct__error(CT_EINVAL,
                     "trainer: the replicas can never start on this cluster: each needs %s "
                     "(%s) and %s; nodes: %s. %s",
                     need,
                     t->gpus > 0 ? "cpus_per_replica, and gpus_per_replica for device \"cuda\""
                                 : "cpus_per_replica",
                     missing, f->desc,
                     gpu ? "Train on a cluster whose nodes have GPUs, or with device \"cpu\" "
                           "(use_gpu false)"
                         : "Lower cpus_per_replica, or add a node with that many CPUs");
}
