/* common/hash.c — the hash functions of ct: 64-bit FNV-1a over bytes, and a word-wise variant
 * for in-process tables whose keys are whole 64-bit words.
 *
 * FNV-1a's values are stored and compared across processes (a collective group's hash in the
 * TCP hello and the shared-memory segment names, a checkpoint's content hash, a CPU binding's
 * boot id), so ct__fnv1a64 must stay the standard algorithm, bit for bit.
 * Not here: cryptographic hashing and MACs (libsodium, auth.c), checksums of transfers. */
#include <string.h>

#include "common/common.h"

#define FNV64_OFFSET 1469598103934665603ULL
#define FNV64_PRIME 1099511628211ULL

uint64_t ct__fnv1a64(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = FNV64_OFFSET;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * FNV64_PRIME;
    return h;
}

uint64_t ct__hash_words(const uint64_t *w, size_t n)
{
    uint64_t h = FNV64_OFFSET;
    for (size_t i = 0; i < n; i++)
        h = (h ^ w[i]) * 0x9e3779b97f4a7c15ULL; /* 2^64 / golden ratio: mixes a whole word */
    return h ^ (h >> 32);                       /* a bucket index takes the low bits */
}
