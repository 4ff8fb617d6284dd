/* trainer/cuda/backend_cuda.c — the GPU's backend table (trainer/backend/table.h) over the
 * functions of cuda.h. One compute stream per process (non-blocking, made at first use) takes
 * every kernel; memory comes from the caching allocator for that stream.
 *
 * Where the GPU's kernels differ from the table's contract, the difference is bridged here:
 * the cross-entropy backward overwrites (the table adds), batch norm's fused ReLU runs as batch
 * norm then ReLU in place (backward masks dy by the output: no workspace), activation backward
 * reads the output only. Layouts are plain (no blocked_fmt). Losses other than cross entropy
 * without label smoothing are missing here: CT_ENOSYS names them. */
#include <pthread.h>
#include <stdatomic.h>

#include "common/common.h"
#include "trainer/backend/table.h"
#include "trainer/cuda/cuda_internal.h"

/* Device indices (cuda:N). Until a table of an index above 0 is asked for (ct__cuda_table),
 * nothing below looks a device up or sets one: every entry uses the current device (cuda:0,
 * the first of CUDA_VISIBLE_DEVICES) and its one compute stream, as before indices. After, an
 * entry finds the device of the memory it is given (cudaPointerGetAttributes), makes it current
 * on the calling thread and queues on that device's compute stream; the entries that are given
 * no memory are the index's own (CT__INDEX_ENTRIES below). Not yet: the caching allocator's streams
 * of other use (ct__cuda_record_stream) across devices. */
static atomic_bool multi;
static pthread_mutex_t compute_mu = PTHREAD_MUTEX_INITIALIZER;
static void *_Atomic compute[CT_MAX_DEVICE_INDEX];
static int compute_rc[CT_MAX_DEVICE_INDEX];

/* device dev's compute stream, dev made current first where indices are in use (NULL when it
 * could not be made: the caller's call fails with its error) */
static void *cs_on(int dev)
{
    if (atomic_load_explicit(&multi, memory_order_relaxed)) {
        int cur = -1;
        if ((cudaGetDevice(&cur) != cudaSuccess || cur != dev) &&
            cudaSetDevice(dev) != cudaSuccess) {
            (void)cudaGetLastError(); /* the call fails on its own: no stream */
            return NULL;
        }
    }
    void *s = atomic_load_explicit(&compute[dev], memory_order_acquire);
    if (s)
        return s;
    pthread_mutex_lock(&compute_mu);
    if (!(s = atomic_load(&compute[dev])) && !compute_rc[dev]) {
        compute_rc[dev] = ct__cuda_stream_new(&s);
        atomic_store(&compute[dev], s);
    }
    pthread_mutex_unlock(&compute_mu);
    return s;
}

/* the device index of device memory p (0 until indices are in use) */
static int dev_of(const void *p)
{
    if (!p || !atomic_load_explicit(&multi, memory_order_relaxed))
        return 0;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.device > 0 && a.device < CT_MAX_DEVICE_INDEX ? a.device : 0;
}

/* the compute stream of p's device, made current */
static void *cs_of(const void *p)
{
    return cs_on(dev_of(p));
}

/* ---- memory ---- */
static int alloc_on(int dev, void **p, size_t bytes)
{
    void *s = cs_on(dev);
    if (!s) {
        *p = NULL;
        return compute_rc[dev] ? compute_rc[dev]
                               : ct__error(CT_ECUDA, "cuda:%d: no compute stream", dev);
    }
    return ct__cuda_malloc(p, bytes, s);
}

static void cu_free(void *p)
{
    ct__cuda_free(p);
}

static int cu_upload(void *dst, const void *src, size_t bytes)
{
    return bytes ? ct__cuda_to_device(dst, src, bytes, cs_of(dst)) : 0;
}

static int cu_download(void *dst, const void *src, size_t bytes)
{
    int rc = bytes ? ct__cuda_to_host(dst, src, bytes, cs_of(src)) : 0;
    return rc ? rc : ct__cuda_sync(cs_of(src));
}

static int cu_copy(void *dst, const void *src, size_t bytes)
{
    if (!bytes || dst == src)
        return 0;
    return ct__cuda_status(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)cs_of(dst)),
        "cudaMemcpyAsync (device to device)");
}

static int cu_zero(void *p, size_t bytes)
{
    return bytes ? ct__cuda_status(cudaMemsetAsync(p, 0, bytes, (cudaStream_t)cs_of(p)),
                                   "cudaMemsetAsync")
                 : 0;
}

/* the given stream (its device made current as dst's) or the compute stream of p's device */
static void *stream_of(void *stream, const void *p)
{
    void *cs = cs_of(p);
    return stream ? stream : cs;
}

static int cu_upload_async(void *dst, const void *src, size_t bytes, void *stream)
{
    return bytes ? ct__cuda_to_device(dst, src, bytes, stream_of(stream, dst)) : 0;
}

static int cu_download_async(void *dst, const void *src, size_t bytes, void *stream)
{
    return bytes ? ct__cuda_to_host(dst, src, bytes, stream_of(stream, src)) : 0;
}

/* dst (this device) = src of another device, on stream or dst's compute stream */
static int cu_peer_copy(void *dst, const void *src, size_t bytes, void *stream)
{
    int to = dev_of(dst), from = dev_of(src);
    void *s = stream_of(stream, dst);
    if (!bytes)
        return 0;
    return ct__cuda_status(cudaMemcpyPeerAsync(dst, to, src, from, bytes, (cudaStream_t)s),
                           "cudaMemcpyPeerAsync");
}

/* ---- streams and events (the device's own: CT__INDEX_ENTRIES) ---- */
static int stream_new_on(int dev, void **stream)
{
    if (atomic_load(&multi) && !cs_on(dev)) /* makes dev current */
        return compute_rc[dev] ? compute_rc[dev] : ct__error(CT_ECUDA, "cuda:%d: no device", dev);
    return ct__cuda_stream_new(stream);
}

static int event_new_on(int dev, void **ev)
{
    if (atomic_load(&multi) && !cs_on(dev))
        return compute_rc[dev] ? compute_rc[dev] : ct__error(CT_ECUDA, "cuda:%d: no device", dev);
    return ct__cuda_event_new(ev);
}

static int synchronize_on(int dev, void *stream)
{
    return ct__cuda_sync(stream ? stream : cs_on(dev));
}

static int event_record_on(int dev, void *ev, void *stream)
{
    return ct__cuda_event_record(ev, stream ? stream : cs_on(dev));
}

static int stream_wait_on(int dev, void *stream, void *ev)
{
    return ct__cuda_stream_wait(stream ? stream : cs_on(dev), ev);
}

/* ---- layouts: plain only ---- */
static int cu_reorder(int64_t n, int64_t c, int64_t h, int64_t w, const float *src, int sfmt,
                      float *dst, int dfmt)
{
    if (sfmt != CT__FMT_PLAIN || dfmt != CT__FMT_PLAIN)
        return ct__error(CT_ENOSYS, "reorder to or from a blocked layout is the CPU's, not cuda's");
    return cu_copy(dst, src, (size_t)(n * c * h * w) * sizeof(float));
}

/* ---- convolution, Linear ---- */
static int cu_conv_fwd(const ct__conv_p *p, const float *x, const float *w, const float *b,
                       float *y)
{
    return ct__cuda_conv_fwd(p, x, w, b, y, cs_of(x));
}
static int cu_conv_bwd_data(const ct__conv_p *p, const float *w, const float *dy, float *dx)
{
    return ct__cuda_conv_bwd_data(p, w, dy, dx, cs_of(w));
}
static int cu_conv_bwd_weights(const ct__conv_p *p, const float *x, const float *dy, float *dw,
                               float *db)
{
    return ct__cuda_conv_bwd_weights(p, x, dy, dw, db, cs_of(x));
}
static int cu_ip_fwd(int64_t n, int64_t ic, int64_t oc, const float *x, const float *w,
                     const float *b, float *y)
{
    return ct__cuda_ip_fwd(n, ic, oc, x, w, b, y, cs_of(x));
}
static int cu_ip_bwd_data(int64_t n, int64_t ic, int64_t oc, const float *w, const float *dy,
                          float *dx)
{
    return ct__cuda_ip_bwd_data(n, ic, oc, w, dy, dx, cs_of(w));
}
static int cu_ip_bwd_weights(int64_t n, int64_t ic, int64_t oc, const float *x, const float *dy,
                             float *dw, float *db)
{
    return ct__cuda_ip_bwd_weights(n, ic, oc, x, dy, dw, db, cs_of(x));
}
static int cu_matmul_lp(int dt, int64_t m, int64_t k, int64_t n, const float *a, bool ta,
                        const float *b, bool tb, float *c, bool accumulate)
{
    return ct__cuda_matmul_lp(dt, m, k, n, a, ta, b, tb, c, accumulate, cs_of(a));
}

static int cu_matmul(int64_t m, int64_t k, int64_t n, const float *a, bool ta, const float *b,
                     bool tb, float *c, bool accumulate)
{
    return ct__cuda_matmul(m, k, n, a, ta, b, tb, c, accumulate, cs_of(a));
}
static int cu_add_col_sums(int64_t rows, int64_t cols, const float *x, float *y)
{
    return ct__cuda_col_sums(x, rows, cols, y, true, cs_of(x));
}

/* ---- batch norm: the fused ReLU as batch norm, then ReLU in place; backward masks dy where the
 * output y is not positive (no workspace) ---- */
static ct__bn_p no_relu(const ct__bn_p *p)
{
    ct__bn_p q = *p;
    q.relu = 0;
    return q;
}

static int cu_bn_fwd_train(const ct__bn_p *p, const float *x, const float *scale,
                           const float *shift, float *y, float *mean, float *var, void *ws)
{
    ct__bn_p q = no_relu(p);
    int64_t n = p->n * p->c * p->hw;
    int rc = ct__cuda_bn_fwd_train(&q, x, scale, shift, y, mean, var, cs_of(x));
    (void)ws;
    return rc == 0 && p->relu ? ct__cuda_relu_fwd(y, y, n, cs_of(x)) : rc;
}

static int cu_bn_fwd_infer(const ct__bn_p *p, const float *x, const float *scale,
                           const float *shift, const float *mean, const float *var, float *y)
{
    ct__bn_p q = no_relu(p);
    int rc = ct__cuda_bn_fwd_infer(&q, x, scale, shift, mean, var, y, cs_of(x));
    return rc == 0 && p->relu ? ct__cuda_relu_fwd(y, y, p->n * p->c * p->hw, cs_of(x)) : rc;
}

static int cu_bn_bwd(const ct__bn_p *p, const float *x, const float *y, const float *dy,
                     const float *scale, const float *mean, const float *var, const void *ws,
                     float *dx, float *dscale, float *dshift)
{
    (void)ws;
    ct__bn_p q = no_relu(p);
    if (!p->relu)
        return ct__cuda_bn_bwd(&q, x, dy, scale, mean, var, dx, dscale, dshift, cs_of(x));
    /* dy masked where the output was not positive, in a block of its own (freed in stream
     * order, after the batch norm below has read it) */
    int64_t n = p->n * p->c * p->hw;
    float *masked = NULL;
    int rc = ct__cuda_malloc((void **)&masked, (size_t)n * sizeof(float), cs_of(x));
    if (rc == 0 &&
        (rc = ct__cuda_eltwise_bwd_dst(CT__ELT_RELU, 0.0f, n, y, dy, masked, cs_of(x))) == 0)
        rc = ct__cuda_bn_bwd(&q, x, masked, scale, mean, var, dx, dscale, dshift, cs_of(x));
    int frc = ct__cuda_free(masked);
    return rc ? rc : frc;
}

static int cu_bn_bwd_frozen(const ct__bn_p *p, const float *x, const float *y, const float *dy,
                            const float *scale, const float *mean, const float *var, float *dx,
                            float *dscale, float *dshift)
{
    return ct__cuda_bn_bwd_frozen(p, x, y, dy, scale, mean, var, dx, dscale, dshift, cs_of(x));
}

static int cu_bn_update_running(int64_t c, float m, float unbias, const float *mean,
                                const float *var, float *rm, float *rv)
{
    return ct__cuda_bn_update_running(c, m, unbias, mean, var, rm, rv, cs_of(rm));
}

/* ---- pooling: cuDNN finds the maximum again in backward, so no workspace ---- */
static int cu_pool_fwd(const ct__pool_p *p, const float *x, float *y, void *ws, bool training)
{
    (void)ws, (void)training;
    return ct__cuda_pool_fwd(p, x, y, cs_of(x));
}
static int cu_pool_bwd(const ct__pool_p *p, const float *x, const float *y, const float *dy,
                       const void *ws, float *dx)
{
    (void)ws;
    return ct__cuda_pool_bwd(p, x, y, dy, dx, cs_of(x));
}
static int cu_apool_fwd(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow, const float *x,
                        float *y)
{
    return ct__cuda_adaptive_avg_fwd(nc, ih, iw, oh, ow, x, y, cs_of(x));
}
static int cu_apool_bwd(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow, const float *dy,
                        float *dx, bool acc)
{
    return ct__cuda_adaptive_avg_bwd(nc, ih, iw, oh, ow, dy, dx, acc, cs_of(dy));
}

/* ---- activations, softmax ---- */
static int cu_eltwise_fwd(int alg, float alpha, int64_t n, const float *x, float *y)
{
    if (alg == CT__ELT_RELU && alpha == 0.0f)
        return ct__cuda_relu_fwd(x, y, n, cs_of(x));
    if (alg == CT__ELT_RELU)
        return ct__cuda_leaky_relu_fwd(alpha, n, x, y, cs_of(x));
    return ct__cuda_eltwise_fwd(alg, alpha, n, x, y, cs_of(x));
}
static int cu_eltwise_bwd(int alg, float alpha, int64_t n, const float *y, const float *dy,
                          float *dx)
{
    return ct__cuda_eltwise_bwd_dst(alg, alpha, n, y, dy, dx, cs_of(y));
}
static int cu_softmax_fwd(bool log, int64_t rows, int64_t cols, const float *x, float *y)
{
    return ct__cuda_softmax_fwd(log, rows, cols, x, y, cs_of(x));
}
static int cu_softmax_bwd(bool log, int64_t rows, int64_t cols, const float *y, const float *dy,
                          float *dx)
{
    return ct__cuda_softmax_bwd(log, rows, cols, y, dy, dx, cs_of(y));
}

/* ---- transformer ops ---- */
static int cu_layernorm_fwd(int64_t rows, int64_t d, float eps, const float *x, const float *w,
                            const float *b, float *y, float *mean, float *rstd)
{
    return ct__cuda_layernorm_fwd(rows, d, eps, x, w, b, y, mean, rstd, cs_of(x));
}
static int cu_layernorm_bwd(int64_t rows, int64_t d, const float *x, const float *w,
                            const float *mean, const float *rstd, const float *dy, float *dx,
                            bool acc, float *dw, float *db)
{
    return ct__cuda_layernorm_bwd(rows, d, x, w, mean, rstd, dy, dx, acc, dw, db, cs_of(x));
}
static int cu_gelu_fwd(bool tanh_approx, int64_t n, const float *x, float *y)
{
    return ct__cuda_gelu_fwd(tanh_approx, n, x, y, cs_of(x));
}
static int cu_gelu_bwd(bool tanh_approx, int64_t n, const float *x, const float *dy, float *dx,
                       bool acc)
{
    return ct__cuda_gelu_bwd(tanh_approx, n, x, dy, dx, acc, cs_of(x));
}
static int cu_embedding_fwd(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                            const float *table, float *y)
{
    return ct__cuda_embedding_fwd(n, d, vocab, idx, table, y, cs_of(idx));
}
static int cu_embedding_bwd(int64_t n, int64_t d, int64_t vocab, const int64_t *idx,
                            int64_t padding_idx, const float *dy, float *dtable)
{
    return ct__cuda_embedding_bwd(n, d, vocab, idx, padding_idx, dy, dtable, cs_of(idx));
}
static int cu_f32_to_i64(int64_t n, const float *x, int64_t *y)
{
    return ct__cuda_f32_to_i64(n, x, y, cs_of(x));
}
static int cu_strided_copy(const ct__strided_p *p, const float *src, float *dst, bool acc)
{
    return ct__cuda_strided_copy(p, src, dst, acc, cs_of(src));
}
static int cu_softmax_causal_fwd(int64_t rows, int64_t t, const float *x, float *y)
{
    return ct__cuda_softmax_causal_fwd(rows, t, x, y, cs_of(x));
}
static int cu_attn_fwd(const ct__attn_p *p, const float *q, const float *k, const float *v,
                       float *o, float *lse)
{
    return ct__cuda_attn_fwd(p, q, k, v, o, lse, cs_of(q));
}
static int cu_attn_bwd(const ct__attn_p *p, const float *q, const float *k, const float *v,
                       const float *o, const float *lse, const float *dout, float *delta, float *dq,
                       float *dk, float *dv, bool acc)
{
    return ct__cuda_attn_bwd(p, q, k, v, o, lse, dout, delta, dq, dk, dv, acc, cs_of(q));
}

/* ---- elementwise ---- */
static int cu_fill(int64_t n, float v, float *x)
{
    return n ? ct__cuda_fill(x, v, n, cs_of(x)) : 0;
}
static int cu_add(int64_t n, const float *a, const float *b, float *y)
{
    return ct__cuda_add(n, a, b, y, cs_of(a));
}
static int cu_axpy(int64_t n, float alpha, const float *x, float *y)
{
    return n ? ct__cuda_axpy(y, alpha, x, n, cs_of(x)) : 0;
}
static int cu_mul(int64_t n, const float *a, const float *b, float *y, bool acc)
{
    return ct__cuda_mul(n, a, b, y, acc, cs_of(a));
}
static int cu_add_i64(int64_t n, int64_t v, int64_t *x)
{
    return ct__cuda_add_i64(n, v, x, cs_of(x));
}
static int cu_sum(int64_t n, const float *x, float *out)
{
    return ct__cuda_sum(x, n, out, cs_of(x));
}
static int cu_unscale(int64_t n, float inv_scale, float *g, float *found_inf)
{
    return ct__cuda_unscale(g, n, inv_scale, found_inf, cs_of(g));
}
static int cu_norm2(int64_t n, const float *x, float *out)
{
    return ct__cuda_norm2(x, n, out, cs_of(x));
}
static int cu_scale(int64_t n, float alpha, float *x)
{
    return n ? ct__cuda_scale(x, alpha, n, cs_of(x)) : 0;
}
static int cu_broadcast(int64_t n, const float *v, float *x, bool acc)
{
    return ct__cuda_broadcast(n, v, x, acc, cs_of(x));
}
static int cu_dropout_mask(int64_t n, float p, uint64_t seed, uint64_t offset, float *mask)
{
    return ct__cuda_dropout_mask(n, p, seed, offset, mask, cs_of(mask));
}

/* ---- losses: cross entropy (mean, no smoothing) ---- */
/* the losses: cross entropy without label smoothing only (loss.cu); every autocast precision
 * (cuBLASLt, cuDNN) */
static int cu_supports(const ct__op_desc *op)
{
    static const char *names[] = {"cross_entropy", "nll_loss", "mse_loss",
                                  "l1_loss",       "bce_loss", "bce_with_logits_loss"};
    if (op->kind != CT__OP_LOSS)
        return 0;
    const ct__loss_p *p = op->loss;
    if (p->kind == CT__LOSS_CE && p->label_smoothing == 0.0f)
        return 0;
    if (p->kind == CT__LOSS_CE)
        return ct__error(CT_ENOSYS,
                         "cross_entropy with label smoothing %g is not implemented on device "
                         "cuda (its loss kernel is cross entropy's without smoothing)",
                         (double)p->label_smoothing);
    return ct__error(CT_ENOSYS,
                     "%s ((%lld, %lld)) is not implemented on device cuda (its loss kernel is "
                     "cross entropy's without smoothing)",
                     p->kind >= 0 && p->kind < 6 ? names[p->kind] : "this loss", (long long)p->n,
                     (long long)p->c);
}

/* the kernels' own guard, for callers that did not ask first */
static int ce_only(const ct__loss_p *p)
{
    return cu_supports(&(ct__op_desc){.kind = CT__OP_LOSS, .loss = p});
}

static int cu_loss_fwd(const ct__loss_p *p, const float *x, const void *target, float *out)
{
    int rc = ce_only(p);
    return rc ? rc : ct__cuda_cross_entropy_fwd(x, target, p->n, p->c, out, cs_of(x));
}

static int cu_loss_bwd(const ct__loss_p *p, const float *x, const void *target,
                       const float *grad_out, float *grad)
{
    int rc = ce_only(p);
    if (rc)
        return rc;
    int64_t n = p->n * p->c;
    float *g = NULL;
    if ((rc = ct__cuda_malloc((void **)&g, (size_t)n * sizeof(float), cs_of(x))) == 0 &&
        (rc = ct__cuda_cross_entropy_bwd(x, target, p->n, p->c, grad_out, g, cs_of(x))) == 0)
        rc = ct__cuda_axpy(grad, 1.0f, g, n, cs_of(x));
    int frc = ct__cuda_free(g);
    return rc ? rc : frc;
}

/* ---- optimizer steps: optim.cu's fused kernels ---- */
static int cu_sgd_step(float *param, const float *grad, float *buf, int64_t n, const ct__sgd_h *h)
{
    return ct__cuda_sgd_step(param, grad, buf, n, h, cs_of(param));
}

static int cu_adam_step(float *param, const float *grad, float *m, float *v, float *mx, int64_t n,
                        const ct__adam_h *h)
{
    return ct__cuda_adam_step(param, grad, m, v, mx, n, h, cs_of(param));
}

/* The entries that are given no memory, one set per device index (table.h) */
CT__INDEX_ENTRIES(0)
CT__INDEX_ENTRIES(1)
CT__INDEX_ENTRIES(2)
CT__INDEX_ENTRIES(3)
_Static_assert(CT_MAX_DEVICE_INDEX == 4, "one CT__INDEX_ENTRIES(i) per device index");

const ct__backend ct__backend_cuda = {
    .name = "cuda",
    .device = CT_CUDA,
    .devices = ct__cuda_device_count,
    .peak_flops = ct__cuda_peak_flops,
    .supports = cu_supports,
    .alloc = alloc_0,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .copy = cu_copy,
    .zero = cu_zero,
    .host_alloc = ct__cuda_pinned_alloc,
    .host_free = ct__cuda_pinned_free,
    .upload_async = cu_upload_async,
    .download_async = cu_download_async,
    .peer_copy = cu_peer_copy,
    .stream_new = stream_new_0,
    .stream_free = ct__cuda_stream_free,
    .synchronize = synchronize_0,
    .event_new = event_new_0,
    .event_free = ct__cuda_event_free,
    .event_record = event_record_0,
    .stream_wait = stream_wait_0,
    .event_sync = ct__cuda_event_sync,
    .host_fn = ct__cuda_host_fn,
    .reorder = cu_reorder,
    .conv_fwd = cu_conv_fwd,
    .conv_bwd_data = cu_conv_bwd_data,
    .conv_bwd_weights = cu_conv_bwd_weights,
    .ip_fwd = cu_ip_fwd,
    .ip_bwd_data = cu_ip_bwd_data,
    .ip_bwd_weights = cu_ip_bwd_weights,
    .matmul = cu_matmul,
    .matmul_lp = cu_matmul_lp,
    .add_col_sums = cu_add_col_sums,
    .bn_fwd_train = cu_bn_fwd_train,
    .bn_fwd_infer = cu_bn_fwd_infer,
    .bn_bwd = cu_bn_bwd,
    .bn_bwd_frozen = cu_bn_bwd_frozen,
    .bn_update_running = cu_bn_update_running,
    .pool_fwd = cu_pool_fwd,
    .pool_bwd = cu_pool_bwd,
    .adaptive_avg_fwd = cu_apool_fwd,
    .adaptive_avg_bwd = cu_apool_bwd,
    .eltwise_fwd = cu_eltwise_fwd,
    .eltwise_bwd = cu_eltwise_bwd,
    .softmax_fwd = cu_softmax_fwd,
    .softmax_bwd = cu_softmax_bwd,
    .layernorm_fwd = cu_layernorm_fwd,
    .layernorm_bwd = cu_layernorm_bwd,
    .gelu_fwd = cu_gelu_fwd,
    .gelu_bwd = cu_gelu_bwd,
    .embedding_fwd = cu_embedding_fwd,
    .embedding_bwd = cu_embedding_bwd,
    .strided_copy = cu_strided_copy,
    .f32_to_i64 = cu_f32_to_i64,
    .softmax_causal_fwd = cu_softmax_causal_fwd,
    .attn_fwd = cu_attn_fwd,
    .attn_bwd = cu_attn_bwd,
    .fill = cu_fill,
    .add = cu_add,
    .axpy = cu_axpy,
    .mul = cu_mul,
    .add_i64 = cu_add_i64,
    .sum = cu_sum,
    .norm2 = cu_norm2,
    .unscale = cu_unscale,
    .scale = cu_scale,
    .broadcast = cu_broadcast,
    .dropout_mask = cu_dropout_mask,
    .loss_fwd = cu_loss_fwd,
    .loss_bwd = cu_loss_bwd,
    .sgd_step = cu_sgd_step,
    .adam_step = cu_adam_step,
};

static ct__backend tables[CT_MAX_DEVICE_INDEX];
static char table_names[CT_MAX_DEVICE_INDEX][16];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void tables_init(void)
{
    static const ct__index_entries *const per[CT_MAX_DEVICE_INDEX] = {
        &index_entries_0, &index_entries_1, &index_entries_2, &index_entries_3};
    ct__index_tables(tables, table_names, &ct__backend_cuda, per);
}

const ct__backend *ct__cuda_table(int index)
{
    if (index < 0 || index >= CT_MAX_DEVICE_INDEX)
        return NULL;
    if (index == 0)
        return &ct__backend_cuda;
    /* from now on, every entry finds its memory's device (the header above) */
    atomic_store(&multi, true);
    pthread_once(&tables_once, tables_init);
    return &tables[index];
}
