/* trainer/metrics/tfevents.c — the TensorBoard event-file writer (tfevents.h): Event protobufs
 * packed by protobuf-c (proto/tb_event.proto), framed as TFRecords with masked CRC-32C.
 * Not here: what the trainer logs (trainer/train/progress.c). */
#include "trainer/metrics/tfevents.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common.h"
#include "objectstore/crc32c.h"
#include "tb_event.pb-c.h"

struct ct_tfevents {
    FILE *f;
    char *path;
};

uint32_t ct__tfevents_masked_crc(const void *buf, size_t len)
{
    uint32_t crc = ct__crc32c(0, buf, len);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void ct__tfevents_frame(const void *data, size_t len, uint8_t *out)
{
    put_le(out, len, 8);
    put_le(out + 8, ct__tfevents_masked_crc(out, 8), 4);
    memcpy(out + 12, data, len);
    put_le(out + 12 + len, ct__tfevents_masked_crc(data, len), 4);
}

/* Packs ev and writes it as one record. */
static int write_event(ct_tfevents *w, const Ct__Tb__Event *ev)
{
    size_t len = ct__tb__event__get_packed_size(ev);
    uint8_t *data = malloc(len ? len : 1), *rec = malloc(len + CT_TFEVENTS_OVERHEAD);
    int rc = 0;
    if (!data || !rec) {
        rc = ct__error(CT_ENOMEM, "tfevents: out of memory for an event of %zu bytes", len);
        goto out;
    }
    ct__tb__event__pack(ev, data);
    ct__tfevents_frame(data, len, rec);
    if (fwrite(rec, 1, len + CT_TFEVENTS_OVERHEAD, w->f) != len + CT_TFEVENTS_OVERHEAD)
        rc = ct__error(CT_EIO, "tfevents: writing %s failed", w->path);
out:
    free(data);
    free(rec);
    return rc;
}

int ct__tfevents_open(const char *dir, double wall_time, ct_tfevents **out)
{
    char host[256] = "localhost";
    int rc = 0;
    *out = NULL;
    if (!dir || !*dir)
        return ct__error(CT_EINVAL, "tfevents: dir is empty");
    ct_tfevents *w = calloc(1, sizeof *w);
    if (!w)
        return ct__error(CT_ENOMEM, "tfevents: out of memory");
    gethostname(host, sizeof host - 1);
    size_t cap = strlen(dir) + strlen(host) + 64;
    if (!(w->path = malloc(cap))) {
        rc = ct__error(CT_ENOMEM, "tfevents: out of memory");
        goto fail;
    }
    snprintf(w->path, cap, "%s/events.out.tfevents.%lld.%s", dir, (long long)wall_time, host);
    if (!(w->f = fopen(w->path, "ab"))) {
        rc = ct__error(CT_EIO, "tfevents: cannot open %s for writing", w->path);
        goto fail;
    }
    Ct__Tb__Event ev = CT__TB__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.what_case = CT__TB__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    if ((rc = write_event(w, &ev)) < 0 || (rc = ct__tfevents_flush(w)) < 0)
        goto fail;
    *out = w;
    return 0;
fail:
    ct__tfevents_close(&w);
    return rc;
}

const char *ct__tfevents_path(const ct_tfevents *w)
{
    return w ? w->path : "";
}

int ct__tfevents_scalars(ct_tfevents *w, double wall_time, int64_t step, const char *const *tags,
                         const double *values, int n)
{
    if (!w || n < 0 || (n > 0 && (!tags || !values)))
        return ct__error(CT_EINVAL, "tfevents_scalars: bad arguments (n = %d)", n);
    for (int i = 0; i < n; i++)
        if (!tags[i] || !*tags[i])
            return ct__error(CT_EINVAL, "tfevents_scalars: tags[%d] is empty", i);
    Ct__Tb__Summary__Value *vals = calloc((size_t)(n ? n : 1), sizeof *vals);
    Ct__Tb__Summary__Value **ptrs = calloc((size_t)(n ? n : 1), sizeof *ptrs);
    int rc;
    if (!vals || !ptrs) {
        rc = ct__error(CT_ENOMEM, "tfevents_scalars: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        ct__tb__summary__value__init(&vals[i]);
        vals[i].tag = (char *)tags[i];
        vals[i].value_case = CT__TB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
        vals[i].simple_value = (float)values[i];
        ptrs[i] = &vals[i];
    }
    Ct__Tb__Summary sum = CT__TB__SUMMARY__INIT;
    sum.n_value = (size_t)n;
    sum.value = ptrs;
    Ct__Tb__Event ev = CT__TB__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.step = step;
    ev.what_case = CT__TB__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    rc = write_event(w, &ev);
out:
    free(vals);
    free(ptrs);
    return rc;
}

int ct__tfevents_flush(ct_tfevents *w)
{
    if (w && w->f && fflush(w->f) != 0)
        return ct__error(CT_EIO, "tfevents: flushing %s failed", w->path);
    return 0;
}

void ct__tfevents_close(ct_tfevents **wp)
{
    if (!wp || !*wp)
        return;
    ct_tfevents *w = *wp;
    if (w->f)
        fclose(w->f);
    free(w->path);
    free(w);
    *wp = NULL;
}
