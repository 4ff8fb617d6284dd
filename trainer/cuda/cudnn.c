/* trainer/cuda/cudnn.c — convolution, batch norm, pooling, activations and softmax on cuDNN
 * (cuda.h): the CUDA versions of trainer/cpu/cpu.h's ops, same parameter structs, plain NCHW f32.
 *
 * API. cuDNN 9's legacy API (cudnnConvolutionForward and friends) rather than its graph API
 * (v8/v9 backend, or the C++ frontend): the legacy API is a direct C interface, one call per op,
 * and in cuDNN 9 it still covers every op here; the graph API would need an operation graph,
 * engine heuristics and execution plans built through attribute setters for each of them, for
 * nothing these ops need. It is deprecated; when it goes, only this file changes.
 *
 * Precision. Convolutions run with CUDNN_FMA_MATH: plain f32 multiply-adds. CUDNN_DEFAULT_MATH
 * lets cuDNN 8+ pick TF32 tensor-core kernels for f32 data on Ampere and later, which round
 * the inputs to 10 mantissa bits and move results by about 1e-3; training on the GPU should
 * give what the CPU gives, so TF32 is opt-in: after ct_set_tf32(true) convolutions use
 * CUDNN_DEFAULT_MATH and any algorithm's math (the setting is part of the algorithm's key).
 *
 * Autocast (p->dt CT_BF16 / CT_F16). cuDNN has no convolution with bf16 inputs and an f32
 * output, so the two inputs are rounded (ct__cuda_to_lp, nearest even) into stream-ordered
 * scratch, the convolution runs with bf16 / f16 tensors, f32 compute (CUDNN_DATA_FLOAT) and
 * tensor-op math, and its bf16 / f16 output is widened into the f32 result (as torch's
 * autocast, whose convolution returns bf16). The bias is added in f32; its gradient is summed
 * from the f32 dy.
 *
 * Algorithms. A convolution's algorithm is chosen once per shape (and device, and determinism
 * setting): the first one of cuDNN's heuristic list (cudnnGetConvolution*Algorithm_v7, fastest
 * first) that succeeds, uses FMA math, needs at most WS_LIMIT of workspace and, unless
 * ct__cuda_set_deterministic(false), is CUDNN_DETERMINISTIC; it is kept in a small table
 * (algo_*). ct promises that a run repeats bit for bit, and cuDNN's fastest backward data and
 * backward filter algorithms often add partial sums with atomics, in whatever order they land;
 * the setting is process-wide, as PyTorch's torch.backends.cudnn.deterministic.
 * The workspace comes from the caching allocator on the op's stream and goes back right after
 * the call is queued: the allocator is stream-ordered, so its next user runs after this one.
 *
 * Batch norm. The CPU contract has training forward write the batch mean and BIASED variance,
 * and backward read them. cuDNN's training forward saves the mean and 1/sqrt(var + eps)
 * instead, and its running variance is the UNBIASED one. So forward asks for running stats
 * with factor 1 (they become this batch's) and scales the variance by (m-1)/m; backward turns
 * var into 1/sqrt(var + eps) with a kernel of ours (ct__cuda_inv_std).
 *
 * Handles. One cudnnHandle_t per thread, created on first use and destroyed when the thread
 * exits; cudnnSetStream on every call.
 *
 * Not here: blocked layouts, transposed convolution, batch norm with fused ReLU, leaky ReLU
 * (all CT_ENOSYS); kernels of our own (elementwise.cu). */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include <cudnn.h>

#include "common/common.h"

#include "trainer/cuda/cuda_internal.h"

/* The most workspace an algorithm may use: the fastest ones (FFT, some GEMMs) can ask for GBs,
 * which would come out of the memory the model's activations need. */
#define WS_LIMIT ((size_t)256 << 20)

static const float ONE = 1.0f, ZERO = 0.0f;

/* ---------------- errors ---------------- */

/* 0, or CT_ENOMEM / CT_ENOSYS / CT_ECUDA with "fn (cudnn.c:line): cuDNN's message". */
static int dnn_status(cudnnStatus_t s, const char *fn, int line)
{
    if (s == CUDNN_STATUS_SUCCESS)
        return 0;
    char more[256] = "";
    cudnnGetLastErrorString(more, sizeof more);
    int code = CT_ECUDA;
    if (s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
        s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
        code = CT_ENOMEM;
    else if (CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED)
        code = CT_ENOSYS;
    return ct__error(code, "%s (cudnn.c:%d): %s%s%s", fn, line, cudnnGetErrorString(s),
                     more[0] ? ": " : "", more);
}

/* DNN_RC(cudnnFoo, args...): calls it; 0, or the mapped code with the message set (the
 * function's name and line). The caller decides where to go: `if ((rc = DNN_RC(...)) < 0)`. */
#define DNN_RC(f, ...) dnn_status(f(__VA_ARGS__), #f, __LINE__)

/* ---------------- the thread's handle ---------------- */

/* one handle per thread and device index (cuda:N; a device past the last shares slot 0, as all
 * did before indices): the backend made the device of the call's memory current */
static pthread_key_t handle_key[CT_MAX_DEVICE_INDEX];
static pthread_once_t handle_once = PTHREAD_ONCE_INIT;
static int handle_key_err;

static void handle_destroy(void *h)
{
    cudnnDestroy((cudnnHandle_t)h);
}

static void handle_key_make(void)
{
    for (int d = 0; d < CT_MAX_DEVICE_INDEX && !handle_key_err; d++)
        handle_key_err = pthread_key_create(&handle_key[d], handle_destroy);
}

/* *h = this thread's handle, set to work on `stream`. */
static int handle_get(cudnnHandle_t *h, void *stream)
{
    int rc = 0;
    pthread_once(&handle_once, handle_key_make);
    if (handle_key_err)
        return ct__error(CT_ENOMEM, "cudnn: pthread_key_create: %s", strerror(handle_key_err));
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= CT_MAX_DEVICE_INDEX) {
        (void)cudaGetLastError();
        dev = 0;
    }
    cudnnHandle_t mine = pthread_getspecific(handle_key[dev]);
    if (!mine) {
        if ((rc = DNN_RC(cudnnCreate, &mine)) < 0)
            goto out;
        int e = pthread_setspecific(handle_key[dev], mine);
        if (e) {
            cudnnDestroy(mine);
            return ct__error(CT_ENOMEM, "cudnn: pthread_setspecific: %s", strerror(e));
        }
    }
    if ((rc = DNN_RC(cudnnSetStream, mine, (cudaStream_t)stream)) < 0)
        goto out;
    *h = mine;
out:
    return rc;
}

/* ---------------- descriptors ---------------- */

/* 0 when every size is >= 1 and the product fits cuDNN's int sizes; else CT_EINVAL / CT_ENOSYS */
static int shape_ok(const char *fn, int64_t n, int64_t c, int64_t h, int64_t w)
{
    int64_t d[4] = {n, c, h, w}, total = 1;
    for (int i = 0; i < 4; i++) {
        if (d[i] < 1)
            return ct__error(CT_EINVAL, "%s: shape (%lld,%lld,%lld,%lld): sizes must be >= 1", fn,
                             (long long)n, (long long)c, (long long)h, (long long)w);
        if (d[i] > INT_MAX / total)
            return ct__error(CT_ENOSYS,
                             "%s: shape (%lld,%lld,%lld,%lld): 2^31 or more elements, more than "
                             "cuDNN's legacy API takes",
                             fn, (long long)n, (long long)c, (long long)h, (long long)w);
        total *= d[i];
    }
    return 0;
}

/* *d = a new NCHW tensor descriptor (n,c,h,w) of type dt; NULL on failure */
static int tensor_new_dt(cudnnTensorDescriptor_t *d, const char *fn, cudnnDataType_t dt, int64_t n,
                         int64_t c, int64_t h, int64_t w)
{
    int rc = shape_ok(fn, n, c, h, w);
    *d = NULL;
    if (rc < 0)
        return rc;
    if ((rc = DNN_RC(cudnnCreateTensorDescriptor, d)) < 0)
        goto out;
    if ((rc = DNN_RC(cudnnSetTensor4dDescriptor, *d, CUDNN_TENSOR_NCHW, dt, (int)n, (int)c, (int)h,
                     (int)w)) < 0)
        goto out;
    return 0;
out:
    if (*d)
        cudnnDestroyTensorDescriptor(*d);
    *d = NULL;
    return rc;
}

/* an f32 one */
static int tensor_new(cudnnTensorDescriptor_t *d, const char *fn, int64_t n, int64_t c, int64_t h,
                      int64_t w)
{
    return tensor_new_dt(d, fn, CUDNN_DATA_FLOAT, n, c, h, w);
}

static void tensor_free(cudnnTensorDescriptor_t *d)
{
    if (*d)
        cudnnDestroyTensorDescriptor(*d);
    *d = NULL;
}

/* CT_EINVAL: one of the pointers `names` is NULL. */
static int null_arg(const char *fn, const char *names)
{
    return ct__error(CT_EINVAL, "%s: a NULL pointer among %s", fn, names);
}

/* lo <= v <= INT_MAX (cuDNN's descriptors take int) */
static bool int_in(int64_t v, int64_t lo)
{
    return v >= lo && v <= INT_MAX;
}

/* ---------------- convolution ---------------- */

typedef struct conv_descs {
    cudnnTensorDescriptor_t x, y, b; /* (n,ic,ih,iw), (n,oc,oh,ow), (1,oc,1,1) */
    cudnnTensorDescriptor_t yf;      /* autocast: y's f32 twin (bias), else NULL */
    cudnnFilterDescriptor_t w;       /* (oc,ic,kh,kw) */
    cudnnConvolutionDescriptor_t conv;
} conv_descs;

static void conv_descs_free(conv_descs *d)
{
    tensor_free(&d->x);
    tensor_free(&d->y);
    tensor_free(&d->b);
    tensor_free(&d->yf);
    if (d->w)
        cudnnDestroyFilterDescriptor(d->w);
    if (d->conv)
        cudnnDestroyConvolutionDescriptor(d->conv);
    memset(d, 0, sizeof *d);
}

/* The output size that padding `pad` on BOTH sides gives (cuDNN has no other), or -1 when the
 * dilated kernel does not fit. */
static int64_t out_size(int64_t in, int64_t pad, int64_t k, int64_t dil, int64_t stride)
{
    int64_t span = in + 2 * pad - ((k - 1) * dil + 1);
    return span < 0 ? -1 : span / stride + 1;
}

/* Checks p and makes its descriptors (d zeroed first); on failure nothing is left. */
static int conv_descs_make(conv_descs *d, const ct__conv_p *p, const char *fn)
{
    int rc = 0;
    memset(d, 0, sizeof *d);
    if (!p)
        return ct__error(CT_EINVAL, "%s: p is NULL", fn);
    if (p->transposed)
        return ct__error(CT_ENOSYS, "%s: transposed convolution is not done on CUDA yet", fn);
    if (p->xfmt != CT__FMT_PLAIN || p->yfmt != CT__FMT_PLAIN)
        return ct__error(CT_ENOSYS,
                         "%s: layouts xfmt %d, yfmt %d: only plain NCHW (0) is done on CUDA", fn,
                         p->xfmt, p->yfmt);
    if (!int_in(p->sh, 1) || !int_in(p->sw, 1) || !int_in(p->dh, 1) || !int_in(p->dw, 1) ||
        !int_in(p->ph, 0) || !int_in(p->pw, 0))
        return ct__error(CT_EINVAL,
                         "%s: stride (%lld,%lld), dilation (%lld,%lld) must be >= 1 and "
                         "padding (%lld,%lld) >= 0",
                         fn, (long long)p->sh, (long long)p->sw, (long long)p->dh, (long long)p->dw,
                         (long long)p->ph, (long long)p->pw);
    int64_t oh = out_size(p->ih, p->ph, p->kh, p->dh, p->sh);
    int64_t ow = out_size(p->iw, p->pw, p->kw, p->dw, p->sw);
    if (oh != p->oh || ow != p->ow)
        return ct__error(CT_ENOSYS,
                         "%s: output %lldx%lld, but padding (%lld,%lld) on both sides gives "
                         "%lldx%lld: cuDNN's legacy API has no other padding",
                         fn, (long long)p->oh, (long long)p->ow, (long long)p->ph, (long long)p->pw,
                         (long long)oh, (long long)ow);
    if (p->dt != CT_F32 && p->dt != CT_BF16 && p->dt != CT_F16)
        return ct__error(CT_EINVAL, "%s: precision %d is not an autocast dtype", fn, p->dt);
    bool lp = p->dt != CT_F32;
    cudnnDataType_t dt = p->dt == CT_BF16  ? CUDNN_DATA_BFLOAT16
                         : p->dt == CT_F16 ? CUDNN_DATA_HALF
                                           : CUDNN_DATA_FLOAT;
    if ((rc = shape_ok(fn, p->oc, p->ic, p->kh, p->kw)) < 0 ||
        (rc = tensor_new_dt(&d->x, fn, dt, p->n, p->ic, p->ih, p->iw)) < 0 ||
        (rc = tensor_new_dt(&d->y, fn, dt, p->n, p->oc, p->oh, p->ow)) < 0 ||
        (rc = tensor_new(&d->b, fn, 1, p->oc, 1, 1)) < 0 ||
        (lp && (rc = tensor_new(&d->yf, fn, p->n, p->oc, p->oh, p->ow)) < 0))
        goto out;
    if ((rc = DNN_RC(cudnnCreateFilterDescriptor, &d->w)) < 0)
        goto out;
    if ((rc = DNN_RC(cudnnSetFilter4dDescriptor, d->w, dt, CUDNN_TENSOR_NCHW, (int)p->oc,
                     (int)p->ic, (int)p->kh, (int)p->kw)) < 0)
        goto out;
    if ((rc = DNN_RC(cudnnCreateConvolutionDescriptor, &d->conv)) < 0)
        goto out;
    if ((rc = DNN_RC(cudnnSetConvolution2dDescriptor, d->conv, (int)p->ph, (int)p->pw, (int)p->sh,
                     (int)p->sw, (int)p->dh, (int)p->dw, CUDNN_CROSS_CORRELATION,
                     CUDNN_DATA_FLOAT)) < 0)
        goto out;
    /* plain f32: no TF32 unless ct_set_tf32(true) (the file's header says why); bf16 / f16 on
     * tensor cores */
    if ((rc = DNN_RC(cudnnSetConvolutionMathType, d->conv,
                     lp                   ? CUDNN_TENSOR_OP_MATH
                     : ct__tf32_allowed() ? CUDNN_DEFAULT_MATH
                                          : CUDNN_FMA_MATH)) < 0)
        goto out;
    return 0;
out:
    conv_descs_free(d);
    return rc;
}

/* ---------------- the algorithm table ---------------- */

enum { ALGO_FWD, ALGO_BWD_DATA, ALGO_BWD_FILTER };
#define ALGO_SLOTS 256 /* distinct convolutions x 3 directions; a model has a few dozen */
#define ALGO_KEY_LEN 20
#define ALGO_MAX 32 /* entries asked of cuDNN's heuristics (it has at most 8 algorithms each) */

typedef struct algo_slot {
    bool used;
    int64_t key[ALGO_KEY_LEN]; /* direction, device, deterministic, every shape number of p */
    int algo;
    size_t ws_bytes;
} algo_slot;

/* When all slots are used, the next new entry replaces the oldest (round robin). */
static struct {
    pthread_mutex_t mu;
    algo_slot slot[ALGO_SLOTS];
    int next;
} A = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Only deterministic algorithms (the default): read once per call, so a call sees one value. */
static atomic_bool deterministic = true;

void ct__cuda_set_deterministic(bool on)
{
    atomic_store(&deterministic, on);
}

bool ct__cuda_deterministic(void)
{
    return atomic_load(&deterministic);
}

static void algo_key(int64_t *k, int dir, int device, bool det, const ct__conv_p *p)
{
    /* field by field: the struct's padding is not guaranteed to be zero; bias does not change
     * the convolution */
    int64_t v[ALGO_KEY_LEN] = {dir,
                               device,
                               det,
                               p->n,
                               p->ic,
                               p->ih,
                               p->iw,
                               p->oc,
                               p->oh,
                               p->ow,
                               p->kh,
                               p->kw,
                               p->sh,
                               p->sw,
                               p->ph,
                               p->pw,
                               p->dh,
                               p->dw,
                               ct__tf32_allowed(),
                               p->dt};
    memcpy(k, v, sizeof v);
}

/* One heuristic result, whichever the direction. */
typedef struct algo_perf {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnMathType_t math;
    cudnnDeterminism_t determinism;
} algo_perf;

/* Asks cuDNN's heuristics for direction dir: perf[0..*n), fastest first. */
static int algo_query(cudnnHandle_t h, const conv_descs *d, int dir, algo_perf *perf, int *n)
{
    int rc = 0, got = 0;
    if (dir == ALGO_FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[ALGO_MAX];
        if ((rc = DNN_RC(cudnnGetConvolutionForwardAlgorithm_v7, h, d->x, d->w, d->conv, d->y,
                         ALGO_MAX, &got, r)) < 0)
            goto out;
        for (int i = 0; i < got; i++)
            perf[i] = (algo_perf){(int)r[i].algo, r[i].status, r[i].memory, r[i].mathType,
                                  r[i].determinism};
    } else if (dir == ALGO_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[ALGO_MAX];
        if ((rc = DNN_RC(cudnnGetConvolutionBackwardDataAlgorithm_v7, h, d->w, d->y, d->conv, d->x,
                         ALGO_MAX, &got, r)) < 0)
            goto out;
        for (int i = 0; i < got; i++)
            perf[i] = (algo_perf){(int)r[i].algo, r[i].status, r[i].memory, r[i].mathType,
                                  r[i].determinism};
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[ALGO_MAX];
        if ((rc = DNN_RC(cudnnGetConvolutionBackwardFilterAlgorithm_v7, h, d->x, d->y, d->conv,
                         d->w, ALGO_MAX, &got, r)) < 0)
            goto out;
        for (int i = 0; i < got; i++)
            perf[i] = (algo_perf){(int)r[i].algo, r[i].status, r[i].memory, r[i].mathType,
                                  r[i].determinism};
    }
out:
    *n = rc < 0 ? 0 : got;
    return rc;
}

/* The workspace algorithm `algo` of direction dir needs. */
static int algo_ws(cudnnHandle_t h, const conv_descs *d, int dir, int algo, size_t *bytes)
{
    int rc = 0;
    *bytes = 0;
    if (dir == ALGO_FWD)
        rc = DNN_RC(cudnnGetConvolutionForwardWorkspaceSize, h, d->x, d->w, d->conv, d->y,
                    (cudnnConvolutionFwdAlgo_t)algo, bytes);
    else if (dir == ALGO_BWD_DATA)
        rc = DNN_RC(cudnnGetConvolutionBackwardDataWorkspaceSize, h, d->w, d->y, d->conv, d->x,
                    (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    else
        rc = DNN_RC(cudnnGetConvolutionBackwardFilterWorkspaceSize, h, d->x, d->y, d->conv, d->w,
                    (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
    return rc;
}

/* *algo and *ws_bytes for direction dir of p: from the table, or chosen now and added. */
static int algo_get(cudnnHandle_t h, const conv_descs *d, const ct__conv_p *p, int dir,
                    const char *fn, int *algo, size_t *ws_bytes)
{
    int device = 0;
    int rc = ct__cuda_status(cudaGetDevice(&device), "cudaGetDevice");
    if (rc < 0)
        return rc;
    bool det = ct__cuda_deterministic();
    int64_t key[ALGO_KEY_LEN];
    algo_key(key, dir, device, det, p);
    bool found = false;
    pthread_mutex_lock(&A.mu);
    for (int i = 0; i < ALGO_SLOTS && !found; i++) {
        const algo_slot *s = &A.slot[i];
        if (s->used && memcmp(s->key, key, sizeof key) == 0) {
            *algo = s->algo;
            *ws_bytes = s->ws_bytes;
            found = true;
        }
    }
    pthread_mutex_unlock(&A.mu);
    if (found)
        return 0;

    /* Not locked while cuDNN is asked: two threads may both choose the same shape's algorithm
     * (the same one) and both add it; that costs a slot, not a wrong answer. */
    algo_perf perf[ALGO_MAX];
    int n = 0, pick = -1;
    if ((rc = algo_query(h, d, dir, perf, &n)) < 0)
        return rc;
    for (int i = 0; i < n && pick < 0; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS &&
            (perf[i].math == CUDNN_FMA_MATH || ct__tf32_allowed() || p->dt != CT_F32) &&
            perf[i].memory <= WS_LIMIT && (!det || perf[i].determinism == CUDNN_DETERMINISTIC))
            pick = i;
    if (pick < 0)
        return ct__error(CT_ENOSYS,
                         "%s: cuDNN has no f32 (FMA)%s algorithm for this convolution within %zu "
                         "MiB of workspace (%d candidates)%s",
                         fn, det ? " deterministic" : "", WS_LIMIT >> 20, n,
                         det ? "; ct__cuda_set_deterministic(false) allows the others" : "");
    size_t bytes = 0;
    if ((rc = algo_ws(h, d, dir, perf[pick].algo, &bytes)) < 0)
        return rc;

    pthread_mutex_lock(&A.mu);
    algo_slot *s = &A.slot[A.next];
    A.next = (A.next + 1) % ALGO_SLOTS;
    s->used = true;
    memcpy(s->key, key, sizeof key);
    s->algo = perf[pick].algo;
    s->ws_bytes = bytes;
    pthread_mutex_unlock(&A.mu);
    *algo = perf[pick].algo;
    *ws_bytes = bytes;
    return 0;
}

/* *ws = a workspace of `bytes` on the stream (NULL when 0). */
static int ws_get(void **ws, size_t bytes, void *stream)
{
    *ws = NULL;
    return bytes ? ct__cuda_malloc(ws, bytes, stream) : 0;
}

/* rc, or the workspace free's error when rc is 0 */
static int ws_put(int rc, void *ws)
{
    int frc = ct__cuda_free(ws);
    return rc < 0 ? rc : frc;
}

/* What one convolution call needs: descriptors, the handle on the stream, the shape's algorithm
 * and its workspace. conv_begin cleans up after itself when it fails; conv_end after a call. */
typedef struct conv_call {
    conv_descs d;
    cudnnHandle_t h;
    int algo;
    void *ws;
    size_t ws_bytes;
} conv_call;

static int conv_begin(conv_call *c, const ct__conv_p *p, int dir, const char *fn, void *stream)
{
    *c = (conv_call){0};
    int rc = conv_descs_make(&c->d, p, fn);
    if (rc < 0)
        return rc;
    if ((rc = handle_get(&c->h, stream)) < 0 ||
        (rc = algo_get(c->h, &c->d, p, dir, fn, &c->algo, &c->ws_bytes)) < 0 ||
        (rc = ws_get(&c->ws, c->ws_bytes, stream)) < 0)
        conv_descs_free(&c->d);
    return rc;
}

static int conv_end(conv_call *c, int rc)
{
    conv_descs_free(&c->d);
    return ws_put(rc, c->ws);
}

/* Autocast scratch: up to three bf16 / f16 buffers on the stream (the inputs rounded, the
 * output before widening), given back stream-ordered after the call. */
typedef struct lp_bufs {
    void *b[3];
    int n;
} lp_bufs;

/* *out = a scratch buffer of n elements; when src, src rounded into it */
static int lp_get(lp_bufs *l, int dt, const float *src, int64_t n, void **out, void *stream)
{
    void *p = NULL;
    int rc = ct__cuda_malloc(&p, (size_t)(n > 0 ? n : 1) * 2, stream);
    if (rc < 0)
        return rc;
    l->b[l->n++] = p;
    *out = p;
    return src ? ct__cuda_to_lp(dt, src, p, n, stream) : 0;
}

static int lp_put(lp_bufs *l, int rc)
{
    for (int i = 0; i < l->n; i++) {
        int frc = ct__cuda_free(l->b[i]);
        rc = rc < 0 ? rc : frc;
    }
    return rc;
}

static int64_t nx(const ct__conv_p *p)
{
    return p->n * p->ic * p->ih * p->iw;
}
static int64_t nw(const ct__conv_p *p)
{
    return p->oc * p->ic * p->kh * p->kw;
}
static int64_t ny(const ct__conv_p *p)
{
    return p->n * p->oc * p->oh * p->ow;
}

int ct__cuda_conv_fwd(const ct__conv_p *p, const float *x, const float *w, const float *b, float *y,
                      void *stream)
{
    static const char fn[] = "cuda_conv_fwd";
    conv_call c;
    int rc = (!x || !w || !y) ? null_arg(fn, "x, w, y") : 0;
    if (rc == 0 && p && p->bias && !b)
        rc = ct__error(CT_EINVAL, "%s: bias is set and b is NULL", fn);
    if (rc < 0 || (rc = conv_begin(&c, p, ALGO_FWD, fn, stream)) < 0)
        return rc;
    lp_bufs l = {0};
    void *xl = (void *)x, *wl = (void *)w, *yl = y;
    if (p->dt != CT_F32 && ((rc = lp_get(&l, p->dt, x, nx(p), &xl, stream)) < 0 ||
                            (rc = lp_get(&l, p->dt, w, nw(p), &wl, stream)) < 0 ||
                            (rc = lp_get(&l, p->dt, NULL, ny(p), &yl, stream)) < 0))
        goto out;
    if ((rc = DNN_RC(cudnnConvolutionForward, c.h, &ONE, c.d.x, xl, c.d.w, wl, c.d.conv,
                     (cudnnConvolutionFwdAlgo_t)c.algo, c.ws, c.ws_bytes, &ZERO, c.d.y, yl)) < 0)
        goto out;
    if (p->dt != CT_F32 && (rc = ct__cuda_from_lp(p->dt, yl, y, ny(p), stream)) < 0)
        goto out;
    /* y += b, broadcast over (n, oh, ow) */
    if (p->bias &&
        (rc = DNN_RC(cudnnAddTensor, c.h, &ONE, c.d.b, b, &ONE, c.d.yf ? c.d.yf : c.d.y, y)) < 0)
        goto out;
out:
    return conv_end(&c, lp_put(&l, rc));
}

int ct__cuda_conv_bwd_data(const ct__conv_p *p, const float *w, const float *dy, float *dx,
                           void *stream)
{
    static const char fn[] = "cuda_conv_bwd_data";
    conv_call c;
    int rc = (!w || !dy || !dx) ? null_arg(fn, "w, dy, dx") : 0;
    if (rc < 0 || (rc = conv_begin(&c, p, ALGO_BWD_DATA, fn, stream)) < 0)
        return rc;
    lp_bufs l = {0};
    void *wl = (void *)w, *dyl = (void *)dy, *dxl = dx;
    if (p->dt != CT_F32 && ((rc = lp_get(&l, p->dt, w, nw(p), &wl, stream)) < 0 ||
                            (rc = lp_get(&l, p->dt, dy, ny(p), &dyl, stream)) < 0 ||
                            (rc = lp_get(&l, p->dt, NULL, nx(p), &dxl, stream)) < 0))
        goto out;
    if ((rc = DNN_RC(cudnnConvolutionBackwardData, c.h, &ONE, c.d.w, wl, c.d.y, dyl, c.d.conv,
                     (cudnnConvolutionBwdDataAlgo_t)c.algo, c.ws, c.ws_bytes, &ZERO, c.d.x, dxl)) <
        0)
        goto out;
    if (p->dt != CT_F32)
        rc = ct__cuda_from_lp(p->dt, dxl, dx, nx(p), stream);
out:
    return conv_end(&c, lp_put(&l, rc));
}

int ct__cuda_conv_bwd_weights(const ct__conv_p *p, const float *x, const float *dy, float *dw,
                              float *db, void *stream)
{
    static const char fn[] = "cuda_conv_bwd_weights";
    conv_call c;
    int rc = (!x || !dy || !dw) ? null_arg(fn, "x, dy, dw") : 0;
    if (rc == 0 && p && p->bias && !db)
        rc = ct__error(CT_EINVAL, "%s: bias is set and db is NULL", fn);
    if (rc < 0 || (rc = conv_begin(&c, p, ALGO_BWD_FILTER, fn, stream)) < 0)
        return rc;
    lp_bufs l = {0};
    void *xl = (void *)x, *dyl = (void *)dy, *dwl = dw;
    if (p->dt != CT_F32 && ((rc = lp_get(&l, p->dt, x, nx(p), &xl, stream)) < 0 ||
                            (rc = lp_get(&l, p->dt, dy, ny(p), &dyl, stream)) < 0 ||
                            (rc = lp_get(&l, p->dt, NULL, nw(p), &dwl, stream)) < 0))
        goto out;
    if ((rc = DNN_RC(cudnnConvolutionBackwardFilter, c.h, &ONE, c.d.x, xl, c.d.y, dyl, c.d.conv,
                     (cudnnConvolutionBwdFilterAlgo_t)c.algo, c.ws, c.ws_bytes, &ZERO, c.d.w,
                     dwl)) < 0)
        goto out;
    if (p->dt != CT_F32 && (rc = ct__cuda_from_lp(p->dt, dwl, dw, nw(p), stream)) < 0)
        goto out;
    /* db = dy (f32) summed over (n, oh, ow) */
    if (p->bias && (rc = DNN_RC(cudnnConvolutionBackwardBias, c.h, &ONE, c.d.yf ? c.d.yf : c.d.y,
                                dy, &ZERO, c.d.b, db)) < 0)
        goto out;
out:
    return conv_end(&c, lp_put(&l, rc));
}

/* ---------------- batch norm ---------------- */

typedef struct bn_descs {
    cudnnTensorDescriptor_t x; /* (n,c,hw,1): x, y, dx, dy */
    cudnnTensorDescriptor_t v; /* (1,c,1,1): scale, shift, mean, var and their gradients */
    cudnnHandle_t h;           /* the thread's, on the call's stream */
} bn_descs;

static void bn_descs_free(bn_descs *d)
{
    tensor_free(&d->x);
    tensor_free(&d->v);
}

/* The descriptors and the handle of one batch-norm call; cleans up after itself on failure. */
static int bn_begin(bn_descs *d, const ct__bn_p *p, const char *fn, void *stream)
{
    int rc;
    memset(d, 0, sizeof *d);
    if (!p)
        return ct__error(CT_EINVAL, "%s: p is NULL", fn);
    if (p->fmt != CT__FMT_PLAIN)
        return ct__error(CT_ENOSYS, "%s: layout %d: only plain NCHW (0) is done on CUDA", fn,
                         p->fmt);
    if (p->relu)
        return ct__error(CT_ENOSYS, "%s: batch norm with fused ReLU is not done on CUDA yet", fn);
    if (!(p->eps >= CUDNN_BN_MIN_EPSILON) || !isfinite(p->eps))
        return ct__error(CT_EINVAL, "%s: eps %g must be finite and >= %g", fn, (double)p->eps,
                         (double)CUDNN_BN_MIN_EPSILON);
    if ((rc = tensor_new(&d->x, fn, p->n, p->c, p->hw, 1)) < 0 ||
        (rc = tensor_new(&d->v, fn, 1, p->c, 1, 1)) < 0 || (rc = handle_get(&d->h, stream)) < 0)
        bn_descs_free(d);
    return rc;
}

int ct__cuda_bn_fwd_train(const ct__bn_p *p, const float *x, const float *scale, const float *shift,
                          float *y, float *mean, float *var, void *stream)
{
    static const char fn[] = "cuda_bn_fwd_train";
    bn_descs d;
    int rc = (!x || !scale || !shift || !y || !mean || !var)
                 ? null_arg(fn, "x, scale, shift, y, mean, var")
                 : 0;
    if (rc < 0 || (rc = bn_begin(&d, p, fn, stream)) < 0)
        return rc;
    /* factor 1 makes the running stats this batch's: running = 0 * old + 1 * batch. The old
     * values are zeroed first, or garbage (a NaN) in them would survive the 0 * old. */
    if ((rc = DNN_RC(cudnnSetTensor, d.h, d.v, mean, &ZERO)) < 0)
        goto out;
    if ((rc = DNN_RC(cudnnSetTensor, d.h, d.v, var, &ZERO)) < 0)
        goto out;
    if ((rc = DNN_RC(cudnnBatchNormalizationForwardTraining, d.h, CUDNN_BATCHNORM_SPATIAL, &ONE,
                     &ZERO, d.x, x, d.x, y, d.v, scale, shift, 1.0, mean, var, (double)p->eps, NULL,
                     NULL)) < 0)
        goto out;
    /* cuDNN's running variance is the unbiased one (sum / (m-1)); the contract's is biased */
    int64_t m = p->n * p->hw;
    if (m > 1) {
        float f = (float)((double)(m - 1) / (double)m);
        if ((rc = DNN_RC(cudnnScaleTensor, d.h, d.v, var, &f)) < 0)
            goto out;
    } else {
        if ((rc = DNN_RC(cudnnSetTensor, d.h, d.v, var, &ZERO)) < 0)
            goto out; /* one value: its unbiased variance is 0/0 */
    }
out:
    bn_descs_free(&d);
    return rc;
}

int ct__cuda_bn_fwd_infer(const ct__bn_p *p, const float *x, const float *scale, const float *shift,
                          const float *mean, const float *var, float *y, void *stream)
{
    static const char fn[] = "cuda_bn_fwd_infer";
    bn_descs d;
    int rc = (!x || !scale || !shift || !mean || !var || !y)
                 ? null_arg(fn, "x, scale, shift, mean, var, y")
                 : 0;
    if (rc < 0 || (rc = bn_begin(&d, p, fn, stream)) < 0)
        return rc;
    if ((rc = DNN_RC(cudnnBatchNormalizationForwardInference, d.h, CUDNN_BATCHNORM_SPATIAL, &ONE,
                     &ZERO, d.x, x, d.x, y, d.v, scale, shift, mean, var, (double)p->eps)) < 0)
        goto out;
out:
    bn_descs_free(&d);
    return rc;
}

int ct__cuda_bn_bwd(const ct__bn_p *p, const float *x, const float *dy, const float *scale,
                    const float *mean, const float *var, float *dx, float *dscale, float *dshift,
                    void *stream)
{
    static const char fn[] = "cuda_bn_bwd";
    bn_descs d;
    float *inv_std = NULL;
    int rc = (!x || !dy || !scale || !mean || !var || !dx || !dscale || !dshift)
                 ? null_arg(fn, "x, dy, scale, mean, var, dx, dscale, dshift")
                 : 0;
    if (rc < 0 || (rc = bn_begin(&d, p, fn, stream)) < 0)
        return rc;
    /* cuDNN's backward takes 1/sqrt(var + eps), not var */
    if ((rc = ct__cuda_malloc((void **)&inv_std, (size_t)p->c * sizeof(float), stream)) < 0 ||
        (rc = ct__cuda_inv_std(var, p->eps, inv_std, p->c, stream)) < 0)
        goto out;
    if ((rc = DNN_RC(cudnnBatchNormalizationBackward, d.h, CUDNN_BATCHNORM_SPATIAL, &ONE, &ZERO,
                     &ONE, &ZERO, d.x, x, d.x, dy, d.x, dx, d.v, scale, dscale, dshift,
                     (double)p->eps, mean, inv_std)) < 0)
        goto out;
out:
    bn_descs_free(&d);
    return ws_put(rc, inv_std);
}

/* ---------------- pooling ---------------- */

typedef struct pool_descs {
    cudnnTensorDescriptor_t x, y; /* (n,c,ih,iw), (n,c,oh,ow) */
    cudnnPoolingDescriptor_t pool;
} pool_descs;

static void pool_descs_free(pool_descs *d)
{
    tensor_free(&d->x);
    tensor_free(&d->y);
    if (d->pool)
        cudnnDestroyPoolingDescriptor(d->pool);
    memset(d, 0, sizeof *d);
}

static int pool_descs_make(pool_descs *d, const ct__pool_p *p, const char *fn)
{
    int rc = 0;
    memset(d, 0, sizeof *d);
    if (!p)
        return ct__error(CT_EINVAL, "%s: p is NULL", fn);
    if (p->fmt != CT__FMT_PLAIN)
        return ct__error(CT_ENOSYS, "%s: layout %d: only plain NCHW (0) is done on CUDA", fn,
                         p->fmt);
    if (p->alg != CT__POOL_MAX && p->alg != CT__POOL_AVG_INCL && p->alg != CT__POOL_AVG_EXCL)
        return ct__error(CT_EINVAL, "%s: unknown pooling algorithm %d", fn, p->alg);
    if (!int_in(p->kh, 1) || !int_in(p->kw, 1) || !int_in(p->sh, 1) || !int_in(p->sw, 1) ||
        !int_in(p->ph, 0) || !int_in(p->pw, 0))
        return ct__error(CT_EINVAL,
                         "%s: window (%lld,%lld) and stride (%lld,%lld) must be >= 1, "
                         "padding (%lld,%lld) >= 0",
                         fn, (long long)p->kh, (long long)p->kw, (long long)p->sh, (long long)p->sw,
                         (long long)p->ph, (long long)p->pw);
    int64_t oh = out_size(p->ih, p->ph, p->kh, 1, p->sh);
    int64_t ow = out_size(p->iw, p->pw, p->kw, 1, p->sw);
    if (oh != p->oh || ow != p->ow)
        return ct__error(CT_ENOSYS,
                         "%s: output %lldx%lld, but padding (%lld,%lld) on both sides gives "
                         "%lldx%lld (ceil mode is not done on CUDA)",
                         fn, (long long)p->oh, (long long)p->ow, (long long)p->ph, (long long)p->pw,
                         (long long)oh, (long long)ow);
    if ((rc = tensor_new(&d->x, fn, p->n, p->c, p->ih, p->iw)) < 0 ||
        (rc = tensor_new(&d->y, fn, p->n, p->c, p->oh, p->ow)) < 0)
        goto out;
    /* MAX_DETERMINISTIC: plain MAX's backward may add overlapping windows' gradients in any
     * order; a training step should give the same bits every run */
    cudnnPoolingMode_t mode = p->alg == CT__POOL_MAX ? CUDNN_POOLING_MAX_DETERMINISTIC
                              : p->alg == CT__POOL_AVG_INCL
                                  ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                  : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    if ((rc = DNN_RC(cudnnCreatePoolingDescriptor, &d->pool)) < 0)
        goto out;
    /* a NaN in a window is the maximum, as in PyTorch: training should see it */
    if ((rc = DNN_RC(cudnnSetPooling2dDescriptor, d->pool, mode, CUDNN_PROPAGATE_NAN, (int)p->kh,
                     (int)p->kw, (int)p->ph, (int)p->pw, (int)p->sh, (int)p->sw)) < 0)
        goto out;
    return 0;
out:
    pool_descs_free(d);
    return rc;
}

int ct__cuda_pool_fwd(const ct__pool_p *p, const float *x, float *y, void *stream)
{
    static const char fn[] = "cuda_pool_fwd";
    pool_descs d;
    cudnnHandle_t h;
    int rc = (!x || !y) ? null_arg(fn, "x, y") : 0;
    if (rc < 0 || (rc = pool_descs_make(&d, p, fn)) < 0)
        return rc;
    if ((rc = handle_get(&h, stream)) < 0)
        goto out;
    if ((rc = DNN_RC(cudnnPoolingForward, h, d.pool, &ONE, d.x, x, &ZERO, d.y, y)) < 0)
        goto out;
out:
    pool_descs_free(&d);
    return rc;
}

int ct__cuda_pool_bwd(const ct__pool_p *p, const float *x, const float *y, const float *dy,
                      float *dx, void *stream)
{
    static const char fn[] = "cuda_pool_bwd";
    pool_descs d;
    cudnnHandle_t h;
    int rc = (!x || !y || !dy || !dx) ? null_arg(fn, "x, y, dy, dx") : 0;
    if (rc < 0 || (rc = pool_descs_make(&d, p, fn)) < 0)
        return rc;
    if ((rc = handle_get(&h, stream)) < 0)
        goto out;
    if ((rc = DNN_RC(cudnnPoolingBackward, h, d.pool, &ONE, d.y, y, d.y, dy, d.x, x, &ZERO, d.x,
                     dx)) < 0)
        goto out;
out:
    pool_descs_free(&d);
    return rc;
}

/* ---------------- activations ---------------- */

typedef struct act_descs {
    cudnnTensorDescriptor_t t; /* (1,1,1,n) */
    cudnnActivationDescriptor_t act;
} act_descs;

static void act_descs_free(act_descs *d)
{
    tensor_free(&d->t);
    if (d->act)
        cudnnDestroyActivationDescriptor(d->act);
    memset(d, 0, sizeof *d);
}

static int act_descs_make(act_descs *d, int alg, float alpha, int64_t n, const char *fn)
{
    int rc = 0;
    memset(d, 0, sizeof *d);
    cudnnActivationMode_t mode;
    switch (alg) {
    case CT__ELT_RELU:
        if (alpha != 0.0f)
            return ct__error(CT_ENOSYS,
                             "%s: leaky relu (slope %g) is not done on CUDA: cuDNN has no leaky "
                             "relu",
                             fn, (double)alpha);
        mode = CUDNN_ACTIVATION_RELU;
        break;
    case CT__ELT_ELU:
        mode = CUDNN_ACTIVATION_ELU;
        break;
    case CT__ELT_TANH:
        mode = CUDNN_ACTIVATION_TANH;
        break;
    case CT__ELT_SIGMOID:
        mode = CUDNN_ACTIVATION_SIGMOID;
        break;
    default:
        return ct__error(CT_EINVAL, "%s: unknown activation %d", fn, alg);
    }
    if ((rc = tensor_new(&d->t, fn, 1, 1, 1, n)) < 0)
        return rc;
    if ((rc = DNN_RC(cudnnCreateActivationDescriptor, &d->act)) < 0)
        goto out;
    /* coef: ELU's alpha (the clipping bound of CLIPPED_RELU, unused otherwise); NaN in, NaN out */
    if ((rc = DNN_RC(cudnnSetActivationDescriptor, d->act, mode, CUDNN_PROPAGATE_NAN,
                     alg == CT__ELT_ELU ? (double)alpha : 0.0)) < 0)
        goto out;
    return 0;
out:
    act_descs_free(d);
    return rc;
}

int ct__cuda_eltwise_fwd(int alg, float alpha, int64_t n, const float *x, float *y, void *stream)
{
    static const char fn[] = "cuda_eltwise_fwd";
    act_descs d;
    cudnnHandle_t h;
    int rc = (!x || !y) ? null_arg(fn, "x, y") : 0;
    if (rc < 0 || (rc = act_descs_make(&d, alg, alpha, n, fn)) < 0)
        return rc;
    if ((rc = handle_get(&h, stream)) < 0)
        goto out;
    if ((rc = DNN_RC(cudnnActivationForward, h, d.act, &ONE, d.t, x, &ZERO, d.t, y)) < 0)
        goto out;
out:
    act_descs_free(&d);
    return rc;
}

int ct__cuda_eltwise_bwd(int alg, float alpha, int64_t n, const float *x, const float *y,
                         const float *dy, float *dx, void *stream)
{
    static const char fn[] = "cuda_eltwise_bwd";
    act_descs d;
    cudnnHandle_t h;
    int rc = (!x || !y || !dy || !dx) ? null_arg(fn, "x, y, dy, dx") : 0;
    if (rc < 0 || (rc = act_descs_make(&d, alg, alpha, n, fn)) < 0)
        return rc;
    if ((rc = handle_get(&h, stream)) < 0)
        goto out;
    if ((rc = DNN_RC(cudnnActivationBackward, h, d.act, &ONE, d.t, y, d.t, dy, d.t, x, &ZERO, d.t,
                     dx)) < 0)
        goto out;
out:
    act_descs_free(&d);
    return rc;
}

/* ---------------- softmax ---------------- */

/* (rows, cols) as (rows, cols, 1, 1): INSTANCE mode normalizes over all but the first axis */
int ct__cuda_softmax_fwd(bool log, int64_t rows, int64_t cols, const float *x, float *y,
                         void *stream)
{
    static const char fn[] = "cuda_softmax_fwd";
    cudnnTensorDescriptor_t t = NULL;
    cudnnHandle_t h;
    int rc = (!x || !y) ? null_arg(fn, "x, y") : 0;
    if (rc < 0 || (rc = tensor_new(&t, fn, rows, cols, 1, 1)) < 0)
        return rc;
    if ((rc = handle_get(&h, stream)) < 0)
        goto out;
    /* ACCURATE subtracts each row's maximum first, as the CPU does */
    if ((rc = DNN_RC(cudnnSoftmaxForward, h, log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
                     CUDNN_SOFTMAX_MODE_INSTANCE, &ONE, t, x, &ZERO, t, y)) < 0)
        goto out;
out:
    tensor_free(&t);
    return rc;
}

int ct__cuda_softmax_bwd(bool log, int64_t rows, int64_t cols, const float *y, const float *dy,
                         float *dx, void *stream)
{
    static const char fn[] = "cuda_softmax_bwd";
    cudnnTensorDescriptor_t t = NULL;
    cudnnHandle_t h;
    int rc = (!y || !dy || !dx) ? null_arg(fn, "y, dy, dx") : 0;
    if (rc < 0 || (rc = tensor_new(&t, fn, rows, cols, 1, 1)) < 0)
        return rc;
    if ((rc = handle_get(&h, stream)) < 0)
        goto out;
    if ((rc = DNN_RC(cudnnSoftmaxBackward, h, log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
                     CUDNN_SOFTMAX_MODE_INSTANCE, &ONE, t, y, t, dy, &ZERO, t, dx)) < 0)
        goto out;
out:
    tensor_free(&t);
    return rc;
}
