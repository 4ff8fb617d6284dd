/* trainer/nn/wgrad_defer.c — deferred weight gradients of Linear layers (nn_impl.h).
 *
 * While a thread defers (ct__wgrad_defer_begin: a pipeline's stage runs its micro-batches), a
 * Linear's backward computes its input's gradient as usual (the previous stage waits for it),
 * but for its weight only copies the rows of x and dy; ct__wgrad_defer_end then computes each
 * weight's gradient once over all the rows gathered, in the order they came (micro-batch order
 * in both schedules), as one product with k = the whole batch. Per micro-batch, each product
 * read and wrote the whole weight gradient for k = 32 rows: bench/pipeline's 8 micro-batches of
 * 32 rows through 8 Linear(1024) layers spent about twice the CPU time of one 256-row batch on
 * weight gradients (69 ms against 33 per step, 1 thread, under load). The rows cost
 * (ic + oc) floats each, what the whole batch's activations hold.
 *
 * Only CPU tensors (the copies are host memcpy) and weights without a gradient-ready hook (the
 * hook would fire before the sum is complete) are deferred; the others go on at once. The rows'
 * buffers are kept per thread between calls (a step gathers the same sizes every time). */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "trainer/nn/nn_impl.h"
#include "trainer/tensor/tensor_impl.h"

/* one weight's rows gathered so far */
typedef struct pending {
    ct_tensor *w, *b; /* retained; b may be NULL */
    ct__wgrad_fn *wgrad;
    int64_t ic, oc, rows;
    int64_t cap;   /* rows the buffers hold */
    float *x, *dy; /* (cap, ic) and (cap, oc), 64-byte aligned */
} pending;

static __thread struct {
    bool on;
    int n, cap; /* p[0..n) in use; p[n..cap) keep their buffers for the next call */
    pending *p;
} D;

void ct__wgrad_defer_begin(void)
{
    D.on = true;
}

/* grows p's buffers to hold `rows` rows, keeping the rows there */
static int reserve(pending *p, int64_t rows)
{
    if (rows <= p->cap)
        return 0;
    int64_t cap = p->cap * 2 > rows ? p->cap * 2 : rows;
    size_t xb = (size_t)(cap * p->ic) * sizeof(float), db = (size_t)(cap * p->oc) * sizeof(float);
    float *x = aligned_alloc(64, (xb + 63) & ~(size_t)63);
    float *dy = aligned_alloc(64, (db + 63) & ~(size_t)63);
    if (!x || !dy) {
        free(x);
        free(dy);
        return ct__error(CT_ENOMEM, "linear backward: out of memory deferring a weight gradient");
    }
    if (p->rows) {
        memcpy(x, p->x, (size_t)(p->rows * p->ic) * sizeof(float));
        memcpy(dy, p->dy, (size_t)(p->rows * p->oc) * sizeof(float));
    }
    free(p->x);
    free(p->dy);
    p->x = x;
    p->dy = dy;
    p->cap = cap;
    return 0;
}

/* the pending entry of (w, b), taken from the free ones when new; NULL when out of memory */
static pending *entry_of(ct_tensor *w, ct_tensor *b, int64_t ic, int64_t oc)
{
    for (int i = 0; i < D.n; i++)
        if (D.p[i].w == w && D.p[i].b == b && D.p[i].ic == ic && D.p[i].oc == oc)
            return &D.p[i];
    if (D.n == D.cap) {
        int cap = D.cap ? D.cap * 2 : 16;
        pending *p = realloc(D.p, (size_t)cap * sizeof(*p));
        if (!p)
            return NULL;
        memset(p + D.cap, 0, (size_t)(cap - D.cap) * sizeof(*p));
        D.p = p;
        D.cap = cap;
    }
    pending *e = &D.p[D.n];
    if (e->ic != ic || e->oc != oc) { /* another shape: the kept buffers do not fit */
        free(e->x);
        free(e->dy);
        *e = (pending){.ic = ic, .oc = oc};
    }
    e->w = ct_tensor_retain(w);
    e->b = b ? ct_tensor_retain(b) : NULL;
    e->rows = 0;
    D.n++;
    return e;
}

int ct__wgrad_defer(ct_tensor *w, ct_tensor *b, int64_t n, int64_t ic, int64_t oc, const float *x,
                    const float *dy, ct__wgrad_fn *wgrad)
{
    if (!D.on || ct_tensor_device(w) != CT_CPU || w->hook_fn || (b && b->hook_fn))
        return 0;
    pending *p = entry_of(w, b, ic, oc);
    if (!p)
        return ct__error(CT_ENOMEM, "linear backward: out of memory deferring a weight gradient");
    int rc = reserve(p, p->rows + n);
    if (rc < 0)
        return rc;
    p->wgrad = wgrad;
    memcpy(p->x + p->rows * ic, x, (size_t)(n * ic) * sizeof(float));
    memcpy(p->dy + p->rows * oc, dy, (size_t)(n * oc) * sizeof(float));
    p->rows += n;
    return 1;
}

int ct__wgrad_defer_end(bool apply)
{
    int rc = 0;
    for (int i = 0; i < D.n; i++) {
        pending *p = &D.p[i];
        if (apply && rc == 0)
            rc = p->wgrad(p->w, p->b, p->rows, p->ic, p->oc, p->x, p->dy);
        ct_tensor_release(&p->w);
        ct_tensor_release(&p->b);
        p->rows = 0;
    }
    D.n = 0;
    D.on = false;
    return rc;
}

void ct__wgrad_defer_free(void)
{
    ct__wgrad_defer_end(false);
    for (int i = 0; i < D.cap; i++) {
        free(D.p[i].x);
        free(D.p[i].dy);
    }
    free(D.p);
    D.p = NULL;
    D.cap = 0;
}
