/* trainer/collective/rendezvous.c — the file-system rendezvous, and reading a string from any
 * rendezvous (ct__rdv_get_str: comm.c, shm.c and tcp.c wait for their peers' ids with it).
 * The file-system rendezvous is a directory where each key is a file, written to a temporary
 * name and renamed into place so readers never see a partial value (the idea of torch's
 * FileStore, one file per key). For standalone runs and tests; in a cluster the head's KV plays
 * this role. Not a general KV: keys are written once. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "common/common.h"
#include "ct/collective.h"
#include "internal.h"

struct file_rdv {
    ct_rendezvous r; /* first: the public struct handed out */
    char *dir;
};

/* key -> dir/escaped-key: bytes outside [A-Za-z0-9._-] become %XX, so '/' nests nothing */
static int key_path(const char *dir, const char *key, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "%s/", dir);
    for (const unsigned char *k = (const unsigned char *)key; *k; k++) {
        if (n + 4 >= cap)
            return ct__error(CT_EINVAL, "rendezvous: key '%s' too long", key);
        if ((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9') ||
            *k == '.' || *k == '_' || *k == '-')
            out[n++] = (char)*k;
        else
            n += (size_t)snprintf(out + n, cap - n, "%%%02X", *k);
    }
    out[n] = 0;
    if (!*key || key[0] == '.')
        return ct__error(CT_EINVAL, "rendezvous: key '%s' empty or starting with '.'", key);
    return 0;
}

static int file_put(void *ctx, const char *key, const void *value, size_t len)
{
    struct file_rdv *f = ctx;
    char path[4096], tmp[4200];
    int rc = key_path(f->dir, key, path, sizeof path);
    if (rc < 0)
        return rc;
    snprintf(tmp, sizeof tmp, "%s/.tmp.%d.%lld", f->dir, (int)getpid(), (long long)ct__now_ns());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return ct__error(-errno, "rendezvous: create %s: %s", tmp, strerror(errno));
    if (ct__write_all(fd, value, len) < 0) {
        rc = ct__error(-errno, "rendezvous: write %s: %s", tmp, strerror(errno));
        goto out;
    }
    if (rename(tmp, path) < 0)
        rc = ct__error(-errno, "rendezvous: rename to %s: %s", path, strerror(errno));
out:
    close(fd);
    if (rc < 0)
        unlink(tmp);
    return rc;
}

static int read_all(const char *path, void **value, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    int rc = 0;
    char *buf = NULL;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        goto out;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        rc = CT_ENOMEM;
        goto out;
    }
    size_t done = 0;
    while (done < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + done, (size_t)st.st_size - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = r < 0 ? -errno : CT_EIO;
            goto out;
        }
        done += (size_t)r;
    }
    *value = buf;
    *len = done;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return rc;
}

static int file_get(void *ctx, const char *key, void **value, size_t *len, int timeout_ms)
{
    struct file_rdv *f = ctx;
    char path[4096];
    int rc = key_path(f->dir, key, path, sizeof path);
    if (rc < 0)
        return rc;
    int64_t deadline = ct__now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    long sleep_us = 200;
    for (;;) {
        rc = read_all(path, value, len);
        if (rc == 0)
            return 0;
        if (rc != CT_ENOENT)
            return ct__error(rc, "rendezvous: read %s: %s", path, ct_strerror(rc));
        if (ct__now_ms() >= deadline)
            return ct__error(CT_ETIMEDOUT, "rendezvous: key '%s' not in %s after %d ms", key,
                             f->dir, timeout_ms);
        struct timespec ts = {0, sleep_us * 1000};
        nanosleep(&ts, NULL);
        if (sleep_us < 10000)
            sleep_us *= 2;
    }
}

ct_rendezvous *ct_rendezvous_file_new(const char *dir)
{
    if (!dir || !*dir) {
        ct__error(CT_EINVAL, "ct_rendezvous_file_new: dir is empty");
        return NULL;
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        ct__error(-errno, "ct_rendezvous_file_new: mkdir %s: %s", dir, strerror(errno));
        return NULL;
    }
    struct file_rdv *f = calloc(1, sizeof *f);
    if (!f || !(f->dir = strdup(dir))) {
        free(f);
        ct__error(CT_ENOMEM, "ct_rendezvous_file_new");
        return NULL;
    }
    f->r.put = file_put;
    f->r.get = file_get;
    f->r.ctx = f;
    return &f->r;
}

void ct_rendezvous_file_destroy(ct_rendezvous **rdv)
{
    if (!rdv || !*rdv)
        return;
    struct file_rdv *f = (struct file_rdv *)*rdv;
    free(f->dir);
    free(f);
    *rdv = NULL;
}

/* ---- any rendezvous ---- */

int ct__rdv_get_str(const ct_rendezvous *rdv, const char *key, char **out, int64_t deadline)
{
    int64_t left = (deadline - ct__now_ns()) / 1000000;
    void *v = NULL;
    size_t len = 0;
    *out = NULL;
    int rc = rdv->get(rdv->ctx, key, &v, &len, left > 0 ? (int)left : 1);
    if (rc < 0)
        return rc;
    char *s = malloc(len + 1);
    if (!s) {
        free(v);
        return ct__error(CT_ENOMEM, "collective: rendezvous value of %zu bytes", len);
    }
    memcpy(s, v, len);
    s[len] = 0;
    free(v);
    *out = s;
    return 0;
}
