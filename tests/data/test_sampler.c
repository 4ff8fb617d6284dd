/* tests/data/test_sampler.c — the distributed sampler against torch's DistributedSampler
 * (sampler_ref.txt, shuffle=False, from gen_ref.py), and its properties with shuffling: equal
 * shard sizes, disjoint and covering shards, a permutation per epoch that is the same on every
 * rank and differs between epochs; and the loader's drop_last batch counts. */
#include <stdint.h>
#include <stdlib.h>
#include "ct/data.h"
#include "tests/data/check.h"

static void check_torch_ref(const char *path)
{
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f)
        return;
    char line[8192];
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        long long n, world, dl, rank, ns;
        int used = 0;
        if (sscanf(line, "%lld %lld %lld %lld %lld :%n", &n, &world, &dl, &rank, &ns, &used) != 5)
            continue;
        lines++;
        ct_sampler_opts o = {.rank = (int)rank,
                             .world_size = (int)world,
                             .drop_last = dl != 0,
                             .seed = 7,
                             .epoch = 3};
        CHECK_EQ(ct_sampler_num_samples(n, &o), ns);
        int64_t *out = calloc((size_t)ns + 1, sizeof *out), *scr = calloc((size_t)n + 1, 8);
        int64_t k = ct_sampler_indices(n, &o, out, scr);
        CHECK_EQ(k, ns);
        char *p = line + used;
        for (int64_t i = 0; i < ns; i++) {
            long long v = strtoll(p, &p, 10);
            if (out[i] != v) {
                fprintf(stderr,
                        "n=%lld world=%lld drop_last=%lld rank=%lld: index %lld: ct %lld "
                        "torch %lld\n",
                        n, world, dl, rank, (long long)i, (long long)out[i], v);
                check_failures++;
            }
        }
        free(out);
        free(scr);
    }
    fclose(f);
    CHECK(lines >= 90);
}

/* Shuffled shards for (n, world): sizes, disjointness / coverage, per-epoch permutation. */
static void check_shuffled(int64_t n, int world, bool drop_last)
{
    int64_t ns =
        ct_sampler_num_samples(n, &(ct_sampler_opts){.world_size = world, .drop_last = drop_last});
    int64_t *shard = calloc((size_t)(ns * world + 1), sizeof *shard);
    int64_t *scr = calloc((size_t)n + 1, sizeof *scr);
    int64_t *perm = calloc((size_t)n + 1, sizeof *perm);
    int64_t *seen = calloc((size_t)n + 1, sizeof *seen);
    int64_t *ep0 = calloc((size_t)(ns * world + 1), sizeof *ep0);
    for (int64_t epoch = 0; epoch < 3; epoch++) {
        memset(seen, 0, (size_t)(n + 1) * sizeof *seen);
        for (int r = 0; r < world; r++) {
            ct_sampler_opts o = {.rank = r,
                                 .world_size = world,
                                 .shuffle = true,
                                 .drop_last = drop_last,
                                 .seed = 1234,
                                 .epoch = epoch};
            CHECK_EQ(ct_sampler_num_samples(n, &o), ns); /* equal on every rank */
            CHECK_EQ(ct_sampler_indices(n, &o, shard + r * ns, scr), ns);
            for (int64_t i = 0; i < ns; i++) {
                int64_t v = shard[r * ns + i];
                CHECK(v >= 0 && v < n);
                if (v >= 0 && v < n)
                    seen[v]++;
            }
        }
        /* Every rank computed the same permutation: rebuild it from the shards (rank r holds
         * positions r, r + world, ...) and compare with the permutation of seed + epoch. */
        ct_sampler_permutation(n, 1234 + (uint64_t)epoch, perm);
        for (int r = 0; r < world; r++)
            for (int64_t i = 0; i < ns; i++)
                CHECK_EQ(shard[r * ns + i], perm[(i * world + r) % n]);
        int64_t total = ns * world, covered = 0, dup = 0;
        for (int64_t v = 0; v < n; v++) {
            covered += seen[v] > 0;
            dup += seen[v] > 1 ? seen[v] - 1 : 0;
        }
        if (total <= n) { /* no padding: disjoint */
            CHECK_EQ(dup, 0);
            CHECK_EQ(covered, total);
            if (!drop_last)
                CHECK_EQ(covered, n);
        } else { /* padded: covers everything, total - n repeats */
            CHECK_EQ(covered, n);
            CHECK_EQ(dup, total - n);
        }
        if (drop_last)
            CHECK_EQ(total, n - n % world);
        else
            CHECK_EQ(total, (n + world - 1) / world * world);
        if (epoch == 0) {
            memcpy(ep0, shard, (size_t)total * sizeof *ep0);
        } else if (n >= 8) {
            int64_t same = 0;
            for (int64_t i = 0; i < total; i++)
                same += shard[i] == ep0[i];
            if (same == total)
                fprintf(stderr, "n=%lld world=%d: epoch %lld equals epoch 0\n", (long long)n, world,
                        (long long)epoch);
            CHECK(same < total);
        }
    }
    /* Reproducible: the same (seed, epoch) gives the same shard again. */
    ct_sampler_opts o = {.rank = world - 1,
                         .world_size = world,
                         .shuffle = true,
                         .drop_last = drop_last,
                         .seed = 1234,
                         .epoch = 2};
    int64_t *again = calloc((size_t)ns + 1, sizeof *again);
    ct_sampler_indices(n, &o, again, scr);
    CHECK(memcmp(again, shard + (world - 1) * ns, (size_t)ns * sizeof *again) == 0);
    free(again);
    free(shard);
    free(scr);
    free(perm);
    free(seen);
    free(ep0);
}

static void check_perm(void)
{
    int64_t a[1000], b[1000], seen[1000] = {0};
    ct_sampler_permutation(1000, 5, a);
    ct_sampler_permutation(1000, 6, b);
    int64_t same = 0, fixed = 0;
    for (int i = 0; i < 1000; i++) {
        seen[a[i]]++;
        same += a[i] == b[i];
        fixed += a[i] == i;
    }
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(seen[i], 1);
    CHECK(same < 20);  /* ~1 expected for independent permutations */
    CHECK(fixed < 20); /* ~1 expected */
}

static void check_errors(void)
{
    int64_t o[4], s[4];
    CHECK_EQ(ct_sampler_num_samples(10, &(ct_sampler_opts){.rank = 2, .world_size = 2}), CT_EINVAL);
    CHECK(strstr(ct_last_error(), "rank 2") != NULL);
    CHECK_EQ(ct_sampler_indices(4, &(ct_sampler_opts){.world_size = -1}, o, s), CT_EINVAL);
    CHECK_EQ(ct_sampler_num_samples(3, &(ct_sampler_opts){.world_size = 5, .drop_last = true}), 0);
}

/* The loader's drop_last: floor vs ceil of this rank's samples / batch size. */
static void check_loader_counts(void)
{
    const int64_t shape[1] = {1};
    float x[103];
    int64_t y[103];
    for (int i = 0; i < 103; i++) {
        x[i] = (float)i;
        y[i] = i;
    }
    ct_dataset *ds = NULL;
    CHECK_OK(ct_dataset_from_f32(x, y, 103, 1, shape, &ds));
    struct {
        int world, bs;
        bool dl, sdl;
        int64_t samples, batches, last;
    } cases[] = {
        {1, 10, false, false, 103, 11, 3}, {1, 10, true, false, 103, 10, 10},
        {4, 8, false, false, 26, 4, 2},    {4, 8, true, false, 26, 3, 8},
        {4, 8, false, true, 25, 4, 1},     {4, 8, true, true, 25, 3, 8},
        {1, 200, true, false, 103, 0, 0},  {1, 200, false, false, 103, 1, 103},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int r = 0; r < cases[c].world; r++) {
            ct_loader *ld = NULL;
            CHECK_OK(ct_loader_new(ds,
                                   &(ct_loader_opts){.batch_size = cases[c].bs,
                                                     .drop_last = cases[c].dl,
                                                     .sampler_drop_last = cases[c].sdl,
                                                     .rank = r,
                                                     .world_size = cases[c].world,
                                                     .shuffle = true,
                                                     .seed = 3},
                                   &ld));
            CHECK_EQ(ct_loader_num_samples(ld), cases[c].samples);
            CHECK_EQ(ct_loader_num_batches(ld), cases[c].batches);
            ct_batch b;
            int64_t nb = 0, ns = 0, last = 0;
            int rc;
            while ((rc = ct_loader_next(ld, &b)) > 0) {
                nb++;
                ns += b.n;
                last = b.n;
            }
            CHECK_EQ(rc, 0);
            CHECK_EQ(nb, cases[c].batches);
            CHECK_EQ(last, cases[c].last);
            if (!cases[c].dl)
                CHECK_EQ(ns, cases[c].samples);
            ct_loader_destroy(&ld);
            CHECK(ld == NULL);
        }
    }
    ct_dataset_destroy(&ds);
}

int main(int argc, char **argv)
{
    check_torch_ref(argc > 1 ? argv[1] : "tests/data/sampler_ref.txt");
    int64_t ns[] = {1, 2, 7, 10, 11, 12, 100, 101, 1000, 60000};
    int worlds[] = {1, 2, 3, 4, 7, 8};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t j = 0; j < sizeof worlds / sizeof worlds[0]; j++)
            for (int dl = 0; dl < 2; dl++)
                if (!(dl && ns[i] < worlds[j]))
                    check_shuffled(ns[i], worlds[j], dl);
    check_perm();
    check_errors();
    check_loader_counts();
    CHECK_DONE("data_sampler");
}
