/* ct/dtype.h — the element types, and the most dimensions of a tensor, shared by tensors, the
 * engine's backends, collectives and checkpoints. One definition for every module, so a
 * buffer's dtype and shape mean the same everywhere. */
#ifndef CT_DTYPE_H
#define CT_DTYPE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most dimensions a tensor (and an op descriptor's shape, a checkpoint's tensor) has. */
#define CT_MAX_DIMS 5

typedef enum ct_dtype { CT_F32 = 0, CT_F16, CT_BF16, CT_I32, CT_I64, CT_U8 } ct_dtype;

/* Bytes per element of a dtype (0 for an unknown value). */
size_t ct_dtype_size(ct_dtype dt);
/* Its safetensors name ("F32", "I64", ...); "?" for an unknown value. Static string. */
const char *ct_dtype_name(ct_dtype dt);

#ifdef __cplusplus
}
#endif
#endif
