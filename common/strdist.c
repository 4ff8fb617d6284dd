/* common/strdist.c — how far apart two short names are, for "did you mean" suggestions (the
 * trainer's config keys, the cluster YAML's keys). Not a general string library. */
#include <ctype.h>
#include <string.h>

#include "common/common.h"

int ct__edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    int d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] +
                    (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = c < del ? (c < ins ? c : ins) : (del < ins ? del : ins);
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < d[i][j])
                d[i][j] = d[i - 2][j - 2] + 1; /* a transposition counts as one edit */
        }
    return d[la][lb];
}

int ct__edit_limit(const char *name)
{
    size_t n = strlen(name);
    return n <= 4 ? 1 : n <= 8 ? 2 : 3;
}
