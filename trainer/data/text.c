/* trainer/data/text.c — a text file as next-token windows, byte-level (vocabulary 256: a token
 * is a byte), read from the file per sample (pread), so a rank reads only its shard and never
 * loads the whole file. The file's first 1 - val_fraction of bytes is the training split, the
 * rest validation; each split is cut into world byte ranges, one per rank, and each range into
 * windows of block_size + 1 bytes at a stride of block_size: sample i is x = bytes [s, s + T),
 * target y = bytes [s + 1, s + T + 1) with s = start + i T, both as floats (token ids).
 * A token file (ct_tokens_write_file: a header, then u16 ids of a text encoded once with a
 * ct_tokenizer) is read the same way, tokens for bytes. Not here: the tokenizer (tokenizer.c). */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "ct/data.h"
#include "data_internal.h"

enum { TOK_HEADER = 32 };

typedef struct text_ds {
    int fd;
    int64_t start, block;
    int width;          /* bytes per token: 1 (text) or 2 (token file, u16 little-endian) */
    int64_t base;       /* file offset of token 0 */
    unsigned char *buf; /* per dataset: get is called by one thread at a time per loader */
} text_ds;

static int text_get(void *self, int64_t i, float *x, float *y)
{
    text_ds *d = self;
    int64_t n = (d->block + 1) * d->width, got = 0;
    int64_t off = d->base + (d->start + i * d->block) * d->width;
    while (got < n) {
        ssize_t r = pread(d->fd, d->buf + got, (size_t)(n - got), (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return ct__error(CT_EIO, "text: reading bytes %lld..%lld: %s", (long long)off,
                             (long long)(off + n),
                             r < 0 ? strerror(errno) : "the file got shorter");
        got += r;
    }
    if (d->width == 1) {
        for (int64_t t = 0; t < d->block; t++) {
            x[t] = (float)d->buf[t];
            y[t] = (float)d->buf[t + 1];
        }
    } else {
        const unsigned char *b = d->buf;
        for (int64_t t = 0; t < d->block; t++) {
            x[t] = (float)(b[2 * t] | b[2 * t + 1] << 8);
            y[t] = (float)(b[2 * t + 2] | b[2 * t + 3] << 8);
        }
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

/* Windows over the n tokens of width bytes at file offset base of the open fd (taken). */
static int open_windows(int fd, const char *path, int64_t base, int width, int64_t size,
                        const ct_text_opts *o, ct_dataset **out)
{
    const char *unit = width == 1 ? "bytes" : "tokens";
    int64_t split = (int64_t)((double)size * (1.0 - o->val_fraction));
    int64_t lo = o->val ? split : 0, len = o->val ? size - split : split;
    int64_t s0 = lo + len * o->rank / o->world_size, s1 = lo + len * (o->rank + 1) / o->world_size;
    int64_t count = s1 - s0 > o->block_size ? (s1 - s0 - 1) / o->block_size : 0;
    if (count == 0) {
        close(fd);
        return ct__error(CT_EINVAL,
                         "text: %s: the %s split's shard %d of %d has %lld %s, fewer than a "
                         "window of block_size + 1 = %lld",
                         path, o->val ? "validation" : "training", o->rank, o->world_size,
                         (long long)(s1 - s0), unit, (long long)o->block_size + 1);
    }
    text_ds *d = calloc(1, sizeof(*d));
    unsigned char *buf = malloc(((size_t)o->block_size + 1) * (size_t)width);
    if (!d || !buf) {
        free(d);
        free(buf);
        close(fd);
        return ct__error(CT_ENOMEM, "text: out of memory");
    }
    *d = (text_ds){
        .fd = fd, .start = s0, .block = o->block_size, .width = width, .base = base, .buf = buf};
    int64_t shape[1] = {o->block_size};
    static const ct_dataset_ops ops = {.get_target = text_get, .destroy = text_destroy};
    int rc = ct_dataset_new_targets(&ops, d, count, 1, shape, 1, shape, out);
    if (rc < 0)
        text_destroy(d);
    return rc;
}

static int check_opts(const char *path, const ct_text_opts *o, ct_dataset **out)
{
    if (out)
        *out = NULL;
    if (!path || !o || !out || o->block_size <= 0 || o->world_size < 1 || o->rank < 0 ||
        o->rank >= o->world_size || !(o->val_fraction >= 0 && o->val_fraction < 1))
        return ct__error(CT_EINVAL, "text: needs a path, block_size > 0, 0 <= rank < world_size "
                                    "and 0 <= val_fraction < 1");
    return 0;
}

static int open_fd(const char *path, int64_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ct__error(errno == ENOENT ? CT_ENOENT : CT_EIO, "text: cannot open %s: %s", path,
                         strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return ct__error(CT_EIO, "text: %s: %s", path, strerror(e));
    }
    *size = st.st_size;
    return fd;
}

int ct_dataset_open_text(const char *path, const ct_text_opts *o, ct_dataset **out)
{
    int64_t size = 0;
    int fd = check_opts(path, o, out);
    if (fd == 0)
        fd = open_fd(path, &size);
    return fd < 0 ? fd : open_windows(fd, path, 0, 1, size, o, out);
}

static uint64_t get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++, v >>= 8)
        p[i] = (unsigned char)v;
}

/* Reads and checks the header of the open token file fd of size bytes. */
static int read_header(int fd, const char *path, int64_t size, ct_tokens_info *info)
{
    unsigned char h[TOK_HEADER];
    ssize_t r = size >= TOK_HEADER ? pread(fd, h, TOK_HEADER, 0) : 0;
    if (r != TOK_HEADER || memcmp(h, "ct-tok1\n", 8) != 0)
        return ct__error(CT_EINVAL, "text: %s is not a token file (no \"ct-tok1\" header)", path);
    *info = (ct_tokens_info){.vocab_size = (int)get_le(h + 8, 4),
                             .n_tokens = (int64_t)get_le(h + 16, 8),
                             .n_bytes = (int64_t)get_le(h + 24, 8)};
    if (info->vocab_size < 256 || info->vocab_size > 65536 || info->n_tokens < 0 ||
        info->n_tokens > (size - TOK_HEADER) / 2 || info->n_bytes < 0)
        return ct__error(CT_EINVAL,
                         "text: %s: bad token file header: vocab_size %d (256..65536), "
                         "n_tokens %lld (file holds %lld)",
                         path, info->vocab_size, (long long)info->n_tokens,
                         (long long)(size - TOK_HEADER) / 2);
    return 0;
}

int ct_tokens_read_info(const char *path, ct_tokens_info *info)
{
    if (!path || !info)
        return ct__error(CT_EINVAL, "text: ct_tokens_read_info needs a path and info");
    int64_t size = 0;
    int fd = open_fd(path, &size);
    if (fd < 0)
        return fd;
    int rc = read_header(fd, path, size, info);
    close(fd);
    return rc;
}

int ct_dataset_open_tokens(const char *path, const ct_text_opts *o, ct_dataset **out)
{
    int64_t size = 0;
    ct_tokens_info info;
    int fd = check_opts(path, o, out);
    if (fd == 0)
        fd = open_fd(path, &size);
    if (fd < 0)
        return fd;
    int rc = read_header(fd, path, size, &info);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return open_windows(fd, path, TOK_HEADER, 2, info.n_tokens, o, out);
}

int ct_tokens_write_file(const ct_tokenizer *tk, const char *text_path, const char *token_path,
                         ct_tokens_info *info)
{
    if (!tk || !text_path || !token_path)
        return ct__error(CT_EINVAL, "text: ct_tokens_write_file needs a tokenizer and paths");
    if (ct_tokenizer_vocab_size(tk) > 65536)
        return ct__error(CT_EINVAL, "text: a token file holds u16 ids: vocabulary %d too large",
                         ct_tokenizer_vocab_size(tk));
    uint8_t *text = NULL;
    size_t n = 0;
    int rc = ct__read_file(text_path, &text, &n);
    if (rc < 0)
        return rc;
    int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    unsigned char *out = malloc(TOK_HEADER + 2 * (n ? n : 1));
    FILE *f;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", token_path);
    if (!ids || !out) {
        rc = ct__error(CT_ENOMEM, "text: out of memory encoding %s", text_path);
        goto done;
    }
    int64_t m = ct_tokenizer_encode(tk, text, (int64_t)n, ids);
    memcpy(out, "ct-tok1\n", 8);
    put_le(out + 8, (uint64_t)ct_tokenizer_vocab_size(tk), 4);
    put_le(out + 12, 0, 4);
    put_le(out + 16, (uint64_t)m, 8);
    put_le(out + 24, (uint64_t)n, 8);
    for (int64_t i = 0; i < m; i++)
        put_le(out + TOK_HEADER + 2 * i, (uint64_t)ids[i], 2);
    size_t bytes = TOK_HEADER + 2 * (size_t)m;
    f = fopen(tmp, "wb");
    int ok = f && fwrite(out, 1, bytes, f) == bytes;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok || rename(tmp, token_path) != 0) {
        rc = ct__error(CT_EIO, "text: cannot write %s: %s", token_path, strerror(errno));
        remove(tmp);
        goto done;
    }
    if (info)
        *info = (ct_tokens_info){
            .vocab_size = ct_tokenizer_vocab_size(tk), .n_tokens = m, .n_bytes = (int64_t)n};
done:
    free(ids);
    free(out);
    free(text);
    return rc;
}
