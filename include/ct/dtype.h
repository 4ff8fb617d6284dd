/* ct/dtype.h — the element types shared by tensors, collectives and checkpoints.
 * One definition for every module, so a buffer's dtype means the same everywhere. */
#ifndef CT_DTYPE_H
#define CT_DTYPE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_dtype { CT_F32 = 0, CT_F16, CT_BF16, CT_I32, CT_I64, CT_U8 } ct_dtype;

/* Bytes per element of a dtype (0 for an unknown value). */
size_t ct_dtype_size(ct_dtype dt);
/* Its safetensors name ("F32", "I64", ...); "?" for an unknown value. Static string. */
const char *ct_dtype_name(ct_dtype dt);

#ifdef __cplusplus
}
#endif
#endif
