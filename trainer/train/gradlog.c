/* trainer/train/gradlog.c — the log of averaged gradients a serving peer keeps while a
 * replacement heals from its snapshot (recovery "live", heal overlap): the survivors go on
 * training, the serving peer records every optimizer step's averaged gradients (before the
 * step) and step ends; when the replacement enters, it replays them on the snapshot's state and
 * stands where the group stands. An optimizer step is a function of the weights, the optimizer's
 * state and rate, and the averaged gradients, so the replay gives the same bits; the regroup
 * checks the weights' hash (replica_live.c). Not here: when to record (the driver, heal.c), the
 * regroup that sends and checks the log (replica_live.c). */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "internal.h"

enum { LOG_OPT = 1, LOG_STEP = 2 };

/* One entry; LOG_OPT's numel floats follow it. */
typedef struct log_entry {
    int32_t kind, model;
    int64_t numel;
    double lr; /* the optimizer's first group's rate at the step */
} log_entry;

static int append(tr_grad_log *log, const void *p, size_t n)
{
    if (log->len + n > log->cap) {
        size_t cap = log->cap ? log->cap : 1 << 16;
        while (cap < log->len + n)
            cap *= 2;
        unsigned char *b = realloc(log->buf, cap);
        if (!b)
            return ct__error(CT_ENOMEM, "trainer: the heal's gradient log: %zu bytes", cap);
        log->buf = b;
        log->cap = cap;
    }
    memcpy(log->buf + log->len, p, n);
    log->len += n;
    return 0;
}

int ct__gradlog_opt(tr_grad_log *log, tr_state *st, int m)
{
    float *values = NULL, *grads = NULL;
    int64_t numel = 0;
    int rc = ct_module_flat(st->models[m], &values, &grads, &numel);
    if (rc < 0)
        return rc;
    log_entry e = {LOG_OPT, m, numel, ct_optim_get_lr(st->optims[m], 0)};
    if ((rc = append(log, &e, sizeof e)) == 0)
        rc = append(log, grads, sizeof *grads * (size_t)numel);
    return rc;
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
    *steps = 0;
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
        memcpy(grads, p, sizeof *grads * (size_t)numel);
        p += sizeof *grads * (size_t)numel;
        if ((rc = ct_optim_step(st->optims[e.model])) < 0)
            return rc;
        ct_module_zero_grad(st->models[e.model]);
    }
    return 0;
}
