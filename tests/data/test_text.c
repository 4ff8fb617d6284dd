/* tests/data/test_text.c — text as next-token windows (ct_dataset_open_text): a file of known
 * bytes; every window's x and y are the file's bytes at the right offsets; the shards of each
 * split are disjoint, in order, and together cover the split but for each shard's tail (less
 * than a window); validation windows come only from the last val_fraction of the file; a shard
 * shorter than a window is an error naming it, as is a missing file. */
#define _DEFAULT_SOURCE
#include <stdlib.h>
#include <unistd.h>

#include "ct/data.h"
#include "tests/data/check.h"

enum { SIZE = 10007, T = 16 };

static unsigned char bytes[SIZE];

/* checks every window of a shard; returns the byte range [lo, hi) its windows cover */
static void check_shard(const char *path, const ct_text_opts *o, int64_t *lo, int64_t *hi)
{
    ct_dataset *ds = NULL;
    CHECK(ct_dataset_open_text(path, o, &ds) == 0);
    if (!ds)
        return;
    CHECK_EQ(ct_dataset_sample_numel(ds), T);
    CHECK_EQ(ct_dataset_target_numel(ds), T);
    int64_t n = ct_dataset_length(ds);
    float x[T], y[T];
    *lo = -1;
    for (int64_t i = 0; i < n; i++) {
        CHECK(ct_dataset_get_target(ds, i, x, y) == 0);
        /* find the window's start from its first byte and the previous window */
        int64_t s = *lo < 0 ? -1 : *lo + i * T;
        if (*lo < 0) {
            for (int64_t k = 0; k + T < SIZE && s < 0; k++)
                if (memcmp(&bytes[k],
                           (unsigned char[]){(unsigned char)x[0], (unsigned char)x[1],
                                             (unsigned char)x[2], (unsigned char)x[3]},
                           4) == 0)
                    s = k;
            *lo = s;
        }
        for (int t = 0; t < T && s >= 0; t++) {
            CHECK_EQ((int64_t)x[t], bytes[s + t]);
            CHECK_EQ((int64_t)y[t], bytes[s + t + 1]);
        }
    }
    *hi = *lo + n * T;
    ct_dataset_destroy(&ds);
}

int main(void)
{
    char path[] = "/tmp/ct-text-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    uint64_t s = 12345;
    for (int i = 0; i < SIZE; i++) { /* distinct-enough bytes: a xorshift stream */
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        bytes[i] = (unsigned char)(s >> 24);
    }
    CHECK(write(fd, bytes, SIZE) == SIZE);
    close(fd);
    for (int val = 0; val < 2; val++) {
        int64_t split = (int64_t)(SIZE * 0.9), start = val ? split : 0, end = val ? SIZE : split;
        int64_t prev_hi = start;
        for (int r = 0; r < 3; r++) {
            ct_text_opts o = {
                .block_size = T, .rank = r, .world_size = 3, .val_fraction = 0.1, .val = val};
            int64_t lo = 0, hi = 0;
            check_shard(path, &o, &lo, &hi);
            int64_t r0 = start + (end - start) * r / 3, r1 = start + (end - start) * (r + 1) / 3;
            CHECK_EQ(lo, r0);       /* the shard starts at its range's first byte */
            CHECK(hi + 1 <= r1);    /* its last window's target stays inside */
            CHECK(r1 - hi < T + 1); /* and less than a window is left over */
            CHECK(lo >= prev_hi);   /* shards in order, disjoint */
            prev_hi = hi;
        }
    }
    ct_dataset *ds = NULL;
    ct_text_opts big = {.block_size = 5000, .rank = 0, .world_size = 2, .val_fraction = 0.1};
    CHECK(ct_dataset_open_text(path, &big, &ds) == CT_EINVAL && !ds);
    CHECK(strstr(ct_last_error(), "shard 0 of 2 has 4503 bytes, fewer than a window"));
    CHECK(ct_dataset_open_text("/nonexistent/t.txt", &big, &ds) == CT_ENOENT);
    unlink(path);
    if (check_failures)
        fprintf(stderr, "%d failure(s)\n", check_failures);
    else
        printf("text windows: ok\n");
    return check_failures != 0;
}
