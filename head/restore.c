/* head/restore.c — a restarted head's state: the write-ahead file (DIR/head.wal, whose records
 * state.c appends) replayed into the tables at start (the KV store, jobs, placement groups,
 * objects' owners), written back as a fresh, compact file that state.c appends to from then on,
 * and the loaded waits given up once the nodes had their time to come back. state.c's header
 * says what the records are. */
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

/* A copy of field f as a C string in out (cap bytes); false when it does not fit. */
static bool str(const wal_field *f, char *out, size_t cap)
{
    if (f->n >= cap)
        return false;
    memcpy(out, f->p, f->n);
    out[f->n] = 0;
    return true;
}

/* Applies a P record: the group replaces one of the same id. false: malformed. */
static bool load_pg(head *h, const wal_field *f, int nf)
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

static void apply(head *h, char tag, const wal_field *f, int nf)
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
    wal_field *f = calloc(MAX_FIELDS, sizeof *f);
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
            f[i] = (wal_field){buf + off, len[i]};
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
    wal_field f[3] = {{(const char *)id, len}, wal_s(job), wal_s(w)};
    return ct__head_state_put_rec(*(int *)ctx, 'O', 3, f);
}

/* Writes the current state as records into fd. 0 or a CT_E* code. */
static int snapshot(head *h, int fd)
{
    int rc = 0;
    for (int i = 0; i < h->ndrivers && !rc; i++) {
        wal_field f[1] = {wal_s(h->drivers[i].job)};
        rc = ct__head_state_put_rec(fd, 'J', 1, f);
    }
    for (int i = 0; i < h->nkv && !rc; i++) {
        wal_field f[3] = {wal_s(h->kv[i].job), wal_s(h->kv[i].key), {h->kv[i].val, h->kv[i].len}};
        rc = ct__head_state_put_rec(fd, 'K', 3, f);
    }
    for (int i = 0; i < h->npgs && !rc; i++)
        if (h->pgs[i].state == PG_PENDING || h->pgs[i].state == PG_READY)
            rc = ct__head_state_put_pg(h, fd, &h->pgs[i]);
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

/* The nodes had their time to come back: bundles still waiting for one are placed anywhere, and
 * loaded owners of objects no node reported are forgotten. */
void ct__head_state_give_up_waits(head *h)
{
    ct__objdir_owners_give_up(h);
    for (int i = 0; i < h->npgs; i++)
        for (int b = 0; b < h->pgs[i].nb; b++)
            h->pgs[i].b[b].want[0] = 0;
}
