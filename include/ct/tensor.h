/* ct/tensor.h — n-dimensional tensors with reverse-mode autograd.
 *
 * A tensor is a view (dtype, shape, strides, offset) on ref-counted storage that lives on a
 * device (ct_device: the CPU, a CUDA GPU, or the checking device; ct_tensor_to copies between
 * them, and every op runs on its inputs' device). Many tensors may share one storage:
 * a model's parameters are carved out of one flat value buffer and one flat gradient buffer
 * (see ct_arena below and ct_module_params in ct/nn.h), so gradient allreduce buckets are
 * plain byte ranges.
 *
 * Autograd: every op in ct/nn.h whose input requires a gradient records a node on the calling
 * thread's tape. ct_tensor_backward(loss, NULL) walks the tape in reverse, ACCUMULATES into
 * each leaf's .grad (as PyTorch does; ct_tensor_zero_grad clears) and then clears the tape.
 * ct_autograd_set_enabled(false) is no-grad mode (evaluation): nothing is recorded. A
 * gradient-ready hook (ct_tensor_on_grad_ready) lets a reducer take a leaf's gradient while
 * backward is still running (DDP-style overlap; see ct_module_on_grad_ready in ct/nn.h).
 *
 * Example:
 *     int64_t shape[2] = {4, 3};
 *     ct_tensor *w = ct_tensor_new(CT_F32, 2, shape);      // caller owns one reference
 *     ct_tensor_set_requires_grad(w, true);
 *     ct_tensor *y = ct_nn_relu(w);                         // ct/nn.h op, records a node
 *     ct_tensor *l = ct_nn_sum(y);
 *     ct_tensor_backward(l, NULL);                          // w's grad = (w > 0)
 *     ct_tensor_release(&l); ct_tensor_release(&y); ct_tensor_release(&w);
 *
 * Ownership: functions returning ct_tensor * give the caller one new reference; release it
 * with ct_tensor_release(&t) (accepts NULL, nulls the pointer). Accessors return borrowed
 * pointers valid while the tensor lives.
 * Threads: a tensor may be read from many threads; writes and refcount changes on one tensor
 * must not race. The tape and the no-grad flag are per thread. */
#ifndef CT_TENSOR_H
#define CT_TENSOR_H

#include "ct/device.h"
#include "ct/dtype.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_tensor ct_tensor;

/* ct_dtype, ct_dtype_size(), ct_dtype_name() and CT_MAX_DIMS come from ct/dtype.h; ct_device and
 * its names from ct/device.h. */

/* New contiguous CPU tensor, zero-filled. NULL on bad shape / out of memory (ct_last_error). */
ct_tensor *ct_tensor_new(ct_dtype dt, int ndim, const int64_t *shape);
/* New contiguous f32 tensor holding a copy of data (numel floats). */
ct_tensor *ct_tensor_from_f32(int ndim, const int64_t *shape, const float *data);
/* New tensor over memory the caller keeps alive and frees (no copy, not freed by ct). */
ct_tensor *ct_tensor_wrap(ct_dtype dt, int ndim, const int64_t *shape, void *data);
/* Adds / drops a reference. */
ct_tensor *ct_tensor_retain(ct_tensor *t);
void ct_tensor_release(ct_tensor **t);

/* A view sharing t's storage: new shape with the same number of elements (t contiguous). */
ct_tensor *ct_tensor_view(ct_tensor *t, int ndim, const int64_t *shape);
/* A view of rows [start, start+len) along dim 0 (a batch slice). */
ct_tensor *ct_tensor_narrow0(ct_tensor *t, int64_t start, int64_t len);
/* A contiguous copy (no autograd), on t's device. */
ct_tensor *ct_tensor_clone(const ct_tensor *t);
/* A copy of contiguous t on device (a new tensor even when t is there already). Differentiable:
 * with grad mode on and t requiring a gradient, it records a node whose backward copies the
 * gradient back to t's device. Between two indices of one kind it is queued on the target's
 * compute stream after an event of the source's (no host wait); otherwise through the host.
 * NULL with a message naming the device where it cannot be used (no CUDA device, a build
 * without CUDA). */
ct_tensor *ct_tensor_to(const ct_tensor *t, ct_device device);
/* An i64 copy of f32 t, each value rounded (token ids and labels carried as floats), on t's
 * device; i64 t itself (retained). */
ct_tensor *ct_tensor_to_i64(const ct_tensor *t);

ct_dtype ct_tensor_dtype(const ct_tensor *t);
ct_device ct_tensor_device(const ct_tensor *t);
int ct_tensor_ndim(const ct_tensor *t);
int64_t ct_tensor_dim(const ct_tensor *t, int i); /* negative i counts from the end */
const int64_t *ct_tensor_shape(const ct_tensor *t);
const int64_t *ct_tensor_strides(const ct_tensor *t); /* in elements */
int64_t ct_tensor_numel(const ct_tensor *t);
bool ct_tensor_is_contiguous(const ct_tensor *t);
/* False when ops left t in an internal blocked layout (4-D activations whose C is a multiple of
 * the CPU's channel block, 8 or 16, coming out of conv / batch norm / pooling / eltwise): read
 * its data through ct_nn_to_plain(). */
bool ct_tensor_is_plain(const ct_tensor *t);
/* First element (storage data + offset). Borrowed. On a device (CUDA, the checking device)
 * this is device memory the host must not dereference: read it with ct_tensor_copy_to,
 * ct_tensor_item or ct_tensor_to(t, CT_CPU). */
void *ct_tensor_data(const ct_tensor *t);
float *ct_tensor_f32(const ct_tensor *t); /* NULL unless dtype is CT_F32 */
/* Copies numel elements in from / out to host memory (same dtype, t contiguous), whatever t's
 * device; copy_to returns when the bytes are there. */
int ct_tensor_copy_from(ct_tensor *t, const void *src, size_t nbytes);
int ct_tensor_copy_to(const ct_tensor *t, void *dst, size_t nbytes);
int ct_tensor_fill_f32(ct_tensor *t, float v);
/* Scalar value of a one-element f32 tensor (waits for it on a device; NaN if that fails). */
float ct_tensor_item(const ct_tensor *t);

/* ---- autograd ---- */
void ct_tensor_set_requires_grad(ct_tensor *t, bool on);
bool ct_tensor_requires_grad(const ct_tensor *t);
/* The accumulated gradient (same shape, f32, contiguous) or NULL if none yet. Borrowed. Only a
 * leaf's (a tensor no op made, e.g. a parameter) is kept as such: an op's output's gradient is
 * backward's scratch, which may hold another tensor's sums when backward returns. */
ct_tensor *ct_tensor_grad(const ct_tensor *t);
/* Zeroes the gradient (keeps the buffer). */
void ct_tensor_zero_grad(ct_tensor *t);
/* Reverse pass from t. grad_out: upstream gradient of t's shape, or NULL for ones (scalar
 * loss). Accumulates into every leaf that requires a gradient; clears the tape. */
int ct_tensor_backward(ct_tensor *t, const ct_tensor *grad_out);
/* ct_tensor_backward(t, NULL) of scale * t, t a scalar: gradient accumulation's 1/k without
 * a tensor for it (PyTorch: (loss / k).backward()). */
int ct_tensor_backward_scaled(ct_tensor *t, float scale);
/* Gradient-ready hook (PyTorch DDP's autograd hook): fn(t, user) runs on the thread calling
 * ct_tensor_backward() as soon as leaf t's gradient is final for that pass, i.e. right after
 * the last recorded node that takes t as an input has run its backward (or was skipped for
 * being off the path from the loss), while the rest of backward is still to come.
 * Guarantees, per ct_tensor_backward() call that succeeds:
 *   - fires exactly once for each hooked leaf that requires a gradient and is an input of some
 *     node on the tape; never for a leaf the tape does not use;
 *   - fires before backward returns, in the order the reverse walk finishes the leaves: a leaf
 *     used last in the forward pass fires first (for a Sequential model: exactly reverse
 *     parameter registration order; leaves of one node fire in reverse input order);
 *   - when it fires, ct_tensor_grad(t) is complete, contiguous f32 and is not written again
 *     by this pass, so another thread may read or reduce it in place until the next backward
 *     (the layout is plain row-major for every tensor in plain layout, which module
 *     parameters always are). A gradient left logically empty (no path from the loss) is
 *     zero-filled first. A leaf without a gradient buffer fires with ct_tensor_grad() NULL.
 * If backward fails half-way, leaves not yet finished do not fire. A negative return from
 * fn does not stop backward: the remaining nodes and hooks still run and ct_tensor_backward()
 * returns the first such code. One hook per tensor: registering replaces the previous one;
 * fn NULL removes it. t must be a leaf (not produced by a recorded op): else CT_EINVAL. user
 * is borrowed until the hook is replaced or t is released. Costs nothing while no hook was
 * ever registered in the process; otherwise one pass over the tape's inputs per backward. */
typedef int (*ct_grad_ready_fn)(ct_tensor *t, void *user);
int ct_tensor_on_grad_ready(ct_tensor *t, ct_grad_ready_fn fn, void *user);

/* No-grad mode for this thread; returns the previous setting. */
bool ct_autograd_set_enabled(bool on);
bool ct_autograd_enabled(void);
/* Drops every recorded node of this thread (e.g. after a forward you will not back-prop). */
void ct_autograd_clear_tape(void);
/* A forward set aside (pipeline schedules, ct/pipeline.h): ct_autograd_tape_detach() takes
 * every node this thread recorded since its tape was last empty and leaves the tape empty, so
 * other forwards and backwards may run; ct_autograd_tape_attach() puts such a tape back as this
 * thread's tape, to be walked by ct_tensor_backward() (which then frees it). detach: caller
 * owns (an empty tape when nothing was recorded), NULL on out of memory. attach takes
 * ownership of *t and clears the pointer; CT_EINVAL (t kept) if this thread's tape is not
 * empty. A tape may be attached on another thread than the one that recorded it. */
typedef struct ct_tape ct_tape;
ct_tape *ct_autograd_tape_detach(void);
int ct_autograd_tape_attach(ct_tape **t);
/* Frees the nodes of a detached tape (accepts NULL; clears the pointer). */
void ct_tape_destroy(ct_tape **t);

/* ---- arenas: one allocation carved into many tensors ----
 * ct_arena_new(bytes) then ct_arena_alloc(a, dt, ndim, shape) returns views into it, each
 * aligned to 64 bytes. The arena's storage lives until its last tensor is released. */
typedef struct ct_arena ct_arena;
ct_arena *ct_arena_new(size_t bytes);
ct_tensor *ct_arena_alloc(ct_arena *a, ct_dtype dt, int ndim, const int64_t *shape);
void *ct_arena_data(const ct_arena *a);
size_t ct_arena_used(const ct_arena *a);
void ct_arena_destroy(ct_arena **a);

#ifdef __cplusplus
}
#endif
#endif
