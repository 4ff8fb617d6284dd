/* head/state.c — what only the head knows, kept in a write-ahead file so that a restarted head
 * has it again (`ct-head --state-dir DIR`, file DIR/head.wal): the KV store (keys, values, the
 * owning job), the jobs whose drivers are attached, the placement groups (id, job, strategy,
 * bundles with their resources and the id of the node each is reserved on), and the objects'
 * owners (the job that may free each, the copies it asked for). What the nodes know (nodes,
 * actors, which objects they hold) they tell a restarted head themselves (nodes.c's
 * resume_node).
 *
 * The file is a sequence of records, each one write(2): a header line "<tag> <nfields> <len>
 * ... \n" and then the fields' bytes (any bytes: keys and values are binary-safe). Tags:
 *   K job key value   a KV put (the job "" for a released key)
 *   D key             a KV delete
 *   J job / G job     a job's driver attached / gone (its keys released: R is implied)
 *   P id job strategy nb, then per bundle: node nres (name amount)*   a group as it is now
 *   X id              a group removed
 *   O id job want     an object's owner and the copies it wants (objdir.c: its first put)
 *   F id              an owned object forgotten (freed, or no holder left)
 * Loading (restore.c) replays them in order (the last P of an id wins), stops at the first torn
 * record (a head killed in the middle of a write), then writes the state back as a fresh, compact
 * file (written aside and renamed over) and appends to it from then on. Records reach the
 * kernel at once, so a head killed (kill -9) loses nothing; they are not fsync'd, so a power
 * loss may lose the last ones.
 *
 * Loaded groups wait for their nodes: a bundle reserved on node N stays unplaced, and the group
 * pending, until N registers again (pgroups.c, ct__head_pg_node_back) or the dead-after time passed
 * since the start (then the scheduler places what is left anywhere). Loaded owners wait the same
 * way for a node to report their object (objdir.c), then are forgotten. Loaded jobs are followed as
 * drivers without a name (nodes.c), so a job whose driver died while the head was away ends. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/common.h"
#include "head/head_internal.h"
#include "head/state.h"

int ct__head_state_put_rec(int fd, char tag, int nf, const wal_field *f)
{
    size_t hdr = 16 + 21 * (size_t)nf, total = hdr;
    for (int i = 0; i < nf; i++)
        total += f[i].n;
    char *buf = malloc(total);
    if (!buf)
        return CT_ENOMEM;
    size_t off = (size_t)snprintf(buf, hdr, "%c %d", tag, nf);
    for (int i = 0; i < nf; i++)
        off += (size_t)snprintf(buf + off, hdr - off, " %zu", f[i].n);
    buf[off++] = '\n';
    for (int i = 0; i < nf; i++) {
        if (f[i].n)
            memcpy(buf + off, f[i].p, f[i].n);
        off += f[i].n;
    }
    int rc = 0;
    if (ct__write_all(fd, buf, off) < 0)
        rc = ct__error(CT_EIO, "head: state file: write: %s", strerror(errno));
    free(buf);
    return rc;
}

static void log_rec(head *h, char tag, int nf, const wal_field *f)
{
    if (h->state_fd < 0)
        return;
    if (ct__head_state_put_rec(h->state_fd, tag, nf, f))
        CT_LOG(CT_LOG_ERROR, "head", "%s", ct_last_error());
}

void ct__head_state_kv_put(head *h, const char *key, const void *val, size_t len, const char *job)
{
    wal_field f[3] = {wal_s(job), wal_s(key), {val, len}};
    log_rec(h, 'K', 3, f);
}

void ct__head_state_kv_del(head *h, const char *key)
{
    wal_field f[1] = {wal_s(key)};
    log_rec(h, 'D', 1, f);
}

void ct__head_state_job(head *h, const char *job, bool attached)
{
    wal_field f[1] = {wal_s(job)};
    log_rec(h, attached ? 'J' : 'G', 1, f);
}

void ct__head_state_obj(head *h, const uint8_t *id, size_t len, const char *job, int want)
{
    char w[16];
    snprintf(w, sizeof w, "%d", want);
    wal_field f[3] = {{(const char *)id, len}, wal_s(job), wal_s(w)};
    log_rec(h, 'O', 3, f);
}

void ct__head_state_obj_gone(head *h, const uint8_t *id, size_t len)
{
    wal_field f[1] = {{(const char *)id, len}};
    log_rec(h, 'F', 1, f);
}

int ct__head_state_put_pg(head *h, int fd, const pgroup *g)
{
    wal_field *f = calloc(4 + (size_t)g->nb * (2 + 2 * MAX_RES), sizeof *f);
    char(*num)[32] = calloc(2 + (size_t)g->nb * (1 + MAX_RES), sizeof *num);
    if (!f || !num) {
        free(f);
        free(num);
        return CT_ENOMEM;
    }
    int nf = 0, nn = 0;
    f[nf++] = wal_s(g->id);
    f[nf++] = wal_s(g->job);
    snprintf(num[nn], 32, "%d", g->strategy);
    f[nf++] = wal_s(num[nn++]);
    snprintf(num[nn], 32, "%d", g->nb);
    f[nf++] = wal_s(num[nn++]);
    for (int b = 0; b < g->nb; b++) {
        const bundle *x = &g->b[b];
        f[nf++] = wal_s(x->node >= 0 ? h->nodes[x->node].id : x->want);
        snprintf(num[nn], 32, "%d", x->need.n);
        f[nf++] = wal_s(num[nn++]);
        for (int r = 0; r < x->need.n; r++) {
            f[nf++] = wal_s(x->need.name[r]);
            snprintf(num[nn], 32, "%.17g", x->need.amt[r]);
            f[nf++] = wal_s(num[nn++]);
        }
    }
    int rc = ct__head_state_put_rec(fd, 'P', nf, f);
    free(f);
    free(num);
    return rc;
}

void ct__head_state_pg(head *h, const pgroup *g)
{
    if (h->state_fd < 0)
        return;
    if (g->state == PG_REMOVED || g->state == PG_FREE) {
        wal_field f[1] = {wal_s(g->id)};
        log_rec(h, 'X', 1, f);
    } else if (ct__head_state_put_pg(h, h->state_fd, g))
        CT_LOG(CT_LOG_ERROR, "head", "%s", ct_last_error());
}
