/* actor/node_actors.c — the node's local actor table: the actors it started (from their
 * StartActor until their exit is reaped), found by id through a hash index (thousands of actors
 * start at once: no linear scans per record), and what the node tells the head about them
 * (ActorReady, StartFailed, ActorExited with pid and status or signal, at once).
 *
 * An actor is the node's child (its zygote forks it with CLONE_PARENT), so the node reaps it
 * (node.c) and may see its exit before the zygote's record with its pid: such exits wait here
 * (early) until the record comes. Every way an actor leaves the table (exit, kill, its zygote's
 * death, a failed start, the node's end) is ct__node_actor_remove, which gives its GPUs back.
 *
 * Not in here: starting actors (node_start.c), the zygotes (node_zygote.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "actor/node_shared.h"

/* Tells the head that actor a ended (pid, wait status). One that died before its record (in
 * its class's create) brings the last lines of its stderr, the memfd its zygote gave the node,
 * which is also copied to the node's stderr (the actor, dead, did not put it there). */
static void report_exit(nodest *n, const nactor *a, pid_t pid, int status)
{
    char tail[400] = "";
    if (a->err_fd >= 0 && !a->reported)
        ct__node_actor_stderr(a->err_fd, tail, sizeof tail);
    Ct__Envelope e;
    Ct__ActorExited x = CT__ACTOR_EXITED__INIT;
    ct__env_init(&e, 0, n->id, 0);
    x.actor_id = (char *)a->id;
    x.pid = pid;
    x.stderr_tail = tail;
    if (WIFSIGNALED(status))
        x.term_signal = WTERMSIG(status);
    else
        x.exit_status = WEXITSTATUS(status);
    e.body_case = CT__ENVELOPE__BODY_ACTOR_EXITED;
    e.actor_exited = &x;
    ct__node_send_head(n, &e);
    CT_LOG(CT_LOG_INFO, "node", "actor %s (pid %d) ended: status %d signal %d", a->id, (int)pid,
           x.exit_status, x.term_signal);
}

void ct__node_report_start_failed(nodest *n, const char *actor_id, const char *reason,
                                  bool permanent)
{
    Ct__Envelope e;
    Ct__StartFailed f = CT__START_FAILED__INIT;
    ct__env_init(&e, 0, n->id, 0);
    f.actor_id = (char *)actor_id;
    f.reason = (char *)reason;
    f.permanent = permanent;
    e.body_case = CT__ENVELOPE__BODY_START_FAILED;
    e.start_failed = &f;
    ct__node_send_head(n, &e);
}

/* a's record r said it serves at r->text: its call address, kept for a resume. */
void ct__node_report_ready(nodest *n, nactor *a, const ct__zrep *r)
{
    snprintf(a->addr, sizeof a->addr, "%.127s", r->text);
    Ct__Envelope e;
    Ct__ActorReady x = CT__ACTOR_READY__INIT;
    ct__env_init(&e, 0, n->id, 0);
    x.actor_id = (char *)r->actor_id;
    x.address = (char *)r->text;
    x.pid = r->pid;
    e.body_case = CT__ENVELOPE__BODY_ACTOR_READY;
    e.actor_ready = &x;
    ct__node_send_head(n, &e);
}

/* ---- the index: id -> 1 + position in a (open addressing) ---- */

/* The index's hash of an actor id: its low bits pick the slot (in this process only). */
static unsigned id_hash(const char *id)
{
    return (unsigned)ct__fnv1a64(id, strlen(id));
}

int ct__node_actor_find(nodest *n, const char *id)
{
    if (!n->ixcap)
        return -1;
    for (unsigned h = id_hash(id) & (n->ixcap - 1);; h = (h + 1) & (n->ixcap - 1)) {
        int v = n->ix[h];
        if (!v)
            return -1;
        if (!strcmp(n->a[v - 1].id, id))
            return v - 1;
    }
}

static void ix_set(nodest *n, int i)
{
    unsigned h = id_hash(n->a[i].id) & (n->ixcap - 1);
    while (n->ix[h] && strcmp(n->a[n->ix[h] - 1].id, n->a[i].id))
        h = (h + 1) & (n->ixcap - 1);
    n->ix[h] = i + 1;
}

/* Removes a[i]'s slot (backward-shift deletion keeps probe chains whole). */
static void ix_del(nodest *n, int i)
{
    unsigned m = n->ixcap - 1, h = id_hash(n->a[i].id) & m;
    while (n->ix[h] != i + 1) {
        if (!n->ix[h])
            return; /* not indexed (a duplicate id took its slot) */
        h = (h + 1) & m;
    }
    for (unsigned j = (h + 1) & m; n->ix[j]; j = (j + 1) & m) {
        unsigned home = id_hash(n->a[n->ix[j] - 1].id) & m;
        /* move j back into the hole h unless its home lies cyclically in (h, j] */
        if ((j > h && (home <= h || home > j)) || (j < h && home <= h && home > j)) {
            n->ix[h] = n->ix[j];
            h = j;
        }
    }
    n->ix[h] = 0;
}

int ct__node_actor_room(nodest *n)
{
    nactor *a = n->na < n->cap ? n->a : ct__node_grow(n->a, &n->cap, sizeof *a, 64);
    if (!a)
        return CT_ENOMEM;
    n->a = a;
    if (2 * (n->na + 1) > n->ixcap) {
        int cap = n->ixcap ? 2 * n->ixcap : 128;
        int *ix = calloc(cap, sizeof *ix);
        if (!ix)
            return ct__error(CT_ENOMEM, "node: out of memory");
        free(n->ix);
        n->ix = ix;
        n->ixcap = cap;
        for (int i = 0; i < n->na; i++)
            ix_set(n, i);
    }
    return 0;
}

nactor *ct__node_actor_add(nodest *n, const Ct__StartActor *s)
{
    nactor *a = &n->a[n->na++];
    memset(a, 0, sizeof *a);
    a->err_fd = -1;
    snprintf(a->id, sizeof a->id, "%s", s->actor_id);
    snprintf(a->cls, sizeof a->cls, "%s", s->class_name);
    snprintf(a->job, sizeof a->job, "%s", s->job_token ? s->job_token : "");
    snprintf(a->pg, sizeof a->pg, "%s", s->pg_id ? s->pg_id : "");
    a->bundle = s->bundle_index;
    for (size_t i = 0; i < s->n_resources && a->nres < 16; i++)
        if (s->resources[i]->name && strlen(s->resources[i]->name) < 32) {
            snprintf(a->rname[a->nres], 32, "%s", s->resources[i]->name);
            a->ramt[a->nres++] = s->resources[i]->amount;
        }
    ix_set(n, n->na - 1);
    return a;
}

void ct__node_actor_remove(nodest *n, int i)
{
    ct__node_gpu_give_back(n, &n->a[i]);
    if (n->a[i].err_fd >= 0) {
        close(n->a[i].err_fd);
        n->nerr_fds--;
    }
    ix_del(n, i);
    if (i != --n->na) {
        ix_del(n, n->na);
        n->a[i] = n->a[n->na];
        ix_set(n, i);
    }
}

int ct__node_actors_end(nodest *n, pid_t *pids, int cap)
{
    int np = 0;
    for (int i = 0; i < n->na; i++) {
        ct__node_kill_pid(n, n->a[i].pid);
        if (n->a[i].pid > 0 && np < cap)
            pids[np++] = n->a[i].pid;
    }
    while (n->na)
        ct__node_actor_remove(n, n->na - 1);
    return np;
}

/* ---- exits: the zygote's record with the pid and the reaped exit come in either order ---- */

void ct__node_actor_pid(nodest *n, int i, pid_t pid)
{
    nactor *a = &n->a[i];
    if (a->pid)
        return;
    a->pid = pid;
    for (int j = 0; j < n->nearly; j++)
        if (n->early[j].pid == pid) {
            report_exit(n, a, pid, n->early[j].status);
            n->early[j] = n->early[--n->nearly];
            ct__node_actor_remove(n, i);
            return;
        }
    if (a->kill_pending)
        ct__node_kill_pid(n, a->pid);
}

void ct__node_actor_exited(nodest *n, pid_t pid, int status)
{
    for (int i = 0; i < n->na; i++)
        if (n->a[i].pid == pid) {
            report_exit(n, &n->a[i], pid, status);
            ct__node_actor_remove(n, i);
            return;
        }
    /* an actor whose pid the zygote has not told yet, or an orphan of an actor */
    if (n->nearly == MAX_EARLY)
        n->nearly--;
    n->early[n->nearly].pid = pid;
    n->early[n->nearly++].status = status;
}

/* ---- KillActor ---- */

bool ct__node_check_kill_actor(nodest *n, const Ct__Envelope *e)
{
    (void)n;
    return e->kill_actor->actor_id != NULL;
}

/* One whose pid the zygote has not told yet is killed when it does (ct__node_actor_pid). */
void ct__node_on_kill_actor(nodest *n, Ct__Envelope *e)
{
    int i = ct__node_actor_find(n, e->kill_actor->actor_id);
    if (i < 0)
        return;
    if (n->a[i].pid > 0)
        ct__node_kill_pid(n, n->a[i].pid);
    else
        n->a[i].kill_pending = true;
}
