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
 * Loading replays them in order (the last P of an id wins), stops at the first torn record
 * (a head killed in the middle of a write), then writes the state back as a fresh, compact
 * file (written aside and renamed over) and appends to it from then on. Records reach the
 * kernel at once, so a head killed (kill -9) loses nothing; they are not fsync'd, so a power
 * loss may lose the last ones.
 *
 * Loaded groups wait for their nodes: a bundle reserved on node N stays unplaced, and the group
 * pending, until N registers again (ct__head_state_node_back) or the dead-after time passed since
 * the start (then the scheduler places what is left anywhere). Loaded owners wait the same way
 * for a node to report their object (objdir.c), then are forgotten. Loaded jobs are followed as
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

#define MAX_FIELDS (4 + 2 * MAX_BUNDLES * (2 + 2 * MAX_RES))

typedef struct field {
    const char *p;
    size_t n;
} field;

/* Appends one record (tag, nf fields) to fd: one write. 0 or CT_EIO. */
static int put_rec(int fd, char tag, int nf, const field *f)
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

static field S(const char *s)
{
    return (field){s, strlen(s)};
}

static void log_rec(head *h, char tag, int nf, const field *f)
{
    if (h->state_fd < 0)
        return;
    if (put_rec(h->state_fd, tag, nf, f))
        CT_LOG(CT_LOG_ERROR, "head", "%s", ct_last_error());
}

void ct__head_state_kv_put(head *h, const char *key, const void *val, size_t len, const char *job)
{
    field f[3] = {S(job), S(key), {val, len}};
    log_rec(h, 'K', 3, f);
}

void ct__head_state_kv_del(head *h, const char *key)
{
    field f[1] = {S(key)};
    log_rec(h, 'D', 1, f);
}

void ct__head_state_job(head *h, const char *job, bool attached)
{
    field f[1] = {S(job)};
    log_rec(h, attached ? 'J' : 'G', 1, f);
}

void ct__head_state_obj(head *h, const uint8_t *id, size_t len, const char *job, int want)
{
    char w[16];
    snprintf(w, sizeof w, "%d", want);
    field f[3] = {{(const char *)id, len}, S(job), S(w)};
    log_rec(h, 'O', 3, f);
}

void ct__head_state_obj_gone(head *h, const uint8_t *id, size_t len)
{
    field f[1] = {{(const char *)id, len}};
    log_rec(h, 'F', 1, f);
}

/* The P record of g into fd (bundles: the node's id where reserved, or the node it waits for). */
static int put_pg(head *h, int fd, const pgroup *g)
{
    field *f = calloc(4 + (size_t)g->nb * (2 + 2 * MAX_RES), sizeof *f);
    char(*num)[32] = calloc(2 + (size_t)g->nb * (1 + MAX_RES), sizeof *num);
    if (!f || !num) {
        free(f);
        free(num);
        return CT_ENOMEM;
    }
    int nf = 0, nn = 0;
    f[nf++] = S(g->id);
    f[nf++] = S(g->job);
    snprintf(num[nn], 32, "%d", g->strategy);
    f[nf++] = S(num[nn++]);
    snprintf(num[nn], 32, "%d", g->nb);
    f[nf++] = S(num[nn++]);
    for (int b = 0; b < g->nb; b++) {
        const bundle *x = &g->b[b];
        f[nf++] = S(x->node >= 0 ? h->nodes[x->node].id : x->want);
        snprintf(num[nn], 32, "%d", x->need.n);
        f[nf++] = S(num[nn++]);
        for (int r = 0; r < x->need.n; r++) {
            f[nf++] = S(x->need.name[r]);
            snprintf(num[nn], 32, "%.17g", x->need.amt[r]);
            f[nf++] = S(num[nn++]);
        }
    }
    int rc = put_rec(fd, 'P', nf, f);
    free(f);
    free(num);
    return rc;
}

void ct__head_state_pg(head *h, const pgroup *g)
{
    if (h->state_fd < 0)
        return;
    if (g->state == PG_REMOVED || g->state == PG_FREE) {
        field f[1] = {S(g->id)};
        log_rec(h, 'X', 1, f);
    } else if (put_pg(h, h->state_fd, g))
        CT_LOG(CT_LOG_ERROR, "head", "%s", ct_last_error());
}

/* ---- loading ---- */

/* A copy of field f as a C string in out (cap bytes); false when it does not fit. */
static bool str(const field *f, char *out, size_t cap)
{
    if (f->n >= cap)
        return false;
    memcpy(out, f->p, f->n);
    out[f->n] = 0;
    return true;
}

/* Applies a P record: the group replaces one of the same id. false: malformed. */
static bool load_pg(head *h, const field *f, int nf)
{
    char id[ID_LEN], num[32];
    if (nf < 4 || !str(&f[0], id, sizeof id) || f[1].n >= TOK_SIZE || !str(&f[3], num, sizeof num))
        return false;
    int nb = atoi(num);
    if (nb < 1 || nb > MAX_BUNDLES)
        return false;
    bundle *b = calloc((size_t)nb, sizeof *b);
    if (!b)
        return false;
    int k = 4;
    for (int i = 0; i < nb; i++) {
        b[i].node = -1;
        if (k + 2 > nf || !str(&f[k], b[i].want, sizeof b[i].want) ||
            !str(&f[k + 1], num, sizeof num)) {
            free(b);
            return false;
        }
        int nr = atoi(num);
        k += 2;
        if (nr < 0 || nr > MAX_RES || k + 2 * nr > nf) {
            free(b);
            return false;
        }
        for (int r = 0; r < nr; r++, k += 2) {
            if (!str(&f[k], b[i].need.name[r], sizeof b[i].need.name[r]) ||
                !str(&f[k + 1], num, sizeof num)) {
                free(b);
                return false;
            }
            b[i].need.amt[r] = strtod(num, NULL);
        }
        b[i].need.n = nr;
        b[i].free = b[i].need;
    }
    int gi = ct__head_find_pg(h, f[0].p, f[0].n);
    if (gi >= 0) { /* the newer record wins */
        h->nbundles -= h->pgs[gi].nb;
        free(h->pgs[gi].b);
    } else if ((gi = ct__head_pg_slot(h, nb)) < 0) {
        free(b);
        return false;
    }
    pgroup *g = &h->pgs[gi];
    memset(g, 0, sizeof *g);
    snprintf(g->id, sizeof g->id, "%s", id);
    if (ct__head_pg_named(h, gi)) {
        g->state = PG_FREE;
        free(b);
        return false;
    }
    memcpy(g->job, f[1].p, f[1].n);
    g->job[f[1].n] = 0;
    str(&f[2], num, sizeof num);
    g->strategy = atoi(num);
    g->nb = nb;
    g->b = b;
    g->state = PG_PENDING;
    h->nbundles += nb;
    unsigned long long seq = strtoull(id + 3, NULL, 10);
    if (!strncmp(id, "pg-", 3) && seq > h->pg_seq)
        h->pg_seq = seq;
    return true;
}

static void apply(head *h, char tag, const field *f, int nf)
{
    char job[TOK_SIZE];
    switch (tag) {
    case 'K':
        if (nf == 3 && f[0].n < TOK_SIZE && f[1].n && f[1].n < MAX_KV_KEY &&
            !memchr(f[1].p, 0, f[1].n)) {
            char *key = strndup(f[1].p, f[1].n);
            str(&f[0], job, sizeof job);
            if (key)
                ct__head_kv_set(h, key, f[2].p, f[2].n, job);
            free(key);
        }
        break;
    case 'D':
        if (nf == 1 && f[0].n < MAX_KV_KEY) {
            char *key = strndup(f[0].p, f[0].n);
            if (key)
                ct__head_kv_unset(h, key);
            free(key);
        }
        break;
    case 'J':
    case 'G':
        if (nf == 1 && str(&f[0], job, sizeof job))
            ct__head_expect_job(h, job, tag == 'J');
        break;
    case 'P':
        if (!load_pg(h, f, nf))
            CT_LOG(CT_LOG_WARN, "head", "state file: a malformed group record skipped");
        break;
    case 'O':
        if (nf == 3 && str(&f[1], job, sizeof job)) {
            char w[16];
            if (str(&f[2], w, sizeof w))
                ct__objdir_owner_loaded(h, (const uint8_t *)f[0].p, f[0].n, job, atoi(w));
        }
        break;
    case 'F':
        if (nf == 1)
            ct__objdir_owner_forget(h, (const uint8_t *)f[0].p, f[0].n);
        break;
    case 'X': {
        int gi = nf == 1 ? ct__head_find_pg(h, f[0].p, f[0].n) : -1;
        if (gi >= 0)
            ct__head_pg_freed(h, gi);
        break;
    }
    default:
        break;
    }
}

/* Replays the records of path (absent: nothing). The number applied. */
static long replay(head *h, const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return 0;
    long n = 0;
    field *f = calloc(MAX_FIELDS, sizeof *f);
    size_t *len = calloc(MAX_FIELDS, sizeof *len);
    for (; f && len;) {
        char tag;
        int nf;
        if (fscanf(fp, "%c %d", &tag, &nf) != 2 || nf < 0 || nf > MAX_FIELDS)
            break;
        size_t total = 0;
        int i;
        for (i = 0; i < nf && fscanf(fp, " %zu", &len[i]) == 1 && len[i] <= (64u << 20); i++)
            total += len[i];
        if (i < nf || fgetc(fp) != '\n')
            break;
        char *buf = malloc(total ? total : 1);
        if (!buf || fread(buf, 1, total, fp) != total) { /* torn: the head died writing it */
            free(buf);
            break;
        }
        size_t off = 0;
        for (i = 0; i < nf; i++) {
            f[i] = (field){buf + off, len[i]};
            off += len[i];
        }
        apply(h, tag, f, nf);
        free(buf);
        n++;
    }
    free(f);
    free(len);
    fclose(fp);
    return n;
}

static int put_owner(void *ctx, const uint8_t *id, size_t len, const char *job, int want)
{
    char w[16];
    snprintf(w, sizeof w, "%d", want);
    field f[3] = {{(const char *)id, len}, S(job), S(w)};
    return put_rec(*(int *)ctx, 'O', 3, f);
}

/* Writes the current state as records into fd. 0 or a CT_E* code. */
static int snapshot(head *h, int fd)
{
    int rc = 0;
    for (int i = 0; i < h->ndrivers && !rc; i++) {
        field f[1] = {S(h->drivers[i].job)};
        rc = put_rec(fd, 'J', 1, f);
    }
    for (int i = 0; i < h->nkv && !rc; i++) {
        field f[3] = {S(h->kv[i].job), S(h->kv[i].key), {h->kv[i].val, h->kv[i].len}};
        rc = put_rec(fd, 'K', 3, f);
    }
    for (int i = 0; i < h->npgs && !rc; i++)
        if (h->pgs[i].state == PG_PENDING || h->pgs[i].state == PG_READY)
            rc = put_pg(h, fd, &h->pgs[i]);
    if (!rc)
        rc = ct__objdir_each_owner(h, put_owner, &fd);
    return rc;
}

static int count_owner(void *ctx, const uint8_t *id, size_t len, const char *job, int want)
{
    (void)id, (void)len, (void)job, (void)want;
    ++*(int *)ctx;
    return 0;
}

int ct__head_state_open(head *h, const char *dir)
{
    h->state_fd = -1;
    if (!dir || !*dir)
        return 0;
    if (mkdir(dir, 0700) && errno != EEXIST)
        return ct__error(CT_EIO, "head: --state-dir %s: %s", dir, strerror(errno));
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/head.wal", dir);
    snprintf(tmp, sizeof tmp, "%s.new", path);
    long n = replay(h, path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return ct__error(CT_EIO, "head: state file %s: %s", tmp, strerror(errno));
    int rc = snapshot(h, fd);
    if (!rc && (fsync(fd) || rename(tmp, path)))
        rc = ct__error(CT_EIO, "head: state file %s: %s", path, strerror(errno));
    if (rc) {
        close(fd);
        unlink(tmp);
        return rc;
    }
    h->state_fd = fd; /* renamed: the same file, appended to from now on */
    int pgs = 0;
    for (int i = 0; i < h->npgs; i++)
        pgs += h->pgs[i].state == PG_PENDING;
    int owners = 0;
    ct__objdir_each_owner(h, count_owner, &owners);
    CT_LOG(CT_LOG_INFO, "head",
           "state %s: %ld records loaded: %d keys, %d groups, %d jobs, %d object owners", path, n,
           h->nkv, pgs, h->ndrivers, owners);
    return 0;
}

void ct__head_state_close(head *h)
{
    if (h->state_fd >= 0)
        close(h->state_fd);
    h->state_fd = -1;
}

/* Node ni registered again: the loaded groups' bundles that wait for it are reserved there
 * again (before its actors are taken back, which may hold them). */
void ct__head_state_node_back(head *h, int ni)
{
    for (int i = 0; i < h->npgs; i++) {
        pgroup *g = &h->pgs[i];
        if (g->state != PG_PENDING)
            continue;
        bool waits = false;
        for (int b = 0; b < g->nb; b++) {
            bundle *x = &g->b[b];
            if (x->node < 0 && x->want[0] && !strcmp(x->want, h->nodes[ni].id)) {
                x->node = ni;
                x->want[0] = 0;
                x->free = x->need;
                ct__rv_sub(&h->nodes[ni].free, &x->need, 1);
            }
            waits |= x->node < 0;
        }
        if (!waits) {
            g->state = PG_READY;
            CT_LOG(CT_LOG_INFO, "head", "placement group %s ready again", g->id);
        }
    }
}

/* The nodes had their time to come back: bundles still waiting for one are placed anywhere, and
 * loaded owners of objects no node reported are forgotten. */
void ct__head_state_give_up_waits(head *h)
{
    ct__objdir_owners_give_up(h);
    for (int i = 0; i < h->npgs; i++)
        for (int b = 0; b < h->pgs[i].nb; b++)
            h->pgs[i].b[b].want[0] = 0;
}
