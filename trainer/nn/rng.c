/* trainer/nn/rng.c — ct's random generator: xoshiro256** per thread, seeded by
 * ct_nn_manual_seed through splitmix64 (torch.manual_seed's role). Modules draw their initial
 * weights from it (module.c), dropout and attention their Philox seeds (ops.c, attention.c).
 * Not here: the counter-based Philox streams themselves (backend/philox.h). */
#include <stdint.h>

#include "ct/nn.h"
#include "nn_impl.h"

static __thread uint64_t rng_s[4] = {0x9E3779B97F4A7C15ULL, 0xBF58476D1CE4E5B9ULL,
                                     0x94D049BB133111EBULL, 0x2545F4914F6CDD1DULL};

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(void)
{
    uint64_t r = rotl(rng_s[1] * 5, 7) * 9, t = rng_s[1] << 17;
    rng_s[2] ^= rng_s[0];
    rng_s[3] ^= rng_s[1];
    rng_s[1] ^= rng_s[2];
    rng_s[0] ^= rng_s[3];
    rng_s[2] ^= t;
    rng_s[3] = rotl(rng_s[3], 45);
    return r;
}

void ct_nn_manual_seed(uint64_t seed)
{
    for (int i = 0; i < 4; i++) { /* splitmix64 */
        uint64_t z = (seed += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        rng_s[i] = z ^ (z >> 31);
    }
}

uint64_t ct__rng_u64(void)
{
    return rng_next();
}

float ct__rng_uniform(void)
{
    return (float)(rng_next() >> 40) * (1.0f / 16777216.0f);
}

float ct__rng_range(float lo, float hi)
{
    return lo + (hi - lo) * ct__rng_uniform();
}
