/* trainer/data/cifar.c — the CIFAR-10 binary reader.
 *
 * Each file is a sequence of 3073-byte records: 1 label byte (0..9), then 3072 pixel bytes,
 * the R, G and B planes of a 32x32 image (so a record is already (3, 32, 32) CHW). Several
 * files (data_batch_1..5.bin) are concatenated in the order given. Samples are (3, 32, 32)
 * floats in [0, 1]. Not here: gzip'd tarballs (unpack them first; a gzip'd .bin also works). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/common.h"
#include "trainer/data/data_internal.h"

#define REC 3073
#define PIX 3072

int ct_dataset_open_cifar10(const char *const *paths, int n_paths, ct_dataset **out)
{
    if (!out)
        return ct__error(CT_EINVAL, "ct_dataset_open_cifar10: out is NULL");
    *out = NULL;
    if (!paths || n_paths <= 0)
        return ct__error(CT_EINVAL, "ct_dataset_open_cifar10: no files given");
    int rc = 0;
    uint8_t **bufs = calloc((size_t)n_paths, sizeof *bufs);
    size_t *lens = calloc((size_t)n_paths, sizeof *lens);
    uint8_t *pix = NULL;
    int64_t *labels = NULL;
    if (!bufs || !lens) {
        rc = ct__error(CT_ENOMEM, "cifar10: out of memory");
        goto out;
    }
    size_t total = 0;
    for (int f = 0; f < n_paths; f++) {
        if (!paths[f]) {
            rc = ct__error(CT_EINVAL, "cifar10: paths[%d] is NULL", f);
            goto out;
        }
        rc = ct__read_file(paths[f], &bufs[f], &lens[f]);
        if (rc < 0)
            goto out;
        if (lens[f] == 0 || lens[f] % REC != 0) {
            rc = ct__error(CT_EINVAL,
                           "%s: size %zu is not a positive multiple of the 3073-byte record "
                           "(%zu whole records + %zu bytes)",
                           paths[f], lens[f], lens[f] / REC, lens[f] % REC);
            goto out;
        }
        total += lens[f] / REC;
    }
    pix = malloc(total * PIX);
    labels = malloc(total * sizeof *labels);
    if (!pix || !labels) {
        rc = ct__error(CT_ENOMEM, "cifar10: out of memory for %zu images", total);
        goto out;
    }
    size_t k = 0;
    for (int f = 0; f < n_paths; f++) {
        size_t nrec = lens[f] / REC;
        for (size_t r = 0; r < nrec; r++, k++) {
            const uint8_t *rec = bufs[f] + r * REC;
            if (rec[0] > 9) {
                rc = ct__error(CT_EINVAL, "%s: record %zu (byte offset %zu): label %u not in 0..9",
                               paths[f], r, r * REC, rec[0]);
                goto out;
            }
            labels[k] = rec[0];
            memcpy(pix + k * PIX, rec + 1, PIX);
        }
        free(bufs[f]);
        bufs[f] = NULL;
    }
    const int64_t shape[3] = {3, 32, 32};
    rc = ct__dataset_u8_take(pix, labels, (int64_t)total, 3, shape, 255.0f, out);
    pix = NULL;
    labels = NULL;
out:
    if (bufs)
        for (int f = 0; f < n_paths; f++)
            free(bufs[f]);
    free(bufs);
    free(lens);
    free(pix);
    free(labels);
    return rc;
}

int ct_dataset_open_cifar10_dir(const char *dir, bool train, ct_dataset **out)
{
    if (!out)
        return ct__error(CT_EINVAL, "ct_dataset_open_cifar10_dir: out is NULL");
    *out = NULL;
    if (!dir)
        return ct__error(CT_EINVAL, "ct_dataset_open_cifar10_dir: dir is NULL");
    char names[5][4096];
    const char *paths[5];
    int n = train ? 5 : 1;
    for (int i = 0; i < n; i++) {
        if (train)
            snprintf(names[i], sizeof names[i], "%s/data_batch_%d.bin", dir, i + 1);
        else
            snprintf(names[i], sizeof names[i], "%s/test_batch.bin", dir);
        paths[i] = names[i];
    }
    return ct_dataset_open_cifar10(paths, n, out);
}
