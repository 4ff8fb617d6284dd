/* trainer/collective/reduce.c — the arithmetic of the CPU collectives: elementwise sums of
 * f32 arrays, written so the compiler vectorizes them (built with -O3), and which chunk of an
 * array each rank owns (ct_comm_chunk: the ring's, the hierarchical path's and ZeRO's shards).
 *
 * Summation order is fixed (srcs[0] + srcs[1] + ... then / div) so every rank that computes
 * the same element gets the same bits. Not a general BLAS. */
#include <string.h>

#include "internal.h"

#define BLOCK 512 /* floats per stack block: 2 KiB, stays in L1 */

void ct__reduce_sum(float *dst, const float *const *srcs, int nsrc, size_t n, float div)
{
    float t[BLOCK];
    for (size_t off = 0; off < n; off += BLOCK) {
        size_t m = n - off < BLOCK ? n - off : BLOCK;
        const float *a = srcs[0] + off;
        if (nsrc == 1) {
            for (size_t i = 0; i < m; i++)
                t[i] = a[i];
        } else {
            const float *b = srcs[1] + off;
            for (size_t i = 0; i < m; i++)
                t[i] = a[i] + b[i];
        }
        for (int k = 2; k < nsrc; k++) {
            const float *s = srcs[k] + off;
            for (size_t i = 0; i < m; i++)
                t[i] += s[i];
        }
        if (div != 1.0f)
            for (size_t i = 0; i < m; i++)
                t[i] /= div;
        memcpy(dst + off, t, m * sizeof(float));
    }
}

void ct__reduce_add(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

void ct__divide(float *dst, size_t n, float div)
{
    for (size_t i = 0; i < n; i++)
        dst[i] /= div;
}

/* ct/collective.h: rank's chunk of count elements, the first count % world ranks one longer. */
void ct_comm_chunk(size_t count, int world, int rank, size_t *off, size_t *len)
{
    if (world < 1 || rank < 0 || rank >= world) {
        *off = *len = 0;
        return;
    }
    size_t base = count / (size_t)world, rem = count % (size_t)world;
    *off = (size_t)rank * base + ((size_t)rank < rem ? (size_t)rank : rem);
    *len = base + ((size_t)rank < rem);
}
