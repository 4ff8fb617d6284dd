/* trainer/backend/device.c — device names: "cpu", "cuda:1", "checkdev" to a ct_device and back
 * (ct/device.h). Not where a device's table is chosen: that is trainer/backend/backend.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "ct/device.h"

static const char *const kind_names[] = {
    [CT_CPU] = "cpu", [CT_CUDA] = "cuda", [CT_CHECKDEV] = "checkdev"};

#define VALID_FORMS "\"cpu\", \"cuda\", \"cuda:N\", \"checkdev\" or \"checkdev:N\" (N from 0 to 3)"

int ct_device_parse(const char *s, ct_device *out)
{
    if (!s || !out)
        return ct__error(CT_EINVAL, "device: NULL name");
    for (int k = 0; k < (int)CT_ARRAY_LEN(kind_names); k++) {
        size_t n = strlen(kind_names[k]);
        if (strncmp(s, kind_names[k], n))
            continue;
        if (!s[n]) {
            *out = ct_device_make(k, 0);
            return 0;
        }
        const char *d = s + n + 1;
        if (s[n] != ':' || k == CT_CPU || d[0] < '0' || d[0] > '9' || d[1])
            break;
        if (d[0] - '0' >= CT_MAX_DEVICE_INDEX)
            break;
        *out = ct_device_make(k, d[0] - '0');
        return 0;
    }
    return ct__error(CT_EINVAL, "device \"%s\": not " VALID_FORMS, s);
}

static bool valid(ct_device d)
{
    int k = ct_device_kind(d), i = ct_device_index(d);
    return d >= 0 && k < (int)CT_ARRAY_LEN(kind_names) && i < CT_MAX_DEVICE_INDEX &&
           !(k == CT_CPU && i);
}

int ct_device_check(ct_device d)
{
    if (!valid(d))
        return ct__error(CT_EINVAL, "device %d (kind %d, index %d): not " VALID_FORMS, d,
                         ct_device_kind(d), ct_device_index(d));
    return 0;
}

const char *ct_device_name(ct_device d, char *buf, size_t size)
{
    if (!valid(d))
        snprintf(buf, size, "?");
    else if (ct_device_index(d))
        snprintf(buf, size, "%s:%d", kind_names[ct_device_kind(d)], ct_device_index(d));
    else
        snprintf(buf, size, "%s", kind_names[ct_device_kind(d)]);
    return buf;
}
