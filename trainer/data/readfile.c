/* trainer/data/readfile.c — reads a whole file into memory, inflating it if it is gzip.
 *
 * The compressed file is read with one fread and inflated in one pass into a buffer sized from
 * the gzip trailer (ISIZE), so a 26 MB Fashion-MNIST file costs one inflate and no copies.
 * Not here: parsing of any format. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "common/common.h"
#include "trainer/data/data_internal.h"

const char *ct__basename(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static int read_raw(const char *path, uint8_t **buf, size_t *len)
{
    int rc = 0;
    uint8_t *b = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct__error(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open: %s", path,
                         strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) {
        rc = ct__error(CT_EIO, "%s: cannot seek: %s", path, strerror(errno));
        goto out;
    }
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        rc = ct__error(CT_EIO, "%s: cannot get the size: %s", path, strerror(errno));
        goto out;
    }
    b = malloc(size ? (size_t)size : 1);
    if (!b) {
        rc = ct__error(CT_ENOMEM, "%s: out of memory for %ld bytes", path, size);
        goto out;
    }
    if (size && fread(b, 1, (size_t)size, f) != (size_t)size) {
        rc = ct__error(CT_EIO, "%s: read failed", path);
        goto out;
    }
    *buf = b;
    *len = (size_t)size;
    b = NULL;
out:
    free(b);
    fclose(f);
    return rc;
}

/* Inflates every gzip member of in into a malloc'd buffer. */
static int gunzip(const char *path, const uint8_t *in, size_t in_len, uint8_t **buf, size_t *len)
{
    int rc = 0;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    /* ISIZE: uncompressed size mod 2^32 of the last member; a hint only. */
    size_t cap = in_len >= 18 ? (size_t)in[in_len - 4] | (size_t)in[in_len - 3] << 8 |
                                    (size_t)in[in_len - 2] << 16 | (size_t)in[in_len - 1] << 24
                              : 0;
    if (cap < in_len)
        cap = in_len * 4 + 64;
    cap += 1; /* room to see the stream end without a resize */
    uint8_t *out = malloc(cap);
    size_t used = 0;
    if (!out)
        return ct__error(CT_ENOMEM, "%s: out of memory for %zu bytes", path, cap);
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
        rc = ct__error(CT_EIO, "%s: inflateInit2 failed", path);
        free(out);
        return rc;
    }
    zs.next_in = (Bytef *)in;
    size_t in_left = in_len;
    for (;;) {
        if (used == cap) {
            size_t ncap = cap * 2;
            uint8_t *n = realloc(out, ncap);
            if (!n) {
                rc = ct__error(CT_ENOMEM, "%s: out of memory for %zu bytes", path, ncap);
                goto out;
            }
            out = n;
            cap = ncap;
        }
        /* zlib counts in uInt: feed at most 1 GiB at a time. */
        uInt in_chunk = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
        uInt out_chunk = cap - used > (1u << 30) ? (1u << 30) : (uInt)(cap - used);
        zs.avail_in = in_chunk;
        zs.next_out = out + used;
        zs.avail_out = out_chunk;
        int z = inflate(&zs, Z_NO_FLUSH);
        in_left -= in_chunk - zs.avail_in;
        used += out_chunk - zs.avail_out;
        if (z == Z_STREAM_END) {
            /* Another member follows (concatenated gzip)? Skip padding zeros like gzip does. */
            while (in_left && *zs.next_in == 0) {
                zs.next_in++;
                in_left--;
            }
            if (!in_left)
                break;
            if (inflateReset(&zs) != Z_OK) {
                rc = ct__error(CT_EIO, "%s: inflateReset failed", path);
                goto out;
            }
            continue;
        }
        if (z == Z_BUF_ERROR && in_left == 0 && zs.avail_out > 0) {
            rc = ct__error(CT_EIO, "%s: truncated gzip stream after %zu compressed bytes", path,
                           in_len);
            goto out;
        }
        if (z != Z_OK && z != Z_BUF_ERROR) {
            rc = ct__error(CT_EIO, "%s: corrupt gzip stream: %s", path,
                           zs.msg ? zs.msg : "inflate failed");
            goto out;
        }
        if (in_left == 0 && zs.avail_out > 0 && z == Z_OK) {
            /* zlib consumed everything and still wants more input */
            rc = ct__error(CT_EIO, "%s: truncated gzip stream after %zu compressed bytes", path,
                           in_len);
            goto out;
        }
    }
    *buf = out;
    *len = used;
    out = NULL;
out:
    inflateEnd(&zs);
    free(out);
    return rc;
}

int ct__read_file(const char *path, uint8_t **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    uint8_t *raw = NULL;
    size_t raw_len = 0;
    int rc = read_raw(path, &raw, &raw_len);
    if (rc < 0)
        return rc;
    if (raw_len >= 2 && raw[0] == 0x1f && raw[1] == 0x8b) {
        rc = gunzip(path, raw, raw_len, buf, len);
        free(raw);
        return rc;
    }
    *buf = raw;
    *len = raw_len;
    return 0;
}
