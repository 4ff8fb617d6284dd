/* common/dtype.c — sizes and names of the element types of ct/dtype.h. */
#include "common/common.h"
#include "ct/dtype.h"

size_t ct_dtype_size(ct_dtype dt)
{
    switch (dt) {
    case CT_F32:
    case CT_I32:
        return 4;
    case CT_F16:
    case CT_BF16:
        return 2;
    case CT_I64:
        return 8;
    case CT_U8:
        return 1;
    }
    return 0;
}

const char *ct_dtype_name(ct_dtype dt)
{
    static const char *names[] = {"F32", "F16", "BF16", "I32", "I64", "U8"};
    return (unsigned)dt < CT_ARRAY_LEN(names) ? names[dt] : "?";
}
