/* actor/node_gpus.c — which GPUs each actor of the node sees: the indices the node hands out, the
 * share of each that actors hold, and an actor's CUDA_VISIBLE_DEVICES (StartActor.gpus: ceil of
 * its demand, lowest free indices first; set by the zygote's child right after the fork).
 *
 * The head counts GPUs as one amount per node, so it places two 0.5-GPU actors on a 1-GPU node:
 * a demand under 1 therefore shares an index with other such demands (up to a sum of 1), and a
 * demand d >= 1 takes ceil(d) indices of its own, the lowest with room. When no index has room
 * (the head's sum fits but the shares do not pack, e.g. three 0.6 on 2 GPUs), the least used
 * one is shared rather than the start failed.
 *
 * Not in here: counting the machine's GPUs (gpu_detect.c), placing by GPU amount (the head). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "actor/node_shared.h"
#include "common/env.h"

/* With the node's own CUDA_VISIBLE_DEVICES, index i is its i-th entry (an actor sees the device
 * the node was given) and there are no more indices than entries; NVML counts every GPU of the
 * machine, so a detected count is cut to the entries too. */
double ct__node_gpu_setup(nodest *n, double gpus, bool detected)
{
    const char *vis = ct__env(CT__ENV_CUDA_VISIBLE_DEVICES);
    int listed = 0;
    char *copy = vis ? strdup(vis) : NULL, *save = NULL;
    for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t && listed < MAX_GPUS;
         t = strtok_r(NULL, ",", &save))
        snprintf(n->gpu_dev[listed++], sizeof n->gpu_dev[0], "%s", t);
    free(copy);
    if (vis && detected && gpus > listed)
        gpus = listed;
    n->ngpu = gpus < MAX_GPUS ? (int)gpus : MAX_GPUS;
    if (vis && n->ngpu > listed) {
        CT_LOG(CT_LOG_WARN, "node", "%g GPUs offered, CUDA_VISIBLE_DEVICES lists %d: actors get %d",
               gpus, listed, listed);
        n->ngpu = listed;
    }
    for (int i = 0; !vis && i < n->ngpu; i++)
        snprintf(n->gpu_dev[i], sizeof n->gpu_dev[0], "%d", i);
    return gpus;
}

void ct__node_gpu_take(nodest *n, nactor *a, double d, char *out, size_t cap)
{
    out[0] = 0;
    if (!(d > 0) || !n->ngpu) /* also NaN */
        return;
    int k = d < 1 ? 1 : d >= n->ngpu ? n->ngpu : (int)d + (d > (int)d);
    a->gpu_share = d < 1 ? d : 1;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n->ngpu && best < 0; i++)
            if (!(a->gpus >> i & 1) && n->gpu_used[i] + a->gpu_share <= 1 + 1e-9)
                best = i;
        if (best < 0) {
            for (int i = 0; i < n->ngpu; i++)
                if (!(a->gpus >> i & 1) && (best < 0 || n->gpu_used[i] < n->gpu_used[best]))
                    best = i;
            CT_LOG(CT_LOG_WARN, "node", "actor %s shares GPU index %d beyond its capacity", a->id,
                   best);
        }
        a->gpus |= 1ull << best;
        n->gpu_used[best] += a->gpu_share;
    }
    size_t off = 0;
    for (int i = 0; i < n->ngpu; i++) {
        if (!(a->gpus >> i & 1))
            continue;
        int w = snprintf(out + off, cap - off, "%s%s", off ? "," : "", n->gpu_dev[i]);
        if (w < 0 || (size_t)w >= cap - off) { /* whole names only: a cut one names another */
            out[off] = 0;
            break;
        }
        off += w;
    }
    CT_LOG(CT_LOG_DEBUG, "node", "actor %s: CUDA_VISIBLE_DEVICES=%s", a->id, out);
}

void ct__node_gpu_give_back(nodest *n, nactor *a)
{
    for (int i = 0; i < n->ngpu; i++)
        if ((a->gpus >> i & 1) && (n->gpu_used[i] -= a->gpu_share) < 1e-9)
            n->gpu_used[i] = 0;
    a->gpus = 0;
}
