/* trainer/pipeline/schedule.c — pipeline schedules as lists of actions (ct/pipeline.h).
 *
 * A schedule is written once per kind as each stage's program: the order in which stage s runs
 * its forwards F(s, m) and backwards B(s, m). One function per schedule writes a stage's
 * program; the table below picks it. The programs are then merged by a unit-time simulation:
 * at each tick every stage runs its next action if what it depends on ran at an earlier tick
 * (F(s, m) needs F(s-1, m); B(s, m) needs F(s, m) and B(s+1, m)). That gives every action its
 * tick and the whole list in tick order, and proves the programs free of deadlock. Not here:
 * running the actions (pipeline.c). */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/pipeline.h"

/* stage s's program: writes its 2*M actions (stage, micro_batch, op) into a */
typedef void (*stage_program_fn)(int s, int stages, int m, ct_pipe_action *a);

static void put(ct_pipe_action *a, int *k, int s, int mb, ct_pipe_op op)
{
    a[*k] = (ct_pipe_action){.stage = s, .micro_batch = mb, .op = op, .tick = -1};
    (*k)++;
}

/* GPipe: F0 .. F(M-1), then B0 .. B(M-1) */
static void gpipe_program(int s, int stages, int m, ct_pipe_action *a)
{
    (void)stages;
    int k = 0;
    for (int i = 0; i < m; i++)
        put(a, &k, s, i, CT_PIPE_FORWARD);
    for (int i = 0; i < m; i++)
        put(a, &k, s, i, CT_PIPE_BACKWARD);
}

/* 1F1B: w = min(S - 1 - s, M) warm-up forwards, then F(w+i) B(i) pairs, then the last w
 * backwards (Megatron's and torch's Schedule1F1B order) */
static void one_f_one_b_program(int s, int stages, int m, ct_pipe_action *a)
{
    int w = stages - 1 - s < m ? stages - 1 - s : m, k = 0;
    for (int i = 0; i < w; i++)
        put(a, &k, s, i, CT_PIPE_FORWARD);
    for (int i = 0; i < m - w; i++) {
        put(a, &k, s, w + i, CT_PIPE_FORWARD);
        put(a, &k, s, i, CT_PIPE_BACKWARD);
    }
    for (int i = m - w; i < m; i++)
        put(a, &k, s, i, CT_PIPE_BACKWARD);
}

static const struct {
    const char *name;
    stage_program_fn program;
} schedules[CT_PIPE_NSCHEDULES] = {
    [CT_PIPE_GPIPE] = {"gpipe", gpipe_program},
    [CT_PIPE_1F1B] = {"1f1b", one_f_one_b_program},
};

int ct_pipe_schedule_parse(const char *s, ct_pipe_schedule *out)
{
    for (int i = 0; s && i < CT_PIPE_NSCHEDULES; i++)
        if (!strcmp(s, schedules[i].name)) {
            *out = (ct_pipe_schedule)i;
            return 0;
        }
    return ct__error(CT_EINVAL, "schedule \"%s\": not one of \"gpipe\", \"1f1b\"",
                     s ? s : "(null)");
}

const char *ct_pipe_schedule_name(ct_pipe_schedule s)
{
    return (unsigned)s < CT_PIPE_NSCHEDULES ? schedules[s].name : "?";
}

/* tick of F(s, mb) or B(s, mb) once run, else -1: done[((s * M) + mb) * 2 + op] */
static int *done_at(int *done, int m, int s, int mb, ct_pipe_op op)
{
    return &done[((size_t)s * m + mb) * 2 + op];
}

/* can stage s run action a at tick t? */
static int ready(int *done, int stages, int m, const ct_pipe_action *a, int t)
{
    int dep[2] = {-1, -1}, nd = 0; /* ticks of the dependencies, -1 when not run */
    if (a->op == CT_PIPE_FORWARD) {
        if (a->stage > 0)
            dep[nd++] = *done_at(done, m, a->stage - 1, a->micro_batch, CT_PIPE_FORWARD);
    } else {
        dep[nd++] = *done_at(done, m, a->stage, a->micro_batch, CT_PIPE_FORWARD);
        if (a->stage < stages - 1)
            dep[nd++] = *done_at(done, m, a->stage + 1, a->micro_batch, CT_PIPE_BACKWARD);
    }
    for (int i = 0; i < nd; i++)
        if (dep[i] < 0 || dep[i] >= t)
            return 0;
    return 1;
}

int ct_pipe_schedule_actions(ct_pipe_schedule kind, int stages, int m, ct_pipe_action **out, int *n)
{
    int rc = 0;
    ct_pipe_action *prog = NULL, *list = NULL;
    int *next = NULL, *done = NULL;
    if (!out || !n)
        return ct__error(CT_EINVAL, "schedule: NULL out or n");
    *out = NULL;
    *n = 0;
    if ((unsigned)kind >= CT_PIPE_NSCHEDULES)
        return ct__error(CT_EINVAL, "schedule %d: no such schedule", (int)kind);
    if (stages < 1 || stages > 1024 || m < 1 || m > 65536)
        return ct__error(
            CT_EINVAL, "schedule: %d stages, %d micro-batches (want 1..1024, 1..65536)", stages, m);
    size_t total = (size_t)2 * stages * m;
    prog = malloc(total * sizeof(*prog));
    list = malloc(total * sizeof(*list));
    next = calloc((size_t)stages, sizeof(*next));
    done = malloc(total * sizeof(*done));
    if (!prog || !list || !next || !done) {
        rc = ct__error(CT_ENOMEM, "schedule: out of memory");
        goto out;
    }
    for (int s = 0; s < stages; s++)
        schedules[kind].program(s, stages, m, prog + (size_t)s * 2 * m);
    for (size_t i = 0; i < total; i++)
        done[i] = -1;
    size_t k = 0;
    for (int t = 0; k < total; t++) {
        size_t before = k;
        for (int s = 0; s < stages; s++) {
            if (next[s] == 2 * m)
                continue;
            ct_pipe_action *a = &prog[(size_t)s * 2 * m + next[s]];
            if (!ready(done, stages, m, a, t))
                continue;
            a->tick = t;
            *done_at(done, m, s, a->micro_batch, a->op) = t;
            list[k++] = *a;
            next[s]++;
        }
        if (k == before) { /* nothing new is done, so nothing will be */
            rc = ct__error(CT_EINVAL, "schedule %s: the stages' programs deadlock at tick %d",
                           schedules[kind].name, t);
            goto out;
        }
    }
    *out = list;
    *n = (int)total;
    list = NULL;
out:
    free(prog);
    free(list);
    free(next);
    free(done);
    return rc;
}
