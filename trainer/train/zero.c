/* trainer/train/zero.c — ZeRO-1 (trainer_opts.zero_stage = 1): the optimizer state sharded over
 * the replicas. Each model's bucketer runs in shard mode (bucket.c): a bucket's gradients are
 * reduce-scattered instead of allreduced, so rank r holds the averages of chunk r of every bucket
 * (ct_comm_chunk of the packed bucket). Here:
 *   - ct__zero_shard: each parameter's optimizer shard := the part of it inside this rank's
 *     chunks (ct_optim_set_shard), so AdamW keeps moments for 1/N of the elements and steps only
 *     those (its groups, e.g. weight decay on matrices only, apply per element as before);
 *   - ct__zero_allgather: after the step, the parameters' owned parts to every rank (one
 *     allgather of chunks per bucket);
 *   - ct__zero_clip: clip_grad_norm from the per-parameter sums of squares of the shards, added
 *     over ranks (allgathered as doubles, added in rank order: every rank gets the same norm);
 *   - ct__zero_gather_state: the optimizer's state dict with every shard tensor gathered into the
 *     full tensor (a collective: every rank calls it), so a checkpoint has the format it has
 *     without ZeRO. Loading needs nothing: every replica loads the full tensors and
 *     ct_optim_set_shard keeps its part.
 * Host (CPU) training and the ring backend only. */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "internal.h"
#include "trainer/optim/optim_internal.h"

int ct__zero_shard(ct_module *model, ct_optim *o, ct_bucketer *b)
{
    const ct_param_ref *ps;
    int np, rc;
    if ((rc = ct_module_params(model, &ps, &np)) < 0)
        return rc;
    for (int k = 0; k < np; k++) {
        int i = ct_optim_find_param(o, ps[k].value);
        if (i < 0)
            continue; /* not optimized: every rank keeps it as it is */
        size_t lo, n;
        ct_bucketer_shard(b, np - 1 - k, &lo, &n);
        if ((rc = ct_optim_set_shard(o, i, (int64_t)lo, (int64_t)n)) < 0)
            return rc;
    }
    return 0;
}

int ct__zero_allgather(ct_module *model, ct_bucketer *b)
{
    const ct_param_ref *ps;
    int np, rc;
    if ((rc = ct_module_params(model, &ps, &np)) < 0)
        return rc;
    float **vals = malloc(sizeof *vals * (size_t)(np ? np : 1));
    if (!vals)
        return ct__error(CT_ENOMEM, "zero: parameter table");
    for (int k = 0; k < np; k++)
        vals[k] = ps[np - 1 - k].value;
    rc = ct_bucketer_allgather(b, vals);
    free(vals);
    return rc;
}

int ct__zero_clip(ct_comm *c, ct_optim *o, double max_norm, double *norm)
{
    int np = ct_optim_num_params(o), w = ct_comm_world_size(c), rc;
    double *all = calloc((size_t)w * (size_t)(np ? np : 1), sizeof *all);
    if (!all)
        return ct__error(CT_ENOMEM, "zero: clip sums");
    double *mine = all + (size_t)ct_comm_rank(c) * (size_t)np;
    if ((rc = ct__optim_shard_sumsq(o, mine)) == 0 &&
        (rc = ct_comm_allgather(c, mine, all, (size_t)np * sizeof(double), CT_U8, 0)) == 0) {
        for (int r = 1; r < w; r++) /* rank order: the same sums everywhere */
            for (int i = 0; i < np; i++)
                all[i] += all[(size_t)r * (size_t)np + (size_t)i];
        rc = ct__optim_clip_sumsq(o, all, max_norm, norm);
    }
    free(all);
    return rc;
}

void ct__zero_state_free(tr_zero_state *z)
{
    for (int i = 0; i < z->n; i++)
        free(z->bufs[i]);
    free(z->bufs);
    free(z->e);
    memset(z, 0, sizeof *z);
}

int ct__zero_gather_state(ct_comm *c, ct_optim *o, tr_zero_state *z)
{
    const ct_state_entry *e;
    int n, rc, w = ct_comm_world_size(c), me = ct_comm_rank(c);
    memset(z, 0, sizeof *z);
    if ((rc = ct_optim_state_dict(o, &e, &n)) < 0)
        return rc;
    /* every rank's shard lengths of every entry (the same entries everywhere; checked) */
    int64_t *len = calloc((size_t)w * (size_t)(n + 1), sizeof *len);
    size_t *counts = calloc((size_t)w, sizeof *counts);
    z->e = calloc((size_t)(n ? n : 1), sizeof *z->e);
    z->bufs = calloc((size_t)(n ? n : 1), sizeof *z->bufs);
    if (!len || !counts || !z->e || !z->bufs) {
        rc = ct__error(CT_ENOMEM, "zero: gathering the optimizer state");
        goto out;
    }
    z->n = n;
    int64_t *my = len + (size_t)me * (size_t)(n + 1);
    my[0] = n;
    for (int i = 0; i < n; i++)
        my[i + 1] = e[i].kind == CT_STATE_TENSOR ? e[i].numel : -1;
    if ((rc = ct_comm_allgather(c, my, len, (size_t)(n + 1) * sizeof *len, CT_U8, 0)) < 0)
        goto out;
    for (int r = 0; r < w; r++)
        if (len[(size_t)r * (size_t)(n + 1)] != n) {
            rc = ct__error(CT_EPROTO, "zero: rank %d has %lld optimizer state entries, rank %d %d",
                           r, (long long)len[(size_t)r * (size_t)(n + 1)], me, n);
            goto out;
        }
    for (int i = 0; i < n; i++) {
        z->e[i] = e[i];
        if (e[i].kind != CT_STATE_TENSOR)
            continue;
        size_t total = 0, off = 0;
        for (int r = 0; r < w; r++) {
            int64_t l = len[(size_t)r * (size_t)(n + 1) + (size_t)i + 1];
            counts[r] = l > 0 ? (size_t)l : 0;
            if (r < me)
                off += counts[r];
            total += counts[r];
        }
        if (!(z->bufs[i] = malloc((total ? total : 1) * sizeof(float)))) {
            rc = ct__error(CT_ENOMEM, "zero: optimizer state \"%s\" of %zu floats", e[i].name,
                           total);
            goto out;
        }
        if (counts[me])
            memcpy(z->bufs[i] + off, e[i].data, counts[me] * sizeof(float));
        if ((rc = ct_comm_allgatherv(c, z->bufs[i], counts, CT_F32, 0)) < 0)
            goto out;
        z->e[i].data = z->bufs[i];
        z->e[i].numel = (int64_t)total;
    }
out:
    free(len);
    free(counts);
    if (rc < 0)
        ct__zero_state_free(z);
    return rc;
}
