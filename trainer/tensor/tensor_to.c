/* trainer/tensor/tensor_to.c — ct_tensor_to: a tensor's copy on another device, and its place
 * on the autograd tape (the backward copies the gradient back). Between two indices of one
 * kind the copy is a peer copy ordered by events between the two devices' streams; otherwise
 * through the host, or an upload or download.
 *
 * Not here: the tensor itself (tensor.c), the tape (autograd.c). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "trainer/tensor/tensor_impl.h"

/* bytes from src (from's memory) to dst (to's), two devices of one kind with peer copies:
 * queued on to's compute stream after an event of from's, and from's later work (its free of
 * src among it) after the copy, so neither device waits on the host. An event per device: CUDA
 * records an event only on a stream of the device it was made on. */
static int peer_copy(const ct__backend *from, const ct__backend *to, void *dst, const void *src,
                     size_t bytes)
{
    void *written = NULL, *copied = NULL;
    int rc = from->event_new(&written);
    if (rc == 0 && (rc = to->event_new(&copied)) == 0 &&
        (rc = from->event_record(written, NULL)) == 0 &&
        (rc = to->stream_wait(NULL, written)) == 0 &&
        (rc = to->peer_copy(dst, src, bytes, NULL)) == 0 &&
        (rc = to->event_record(copied, NULL)) == 0)
        rc = from->stream_wait(NULL, copied);
    if (written)
        from->event_free(written);
    if (copied)
        to->event_free(copied);
    return rc;
}

/* bytes from src on from's device to dst on to's (two tables) */
static int copy_between(const ct__backend *from, const ct__backend *to, void *dst, const void *src,
                        size_t bytes)
{
    if (from == to)
        return to->copy(dst, src, bytes);
    if (from->device == CT_CPU)
        return to->upload(dst, src, bytes);
    if (to->device == CT_CPU)
        return from->download(dst, src, bytes);
    if (ct_device_kind(from->device) == ct_device_kind(to->device) && to->peer_copy)
        return peer_copy(from, to, dst, src, bytes);
    void *h = malloc(bytes ? bytes : 1); /* between two devices: through the host */
    int rc = !h ? ct__error(CT_ENOMEM, "tensor_to: out of memory") : from->download(h, src, bytes);
    if (rc == 0)
        rc = to->upload(dst, h, bytes);
    free(h);
    return rc;
}

/* the gradient of ct_tensor_to's output, copied back to its input's device */
static int to_bw(ct__node *nd)
{
    ct_tensor *x = nd->in[0];
    const ct__backend *from = ct__bk(nd->out), *to = ct__bk(x);
    int64_t n = ct_tensor_numel(x);
    size_t bytes = (size_t)n * sizeof(float);
    bool acc;
    float *g = ct__grad_dst(x, &acc);
    if (!g)
        return ct__error(CT_ENOMEM, "tensor_to backward: out of memory");
    if (!acc)
        return copy_between(from, to, g, ct__f32(nd->out->grad), bytes);
    ct_tensor *tmp = ct__tensor_empty_on(to, CT_F32, x->ndim, x->shape);
    int rc = tmp ? copy_between(from, to, ct__f32(tmp), ct__f32(nd->out->grad), bytes)
                 : ct__error(CT_ENOMEM, "tensor_to backward: out of memory");
    if (rc == 0)
        rc = to->axpy(n, 1.0f, ct__f32(tmp), g);
    ct_tensor_release(&tmp);
    return rc;
}

ct_tensor *ct_tensor_to(const ct_tensor *t, ct_device device)
{
    if (!t) {
        ct__error(CT_EINVAL, "tensor_to: NULL tensor");
        return NULL;
    }
    const ct__backend *to = ct__backend_of(device), *from = ct__bk(t);
    if (!to)
        return NULL;
    ct_tensor *c;
    if (from == to) {
        c = ct_tensor_clone(t);
    } else if (!ct_tensor_is_contiguous(t)) {
        ct__error(CT_EINVAL, "tensor_to: the tensor must be contiguous");
        return NULL;
    } else {
        if (!(c = ct__tensor_empty_on(to, t->dtype, t->ndim, t->shape)))
            return NULL;
        c->fmt = t->fmt;
        size_t bytes = (size_t)ct_tensor_numel(t) * ct_dtype_size(t->dtype);
        if (copy_between(from, to, ct_tensor_data(c), ct_tensor_data(t), bytes) < 0)
            ct_tensor_release(&c);
    }
    ct_tensor *in = (ct_tensor *)t;
    if (c && t->dtype == CT_F32 && ct__needs_grad(1, &in) &&
        !ct__node_record("tensor_to", to_bw, c, 1, &in, NULL, NULL)) {
        ct__error(CT_ENOMEM, "tensor_to: out of memory for its autograd node");
        ct_tensor_release(&c);
    }
    return c;
}
