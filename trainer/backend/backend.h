/* trainer/backend/backend.h — the choice of a device's table (backend.c): what an op calls to
 * find the table (table.h) of its inputs' device. Internal: used by trainer/tensor, nn, optim,
 * collective and train; the backends themselves include table.h only. */
#ifndef CT_BACKEND_H
#define CT_BACKEND_H

#include "trainer/backend/table.h"

/* The table of a device: CT_CPU always; CT_CUDA where this build has CUDA and a device can be
 * used (an index the process sees); CT_CHECKDEV any index. NULL with a message naming the device
 * and why, otherwise. Tables of two indices of one kind are two tables, so comparing tables
 * compares devices. */
const ct__backend *ct__backend_of(ct_device device);
/* 0 when this program has device's table (CUDA: linked in, or libct_cuda.so loaded: cudalib.h),
 * whether or not a device can be used here (a driver without a GPU checks for its replicas);
 * CT_ENOSYS saying why. */
int ct__backend_linked(ct_device device);

#endif
