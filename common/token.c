/* common/token.c — secrets for the head's authority checks: 128-bit random tokens written as
 * CT_TOKEN_LEN lower-case hex digits (getrandom), their format check, and a comparison whose
 * time does not depend on where two tokens differ.
 *
 * The head gives each node one when it registers (only that node may then speak for it); a
 * driver draws one per ct_init as its job's token, and the actors it creates inherit it.
 * Not in here: who holds which token and what it allows (head/loop.c). */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/random.h>
#include "common/common.h"

int ct__token_new(char out[CT_TOKEN_LEN + 1])
{
    unsigned char b[CT_TOKEN_LEN / 2];
    size_t got = 0;
    out[0] = 0;
    while (got < sizeof b) {
        ssize_t n = getrandom(b + got, sizeof b - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ct__error(-errno, "token: getrandom: %s", strerror(errno));
        got += (size_t)n;
    }
    ct__hex(out, b, sizeof b);
    return 0;
}

bool ct__token_valid(const char *t)
{
    if (!t)
        return false;
    for (int i = 0; i < CT_TOKEN_LEN; i++)
        if (!((t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f')))
            return false;
    return t[CT_TOKEN_LEN] == 0;
}

bool ct__token_eq(const char *a, const char *b)
{
    if (!ct__token_valid(a) || !ct__token_valid(b))
        return false;
    unsigned char d = 0;
    for (int i = 0; i < CT_TOKEN_LEN; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}
