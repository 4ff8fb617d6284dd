/* tests/data/test_targets.c — f32 targets and sharded files: a target dataset in memory (get,
 * subset, the loader's target batches, pad_to), CSV target columns, and CSV shards: every line
 * in exactly one shard, in file order, for several world sizes, each rank reading little more
 * than its byte range (counted bytes), plus errors. */
#include <stdint.h>
#include <stdlib.h>
#include "ct/data.h"
#include "tests/data/check.h"

static char dir[256];

static const char *put(const char *name, const char *text)
{
    static char paths[8][512];
    static int k;
    char *p = paths[k++ % 8];
    snprintf(p, 512, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    fputs(text, f);
    fclose(f);
    return p;
}

/* In memory: x (6, 2), y (6, 3) = (i, -i, 10 i); subset; loader batches and padding. */
static void test_memory(void)
{
    float x[12], y[18], xs[2], ys[3];
    for (int i = 0; i < 6; i++) {
        x[2 * i] = (float)i;
        x[2 * i + 1] = 0.5f * (float)i;
        y[3 * i] = (float)i;
        y[3 * i + 1] = -(float)i;
        y[3 * i + 2] = 10.0f * (float)i;
    }
    const int64_t shape[1] = {2}, tshape[1] = {3};
    ct_dataset *ds = NULL, *sub = NULL;
    CHECK_OK(ct_dataset_from_f32_targets(x, y, 6, 1, shape, 1, tshape, &ds));
    int64_t ts[CT_DATA_MAX_DIMS];
    CHECK_EQ(ct_dataset_target_shape(ds, ts), 1);
    CHECK_EQ(ts[0], 3);
    CHECK_EQ(ct_dataset_target_numel(ds), 3);
    CHECK_OK(ct_dataset_get_target(ds, 4, xs, ys));
    CHECK_NEAR(xs[1], 2.0, 0);
    CHECK_NEAR(ys[2], 40.0, 0);
    int64_t label;
    CHECK_ERR(ct_dataset_get(ds, 0, xs, &label), CT_EINVAL, "f32 targets");
    CHECK_ERR(ct_dataset_get_target(ds, 6, xs, ys), CT_ERANGE, "index 6");
    CHECK_OK(ct_dataset_subset(ds, 2, 3, &sub));
    CHECK_EQ(ct_dataset_target_numel(sub), 3);
    CHECK_OK(ct_dataset_get_target(sub, 0, xs, ys));
    CHECK_NEAR(ys[1], -2.0, 0);

    /* labels datasets say 0 and refuse get_target */
    ct_dataset *lab = NULL;
    const int64_t labels[2] = {1, 2};
    CHECK_OK(ct_dataset_from_f32(x, labels, 2, 1, shape, &lab));
    CHECK_EQ(ct_dataset_target_shape(lab, NULL), 0);
    CHECK_ERR(ct_dataset_get_target(lab, 0, xs, ys), CT_EINVAL, "int64 labels");
    ct_dataset_destroy(&lab);

    /* loader: rank 1 of 2, no shuffle: samples 1, 3, 5; targets travel with their sample */
    for (int prefetch = 0; prefetch <= 2; prefetch += 2) {
        ct_loader *ld = NULL;
        CHECK_OK(ct_loader_new(
            ds,
            &(ct_loader_opts){.batch_size = 2, .rank = 1, .world_size = 2, .prefetch = prefetch},
            &ld));
        ct_batch b;
        int64_t seen = 0;
        while (ld && ct_loader_next(ld, &b) > 0) {
            CHECK(b.y == NULL);
            CHECK(b.target != NULL);
            CHECK_EQ(b.tndim, 1);
            CHECK_EQ(b.tshape[0], 3);
            for (int64_t k = 0; k < b.n; k++, seen++) {
                int64_t i = b.index[k];
                CHECK_EQ(i, 2 * seen + 1);
                CHECK_NEAR(b.x[2 * k + 1], 0.5 * (double)i, 0);
                CHECK_NEAR(b.target[3 * k + 2], 10.0 * (double)i, 0);
            }
        }
        CHECK_EQ(seen, 3);
        ct_loader_destroy(&ld);
    }

    /* pad_to: 3 samples padded to 5 repeat the epoch's order from its start; shuffled orders
     * depend on (seed, epoch) only */
    ct_loader *a = NULL, *c = NULL;
    CHECK_OK(ct_loader_new(
        sub, &(ct_loader_opts){.batch_size = 5, .shuffle = true, .seed = 9, .pad_to = 5}, &a));
    CHECK_OK(ct_loader_new(
        sub,
        &(ct_loader_opts){.batch_size = 5, .shuffle = true, .seed = 9, .pad_to = 5, .prefetch = 1},
        &c));
    CHECK_EQ(ct_loader_num_samples(a), 5);
    for (int64_t e = 0; e < 3; e++) {
        ct_batch ba, bc;
        CHECK_OK(ct_loader_set_epoch(a, e));
        CHECK_OK(ct_loader_set_epoch(c, e));
        CHECK_EQ(ct_loader_next(a, &ba), 1);
        CHECK_EQ(ct_loader_next(c, &bc), 1);
        CHECK_EQ(ba.n, 5);
        for (int k = 0; k < 5; k++)
            CHECK_EQ(ba.index[k], bc.index[k]);
        CHECK_EQ(ba.index[3], ba.index[0]);
        CHECK_EQ(ba.index[4], ba.index[1]);
        CHECK(ba.index[0] != ba.index[1] && ba.index[1] != ba.index[2]);
        for (int k = 0; k < 5; k++)
            CHECK_NEAR(ba.target[3 * k], 2.0 + (double)ba.index[k], 0);
    }
    ct_loader_destroy(&a);
    ct_loader_destroy(&c);
    CHECK_ERR(ct_loader_new(sub, &(ct_loader_opts){.pad_to = 2}, &a), CT_EINVAL, "pad_to 2");
    ct_dataset_destroy(&sub);
    ct_dataset_destroy(&ds);
}

static void test_csv_targets(void)
{
    ct_dataset *ds = NULL;
    /* two targets, the last two columns */
    const char *p = put("t.csv", "x1,x2,y1,y2\n1,2,0.5,-1\n3,4,1.5,-3\n");
    CHECK_OK(ct_dataset_open_csv(p, &(ct_csv_opts){.label_column = -2, .targets = 2}, &ds));
    float x[4], y[4];
    int64_t ts[4];
    CHECK(ds != NULL);
    if (ds) {
        CHECK_EQ(ct_dataset_length(ds), 2);
        CHECK_EQ(ct_dataset_sample_numel(ds), 2);
        CHECK_EQ(ct_dataset_target_shape(ds, ts), 1);
        CHECK_EQ(ts[0], 2);
        CHECK_OK(ct_dataset_get_target(ds, 1, x, y));
        CHECK_NEAR(x[0], 3, 0);
        CHECK_NEAR(x[1], 4, 0);
        CHECK_NEAR(y[0], 1.5, 0);
        CHECK_NEAR(y[1], -3, 0);
    }
    ct_dataset_destroy(&ds);
    /* one target by name, in the middle; non-integer values are fine */
    CHECK_OK(ct_dataset_open_csv(p, &(ct_csv_opts){.label_name = "x2", .targets = 1}, &ds));
    if (ds) {
        CHECK_EQ(ct_dataset_sample_numel(ds), 3);
        CHECK_OK(ct_dataset_get_target(ds, 0, x, y));
        CHECK_NEAR(y[0], 2, 0);
        CHECK_NEAR(x[0], 1, 0);
        CHECK_NEAR(x[1], 0.5, 0);
        CHECK_NEAR(x[2], -1, 0);
    }
    ct_dataset_destroy(&ds);
    CHECK_ERR(ct_dataset_open_csv(p, &(ct_csv_opts){.label_column = -1, .targets = 2}, &ds),
              CT_EINVAL, "2 target columns from column 4");
    CHECK_ERR(ct_dataset_open_csv(p, &(ct_csv_opts){.targets = 4}, &ds), CT_EINVAL,
              "need the target columns and at least one feature");
}

/* A file of n data lines "i,<padding>,2i" (varying lengths), header line first, a blank line
 * here and there; written to path. Returns its size. */
static long write_big(const char *path, int n)
{
    FILE *f = fopen(path, "wb");
    fputs("id,pad,y\n", f);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%d,%.*s1,%d\n", i, i % 37, "0000000000000000000000000000000000000000", 2 * i);
        if (i % 101 == 0)
            fputs("\n", f);
    }
    long size = ftell(f);
    fclose(f);
    return size;
}

static void test_shards(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/big.csv", dir);
    const int n = 20000;
    long size = write_big(path, n);
    const ct_csv_opts o = {.label_column = -1, .targets = 1};
    const int worlds[] = {1, 2, 3, 4, 7};
    for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
        int world = worlds[w];
        int64_t next = 0, total_read = 0;
        for (int r = 0; r < world; r++) {
            ct_dataset *ds = NULL;
            int64_t bytes = -1;
            CHECK_OK(ct_dataset_open_csv_shard(path, &o, r, world, &ds, &bytes));
            if (!ds)
                continue;
            /* its lines follow the previous rank's, in file order */
            float x[2], y[1];
            for (int64_t i = 0; i < ct_dataset_length(ds); i++, next++) {
                CHECK_OK(ct_dataset_get_target(ds, i, x, y));
                if (x[0] != (float)next || y[0] != (float)(2 * next)) {
                    fprintf(stderr, "world %d rank %d sample %lld: id %g y %g, want %lld\n", world,
                            r, (long long)i, x[0], y[0], (long long)next);
                    check_failures++;
                    break;
                }
            }
            /* bytes read: the range, one byte before it, the first line's chunk and the rest of
             * the last line's chunk; never the whole file when world > 1 */
            long range = size * (r + 1) / world - size * r / world;
            CHECK(bytes >= range);
            CHECK(bytes <= range + 1 + 2 * 256);
            total_read += bytes;
            ct_dataset_destroy(&ds);
        }
        CHECK_EQ(next, n);
        printf("world %d: %lld bytes read in all for a file of %ld\n", world, (long long)total_read,
               size);
        CHECK(total_read <= size + world * (1 + 2 * 256));
    }
    /* more ranks than lines: some shards are empty, each line still once */
    const char *p = put("small.csv", "1,10\n2,20\n");
    int64_t count = 0;
    for (int r = 0; r < 8; r++) {
        ct_dataset *ds = NULL;
        CHECK_OK(ct_dataset_open_csv_shard(p, &o, r, 8, &ds, NULL));
        count += ct_dataset_length(ds);
        ct_dataset_destroy(&ds);
    }
    CHECK_EQ(count, 2);
    /* errors: a line of a shard past the first is named by its byte offset */
    p = put("badshard.csv", "a,b\n1,2\n3,4\n5,x\n");
    ct_dataset *ds = NULL;
    CHECK_ERR(ct_dataset_open_csv_shard(p, &o, 1, 2, &ds, NULL), CT_EINVAL,
              "badshard.csv:byte 12: column 2 (b): cannot parse 'x'");
    CHECK_ERR(ct_dataset_open_csv_shard(p, &o, 2, 2, &ds, NULL), CT_EINVAL, "rank 2 not in");
    CHECK(ds == NULL);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/ct_test_targets_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_memory();
    test_csv_targets();
    test_shards();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    CHECK_DONE("data_targets");
}
