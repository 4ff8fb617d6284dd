/* trainer/cudaemu/include/cub/device/device_radix_sort.cuh — the CUDA emulator's stand-in for
 * CUB's DeviceRadixSort::SortPairs: a stable least-significant-digit radix sort of (key, value)
 * pairs on the bits [begin_bit, end_bit) of the keys, 8 bits a pass, on the host. CUB's contract:
 * called with temp NULL it only sets temp_bytes; called again with that much scratch it sorts
 * keys_in / values_in into keys_out / values_out (the inputs are not changed), ties keeping their
 * input order. A call with less scratch than it asked for fails, as CUB's does. C++ only. */
#ifndef CT_CUDAEMU_CUB_RADIX_SORT_H
#define CT_CUDAEMU_CUB_RADIX_SORT_H

#include <cstdint>
#include <cstring>
#include <vector>

#include <cuda_runtime_api.h>

namespace cub
{

struct DeviceRadixSort {
    template <typename K, typename V>
    static cudaError_t SortPairs(void *temp, size_t &temp_bytes, const K *keys_in, K *keys_out,
                                 const V *values_in, V *values_out, int n, int begin_bit = 0,
                                 int end_bit = (int)sizeof(K) * 8, cudaStream_t stream = 0)
    {
        (void)stream;
        const size_t need = 256; /* what a real sort's scratch would be is not modelled */
        if (!temp) {
            temp_bytes = need;
            return cudaSuccess;
        }
        if (temp_bytes < need || n < 0 || begin_bit < 0 || end_bit > (int)sizeof(K) * 8 ||
            begin_bit > end_bit)
            return cudaErrorInvalidValue;
        std::vector<K> k(keys_in, keys_in + n), k2((size_t)n);
        std::vector<V> v(values_in, values_in + n), v2((size_t)n);
        for (int bit = begin_bit; bit < end_bit; bit += 8) {
            int width = end_bit - bit < 8 ? end_bit - bit : 8;
            uint64_t digit_mask = ((uint64_t)1 << width) - 1;
            size_t count[257] = {0};
            for (int i = 0; i < n; i++)
                count[((uint64_t)k[i] >> bit & digit_mask) + 1]++;
            for (int d = 0; d < 256; d++)
                count[d + 1] += count[d];
            for (int i = 0; i < n; i++) {
                size_t at = count[(uint64_t)k[i] >> bit & digit_mask]++;
                k2[at] = k[i];
                v2[at] = v[i];
            }
            k.swap(k2);
            v.swap(v2);
        }
        if (n > 0) {
            std::memcpy(keys_out, k.data(), (size_t)n * sizeof(K));
            std::memcpy(values_out, v.data(), (size_t)n * sizeof(V));
        }
        return cudaSuccess;
    }
};

} // namespace cub

#endif
