/* trainer/train/upload.c — a replica's batches from the host to its device: the loader's batch
 * is copied into host staging (pinned on CUDA), uploaded on a copy stream of its own, and the
 * compute stream waits for the copy's event before the step's kernels read it. The copy stream
 * first waits for the compute stream's work so far (the new tensor's memory comes from the
 * compute stream's allocator, and work queued there earlier may still use it), and the staging
 * is written again only after its last upload's event (the host waits). On the checking device
 * each missing wait reads or writes bytes at the wrong time and the run goes wrong. Not here: the
 * CPU (replica.c wraps the loader's memory as it is). */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "internal.h"
#include "trainer/backend/backend.h"
#include "trainer/tensor/tensor_impl.h"

int ct__uploader_init(tr_uploader *u, ct_device device)
{
    memset(u, 0, sizeof *u);
    if (!(u->bk = ct__backend_of(device)))
        return CT_ENOSYS; /* ct__backend_of said why */
    const ct__backend *bk = u->bk;
    int rc = 0;
    if ((rc = CT__BK_CALL(bk, stream_new, &u->stream)) < 0 ||
        (rc = CT__BK_CALL(bk, event_new, &u->copied)) < 0 ||
        (rc = CT__BK_CALL(bk, event_new, &u->compute)) < 0)
        ct__uploader_free(u);
    return rc;
}

void ct__uploader_free(tr_uploader *u)
{
    const ct__backend *bk = u->bk;
    if (!bk)
        return;
    if (u->stream) {
        bk->synchronize(u->stream); /* the staging's last upload is done */
        bk->stream_free(u->stream);
    }
    if (u->stage)
        bk->host_free(u->stage);
    if (u->copied)
        bk->event_free(u->copied);
    if (u->compute)
        bk->event_free(u->compute);
    memset(u, 0, sizeof *u);
}

int ct__uploader_put(tr_uploader *u, ct_dtype dt, int ndim, const int64_t *shape, const void *host,
                     ct_tensor **out)
{
    const ct__backend *bk = u->bk;
    *out = NULL;
    int rc = 0;
    if (u->used && (rc = bk->event_sync(u->copied)) < 0) /* the staging is free again */
        return rc;
    ct_tensor *t = ct__tensor_empty_on(bk, dt, ndim, shape);
    if (!t)
        return CT_ENOMEM;
    size_t bytes = (size_t)ct_tensor_numel(t) * ct_dtype_size(dt);
    if (bytes > u->cap) {
        if (u->stage)
            bk->host_free(u->stage);
        u->stage = NULL;
        u->cap = 0;
        if ((rc = bk->host_alloc(&u->stage, bytes)) < 0)
            goto fail;
        u->cap = bytes;
    }
    memcpy(u->stage, host, bytes);
    if ((rc = bk->event_record(u->compute, NULL)) < 0 ||
        (rc = bk->stream_wait(u->stream, u->compute)) < 0 ||
        (rc = bk->upload_async(ct_tensor_data(t), u->stage, bytes, u->stream)) < 0 ||
        (rc = bk->event_record(u->copied, u->stream)) < 0 ||
        (rc = bk->stream_wait(NULL, u->copied)) < 0)
        goto fail;
    u->used = true;
    *out = t;
    return 0;
fail:
    ct_tensor_release(&t);
    return rc;
}
