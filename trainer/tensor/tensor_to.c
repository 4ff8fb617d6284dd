/* trainer/tensor/tensor_to.c — ct_tensor_to: a tensor's copy on another device (tensor.c's
 * ct__tensor_copy_on) with its place on the autograd tape: the backward copies the gradient
 * back to the input's device.
 *
 * Not here: the copy itself (tensor.c), the tape (autograd.c). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "trainer/tensor/tensor_impl.h"

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
        return ct__copy_between(from, to, g, ct__f32(nd->out->grad), bytes);
    ct_tensor *tmp = ct__tensor_empty_on(to, CT_F32, x->ndim, x->shape);
    int rc = tmp ? ct__copy_between(from, to, ct__f32(tmp), ct__f32(nd->out->grad), bytes)
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
    ct_tensor *c = ct__tensor_copy_on(t, device);
    ct_tensor *in = (ct_tensor *)t;
    if (c && t->dtype == CT_F32 && ct__needs_grad(1, &in) &&
        !ct__node_record("tensor_to", to_bw, c, 1, &in, NULL, NULL)) {
        ct__error(CT_ENOMEM, "tensor_to: out of memory for its autograd node");
        ct_tensor_release(&c);
    }
    return c;
}
