/* tests/data/test_idx.c — the IDX reader: the real Fashion-MNIST (counts, labels and pixels
 * against the raw file bytes read independently with gzread, load time), small generated files
 * (raw and gzip), and rejection of truncated, wrong-magic and mismatched files with CT_EIO /
 * CT_EINVAL and a message naming the file and the fault. */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include "ct/data.h"
#include "tests/data/check.h"

static char dir[256];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reads a (gzip) file fully with zlib's gzread: the test's own, independent path. */
static uint8_t *slurp_gz(const char *path, size_t *len)
{
    gzFile g = gzopen(path, "rb");
    if (!g)
        return NULL;
    size_t cap = 1 << 20, n = 0;
    uint8_t *b = malloc(cap);
    int r;
    while ((r = gzread(g, b + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)r;
        if (n == cap)
            b = realloc(b, cap *= 2);
    }
    gzclose(g);
    *len = n;
    return b;
}

static void real_split(bool train, int64_t n_expect, const int64_t *first_labels)
{
    const char *split = train ? "train" : "t10k";
    char ip[512], lp[512];
    snprintf(ip, sizeof ip, "%s/%s-images-idx3-ubyte.gz", CT_FASHION_MNIST_DIR, split);
    snprintf(lp, sizeof lp, "%s/%s-labels-idx1-ubyte.gz", CT_FASHION_MNIST_DIR, split);
    ct_dataset *ds = NULL;
    double t0 = now_s();
    int rc = ct_dataset_open_mnist(NULL, train, &ds);
    double dt = now_s() - t0;
    CHECK_OK(rc);
    if (rc < 0)
        return;
    printf("fashion-mnist %s: %lld samples loaded in %.3f s\n", split,
           (long long)ct_dataset_length(ds), dt);
    CHECK(dt < 5.0); /* ~0.2 s optimised; generous for sanitizer builds */
    CHECK_EQ(ct_dataset_length(ds), n_expect);
    int64_t shape[CT_DATA_MAX_DIMS];
    CHECK_EQ(ct_dataset_shape(ds, shape), 3);
    CHECK_EQ(shape[0], 1);
    CHECK_EQ(shape[1], 28);
    CHECK_EQ(shape[2], 28);
    CHECK_EQ(ct_dataset_sample_numel(ds), 784);
    size_t ilen = 0, llen = 0;
    uint8_t *img = slurp_gz(ip, &ilen), *lab = slurp_gz(lp, &llen);
    CHECK(img && lab);
    CHECK_EQ(ilen, 16 + (size_t)n_expect * 784);
    CHECK_EQ(llen, 8 + (size_t)n_expect);
    float x[784];
    int64_t y;
    for (int i = 0; i < 10; i++) {
        CHECK_OK(ct_dataset_get(ds, i, x, &y));
        CHECK_EQ(y, first_labels[i]);
    }
    /* Every label, and every pixel of a few images, against the raw bytes. */
    int64_t bad_labels = 0, bad_pix = 0;
    for (int64_t i = 0; i < n_expect && img && lab; i++) {
        bool full = i < 3 || i == n_expect - 1 || i % 9973 == 0;
        CHECK_OK(ct_dataset_get(ds, i, x, &y));
        bad_labels += y != lab[8 + i];
        for (int k = 0; k < 784 && full; k++)
            bad_pix += x[k] != (float)img[16 + i * 784 + k] / 255.0f;
    }
    CHECK_EQ(bad_labels, 0);
    CHECK_EQ(bad_pix, 0);
    if (train) { /* a few values read off `od` of the file: image 0, file offsets 115, 116, 143 =
                    pixels 99, 100, 127 */
        CHECK_OK(ct_dataset_get(ds, 0, x, &y));
        CHECK_NEAR(x[99], 13 / 255.0, 1e-7);
        CHECK_NEAR(x[100], 73 / 255.0, 1e-7);
        CHECK_NEAR(x[127], 136 / 255.0, 1e-7);
        CHECK_EQ(x[0], 0);
    }
    CHECK_EQ(ct_dataset_get(ds, n_expect, x, &y), CT_ERANGE);
    free(img);
    free(lab);
    ct_dataset_destroy(&ds);
    CHECK(ds == NULL);
}

/* Writes bytes to dir/name, gzip'd if gz. */
static const char *put(const char *name, const uint8_t *b, size_t n, bool gz)
{
    static char paths[16][512];
    static int k;
    char *p = paths[k++ % 16];
    snprintf(p, 512, "%s/%s", dir, name);
    if (gz) {
        gzFile g = gzopen(p, "wb");
        if (n)
            gzwrite(g, b, (unsigned)n);
        gzclose(g);
    } else {
        FILE *f = fopen(p, "wb");
        fwrite(b, 1, n, f);
        fclose(f);
    }
    return p;
}

static size_t idx_images(uint8_t *b, uint32_t magic, uint32_t n, uint32_t h, uint32_t w)
{
    uint32_t v[4] = {magic, n, h, w};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            b[i * 4 + j] = (uint8_t)(v[i] >> (24 - 8 * j));
    for (uint32_t i = 0; i < n * h * w; i++)
        b[16 + i] = (uint8_t)(i * 7 + 3);
    return 16 + (size_t)n * h * w;
}

static size_t idx_labels(uint8_t *b, uint32_t magic, uint32_t n)
{
    uint32_t v[2] = {magic, n};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            b[i * 4 + j] = (uint8_t)(v[i] >> (24 - 8 * j));
    for (uint32_t i = 0; i < n; i++)
        b[8 + i] = (uint8_t)(i % 10);
    return 8 + n;
}

static void generated(bool gz)
{
    uint8_t ib[16 + 5 * 3 * 4], lb[8 + 5];
    size_t il = idx_images(ib, 0x803, 5, 3, 4), ll = idx_labels(lb, 0x801, 5);
    const char *ip = put(gz ? "i.gz" : "i.raw", ib, il, gz);
    const char *lp = put(gz ? "l.gz" : "l.raw", lb, ll, gz);
    ct_dataset *ds = NULL;
    CHECK_OK(ct_dataset_open_idx(ip, lp, &ds));
    if (!ds)
        return;
    CHECK_EQ(ct_dataset_length(ds), 5);
    int64_t shape[4];
    CHECK_EQ(ct_dataset_shape(ds, shape), 3);
    CHECK_EQ(shape[0] * 100 + shape[1] * 10 + shape[2], 134);
    float x[12];
    int64_t y;
    for (int i = 0; i < 5; i++) {
        CHECK_OK(ct_dataset_get(ds, i, x, &y));
        CHECK_EQ(y, i % 10);
        for (int k = 0; k < 12; k++)
            CHECK_NEAR(x[k], (double)(uint8_t)((i * 12 + k) * 7 + 3) / 255.0, 1e-7);
    }
    ct_dataset_destroy(&ds);

    /* Rejections. Each names the file and says what was wrong. */
    const char *bad;
    bad = put(gz ? "trunc.gz" : "trunc", ib, il - 7, gz);
    CHECK_ERR(ct_dataset_open_idx(bad, lp, &ds), CT_EIO,
              "truncated: expected 60 pixel bytes, got 53");
    CHECK(strstr(ct_last_error(), gz ? "trunc.gz" : "trunc") != NULL);
    CHECK(ds == NULL);
    bad = put(gz ? "hdr.gz" : "hdr", ib, 10, gz);
    CHECK_ERR(ct_dataset_open_idx(bad, lp, &ds), CT_EIO, "truncated: header needs 16 bytes");
    bad = put(gz ? "ltrunc.gz" : "ltrunc", lb, ll - 1, gz);
    CHECK_ERR(ct_dataset_open_idx(ip, bad, &ds), CT_EIO,
              "truncated: expected 5 label bytes, got 4");
    uint8_t wb[sizeof ib];
    memcpy(wb, ib, il);
    wb[3] = 0x01; /* a labels magic where images belong */
    bad = put(gz ? "magic.gz" : "magic", wb, il, gz);
    CHECK_ERR(ct_dataset_open_idx(bad, lp, &ds), CT_EINVAL,
              "wrong magic 0x00000801, expected 0x00000803");
    CHECK(strstr(ct_last_error(), gz ? "magic.gz" : "magic") != NULL);
    CHECK_ERR(ct_dataset_open_idx(ip, ip, &ds), CT_EINVAL,
              "wrong magic 0x00000803, expected 0x00000801");
    uint8_t lb4[8 + 4];
    size_t ll4 = idx_labels(lb4, 0x801, 4);
    bad = put(gz ? "l4.gz" : "l4", lb4, ll4, gz);
    CHECK_ERR(ct_dataset_open_idx(ip, bad, &ds), CT_EINVAL, "has 5 images but");
    CHECK(strstr(ct_last_error(), "has 4 labels") != NULL);
    uint8_t big[sizeof ib + 3];
    memcpy(big, ib, il);
    big[il] = big[il + 1] = big[il + 2] = 9;
    bad = put(gz ? "long.gz" : "long", big, il + 3, gz);
    CHECK_ERR(ct_dataset_open_idx(bad, lp, &ds), CT_EINVAL, "3 trailing bytes");
    CHECK(ds == NULL);
}

/* A gzip file cut in the middle of its stream: corrupt, not silently short. */
static void cut_gzip(void)
{
    size_t n = 16 + 200 * 28 * 28;
    uint8_t *b = malloc(n);
    idx_images(b, 0x803, 200, 28, 28);
    for (size_t i = 16; i < n; i++) /* incompressible-ish bytes */
        b[i] = (uint8_t)((i * 2654435761u) >> 13);
    const char *p = put("full.gz", b, n, true);
    FILE *f = fopen(p, "rb");
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *z = malloc((size_t)sz);
    CHECK_EQ(fread(z, 1, (size_t)sz, f), sz);
    fclose(f);
    const char *cut = put("cut.gz", z, (size_t)sz / 2, false);
    uint8_t lb[8 + 200];
    const char *lp = put("l200", lb, idx_labels(lb, 0x801, 200), false);
    ct_dataset *ds = NULL;
    CHECK_OK(ct_dataset_open_idx(p, lp, &ds));
    CHECK_EQ(ct_dataset_length(ds), 200);
    ct_dataset_destroy(&ds);
    CHECK_ERR(ct_dataset_open_idx(cut, lp, &ds), CT_EIO, "truncated gzip stream");
    CHECK(strstr(ct_last_error(), "cut.gz") != NULL);
    z[sz / 2] ^= 0xff; /* corrupt a byte in the middle */
    z[sz / 2 + 1] ^= 0x55;
    const char *bad = put("bad.gz", z, (size_t)sz, false);
    int rc = ct_dataset_open_idx(bad, lp, &ds);
    CHECK_EQ(rc, CT_EIO);
    CHECK(strstr(ct_last_error(), "bad.gz") != NULL);
    char missing[600];
    snprintf(missing, sizeof missing, "%s/nope.gz", dir);
    CHECK_ERR(ct_dataset_open_idx(missing, lp, &ds), CT_ENOENT, "nope.gz: cannot open");
    CHECK_ERR(ct_dataset_open_mnist(dir, true, &ds), CT_ENOENT, "train-images-idx3-ubyte");
    free(b);
    free(z);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/ct_test_idx_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    if (access(CT_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) == 0) {
        const int64_t train_first[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
        const int64_t test_first[10] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
        real_split(true, 60000, train_first);
        real_split(false, 10000, test_first);
    } else {
        fprintf(stderr, "Fashion-MNIST not installed at %s: real-data checks fail\n",
                CT_FASHION_MNIST_DIR);
        check_failures++;
    }
    generated(false);
    generated(true);
    cut_gzip();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    CHECK_DONE("data_idx");
}
