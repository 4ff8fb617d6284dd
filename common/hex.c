/* common/hex.c — bytes written as lower-case hexadecimal digits: object ids, node ids,
 * tokens. Not here: parsing hex back (the object id's parser, objectstore/store.c). */
#include "common/common.h"

char *ct__hex(char *out, const void *bytes, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    const unsigned char *b = bytes;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[b[i] >> 4];
        out[2 * i + 1] = hx[b[i] & 15];
    }
    out[2 * n] = '\0';
    return out;
}
