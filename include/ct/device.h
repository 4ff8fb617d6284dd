/* ct/device.h — where a tensor's storage lives (ct_device), and device names to and from it.
 * Shared by tensors (ct/tensor.h), modules, optimizers, collectives and the trainer's options;
 * the engine's backends are chosen by it (trainer/backend/backend.c). */
#ifndef CT_DEVICE_H
#define CT_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where a tensor's storage lives: a kind and an index (cuda:1 is the second GPU). The kinds
 * CT_CPU, CT_CUDA and CT_CHECKDEV are themselves devices, of index 0. CT_CHECKDEV is the
 * checking device: host memory that host code cannot dereference (its pointers are tagged) and
 * kernels that run late on worker threads, one per stream, so code that misses a copy or a wait
 * fails on any machine, as it would on a GPU (trainer/checkdev/); each index is a memory space
 * of its own. A ct_device is kind | index << 8 (docs/ARCHITECTURE.md, "Devices"). */
enum { CT_CPU = 0, CT_CUDA = 1, CT_CHECKDEV = 2 };
typedef int ct_device;
/* Indices 0 .. CT_MAX_DEVICE_INDEX - 1 per kind (the CPU has index 0 only). */
#define CT_MAX_DEVICE_INDEX 4
static inline int ct_device_kind(ct_device d)
{
    return d & 0xff;
}
static inline int ct_device_index(ct_device d)
{
    return d >> 8;
}
static inline ct_device ct_device_make(int kind, int index)
{
    return kind | index << 8;
}
/* Parses "cpu", "cuda", "cuda:N", "checkdev", "checkdev:N" (N < CT_MAX_DEVICE_INDEX) into *out.
 * 0, or CT_EINVAL with a message quoting s and listing the valid forms. */
int ct_device_parse(const char *s, ct_device *out);
/* The name of d as ct_device_parse reads it ("cpu", "cuda:1"; index 0 without ":0") in buf;
 * returns buf. "?" for a device that is not one. */
const char *ct_device_name(ct_device d, char *buf, size_t size);
/* 0 when d is a kind and index ct_device_parse would give; else CT_EINVAL naming it. */
int ct_device_check(ct_device d);

#ifdef __cplusplus
}
#endif
#endif
