/* common/version.c — ct_version(): the version of the ct code a program runs with. */
#include "ct/ct.h"

const char *ct_version(void)
{
    return CT_VERSION_STRING;
}
