/* trainer/data/data_internal.h — helpers shared by the data module's files. Not public API. */
#ifndef CT_DATA_INTERNAL_H
#define CT_DATA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "ct/data.h"

/* Reads the whole file at path into a malloc'd buffer (*buf, *len; caller frees). If the file
 * starts with the gzip magic it is inflated (all members). Errors name the file:
 * CT_ENOENT missing, CT_EIO read failure or corrupt/truncated gzip stream. */
int ct__read_file(const char *path, uint8_t **buf, size_t *len);

/* Makes a dataset over u8 samples x (length * numel) and labels, taking ownership of both
 * malloc'd buffers (freed on failure too). */
int ct__dataset_u8_take(uint8_t *x, int64_t *labels, int64_t length, int ndim, const int64_t *shape,
                        float div, ct_dataset **out);

/* If ds is an in-memory u8 dataset, returns its samples (length, numel) and sets *lut to its
 * u8 -> float table (256) and *labels (length); else NULL. Lets the loader fuse conversion
 * and normalisation. */
const uint8_t *ct__dataset_u8(const ct_dataset *ds, const float **lut, const int64_t **labels);

/* The last path component, for error messages. */
const char *ct__basename(const char *path);

/* splitmix64: a fast 64-bit mixer, good enough for shuffles and augmentation. */
static inline uint64_t ct__splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform integer in [0, bound) (bound > 0), Lemire's multiply-shift. */
static inline uint64_t ct__rand_below(uint64_t *state, uint64_t bound)
{
    return (uint64_t)(((unsigned __int128)ct__splitmix64(state) * bound) >> 64);
}

#endif
