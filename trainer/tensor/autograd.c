/* trainer/tensor/autograd.c — the per-thread tape and the reverse pass.
 *
 * Ops append nodes in execution order, so the tape is already a topological order: backward
 * walks it from the end. A node runs when its output has received a gradient. Non-leaf
 * gradients die with their tensors when the tape is cleared. Gradient-ready hooks of leaves
 * fire during the walk, right after the last node that takes the leaf as an input (found by
 * one pre-pass over the tape). Not here: op math (trainer/nn/). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "trainer/tensor/tensor_impl.h"

static __thread struct {
    ct__node **nodes;
    int n, cap;
} tape;
static __thread bool grad_disabled;
static __thread bool release_set; /* thread_release is registered for this thread's end */
static void thread_release(void);

/* The thread holds a tape array or scratch: hand them back when it ends (a stage thread's). */
static int thread_state_kept(void)
{
    if (!release_set)
        release_set = ct__at_thread_exit(thread_release) == 0;
    return release_set ? 0 : CT_ENOMEM;
}
/* set once any gradient-ready hook is registered: until then backward skips the hook pass */
static atomic_bool hooks_used;

bool ct_autograd_set_enabled(bool on)
{
    bool prev = !grad_disabled;
    grad_disabled = !on;
    return prev;
}

bool ct_autograd_enabled(void)
{
    return !grad_disabled;
}

bool ct__needs_grad(int nin, ct_tensor *const *in)
{
    if (grad_disabled)
        return false;
    for (int i = 0; i < nin; i++)
        if (in[i] && in[i]->requires_grad)
            return true;
    return false;
}

static void node_free(ct__node *n)
{
    if (!n)
        return;
    if (n->out && n->out->node == n)
        n->out->node = NULL;
    ct_tensor_release(&n->out);
    for (int i = 0; i < n->nin; i++)
        ct_tensor_release(&n->in[i]);
    for (int i = 0; i < 4; i++)
        ct_tensor_release(&n->saved[i]);
    if (n->free_ctx)
        n->free_ctx(n->ctx);
    else
        free(n->ctx);
    free(n);
}

ct__node *ct__node_record(const char *name, int (*backward)(ct__node *), ct_tensor *out, int nin,
                          ct_tensor *const *in, void *ctx, void (*free_ctx)(void *))
{
    ct__node *n = NULL;
    if (!ct__needs_grad(nin, in) || nin > CT__NODE_MAX_IN)
        goto drop;
    if (tape.n == tape.cap) {
        int cap = tape.cap ? tape.cap * 2 : 64;
        if (thread_state_kept() < 0)
            goto drop;
        ct__node **nn = realloc(tape.nodes, (size_t)cap * sizeof(*nn));
        if (!nn)
            goto drop;
        tape.nodes = nn;
        tape.cap = cap;
    }
    n = calloc(1, sizeof(*n));
    if (!n)
        goto drop;
    n->name = name;
    n->backward = backward;
    n->free_ctx = free_ctx;
    n->ctx = ctx;
    n->out = ct_tensor_retain(out);
    n->nin = nin;
    for (int i = 0; i < nin; i++)
        n->in[i] = ct_tensor_retain(in[i]);
    out->requires_grad = true;
    out->node = n;
    tape.nodes[tape.n++] = n;
    return n;
drop:
    if (free_ctx)
        free_ctx(ctx);
    else
        free(ctx);
    return NULL;
}

void ct_autograd_clear_tape(void)
{
    for (int i = tape.n - 1; i >= 0; i--)
        node_free(tape.nodes[i]);
    tape.n = 0;
    if (tape.cap > 4096) {
        free(tape.nodes);
        tape.nodes = NULL;
        tape.cap = 0;
    }
}

struct ct_tape {
    ct__node **nodes;
    int n;
};

ct_tape *ct_autograd_tape_detach(void)
{
    ct_tape *t = calloc(1, sizeof(*t));
    if (!t) {
        ct__error(CT_ENOMEM, "tape detach: out of memory");
        return NULL;
    }
    t->nodes = tape.nodes; /* the thread's array goes with its nodes; a new one grows later */
    t->n = tape.n;
    tape.nodes = NULL;
    tape.n = tape.cap = 0;
    return t;
}

int ct_autograd_tape_attach(ct_tape **t)
{
    if (!t || !*t)
        return ct__error(CT_EINVAL, "tape attach: NULL tape");
    if (tape.n > 0)
        return ct__error(CT_EINVAL, "tape attach: this thread has %d recorded nodes", tape.n);
    if (thread_state_kept() < 0)
        return CT_ENOMEM; /* said why */
    free(tape.nodes);
    tape.nodes = (*t)->nodes;
    tape.n = tape.cap = (*t)->n;
    free(*t);
    *t = NULL;
    return 0;
}

void ct_tape_destroy(ct_tape **t)
{
    if (!t || !*t)
        return;
    for (int i = (*t)->n - 1; i >= 0; i--)
        node_free((*t)->nodes[i]);
    free((*t)->nodes);
    free(*t);
    *t = NULL;
}

float *ct__grad_dst(ct_tensor *t, bool *acc)
{
    if (!t->grad) {
        ct_tensor *g = ct__tensor_empty_on(ct__bk(t), CT_F32, t->ndim, t->shape);
        if (!g)
            return NULL;
        g->fmt = t->fmt; /* a gradient has its tensor's layout */
        t->grad = g;
        t->grad_empty = true;
    }
    *acc = !t->grad_empty;
    t->grad_empty = false;
    return ct__f32(t->grad);
}

bool ct__grad_pass(ct__node *nd, ct_tensor *t)
{
    ct_tensor *g = nd->out->grad;
    if (t->grad || !t->node || t->fmt != CT__FMT_PLAIN || g->fmt != CT__FMT_PLAIN ||
        ct__bk(g) != ct__bk(t) || ct_tensor_numel(g) != ct_tensor_numel(t) ||
        !ct_tensor_is_contiguous(g))
        return false;
    ct_tensor *v = ct_tensor_view(g, t->ndim, t->shape);
    if (!v)
        return false;
    t->grad = v;
    t->grad_empty = false;
    return true;
}

int ct__grad_add(const ct__backend *bk, float *dst, const float *src, int64_t n, bool acc)
{
    if (dst == src)
        return 0;
    if (acc)
        return bk->axpy(n, 1.0f, src, dst);
    return bk->copy(dst, src, (size_t)n * sizeof(float));
}

/* per thread, per device (ct_device: CPU, CUDA, checking device; kind and index) and slot; kept
 * for the thread's life. reach: p with bits 63:56 cleared, which no user-space address has but
 * the checking device's pointers carry (its tag and index, trainer/checkdev/checkdev.c):
 * LeakSanitizer, which scans this for pointers into live blocks, then finds the block behind a
 * checking device's p too. */
static __thread struct {
    float *p;
    int64_t n;
    const ct__backend *bk;    /* p's device's table */
    volatile uintptr_t reach; /* never read here: a store the compiler must keep */
} scratch[3 * CT_MAX_DEVICE_INDEX][4];

/* At the thread's end: its tape (nodes and array) and its scratch. */
static void thread_release(void)
{
    ct_autograd_clear_tape();
    free(tape.nodes);
    tape.nodes = NULL;
    tape.cap = 0;
    for (size_t d = 0; d < CT_ARRAY_LEN(scratch); d++)
        for (size_t k = 0; k < CT_ARRAY_LEN(scratch[d]); k++)
            if (scratch[d][k].p) {
                scratch[d][k].bk->free(scratch[d][k].p);
                scratch[d][k].p = NULL;
                scratch[d][k].n = 0;
            }
    release_set = false;
}

float *ct__scratch(const ct__backend *bk, int slot, int64_t n)
{
    unsigned d =
        (unsigned)(ct_device_kind(bk->device) * CT_MAX_DEVICE_INDEX + ct_device_index(bk->device));
    if (d >= CT_ARRAY_LEN(scratch))
        return NULL;
    __typeof__(scratch[0][0]) *s = &scratch[d][slot];
    if (s->n < n) {
        bk->free(s->p); /* one table per device: this slot's memory is bk's */
        s->p = NULL;
        s->bk = bk;
        s->n = thread_state_kept() < 0 || bk->alloc((void **)&s->p, (size_t)n * sizeof(float)) < 0
                   ? 0
                   : n;
        s->reach = (uintptr_t)s->p & (((uintptr_t)1 << 56) - 1);
    }
    return s->p;
}

void ct_tensor_set_requires_grad(ct_tensor *t, bool on)
{
    if (t)
        t->requires_grad = on;
}

bool ct_tensor_requires_grad(const ct_tensor *t)
{
    return t && t->requires_grad;
}

ct_tensor *ct_tensor_grad(const ct_tensor *t)
{
    return t ? t->grad : NULL;
}

void ct_tensor_zero_grad(ct_tensor *t)
{
    if (!t || !t->grad)
        return;
    ct__bk(t->grad)->zero(ct__f32(t->grad), (size_t)ct_tensor_numel(t) * sizeof(float));
    t->grad_empty = true;
}

int ct_tensor_on_grad_ready(ct_tensor *t, ct_grad_ready_fn fn, void *user)
{
    if (!t)
        return ct__error(CT_EINVAL, "on_grad_ready: NULL tensor");
    if (t->node)
        return ct__error(CT_EINVAL, "on_grad_ready: tensor is produced by op \"%s\", not a leaf",
                         t->node->name);
    t->hook_fn = fn;
    t->hook_user = fn ? user : NULL;
    if (fn)
        atomic_store_explicit(&hooks_used, true, memory_order_relaxed);
    return 0;
}

static inline bool hooked(const ct_tensor *x)
{
    return x && x->hook_fn && !x->node && x->requires_grad;
}

/* hook_at of every hooked leaf := the lowest tape index of a node using it (the last node the
 * reverse walk runs that can add to its gradient). Returns whether any hooked leaf is used. */
static bool hooks_prepare(void)
{
    bool any = false;
    for (int i = tape.n - 1; i >= 0; i--) {
        ct__node *nd = tape.nodes[i];
        for (int j = 0; j < nd->nin; j++)
            if (hooked(nd->in[j])) {
                nd->in[j]->hook_at = i;
                any = true;
            }
    }
    return any;
}

/* Fires the hooks of node i's leaves whose gradient is now final, in reverse input order. */
static void hooks_fire(int i, int *first_err)
{
    ct__node *nd = tape.nodes[i];
    for (int j = nd->nin - 1; j >= 0; j--) {
        ct_tensor *x = nd->in[j];
        if (!hooked(x) || x->hook_at != i)
            continue;
        bool dup = false; /* the same leaf twice in one node: fire once */
        for (int k = j + 1; k < nd->nin && !dup; k++)
            dup = nd->in[k] == x;
        if (dup)
            continue;
        if (x->grad && x->grad_empty) { /* logically zero: make the buffer say so */
            int zrc =
                ct__bk(x->grad)->zero(ct__f32(x->grad), (size_t)ct_tensor_numel(x) * sizeof(float));
            if (zrc < 0 && *first_err == 0)
                *first_err = zrc;
            x->grad_empty = false;
        }
        int rc = x->hook_fn(x, x->hook_user);
        if (rc < 0 && *first_err == 0)
            *first_err = rc;
    }
}

/* grad_out, or (NULL) scale as the scalar t's seed */
static int backward(ct_tensor *t, const ct_tensor *grad_out, float scale)
{
    int rc = 0, hook_err = 0;
    bool hooks = false;
    if (!t) {
        rc = ct__error(CT_EINVAL, "backward: NULL tensor");
        goto out;
    }
    if (!t->requires_grad) {
        rc = ct__error(CT_EINVAL, "backward: tensor does not require grad (no op recorded)");
        goto out;
    }
    int64_t n = ct_tensor_numel(t);
    if (grad_out && ct_tensor_numel(grad_out) != n) {
        rc = ct__error(CT_ERANGE, "backward: grad_out has %lld elements, tensor %lld",
                       (long long)ct_tensor_numel(grad_out), (long long)n);
        goto out;
    }
    if (!grad_out && n != 1) {
        rc = ct__error(CT_EINVAL, "backward: grad_out may be NULL only for a scalar (%lld elems)",
                       (long long)n);
        goto out;
    }
    bool acc;
    float *g = ct__grad_dst(t, &acc);
    if (!g) {
        rc = ct__error(CT_ENOMEM, "backward: out of memory");
        goto out;
    }
    const ct__backend *bk = ct__bk(t);
    if (grad_out) {
        /* on t's device and in t's layout (e.g. a plain upstream gradient for a blocked
         * output) */
        ct_tensor *c = ct__tensor_copy_on(grad_out, bk->device);
        if (!c) {
            rc = CT_EINVAL; /* ct__tensor_copy_on said why */
            goto out;
        }
        if (c->fmt != t->fmt) {
            float *tmp = ct__scratch(bk, 0, n);
            if (!tmp || t->ndim != 4 ||
                CT__BK_CALL(bk, reorder, t->shape[0], t->shape[1], t->shape[2], t->shape[3],
                            ct__f32(c), c->fmt, tmp, t->fmt) < 0) {
                ct_tensor_release(&c);
                rc = ct__error(CT_EINVAL, "backward: cannot convert grad_out's layout");
                goto out;
            }
            rc = ct__grad_add(bk, g, tmp, n, acc);
        } else {
            rc = ct__grad_add(bk, g, ct__f32(c), n, acc);
        }
        ct_tensor_release(&c);
    } else {
        float *seed = ct__scratch(bk, 0, 1);
        rc = !seed ? ct__error(CT_ENOMEM, "backward: out of memory") : bk->fill(1, scale, seed);
        if (rc == 0)
            rc = ct__grad_add(bk, g, seed, 1, acc);
    }
    if (rc < 0)
        goto out;
    if (atomic_load_explicit(&hooks_used, memory_order_relaxed))
        hooks = hooks_prepare();
    for (int i = tape.n - 1; i >= 0; i--) {
        ct__node *nd = tape.nodes[i];
        if (nd->out->grad && !nd->out->grad_empty) { /* else: not on the path from t */
            rc = nd->backward(nd);
            if (rc < 0)
                goto out;
        }
        if (hooks)
            hooks_fire(i, &hook_err);
    }
    rc = hook_err;
out:
    ct_autograd_clear_tape();
    return rc;
}

int ct_tensor_backward(ct_tensor *t, const ct_tensor *grad_out)
{
    return backward(t, grad_out, 1.0f);
}

int ct_tensor_backward_scaled(ct_tensor *t, float scale)
{
    return backward(t, NULL, scale);
}
