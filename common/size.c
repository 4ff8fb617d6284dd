/* common/size.c — ct__parse_size: memory sizes as users write them ("512M", "2GiB", bytes),
 * for ct-node's --store-memory and ctup's store_memory key alike. */
#include <stdlib.h>

#include "common/common.h"

int ct__parse_size(const char *s, uint64_t *bytes)
{
    if (!s || !*s)
        return CT_EINVAL;
    char *end;
    double x = strtod(s, &end), mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1024.0 * 1024 * 1024, end++;
    if (end[0] == 'i' && end[1] == 'B')
        end += 2;
    else if (*end == 'B' || *end == 'b')
        end++;
    if (end == s || *end || !(x * mul >= 1 << 20) || x * mul > 1e15)
        return CT_EINVAL;
    *bytes = (uint64_t)(x * mul);
    return 0;
}
