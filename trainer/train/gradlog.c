/* trainer/train/gradlog.c — the log of averaged gradients a serving peer keeps while a
 * replacement heals from its snapshot (recovery "live", heal overlap): the survivors go on
 * training, the serving peer records every optimizer step's averaged gradients (before the
 * step) and step ends; when the replacement enters, it replays them on the snapshot's state and
 * stands where the group stands. An optimizer step is a function of the weights, the optimizer's
 * state and rate, and the averaged gradients, so the replay gives the same bits; the regroup
 * checks the weights' hash (replica_live.c). Gradients on a device (the checking device) are
 * downloaded into the log (the download waits for the step's allreduce on the compute stream)
 * and uploaded by the replay. Not here: when to record (the driver, heal.c), the
 * regroup that sends and checks the log (replica_live.c). */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "internal.h"
#include "trainer/backend/backend.h"

enum { LOG_OPT = 1, LOG_STEP = 2 };

/* One entry; LOG_OPT's numel floats follow it. */
typedef struct log_entry {
    int32_t kind, model;
    int64_t numel;
    double lr; /* the optimizer's first group's rate at the step */
} log_entry;

/* Room for n more bytes at the log's end; NULL when out of memory. */
static unsigned char *reserve(tr_grad_log *log, size_t n)
{
    if (log->len + n > log->cap) {
        size_t cap = log->cap ? log->cap : 1 << 16;
        while (cap < log->len + n)
            cap *= 2;
        unsigned char *b = realloc(log->buf, cap);
        if (!b) {
            ct__error(CT_ENOMEM, "trainer: the heal's gradient log: %zu bytes", cap);
            return NULL;
        }
        log->buf = b;
        log->cap = cap;
    }
    return log->buf + log->len;
}

static int append(tr_grad_log *log, const void *p, size_t n)
{
    unsigned char *dst = reserve(log, n);
    if (!dst)
        return CT_ENOMEM;
    memcpy(dst, p, n);
    log->len += n;
    return 0;
}

/* The backend of a device, NULL for the CPU; CT_ENOSYS when the program lacks it. */
static int backend_for(ct_device device, const ct__backend **bk)
{
    *bk = device == CT_CPU ? NULL : ct__backend_of(device);
    return device == CT_CPU || *bk ? 0 : ct__error(CT_ENOSYS, "trainer: no backend for a device");
}

int ct__gradlog_opt(tr_grad_log *log, tr_state *st, int m, ct_device device)
{
    float *values = NULL, *grads = NULL;
    int64_t numel = 0;
    const ct__backend *bk = NULL;
    int rc = ct_module_flat(st->models[m], &values, &grads, &numel);
    if (rc < 0 || (rc = backend_for(device, &bk)) < 0)
        return rc;
    log_entry e = {LOG_OPT, m, numel, ct_optim_get_lr(st->optims[m], 0)};
    size_t bytes = sizeof *grads * (size_t)numel;
    if ((rc = append(log, &e, sizeof e)) < 0)
        return rc;
    unsigned char *dst = reserve(log, bytes);
    if (!dst)
        return CT_ENOMEM;
    if (bk && (rc = bk->download(dst, grads, bytes)) < 0)
        return rc;
    if (!bk)
        memcpy(dst, grads, bytes);
    log->len += bytes;
    return 0;
}

int ct__gradlog_step(tr_grad_log *log)
{
    log_entry e = {.kind = LOG_STEP};
    return append(log, &e, sizeof e);
}

void ct__gradlog_reset(tr_grad_log *log)
{
    free(log->buf);
    *log = (tr_grad_log){0};
}

int ct__gradlog_replay(tr_state *st, const tr_spec *spec, const void *buf, size_t len,
                       int64_t *steps)
{
    const unsigned char *p = buf, *end = p + len;
    const ct__backend *bk = NULL;
    *steps = 0;
    int brc = backend_for((ct_device)spec->device, &bk);
    if (brc < 0)
        return brc;
    while (p < end) {
        log_entry e;
        if ((size_t)(end - p) < sizeof e)
            return ct__error(CT_EPROTO, "trainer: the heal's gradient log ends inside an entry");
        memcpy(&e, p, sizeof e);
        p += sizeof e;
        if (e.kind == LOG_STEP) {
            st->step++;
            ++*steps;
            int rc = st->sched && !st->plateau_metric[0] && spec->sched_every == TR_SCHED_BATCH
                         ? ct_sched_step(st->sched)
                         : 0;
            if (rc < 0)
                return rc;
            continue;
        }
        float *values = NULL, *grads = NULL;
        int64_t numel = 0;
        int rc = e.kind == LOG_OPT && e.model >= 0 && e.model < st->nmodels
                     ? ct_module_flat(st->models[e.model], &values, &grads, &numel)
                     : CT_EPROTO;
        if (rc == 0 && (numel != e.numel || (size_t)(end - p) / sizeof *grads < (size_t)numel))
            rc = CT_EPROTO;
        if (rc < 0)
            return ct__error(rc,
                             "trainer: the heal's gradient log: a bad entry (kind %d, model "
                             "%d, %lld values)",
                             e.kind, e.model, (long long)e.numel);
        double lr = ct_optim_get_lr(st->optims[e.model], 0);
        if (lr != e.lr)
            return ct__error(CT_EPROTO,
                             "trainer: the heal's gradient log: model %d's rate %.17g here, "
                             "%.17g at the recorded step",
                             e.model, lr, e.lr);
        size_t bytes = sizeof *grads * (size_t)numel;
        if (bk && (rc = bk->upload(grads, p, bytes)) < 0) /* queued before the step's kernels */
            return rc;
        if (!bk)
            memcpy(grads, p, bytes);
        p += bytes;
        if ((rc = ct_optim_step(st->optims[e.model])) < 0)
            return rc;
        ct_module_zero_grad(st->models[e.model]);
    }
    return 0;
}
