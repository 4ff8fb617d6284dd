/* trainer/tensor/tensor_impl.h — the tensor, storage and autograd-node structs, shared by the
 * engine's own modules (tensor/, nn/). Not public API: users see only ct/tensor.h.
 *
 * Grad protocol for op backward functions: ct__grad_dst(t, &acc) returns t's gradient buffer
 * (allocating it if needed) and sets acc=false when the buffer holds nothing yet (the kernel may
 * overwrite it) or acc=true when the kernel must add into it. ct__grad_add() does the add for
 * kernels (oneDNN) that can only overwrite: they write into a scratch buffer first. */
#ifndef CT_TENSOR_IMPL_H
#define CT_TENSOR_IMPL_H

#include "ct/tensor.h"
#include "trainer/backend/backend.h"

typedef struct ct__storage {
    int refcount;
    ct_device device;
    const ct__backend *bk; /* the device's table (table.h): every kernel on data goes here */
    void *data;            /* the device's memory */
    size_t nbytes;
    bool owned; /* bk->free(data) when the last reference goes */
} ct__storage;

typedef struct ct__node ct__node;

struct ct_tensor {
    int refcount;
    ct_dtype dtype;
    int ndim;
    int64_t shape[CT_MAX_DIMS];
    int64_t strides[CT_MAX_DIMS];
    int64_t offset; /* elements */
    int fmt;        /* physical layout, CT__FMT_* of trainer/cpu/cpu.h (0: plain row-major) */
    ct__storage *storage;
    /* autograd */
    bool requires_grad;
    bool grad_empty; /* grad buffer content is logically zero: next writer may overwrite */
    ct_tensor *grad;
    ct__node *node; /* producing op on the tape (weak: the tape owns nodes), NULL for leaves */
    /* gradient-ready hook (leaves; ct_tensor_on_grad_ready). hook_at is scratch of the
     * backward pass that is running: the tape index of the last node that may add to grad. */
    ct_grad_ready_fn hook_fn;
    void *hook_user;
    int hook_at;
};

#define CT__NODE_MAX_IN 6

/* One recorded op. The tape owns nodes; a node owns references to its inputs, its output and
 * any saved tensors; ctx is freed with free_ctx (or free() when free_ctx is NULL). */
struct ct__node {
    const char *name;
    int (*backward)(ct__node *n); /* reads n->out->grad, accumulates into inputs' grads */
    void (*free_ctx)(void *ctx);
    ct_tensor *out;
    ct_tensor *in[CT__NODE_MAX_IN];
    int nin;
    ct_tensor *saved[4];
    void *ctx;
};

/* Records a node for out = op(in...) when grad mode is on and some input requires grad. Takes
 * ownership of ctx (freed even on failure / when nothing is recorded). Returns the node or NULL
 * (nothing recorded; not an error unless ct__node_record_failed()). */
ct__node *ct__node_record(const char *name, int (*backward)(ct__node *), ct_tensor *out, int nin,
                          ct_tensor *const *in, void *ctx, void (*free_ctx)(void *));
/* True when some input requires grad and grad mode is on. */
bool ct__needs_grad(int nin, ct_tensor *const *in);

/* Gradient buffer of t (f32, contiguous, t's numel, on t's device) for a backward kernel; see
 * header. NULL on out of memory. */
float *ct__grad_dst(ct_tensor *t, bool *acc);
/* For backward functions whose input's gradient equals their output's (reshape, add): when t
 * holds no gradient yet and an op made it (not a leaf), t's gradient becomes a view of nd->out's,
 * no copy (nothing reads nd->out's gradient after nd's backward). Returns whether it did; when
 * not, the caller copies or adds as usual. After backward, a non-leaf's gradient may so hold
 * the sums of another tensor's. */
bool ct__grad_pass(ct__node *nd, ct_tensor *t);
/* dst[i] += src[i] or dst[i] = src[i] when !acc, n floats of bk's device. */
int ct__grad_add(const ct__backend *bk, float *dst, const float *src, int64_t n, bool acc);
/* A per-thread scratch buffer of at least n floats of bk's device (valid until the next call
 * on this thread with the same device and slot; on a device, for work queued on its compute
 * stream). slot 0..3. */
float *ct__scratch(const ct__backend *bk, int slot, int64_t n);

/* Contiguous float data of t (asserts f32): device memory where t is on a device. */
static inline float *ct__f32(const ct_tensor *t)
{
    return (float *)t->storage->data + t->offset;
}

/* The table of t's device. */
static inline const ct__backend *ct__bk(const ct_tensor *t)
{
    return t->storage->bk;
}

/* uninitialised, on bk's device */
ct_tensor *ct__tensor_empty_on(const ct__backend *bk, ct_dtype dt, int ndim, const int64_t *shape);
/* t's copy on device (a clone on its own device), not on the autograd tape; NULL with the
 * error set (tensor.c). ct_tensor_to is this plus the tape node. */
ct_tensor *ct__tensor_copy_on(const ct_tensor *t, ct_device device);
/* bytes from src in from's memory to dst in to's (tensor.c): a copy, upload, download, peer
 * copy ordered by events, or through the host. */
int ct__copy_between(const struct ct__backend *from, const struct ct__backend *to, void *dst,
                     const void *src, size_t bytes);
ct_tensor *ct__tensor_empty_like(const ct_tensor *t); /* on t's device */
/* Re-points t at (storage, offset), dropping its old storage. Used to carve flat buffers. */
void ct__tensor_rebind(ct_tensor *t, ct__storage *s, int64_t offset);
ct__storage *ct__storage_new_on(const ct__backend *bk, size_t nbytes, bool zero);
void ct__storage_release(ct__storage **s);
/* Points t's gradient at a view of (storage, offset) (flat gradient buffers). */
int ct__tensor_bind_grad(ct_tensor *t, ct__storage *s, int64_t offset);

#endif
