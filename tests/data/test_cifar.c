/* tests/data/test_cifar.c — the CIFAR-10 binary reader on files generated in its format:
 * records of 1 label byte + R, G, B planes of 32x32; several files concatenated in order; sizes
 * that are not a multiple of 3073 and labels above 9 are rejected with the file named. */
#include <stdint.h>
#include <stdlib.h>
#include "ct/data.h"
#include "tests/data/check.h"

static char dir[256];

/* Pixel value of image `img` (global index), channel c, row y, column x. */
static uint8_t pv(int img, int c, int y, int x)
{
    return (uint8_t)(img * 31 + c * 101 + y * 7 + x * 3);
}

static const char *write_batch(const char *name, int first, int n, size_t extra, int bad_label)
{
    static char paths[8][512];
    static int k;
    char *p = paths[k++ % 8];
    snprintf(p, 512, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    for (int i = 0; i < n; i++) {
        uint8_t rec[3073];
        rec[0] = (uint8_t)((first + i) % 10);
        if (i == bad_label)
            rec[0] = 10;
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 32; y++)
                for (int x = 0; x < 32; x++)
                    rec[1 + c * 1024 + y * 32 + x] = pv(first + i, c, y, x);
        fwrite(rec, 1, sizeof rec, f);
    }
    for (size_t e = 0; e < extra; e++)
        fputc(0, f);
    fclose(f);
    return p;
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/ct_test_cifar_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    const char *paths[3] = {write_batch("data_batch_1.bin", 0, 4, 0, -1),
                            write_batch("data_batch_2.bin", 4, 3, 0, -1),
                            write_batch("data_batch_3.bin", 7, 5, 0, -1)};
    ct_dataset *ds = NULL;
    CHECK_OK(ct_dataset_open_cifar10(paths, 3, &ds));
    CHECK_EQ(ct_dataset_length(ds), 12);
    int64_t shape[4];
    CHECK_EQ(ct_dataset_shape(ds, shape), 3);
    CHECK_EQ(shape[0], 3);
    CHECK_EQ(shape[1], 32);
    CHECK_EQ(shape[2], 32);
    static float x[3072];
    int64_t y;
    int64_t bad = 0;
    for (int i = 0; i < 12; i++) {
        CHECK_OK(ct_dataset_get(ds, i, x, &y));
        CHECK_EQ(y, i % 10);
        for (int c = 0; c < 3; c++)
            for (int r = 0; r < 32; r++)
                for (int q = 0; q < 32; q++)
                    bad += x[c * 1024 + r * 32 + q] != (float)pv(i, c, r, q) / 255.0f;
    }
    CHECK_EQ(bad, 0);
    /* spot values: image 5 (second file), green plane, row 2, column 9 */
    CHECK_OK(ct_dataset_get(ds, 5, x, &y));
    CHECK_NEAR(x[1024 + 2 * 32 + 9], (double)(uint8_t)(5 * 31 + 101 + 14 + 27) / 255.0, 1e-7);
    ct_dataset_destroy(&ds);

    /* The _dir convenience: data_batch_1..5 must all exist. */
    CHECK_ERR(ct_dataset_open_cifar10_dir(dir, true, &ds), CT_ENOENT, "data_batch_4.bin");
    write_batch("data_batch_4.bin", 12, 1, 0, -1);
    write_batch("data_batch_5.bin", 13, 2, 0, -1);
    CHECK_OK(ct_dataset_open_cifar10_dir(dir, true, &ds));
    CHECK_EQ(ct_dataset_length(ds), 15);
    ct_dataset_destroy(&ds);
    write_batch("test_batch.bin", 0, 2, 0, -1);
    CHECK_OK(ct_dataset_open_cifar10_dir(dir, false, &ds));
    CHECK_EQ(ct_dataset_length(ds), 2);
    ct_dataset_destroy(&ds);

    /* Rejections */
    const char *odd[2] = {paths[0], write_batch("odd.bin", 0, 2, 100, -1)};
    CHECK_ERR(ct_dataset_open_cifar10(odd, 2, &ds), CT_EINVAL,
              "odd.bin: size 6246 is not a positive multiple of the 3073-byte record");
    CHECK(strstr(ct_last_error(), "2 whole records + 100 bytes") != NULL);
    CHECK(ds == NULL);
    const char *empty[1] = {write_batch("empty.bin", 0, 0, 0, -1)};
    CHECK_ERR(ct_dataset_open_cifar10(empty, 1, &ds), CT_EINVAL, "empty.bin: size 0");
    const char *lab[1] = {write_batch("label.bin", 0, 3, 0, 2)};
    CHECK_ERR(ct_dataset_open_cifar10(lab, 1, &ds), CT_EINVAL,
              "label.bin: record 2 (byte offset 6146): label 10 not in 0..9");
    CHECK_ERR(ct_dataset_open_cifar10(NULL, 0, &ds), CT_EINVAL, "no files");

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    CHECK_DONE("data_cifar");
}
