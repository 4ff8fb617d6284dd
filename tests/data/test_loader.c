/* tests/data/test_loader.c — the loader: batches follow the distributed sampler's shard, carry
 * the right samples, labels and transforms; prefetching yields exactly the batches of the
 * synchronous path; the prefetch thread starts and stops many times (also mid-batch, on a slow
 * dataset) and dataset errors reach the consumer with their message; buffers are reused. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "common/common.h" /* ct__error: the user dataset below reports like ct's own code */
#include "ct/data.h"
#include "tests/data/check.h"

#define N 103
#define C 2
#define H 5
#define W 6
#define NUMEL (C * H * W)

static float data[N * NUMEL];
static int64_t labels[N];
static const int64_t shape[3] = {C, H, W};

/* ---- a user dataset written against the vtable: slow, failing at one index, counting ---- */
typedef struct user_ds {
    int fail_at;
    int sleep_us;
    atomic_int gets;
    int *destroyed;
} user_ds;

static int user_get(void *self, int64_t i, float *x, int64_t *label)
{
    user_ds *u = self;
    atomic_fetch_add(&u->gets, 1);
    if (u->sleep_us)
        usleep((useconds_t)u->sleep_us);
    if (i == u->fail_at)
        return ct__error(CT_EIO, "boom at %lld", (long long)i);
    memcpy(x, data + i * NUMEL, NUMEL * sizeof *x);
    *label = labels[i];
    return 0;
}

static void user_destroy(void *self)
{
    user_ds *u = self;
    (*u->destroyed)++;
    free(u);
}

static user_ds *last_user; /* the most recent user_new's state, for counting its gets */

static ct_dataset *user_new(int fail_at, int sleep_us, int *destroyed)
{
    static const ct_dataset_ops ops = {user_get, user_destroy};
    user_ds *u = calloc(1, sizeof *u);
    last_user = u;
    u->fail_at = fail_at;
    u->sleep_us = sleep_us;
    u->destroyed = destroyed;
    ct_dataset *ds = NULL;
    CHECK_OK(ct_dataset_new(&ops, u, N, 3, shape, &ds));
    return ds;
}

/* Expected transformed sample idx for the loader options. */
static void expect_sample(const ct_loader_opts *o, int64_t epoch, int64_t idx, float *out)
{
    const ct_transform_opts *t = &o->transform;
    int oh = t->crop_h ? t->crop_h : H, ow = t->crop_w ? t->crop_w : W;
    ct_transform_draw d = ct_transform_draw_for(t, H, W, o->seed, epoch, idx);
    if (t->crop_h || t->hflip_p > 0)
        ct_transform_crop_flip(data + idx * NUMEL, C, H, W, t->crop_h ? t->crop_pad : 0, d.top,
                               d.left, d.flip, out, oh, ow);
    else
        memcpy(out, data + idx * NUMEL, NUMEL * sizeof *out);
    if (t->mean)
        ct_transform_normalize(out, (int64_t)C * oh * ow, t->mean, t->std,
                               t->n_mean ? t->n_mean : C);
}

/* One epoch's batches against the sampler and the transforms, done independently. */
static void check_epoch(ct_dataset *ds, const ct_loader_opts *o, int64_t epoch)
{
    ct_loader *ld = NULL;
    CHECK_OK(ct_loader_new(ds, o, &ld));
    if (!ld)
        return;
    CHECK_OK(ct_loader_set_epoch(ld, epoch));
    ct_sampler_opts so = {.rank = o->rank,
                          .world_size = o->world_size,
                          .shuffle = o->shuffle,
                          .drop_last = o->sampler_drop_last,
                          .seed = o->seed,
                          .epoch = epoch};
    int64_t ns = ct_sampler_num_samples(N, &so);
    int64_t *shard = calloc((size_t)ns + 1, 8), *scr = calloc(N, 8);
    CHECK_EQ(ct_sampler_indices(N, &so, shard, scr), ns);
    int64_t lshape[4];
    int nd = ct_loader_shape(ld, lshape);
    CHECK_EQ(nd, 3);
    int64_t numel = lshape[0] * lshape[1] * lshape[2];
    float *want = malloc((size_t)numel * sizeof *want);
    ct_batch b;
    int64_t pos = 0, nb = 0, bad = 0;
    int rc;
    while ((rc = ct_loader_next(ld, &b)) > 0) {
        CHECK_EQ(b.batch, nb);
        CHECK_EQ(b.ndim, 3);
        CHECK(b.shape[0] == lshape[0] && b.shape[1] == lshape[1] && b.shape[2] == lshape[2]);
        for (int64_t k = 0; k < b.n; k++, pos++) {
            CHECK_EQ(b.index[k], shard[pos]);
            CHECK_EQ(b.y[k], labels[shard[pos]]);
            expect_sample(o, epoch, shard[pos], want);
            bad += memcmp(b.x + k * numel, want, (size_t)numel * sizeof *want) != 0;
        }
        nb++;
    }
    CHECK_EQ(rc, 0);
    CHECK_EQ(bad, 0);
    CHECK_EQ(nb, ct_loader_num_batches(ld));
    CHECK_EQ(pos, o->drop_last ? ct_loader_num_batches(ld) * o->batch_size : ns);
    CHECK_EQ(ct_loader_next(ld, &b), 0); /* stays at the end until set_epoch */
    free(want);
    free(shard);
    free(scr);
    ct_loader_destroy(&ld);
}

/* Runs the same epochs with prefetch 0 and `pf`: every batch identical. */
static void prefetch_equals_sync(ct_dataset *ds, ct_loader_opts o, int pf)
{
    ct_loader *a = NULL, *p = NULL;
    o.prefetch = 0;
    CHECK_OK(ct_loader_new(ds, &o, &a));
    o.prefetch = pf;
    CHECK_OK(ct_loader_new(ds, &o, &p));
    if (!a || !p)
        return;
    const int64_t epochs[] = {0, 1, 1, 5, 2};
    int64_t batches = 0, diff = 0;
    for (size_t e = 0; e < sizeof epochs / sizeof epochs[0]; e++) {
        if (e > 0) { /* epoch 0 first: without set_epoch, as a loader starts */
            CHECK_OK(ct_loader_set_epoch(a, epochs[e]));
            CHECK_OK(ct_loader_set_epoch(p, epochs[e]));
        }
        for (;;) {
            ct_batch ba, bp;
            int ra = ct_loader_next(a, &ba), rp = ct_loader_next(p, &bp);
            CHECK_EQ(ra, rp);
            if (ra <= 0 || rp <= 0)
                break;
            CHECK_EQ(ba.n, bp.n);
            int64_t numel = ba.shape[0] * ba.shape[1] * ba.shape[2];
            diff += memcmp(ba.x, bp.x, (size_t)(ba.n * numel) * sizeof(float)) != 0;
            diff += memcmp(ba.y, bp.y, (size_t)ba.n * sizeof(int64_t)) != 0;
            diff += memcmp(ba.index, bp.index, (size_t)ba.n * sizeof(int64_t)) != 0;
            batches++;
            if (epochs[e] == 5 && ba.batch == 2)
                break; /* leave an epoch half-way: set_epoch restarts cleanly */
        }
    }
    CHECK_EQ(diff, 0);
    CHECK(batches > 10);
    ct_loader_destroy(&a);
    ct_loader_destroy(&p);
}

/* ct_loader_seek(epoch, k) gives batches k.. of a full pass of that epoch, bit for bit, with
 * and without prefetch, also from the middle of another epoch; k = num_batches is an empty
 * epoch, k past it is refused. */
static void seek_equals_full(ct_dataset *ds, ct_loader_opts o, int pf)
{
    ct_loader *a = NULL, *p = NULL;
    o.prefetch = 0;
    CHECK_OK(ct_loader_new(ds, &o, &a));
    o.prefetch = pf;
    CHECK_OK(ct_loader_new(ds, &o, &p));
    if (!a || !p)
        return;
    int64_t nb = ct_loader_num_batches(a), diff = 0, seen = 0, want = 0;
    ct_batch ba, bp;
    CHECK_EQ(ct_loader_next(p, &bp), 1); /* leave epoch 0 part way */
    for (int64_t k = 0; k <= nb; k += 3) {
        CHECK_OK(ct_loader_set_epoch(a, 2));
        for (int64_t i = 0; i < k; i++)
            CHECK_EQ(ct_loader_next(a, &ba), 1);
        CHECK_OK(ct_loader_seek(p, 2, k));
        want += nb - k;
        for (;;) {
            int ra = ct_loader_next(a, &ba), rp = ct_loader_next(p, &bp);
            CHECK_EQ(ra, rp);
            if (ra <= 0 || rp <= 0)
                break;
            CHECK_EQ(ba.batch, bp.batch);
            CHECK_EQ(ba.n, bp.n);
            int64_t numel = ba.shape[0] * ba.shape[1] * ba.shape[2];
            diff += memcmp(ba.x, bp.x, (size_t)(ba.n * numel) * sizeof(float)) != 0;
            diff += memcmp(ba.index, bp.index, (size_t)ba.n * sizeof(int64_t)) != 0;
            seen++;
        }
    }
    CHECK_OK(ct_loader_seek(p, 1, nb));
    CHECK_EQ(ct_loader_next(p, &bp), 0);
    CHECK_ERR(ct_loader_seek(p, 1, nb + 1), CT_EINVAL, "out of range");
    CHECK_EQ(diff, 0);
    CHECK_EQ(seen, want);
    CHECK(nb >= 3);
    ct_loader_destroy(&a);
    ct_loader_destroy(&p);
}

/* Re-sharding mid-epoch (ct_loader_seek_offset): 4 ranks take k batches each, then 3 ranks deal
 * the rest of the same epoch's order from offset = 4 k B: every position of the order is taken
 * once, in order (rank r's i-th sample of the rest is position offset + r + 3 i), with and
 * without prefetch; the next epoch is whole again, and bad offsets are refused. */
static void reshard_offset(ct_dataset *ds, int pf)
{
    int64_t n = ct_dataset_length(ds), B = 5, k = 3, offset = 4 * k * B;
    int64_t *perm = malloc(sizeof *perm * (size_t)n), *count = calloc((size_t)n, sizeof *count);
    ct_sampler_permutation(n, 7 + 1, perm); /* seed 7, epoch 1 */
    int64_t wrong = 0, taken = 0;
    for (int r = 0; r < 4; r++) {
        ct_loader *ld = NULL;
        CHECK_OK(ct_loader_new(ds,
                               &(ct_loader_opts){.batch_size = B,
                                                 .shuffle = true,
                                                 .seed = 7,
                                                 .rank = r,
                                                 .world_size = 4,
                                                 .prefetch = pf},
                               &ld));
        CHECK_OK(ct_loader_set_epoch(ld, 1));
        ct_batch b;
        for (int64_t i = 0; ld && i < k && ct_loader_next(ld, &b) == 1; i++)
            for (int64_t j = 0; j < b.n; j++, taken++) {
                count[b.index[j]]++;
                wrong += b.index[j] != perm[(i * B + j) * 4 + r];
            }
        ct_loader_destroy(&ld);
    }
    for (int r = 0; r < 3; r++) {
        ct_loader *ld = NULL;
        CHECK_OK(ct_loader_new(ds,
                               &(ct_loader_opts){.batch_size = B,
                                                 .shuffle = true,
                                                 .seed = 7,
                                                 .rank = r,
                                                 .world_size = 3,
                                                 .prefetch = pf},
                               &ld));
        if (!ld)
            continue;
        CHECK_OK(ct_loader_seek_offset(ld, 1, offset, 0));
        CHECK_EQ(ct_loader_num_samples(ld), (n - offset + 2) / 3);
        ct_batch b;
        int64_t i = 0;
        while (ct_loader_next(ld, &b) == 1)
            for (int64_t j = 0; j < b.n; j++, i++) {
                int64_t p = offset + r + 3 * i;
                if (p < n) { /* past the end: padding from the order's start */
                    count[b.index[j]]++;
                    taken++;
                }
                wrong += b.index[j] != perm[p % n];
            }
        CHECK_EQ(i, (n - offset + 2) / 3);
        CHECK_OK(ct_loader_set_epoch(ld, 2)); /* a whole epoch again */
        CHECK_EQ(ct_loader_num_samples(ld), (n + 2) / 3);
        CHECK_ERR(ct_loader_seek_offset(ld, 1, n + 1, 0), CT_EINVAL, "offset");
        CHECK_ERR(ct_loader_seek_offset(ld, 1, offset, 1000), CT_EINVAL, "out of range");
        ct_loader_destroy(&ld);
    }
    int64_t once = 0;
    for (int64_t i = 0; i < n; i++)
        once += count[i] == 1;
    CHECK_EQ(wrong, 0);
    CHECK_EQ(taken, n);
    CHECK_EQ(once, n);
    free(perm);
    free(count);
}

/* Buffers are allocated once: batch pointers cycle through prefetch + 1 slots at most. */
static void buffers_reused(ct_dataset *ds, int pf)
{
    ct_loader *ld = NULL;
    CHECK_OK(ct_loader_new(ds, &(ct_loader_opts){.batch_size = 4, .prefetch = pf, .shuffle = true},
                           &ld));
    const float *seen[8] = {0};
    int nseen = 0;
    for (int e = 0; e < 3; e++) {
        ct_loader_set_epoch(ld, e);
        ct_batch b;
        while (ct_loader_next(ld, &b) > 0) {
            int k = 0;
            while (k < nseen && seen[k] != b.x)
                k++;
            if (k == nseen && nseen < 8)
                seen[nseen++] = b.x;
        }
    }
    CHECK(nseen <= (pf ? pf + 1 : 1));
    ct_loader_destroy(&ld);
}

static void start_stop(ct_dataset *ds)
{
    const float m[2] = {0.5f, 0.1f}, s[2] = {0.3f, 0.2f};
    for (int i = 0; i < 300; i++) {
        ct_loader *ld = NULL;
        CHECK_OK(
            ct_loader_new(ds,
                          &(ct_loader_opts){.batch_size = 1 + i % 7,
                                            .shuffle = true,
                                            .prefetch = 1 + i % 4,
                                            .seed = (uint64_t)i,
                                            .world_size = 1 + i % 3,
                                            .rank = i % (1 + i % 3),
                                            .transform = {.mean = m, .std = s, .hflip_p = 0.5f}},
                          &ld));
        if (!ld)
            return;
        for (int e = 0; e < i % 3; e++)
            CHECK_OK(ct_loader_set_epoch(ld, e)); /* restart the thread without consuming */
        ct_batch b;
        for (int k = 0; k < i % 5; k++)
            CHECK(ct_loader_next(ld, &b) >= 0);
        ct_loader_destroy(&ld); /* the thread is usually mid-epoch here */
    }
}

/* Destroy while the producer is inside a slow batch: returns after at most one sample. */
static void destroy_mid_batch(void)
{
    int destroyed = 0;
    ct_dataset *ds = user_new(-1, 3000, &destroyed);
    ct_loader *ld = NULL;
    CHECK_OK(ct_loader_new(ds, &(ct_loader_opts){.batch_size = 48, .prefetch = 3}, &ld));
    ct_batch b;
    CHECK_EQ(ct_loader_next(ld, &b), 1); /* waits ~150 ms for batch 0 */
    CHECK_EQ(b.n, 48);
    CHECK_EQ(b.y[5], labels[5]);
    usleep(10000); /* the thread is now inside batch 1 */
    ct_loader_destroy(&ld);
    /* Counted, not timed: the thread stopped inside batch 1 instead of finishing it (and the
     * two more batches prefetch=3 allows), so fewer than 2 batches' worth of samples were read. */
    int gets = atomic_load(&last_user->gets);
    if (!(gets < 2 * 48))
        fprintf(stderr, "destroy mid-batch: the loader read %d samples, expected < 96\n", gets);
    CHECK(gets < 2 * 48);
    CHECK(ld == NULL);
    for (int i = 0; i < 20; i++) { /* again, right after creation and after set_epoch */
        CHECK_OK(ct_loader_new(ds, &(ct_loader_opts){.batch_size = 16, .prefetch = 2}, &ld));
        if (i % 2)
            CHECK_OK(ct_loader_set_epoch(ld, i));
        usleep((useconds_t)(i * 300));
        ct_loader_destroy(&ld);
    }
    ct_dataset_destroy(&ds);
    CHECK_EQ(destroyed, 1);
    CHECK(ds == NULL);
}

static void get_error(int pf)
{
    int destroyed = 0;
    ct_dataset *ds = user_new(37, 0, &destroyed);
    ct_loader *ld = NULL;
    CHECK_OK(ct_loader_new(ds, &(ct_loader_opts){.batch_size = 10, .prefetch = pf}, &ld));
    ct_batch b;
    for (int i = 0; i < 3; i++)
        CHECK_EQ(ct_loader_next(ld, &b), 1);
    CHECK_ERR(ct_loader_next(ld, &b), CT_EIO, "loader: sample 37 of epoch 0: boom at 37");
    CHECK_EQ(ct_loader_next(ld, &b), 0);
    CHECK_OK(ct_loader_set_epoch(ld, 1)); /* a new epoch runs again up to the bad sample */
    CHECK_EQ(ct_loader_next(ld, &b), 1);
    CHECK_EQ(b.index[9], 9);
    ct_loader_destroy(&ld);
    ct_dataset_destroy(&ds);
    CHECK_EQ(destroyed, 1);
}

static void bad_options(ct_dataset *img)
{
    ct_loader *ld = NULL;
    const float z[2] = {0, 0}, one[2] = {1, 1};
    CHECK_ERR(ct_loader_new(img, &(ct_loader_opts){.transform = {.mean = z, .std = z}}, &ld),
              CT_EINVAL, "transform.std[0] is 0");
    CHECK_ERR(ct_loader_new(
                  img, &(ct_loader_opts){.transform = {.mean = z, .std = one, .n_mean = 3}}, &ld),
              CT_EINVAL, "transform.n_mean 3");
    CHECK_ERR(
        ct_loader_new(
            img, &(ct_loader_opts){.transform = {.crop_h = 9, .crop_w = 9, .crop_pad = 1}}, &ld),
        CT_EINVAL, "larger than the padded image");
    CHECK_ERR(ct_loader_new(img, &(ct_loader_opts){.rank = 3, .world_size = 2}, &ld), CT_EINVAL,
              "rank 3");
    CHECK_ERR(ct_loader_new(img, &(ct_loader_opts){.batch_size = -1}, &ld), CT_EINVAL,
              "batch_size");
    float f[4] = {1, 2, 3, 4};
    int64_t y[2] = {0, 1}, s1[1] = {2};
    ct_dataset *tab = NULL;
    CHECK_OK(ct_dataset_from_f32(f, y, 2, 1, s1, &tab));
    CHECK_ERR(ct_loader_new(tab, &(ct_loader_opts){.transform = {.hflip_p = 0.5f}}, &ld), CT_EINVAL,
              "needs (C,H,W)");
    /* (F) data: per-feature normalisation with n_mean = F */
    const float fm[2] = {1, 2}, fs[2] = {2, 4};
    CHECK_OK(ct_loader_new(
        tab, &(ct_loader_opts){.batch_size = 2, .transform = {.mean = fm, .std = fs, .n_mean = 2}},
        &ld));
    ct_batch b;
    CHECK_EQ(ct_loader_next(ld, &b), 1);
    CHECK_EQ(b.ndim, 1);
    CHECK_EQ(b.shape[0], 2);
    CHECK_NEAR(b.x[0], 0.0, 0);
    CHECK_NEAR(b.x[1], 0.0, 0);
    CHECK_NEAR(b.x[2], 1.0, 0);
    CHECK_NEAR(b.x[3], 0.5, 0);
    ct_loader_destroy(&ld);
    ct_dataset_destroy(&tab);
    CHECK(ld == NULL);
}

/* u8 datasets take a fused table path (convert + normalise in one pass): bit-identical to
 * ct_dataset_get followed by ct_transform_normalize, per channel and with one value. */
static void u8_fast_path(void)
{
    static uint8_t px[N * NUMEL];
    for (int i = 0; i < N * NUMEL; i++)
        px[i] = (uint8_t)((i * 13 + i / 7) & 255);
    ct_dataset *ds = NULL;
    CHECK_OK(ct_dataset_from_u8(px, labels, N, 3, shape, 255.0f, &ds));
    float x[NUMEL];
    int64_t y;
    CHECK_OK(ct_dataset_get(ds, 3, x, &y));
    CHECK_EQ(x[5], (float)px[3 * NUMEL + 5] / 255.0f); /* exactly ToTensor's x / 255 */
    const float m2[2] = {0.2860f, 0.5f}, s2[2] = {0.3530f, 0.25f};
    for (int v = 0; v < 4; v++) {
        ct_loader_opts o = {
            .batch_size = 9, .shuffle = true, .seed = 11, .prefetch = v % 2 ? 2 : 0};
        if (v >= 2) {
            o.transform.mean = m2;
            o.transform.std = s2;
            o.transform.n_mean = v == 2 ? 1 : 2;
        }
        ct_loader *ld = NULL;
        CHECK_OK(ct_loader_new(ds, &o, &ld));
        if (!ld)
            break;
        ct_batch b;
        int64_t bad = 0, seen = 0;
        while (ct_loader_next(ld, &b) > 0)
            for (int64_t k = 0; k < b.n; k++, seen++) {
                CHECK_OK(ct_dataset_get(ds, b.index[k], x, &y));
                CHECK_EQ(b.y[k], y);
                if (o.transform.mean)
                    ct_transform_normalize(x, NUMEL, m2, s2, o.transform.n_mean);
                bad += memcmp(b.x + k * NUMEL, x, sizeof x) != 0;
            }
        CHECK_EQ(seen, N);
        CHECK_EQ(bad, 0);
        ct_loader_destroy(&ld);
    }
    /* a subset of a u8 dataset takes the same path, shifted by its start */
    ct_dataset *sub = NULL;
    CHECK_OK(ct_dataset_subset(ds, 41, 50, &sub));
    ct_loader *ld = NULL;
    CHECK_OK(ct_loader_new(
        sub, &(ct_loader_opts){.batch_size = 50, .transform = {.mean = m2, .std = s2}}, &ld));
    ct_batch b;
    CHECK_EQ(ct_loader_next(ld, &b), 1);
    CHECK_EQ(b.n, 50);
    int64_t bad = 0;
    for (int64_t k = 0; ld && k < b.n; k++) {
        CHECK_EQ(b.index[k], k);
        CHECK_OK(ct_dataset_get(ds, 41 + k, x, &y));
        CHECK_EQ(b.y[k], y);
        ct_transform_normalize(x, NUMEL, m2, s2, 2);
        bad += memcmp(b.x + k * NUMEL, x, sizeof x) != 0;
    }
    CHECK_EQ(bad, 0);
    ct_loader_destroy(&ld);
    ct_dataset_destroy(&sub);
    ct_dataset_destroy(&ds);
}

int main(void)
{
    for (int i = 0; i < N * NUMEL; i++)
        data[i] = (float)(i % 977) * 0.001f + 0.25f;
    for (int i = 0; i < N; i++)
        labels[i] = (i * 7) % 10;
    ct_dataset *ds = NULL;
    CHECK_OK(ct_dataset_from_f32(data, labels, N, 3, shape, &ds));
    const float mean[2] = {0.3f, 0.6f}, stdv[2] = {0.2f, 0.5f};
    ct_loader_opts plain = {.batch_size = 10};
    ct_loader_opts dist = {
        .batch_size = 8, .shuffle = true, .seed = 99, .rank = 2, .world_size = 3};
    ct_loader_opts aug = {
        .batch_size = 7,
        .shuffle = true,
        .seed = 5,
        .rank = 1,
        .world_size = 4,
        .drop_last = true,
        .transform = {
            .mean = mean, .std = stdv, .hflip_p = 0.5f, .crop_h = 4, .crop_w = 6, .crop_pad = 2}};
    ct_loader_opts sdl = aug;
    sdl.sampler_drop_last = true;
    sdl.drop_last = false;
    sdl.transform.crop_h = 0;
    sdl.transform.crop_w = 0;
    sdl.transform.crop_pad = 0;
    for (int64_t e = 0; e < 3; e++) {
        check_epoch(ds, &plain, e);
        check_epoch(ds, &dist, e);
        check_epoch(ds, &aug, e);
        check_epoch(ds, &sdl, e);
    }
    /* Shuffled order differs between epochs. */
    {
        ct_loader *ld = NULL;
        CHECK_OK(ct_loader_new(ds, &dist, &ld));
        ct_batch b;
        int64_t first[8];
        ct_loader_next(ld, &b);
        memcpy(first, b.index, sizeof first);
        ct_loader_set_epoch(ld, 1);
        ct_loader_next(ld, &b);
        CHECK(memcmp(first, b.index, sizeof first) != 0);
        ct_loader_destroy(&ld);
    }
    for (int pf = 1; pf <= 4; pf++) {
        prefetch_equals_sync(ds, plain, pf);
        prefetch_equals_sync(ds, dist, pf);
        prefetch_equals_sync(ds, aug, pf);
    }
    seek_equals_full(ds, dist, 0);
    seek_equals_full(ds, dist, 2);
    seek_equals_full(ds, aug, 3);
    reshard_offset(ds, 0);
    reshard_offset(ds, 2);
    buffers_reused(ds, 0);
    buffers_reused(ds, 3);
    start_stop(ds);
    destroy_mid_batch();
    get_error(0);
    get_error(2);
    bad_options(ds);
    u8_fast_path();
    { /* a subset view: indices shift by start, bounds are checked */
        ct_dataset *sub = NULL;
        CHECK_OK(ct_dataset_subset(ds, 90, 13, &sub));
        CHECK_EQ(ct_dataset_length(sub), 13);
        float x[NUMEL];
        int64_t y;
        CHECK_OK(ct_dataset_get(sub, 4, x, &y));
        CHECK_EQ(y, labels[94]);
        CHECK(memcmp(x, data + 94 * NUMEL, sizeof x) == 0);
        CHECK_EQ(ct_dataset_get(sub, 13, x, &y), CT_ERANGE);
        ct_dataset_destroy(&sub);
        CHECK_ERR(ct_dataset_subset(ds, 90, 14, &sub), CT_ERANGE, "[90, 104) not within [0, 103)");
        CHECK(sub == NULL);
    }
    ct_dataset_destroy(&ds);
    ct_loader_destroy(NULL);
    ct_dataset_destroy(&ds); /* NULL-safe */
    CHECK_DONE("data_loader");
}
