/* trainer/data/idx.c — the IDX reader (MNIST, Fashion-MNIST), gzip or raw.
 *
 * Images: u32 BE magic 0x00000803, u32 BE dims N, H, W, then N*H*W u8 pixels.
 * Labels: u32 BE magic 0x00000801, u32 BE dim N, then N u8 labels.
 * Samples are (1, H, W) floats in [0, 1]; pixels stay u8 in memory (47 MB for 60000 images).
 * Not here: the generic file reading and gunzip (readfile.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "trainer/data/data_internal.h"

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Checks the header of an IDX file with `ndims` dims and u8 data, fills dims, returns the
 * offset of the data. */
static int idx_header(const char *path, const uint8_t *b, size_t len, uint32_t magic, int ndims,
                      const char *what, uint64_t *dims)
{
    size_t hdr = 4 + 4 * (size_t)ndims;
    if (len < 4)
        return ct__error(CT_EIO, "%s: truncated: %zu bytes, too short for an IDX magic", path, len);
    if (be32(b) != magic)
        return ct__error(CT_EINVAL, "%s: wrong magic 0x%08x, expected 0x%08x (IDX %s, u8, %d dims)",
                         path, be32(b), magic, what, ndims);
    if (len < hdr)
        return ct__error(CT_EIO, "%s: truncated: header needs %zu bytes, got %zu", path, hdr, len);
    for (int d = 0; d < ndims; d++)
        dims[d] = be32(b + 4 + 4 * d);
    return (int)hdr;
}

int ct_dataset_open_idx(const char *images_path, const char *labels_path, ct_dataset **out)
{
    if (!out)
        return ct__error(CT_EINVAL, "ct_dataset_open_idx: out is NULL");
    *out = NULL;
    if (!images_path || !labels_path)
        return ct__error(CT_EINVAL, "ct_dataset_open_idx: NULL path");
    uint8_t *ib = NULL, *lb = NULL, *pix = NULL;
    int64_t *labels = NULL;
    size_t ilen = 0, llen = 0;
    uint64_t idims[3] = {0}, ldims[1] = {0};
    int rc = ct__read_file(images_path, &ib, &ilen);
    if (rc < 0)
        goto err;
    rc = ct__read_file(labels_path, &lb, &llen);
    if (rc < 0)
        goto err;
    int ioff = idx_header(images_path, ib, ilen, 0x00000803u, 3, "images", idims);
    if (ioff < 0) {
        rc = ioff;
        goto err;
    }
    int loff = idx_header(labels_path, lb, llen, 0x00000801u, 1, "labels", ldims);
    if (loff < 0) {
        rc = loff;
        goto err;
    }
    uint64_t n = idims[0], h = idims[1], w = idims[2];
    if (h == 0 || w == 0) {
        rc = ct__error(CT_EINVAL, "%s: bad image size %llux%llu", images_path,
                       (unsigned long long)h, (unsigned long long)w);
        goto err;
    }
    uint64_t npix;
    if (__builtin_mul_overflow(n, h * w, &npix) || npix > (uint64_t)SIZE_MAX / 2) {
        rc = ct__error(CT_EINVAL, "%s: dims %llu x %llu x %llu too large", images_path,
                       (unsigned long long)n, (unsigned long long)h, (unsigned long long)w);
        goto err;
    }
    if (ilen - (size_t)ioff < npix) {
        rc = ct__error(CT_EIO, "%s: truncated: expected %llu pixel bytes, got %zu", images_path,
                       (unsigned long long)npix, ilen - (size_t)ioff);
        goto err;
    }
    if (ilen - (size_t)ioff > npix) {
        rc = ct__error(CT_EINVAL, "%s: %zu trailing bytes after %llu pixel bytes", images_path,
                       ilen - (size_t)ioff - (size_t)npix, (unsigned long long)npix);
        goto err;
    }
    if (llen - (size_t)loff < ldims[0]) {
        rc = ct__error(CT_EIO, "%s: truncated: expected %llu label bytes, got %zu", labels_path,
                       (unsigned long long)ldims[0], llen - (size_t)loff);
        goto err;
    }
    if (llen - (size_t)loff > ldims[0]) {
        rc = ct__error(CT_EINVAL, "%s: %zu trailing bytes after %llu label bytes", labels_path,
                       llen - (size_t)loff - (size_t)ldims[0], (unsigned long long)ldims[0]);
        goto err;
    }
    if (ldims[0] != n) {
        rc = ct__error(CT_EINVAL, "%s has %llu images but %s has %llu labels", images_path,
                       (unsigned long long)n, labels_path, (unsigned long long)ldims[0]);
        goto err;
    }
    labels = malloc(n ? n * sizeof *labels : 1);
    if (!labels) {
        rc = ct__error(CT_ENOMEM, "%s: out of memory", labels_path);
        goto err;
    }
    for (uint64_t i = 0; i < n; i++)
        labels[i] = lb[loff + i];
    /* Keep the pixels in place: slide them to the start of the buffer, drop the header. */
    memmove(ib, ib + ioff, npix);
    pix = ib;
    ib = NULL;
    free(lb);
    lb = NULL;
    const int64_t shape[3] = {1, (int64_t)h, (int64_t)w};
    return ct__dataset_u8_take(pix, labels, (int64_t)n, 3, shape, 255.0f, out);
err:
    free(ib);
    free(lb);
    free(labels);
    return rc;
}

int ct_dataset_open_mnist(const char *dir, bool train, ct_dataset **out)
{
    if (!out)
        return ct__error(CT_EINVAL, "ct_dataset_open_mnist: out is NULL");
    *out = NULL;
    if (!dir)
        dir = CT_FASHION_MNIST_DIR;
    const char *split = train ? "train" : "t10k";
    char ip[4096], lp[4096];
    for (int gz = 1; gz >= 0; gz--) {
        snprintf(ip, sizeof ip, "%s/%s-images-idx3-ubyte%s", dir, split, gz ? ".gz" : "");
        snprintf(lp, sizeof lp, "%s/%s-labels-idx1-ubyte%s", dir, split, gz ? ".gz" : "");
        FILE *f = fopen(ip, "rb");
        if (f) {
            fclose(f);
            return ct_dataset_open_idx(ip, lp, out);
        }
    }
    return ct__error(CT_ENOENT, "%s: no %s-images-idx3-ubyte(.gz) there", dir, split);
}
