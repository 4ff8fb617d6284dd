/* trainer/backend/philox.h — Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as
 * 1, 2, 3", SC'11), the counter-based generator cuRAND and PyTorch's CUDA dropout use: the n-th
 * number of a stream depends only on (key, n), so every backend and thread computes the same
 * dropout mask in any order. Header-only, for C and CUDA. */
#ifndef CT_PHILOX_H
#define CT_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define CT__PHILOX_FN static __host__ __device__ inline
#else
#define CT__PHILOX_FN static inline
#endif

/* The four 32-bit outputs for counter ctr (c[0] low word) under key (k[0] low word). */
CT__PHILOX_FN void ct__philox4x32_10(uint64_t ctr, uint64_t key, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)ctr, c1 = (uint32_t)(ctr >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* Element i's uniform float in [0, 1) of the stream (seed, offset): output (offset + i) % 4 of
 * counter (offset + i) / 4, its top 24 bits. */
CT__PHILOX_FN float ct__philox_uniform(uint64_t seed, uint64_t offset, uint64_t i)
{
    uint32_t o[4];
    uint64_t n = offset + i;
    ct__philox4x32_10(n >> 2, seed, o);
    return (float)(o[n & 3] >> 8) * (1.0f / 16777216.0f);
}

#endif
