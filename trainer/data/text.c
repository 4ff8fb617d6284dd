/* trainer/data/text.c — a text file as next-token windows, byte-level (vocabulary 256: a token
 * is a byte), read from the file per sample (pread), so a rank reads only its shard and never
 * loads the whole file. The file's first 1 - val_fraction of bytes is the training split, the
 * rest validation; each split is cut into world byte ranges, one per rank, and each range into
 * windows of block_size + 1 bytes at a stride of block_size: sample i is x = bytes [s, s + T),
 * target y = bytes [s + 1, s + T + 1) with s = start + i T, both as floats (token ids).
 * Not here: a BPE vocabulary (a tokenizer file would map byte runs to ids before this). */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "ct/data.h"

typedef struct text_ds {
    int fd;
    int64_t start, block;
    unsigned char *buf; /* per dataset: get is called by one thread at a time per loader */
} text_ds;

static int text_get(void *self, int64_t i, float *x, float *y)
{
    text_ds *d = self;
    int64_t n = d->block + 1, off = d->start + i * d->block, got = 0;
    while (got < n) {
        ssize_t r = pread(d->fd, d->buf + got, (size_t)(n - got), (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return ct__error(r < 0 ? CT_EIO : CT_EIO, "text: reading bytes %lld..%lld: %s",
                             (long long)off, (long long)(off + n),
                             r < 0 ? strerror(errno) : "the file got shorter");
        got += r;
    }
    for (int64_t t = 0; t < d->block; t++) {
        x[t] = (float)d->buf[t];
        y[t] = (float)d->buf[t + 1];
    }
    return 0;
}

static void text_destroy(void *self)
{
    text_ds *d = self;
    close(d->fd);
    free(d->buf);
    free(d);
}

int ct_dataset_open_text(const char *path, const ct_text_opts *o, ct_dataset **out)
{
    if (out)
        *out = NULL;
    if (!path || !o || !out || o->block_size <= 0 || o->world_size < 1 || o->rank < 0 ||
        o->rank >= o->world_size || !(o->val_fraction >= 0 && o->val_fraction < 1))
        return ct__error(CT_EINVAL, "text: needs a path, block_size > 0, 0 <= rank < world_size "
                                    "and 0 <= val_fraction < 1");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ct__error(errno == ENOENT ? CT_ENOENT : CT_EIO, "text: cannot open %s: %s", path,
                         strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        close(fd);
        return ct__error(CT_EIO, "text: %s: %s", path, strerror(errno));
    }
    int64_t size = st.st_size, split = (int64_t)((double)size * (1.0 - o->val_fraction));
    int64_t lo = o->val ? split : 0, len = o->val ? size - split : split;
    int64_t s0 = lo + len * o->rank / o->world_size, s1 = lo + len * (o->rank + 1) / o->world_size;
    int64_t count = s1 - s0 > o->block_size ? (s1 - s0 - 1) / o->block_size : 0;
    if (count == 0) {
        close(fd);
        return ct__error(CT_EINVAL,
                         "text: %s: the %s split's shard %d of %d has %lld bytes, fewer than a "
                         "window of block_size + 1 = %lld",
                         path, o->val ? "validation" : "training", o->rank, o->world_size,
                         (long long)(s1 - s0), (long long)o->block_size + 1);
    }
    text_ds *d = calloc(1, sizeof(*d));
    unsigned char *buf = malloc((size_t)o->block_size + 1);
    if (!d || !buf) {
        free(d);
        free(buf);
        close(fd);
        return ct__error(CT_ENOMEM, "text: out of memory");
    }
    *d = (text_ds){.fd = fd, .start = s0, .block = o->block_size, .buf = buf};
    int64_t shape[1] = {o->block_size};
    static const ct_dataset_ops ops = {.get_target = text_get, .destroy = text_destroy};
    int rc = ct_dataset_new_targets(&ops, d, count, 1, shape, 1, shape, out);
    if (rc < 0)
        text_destroy(d);
    return rc;
}
