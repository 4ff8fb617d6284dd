/* actor/node_stats.c — what a node measures of its host and its shard for the head's metrics
 * (NodeStats, with a heartbeat at most once a second; head/metrics.c shows them as ct_node_*):
 * the host's CPU busy fraction since the previous sample (/proc/stat: all CPUs, busy = not idle
 * nor iowait), its memory (/proc/meminfo: MemTotal, MemAvailable), the shard's arena bytes in
 * use and what is spilled to disk, and each GPU's memory and utilisation where NVML is there
 * and counted the node's GPUs (gpu_detect.c; none otherwise, nor with --gpus, which keeps a
 * node from asking NVML anything). Several nodes on one host report the same host.
 * Not here: sending (node_head.c), rendering (head/metrics.c). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "actor/node_shared.h"
#include "objectstore/store.h"

#define SAMPLE_MS 1000

/* The host's busy and total CPU ticks since boot (/proc/stat's first line); false if unread. */
static bool cpu_ticks(uint64_t *busy, uint64_t *total)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return false;
    unsigned long long v[8] = {0};
    int k = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (k < 4)
        return false;
    *total = 0;
    for (int i = 0; i < 8; i++) /* user nice system idle iowait irq softirq steal */
        *total += v[i];
    *busy = *total - v[3] - v[4];
    return true;
}

/* MemTotal and MemAvailable in bytes (/proc/meminfo); 0 for what is not there. */
static void memory(uint64_t *total, uint64_t *avail)
{
    *total = *avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return;
    char line[128];
    unsigned long long kb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1)
            *total = kb * 1024;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            *avail = kb * 1024;
    }
    fclose(f);
}

bool ct__node_stats_sample(nodest *n, node_stats_msg *m)
{
    node_sampler *s = &n->sampler;
    int64_t now = ct__now_ms();
    if (s->at && now - s->at < SAMPLE_MS)
        return false;
    s->at = now;
    Ct__NodeStats init = CT__NODE_STATS__INIT;
    m->stats = init;
    uint64_t busy = 0, total = 0;
    m->stats.cpu_utilization = NAN;
    if (cpu_ticks(&busy, &total)) {
        if (s->cpu_total && total > s->cpu_total && busy >= s->cpu_busy)
            m->stats.cpu_utilization =
                (double)(busy - s->cpu_busy) / (double)(total - s->cpu_total);
        s->cpu_busy = busy;
        s->cpu_total = total;
    }
    memory(&m->stats.memory_total_bytes, &m->stats.memory_available_bytes);
    ct_store_stats st;
    if (ct__objnode_stats(&st)) {
        m->stats.store_used_bytes = st.memory_used;
        m->stats.store_spilled_bytes = st.spilled_bytes;
        m->stats.store_spilled_objects = st.spilled;
    }
    if (!s->nvml_tried) { /* once: a host without the driver does not look again */
        s->nvml_tried = true;
        /* only where NVML counted the node's GPUs: a node given --gpus never asks NVML */
        if (n->o && n->o->gpus < 0 && n->ngpu > 0)
            s->nvml = ct__nvml_open();
    }
    ct__gpu_sample g[NODE_STATS_GPUS];
    int ng = ct__nvml_sample(s->nvml, g, NODE_STATS_GPUS);
    for (int i = 0; i < ng; i++) {
        Ct__GpuStats gi = CT__GPU_STATS__INIT;
        gi.index = g[i].index;
        gi.memory_used_bytes = g[i].memory_used;
        gi.memory_total_bytes = g[i].memory_total;
        gi.utilization_percent = g[i].utilization;
        m->gpu[i] = gi;
        m->gpus[i] = &m->gpu[i];
    }
    m->stats.n_gpus = (size_t)ng;
    m->stats.gpus = ng ? m->gpus : NULL;
    return true;
}

void ct__node_stats_close(nodest *n)
{
    ct__nvml_close(&n->sampler.nvml);
    n->sampler.nvml_tried = false;
}
