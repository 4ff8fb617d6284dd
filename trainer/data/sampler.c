/* trainer/data/sampler.c — torch.utils.data.DistributedSampler's index arithmetic, exactly,
 * with ct's own permutation (Fisher-Yates over splitmix64 seeded by seed + epoch).
 *
 * Not here: batching (loader.c). */
#include <string.h>
#include "common/common.h"
#include "trainer/data/data_internal.h"

static int check(int64_t n, const ct_sampler_opts *o, int *world)
{
    if (!o)
        return ct__error(CT_EINVAL, "sampler: opts is NULL");
    *world = o->world_size ? o->world_size : 1;
    if (*world < 1)
        return ct__error(CT_EINVAL, "sampler: world_size %d < 1", o->world_size);
    if (o->rank < 0 || o->rank >= *world)
        return ct__error(CT_EINVAL, "sampler: rank %d not in [0, %d)", o->rank, *world);
    if (n < 0)
        return ct__error(CT_EINVAL, "sampler: dataset length %lld < 0", (long long)n);
    return 0;
}

int64_t ct_sampler_num_samples(int64_t n, const ct_sampler_opts *o)
{
    int world = 1;
    int rc = check(n, o, &world);
    if (rc < 0)
        return rc;
    if (o->drop_last && n % world != 0) {
        /* math.ceil((n - world) / world); n - world < 0 only when n < world: then 0 */
        int64_t a = n - world;
        return a <= 0 ? 0 : (a + world - 1) / world;
    }
    return (n + world - 1) / world;
}

void ct_sampler_permutation(int64_t n, uint64_t seed, int64_t *out)
{
    uint64_t st = seed ^ 0x5851f42d4c957f2dULL;
    for (int64_t i = 0; i < n; i++)
        out[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)ct__rand_below(&st, (uint64_t)i + 1);
        int64_t t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}

int64_t ct_sampler_indices(int64_t n, const ct_sampler_opts *o, int64_t *out, int64_t *scratch)
{
    int64_t ns = ct_sampler_num_samples(n, o);
    if (ns < 0)
        return ns;
    if (ns > 0 && (!out || !scratch))
        return ct__error(CT_EINVAL, "sampler: out or scratch is NULL");
    if (ns == 0)
        return 0;
    int world = o->world_size ? o->world_size : 1;
    if (o->shuffle)
        ct_sampler_permutation(n, o->seed + (uint64_t)o->epoch, scratch);
    else
        for (int64_t i = 0; i < n; i++)
            scratch[i] = i;
    /* Position p of the padded list is indices[p % n] (padding repeats from the start, as
     * often as needed); drop_last truncates, which the same formula gives since total <= n. */
    int64_t total = ns * world;
    int64_t k = 0;
    for (int64_t p = o->rank; p < total; p += world)
        out[k++] = scratch[p % n];
    return k;
}
