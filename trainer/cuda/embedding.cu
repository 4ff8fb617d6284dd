/* trainer/cuda/embedding.cu — the embedding on the GPU (the backend table's emb_fwd and
 * emb_bwd; trainer/cpu/transformer.c is the reference): the lookup, a thread per output value,
 * and its scatter-add without atomics, so that a run gives the same bits every time.
 *
 * The backward sorts the positions by token with CUB's radix sort (stable: a token's positions
 * stay in order), then one thread per (token, column) adds that token's rows of dy in position
 * order and adds the sum to its row of the table. A thread per column down all n positions (the
 * first version) had d threads in flight, 128 for the GPT of bench/gpt_train, each a chain of n
 * dependent read-modify-writes. Tokens are sorted on the bits that vocab needs (9 for a byte
 * vocabulary: 2 passes); an index outside [0, vocab), or the padding index, sorts as vocab and
 * adds nothing. */
#include <cub/device/device_radix_sort.cuh>

#include "common/common.h"

#include "trainer/cuda/cuda_internal.h"

/* an index outside [0, vocab) gives a row of NaN: the GPU cannot return an error from here,
 * and a NaN loss is seen at once */
static __global__ void emb_fwd_kernel(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                                      const float *table, float *y)
{
    GRID_STRIDE(e, n * d)
    {
        int64_t i = e / d, c = e % d, t = idx[i];
        y[e] = t >= 0 && t < vocab ? table[t * d + c] : __int_as_float(0x7fc00000);
    }
}

/* the sort's input: position i's key (its token, or vocab: adds nothing) and i itself */
static __global__ void emb_keys_kernel(int64_t n, int64_t vocab, const int64_t *idx,
                                       int64_t padding_idx, uint32_t *key, int32_t *pos)
{
    GRID_STRIDE(i, n)
    {
        int64_t t = idx[i];
        key[i] = (uint32_t)(t >= 0 && t < vocab && t != padding_idx ? t : vocab);
        pos[i] = (int32_t)i;
    }
}

/* a thread per (sorted position k, column c); the first position of each token's run adds the
 * run's rows of dy, in position order, to the token's row of the table */
static __global__ void emb_runs_kernel(int64_t n, int64_t d, int64_t vocab, const uint32_t *key,
                                       const int32_t *pos, const float *dy, float *dtable)
{
    GRID_STRIDE(e, n * d)
    {
        int64_t k = e / d, c = e % d;
        uint32_t t = key[k];
        if (t == (uint32_t)vocab || (k > 0 && key[k - 1] == t))
            continue;
        float s = 0.0f;
        for (int64_t j = k; j < n && key[j] == t; j++)
            s += dy[(int64_t)pos[j] * d + c];
        dtable[(int64_t)t * d + c] += s;
    }
}

extern "C" int ct__cuda_embedding_fwd(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                                      const float *table, float *y, void *stream)
{
    if (n <= 0 || d <= 0)
        return n < 0 || d < 0 ? ct__error(CT_EINVAL, "cuda_embedding_fwd: negative size") : 0;
    emb_fwd_kernel<<<ct__cuda_blocks(n * d), CT_CUDA_THREADS, 0, (cudaStream_t)stream>>>(
        n, d, vocab, idx, table, y);
    return ct__cuda_status(cudaGetLastError(), "cuda_embedding_fwd");
}

/* bytes rounded up to a multiple of 256 (the alignment of each part of the one allocation) */
static size_t round256(size_t bytes)
{
    return (bytes + 255) / 256 * 256;
}

extern "C" int ct__cuda_embedding_bwd(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                                      int64_t padding_idx, const float *dy, float *dtable,
                                      void *stream)
{
    if (n <= 0 || d <= 0)
        return n < 0 || d < 0 ? ct__error(CT_EINVAL, "cuda_embedding_bwd: negative size") : 0;
    if (n > INT32_MAX || vocab < 1 || vocab >= INT32_MAX)
        return ct__error(CT_EINVAL,
                         "cuda_embedding_bwd: %lld positions or a vocabulary of %lld: both must "
                         "be in [1, 2^31 - 1)",
                         (long long)n, (long long)vocab);
    int bits = 1;
    while (bits < 32 && ((int64_t)1 << bits) <= vocab) /* keys go up to vocab itself */
        bits++;
    cudaStream_t s = (cudaStream_t)stream;
    uint32_t *keys = NULL;
    int32_t *pos = NULL;
    size_t sort_bytes = 0;
    int rc = ct__cuda_status(
        cub::DeviceRadixSort::SortPairs(NULL, sort_bytes, keys, keys, pos, pos, (int)n, 0, bits, s),
        "cuda_embedding_bwd: sort size");
    if (rc)
        return rc;
    /* one allocation: the sort's scratch, then keys and positions in and out */
    size_t kb = round256((size_t)n * sizeof(uint32_t)), pb = round256((size_t)n * sizeof(int32_t));
    char *buf = NULL;
    if ((rc = ct__cuda_malloc((void **)&buf, round256(sort_bytes) + 2 * (kb + pb), stream)) < 0)
        return rc;
    char *at = buf + round256(sort_bytes);
    uint32_t *key_in = (uint32_t *)at, *key_out = (uint32_t *)(at + kb);
    int32_t *pos_in = (int32_t *)(at + 2 * kb), *pos_out = (int32_t *)(at + 2 * kb + pb);
    emb_keys_kernel<<<ct__cuda_blocks(n), CT_CUDA_THREADS, 0, s>>>(n, vocab, idx, padding_idx,
                                                                   key_in, pos_in);
    rc = ct__cuda_status(cudaGetLastError(), "cuda_embedding_bwd: keys");
    if (rc == 0)
        rc = ct__cuda_status(cub::DeviceRadixSort::SortPairs(buf, sort_bytes, key_in, key_out,
                                                             pos_in, pos_out, (int)n, 0, bits, s),
                             "cuda_embedding_bwd: sort");
    if (rc == 0) {
        emb_runs_kernel<<<ct__cuda_blocks(n * d), CT_CUDA_THREADS, 0, s>>>(n, d, vocab, key_out,
                                                                           pos_out, dy, dtable);
        rc = ct__cuda_status(cudaGetLastError(), "cuda_embedding_bwd");
    }
    int frc = ct__cuda_free(buf); /* stream-ordered: reused only after these kernels */
    return rc ? rc : frc;
}
