/* trainer/cuda/device.c — the CUDA device probe, error reporting, streams and events, pinned host
 * memory, host <-> device copies. */
#include "common/common.h"

#include "trainer/cuda/cuda_internal.h"

int ct__cuda_status(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    return ct__error(e == cudaErrorMemoryAllocation ? CT_ENOMEM : CT_ECUDA, "%s: %s", what,
                     cudaGetErrorString(e));
}

int ct__cuda_device_count(const char **why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        /* cudaGetDeviceCount leaves its error sticky for cudaGetLastError: clear it */
        (void)cudaGetLastError();
        if (why)
            *why = e == cudaErrorNoDevice || (e == cudaSuccess && n <= 0)
                       ? "no CUDA device (none present, or CUDA_VISIBLE_DEVICES hides them)"
                   : e == cudaErrorInsufficientDriver ? "no NVIDIA driver, or one too old for "
                                                        "this CUDA runtime"
                                                      : cudaGetErrorString(e);
        return 0;
    }
    return n;
}

/* Dense FLOPs per clock per SM (an FMA counts 2), from NVIDIA's architecture whitepapers: FP32
 * on the CUDA cores; bf16 / f16 on the tensor cores with f32 accumulation. The product with
 * the SMs and cudaDevAttrClockRate (the boost clock) gives a peak a little above the data
 * sheet's where the tensor cores' figure is quoted at a lower clock (H100 SXM: 989 TFLOP/s bf16
 * at 1.83 GHz; this gives 1,070 at 1.98). */
static const struct {
    int major, minor;
    double f32, lowp;
} peak_table[] = {
    {7, 0, 128, 1024},  /* V100 (f16 only: no bf16 tensor cores) */
    {8, 0, 128, 2048},  /* A100 */
    {8, 6, 256, 512},   /* GA10x */
    {8, 9, 256, 512},   /* AD10x, L4, L40 */
    {9, 0, 256, 4096},  /* H100, H200 */
    {10, 0, 256, 8192}, /* B200 */
};

double ct__cuda_peak_flops(int dt, int threads)
{
    (void)threads;
    int dev = 0, sms = 0, khz = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError(); /* not for the next launch check */
        return 0;
    }
    for (size_t i = 0; i < sizeof peak_table / sizeof *peak_table; i++)
        if (peak_table[i].major == major && peak_table[i].minor == minor) {
            bool lowp = dt == CT_BF16 || dt == CT_F16;
            if (lowp && dt == CT_BF16 && major < 8)
                return 0; /* no bf16 tensor cores */
            return (double)sms * khz * 1e3 * (lowp ? peak_table[i].lowp : peak_table[i].f32);
        }
    return 0;
}

int ct__cuda_stream_new(void **stream)
{
    cudaStream_t s = NULL;
    int rc = ct__cuda_status(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                             "cudaStreamCreateWithFlags");
    *stream = rc ? NULL : (void *)s;
    return rc;
}

void ct__cuda_stream_free(void *stream)
{
    if (stream)
        cudaStreamDestroy((cudaStream_t)stream);
}

int ct__cuda_event_new(void **ev)
{
    cudaEvent_t e = NULL;
    /* no timing: recording and waiting are cheaper, and nothing here measures time with them */
    int rc = ct__cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                             "cudaEventCreateWithFlags");
    *ev = rc ? NULL : (void *)e;
    return rc;
}

void ct__cuda_event_free(void *ev)
{
    if (ev)
        cudaEventDestroy((cudaEvent_t)ev);
}

int ct__cuda_event_record(void *ev, void *stream)
{
    if (!ev)
        return ct__error(CT_EINVAL, "cuda_event_record: ev is NULL");
    return ct__cuda_status(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream),
                           "cudaEventRecord");
}

int ct__cuda_stream_wait(void *stream, void *ev)
{
    if (!ev)
        return ct__error(CT_EINVAL, "cuda_stream_wait: ev is NULL");
    return ct__cuda_status(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)ev, 0),
                           "cudaStreamWaitEvent");
}

int ct__cuda_event_sync(void *ev)
{
    if (!ev)
        return ct__error(CT_EINVAL, "cuda_event_sync: ev is NULL");
    return ct__cuda_status(cudaEventSynchronize((cudaEvent_t)ev), "cudaEventSynchronize");
}

int ct__cuda_host_fn(void *stream, void (*fn)(void *arg), void *arg)
{
    if (!stream || !fn)
        return ct__error(CT_EINVAL, "cuda_host_fn: needs a stream and a function");
    return ct__cuda_status(cudaLaunchHostFunc((cudaStream_t)stream, fn, arg), "cudaLaunchHostFunc");
}

int ct__cuda_event_done(void *ev)
{
    if (!ev)
        return ct__error(CT_EINVAL, "cuda_event_done: ev is NULL");
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
    if (e == cudaErrorNotReady) {
        /* not an error: clear it, or the next launch check would report it */
        (void)cudaGetLastError();
        return 0;
    }
    int rc = ct__cuda_status(e, "cudaEventQuery");
    return rc < 0 ? rc : 1;
}

int ct__cuda_sync(void *stream)
{
    if (stream)
        return ct__cuda_status(cudaStreamSynchronize((cudaStream_t)stream),
                               "cudaStreamSynchronize");
    return ct__cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

int ct__cuda_pinned_alloc(void **p, size_t bytes)
{
    *p = NULL;
    return ct__cuda_status(cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocDefault),
                           "cudaHostAlloc");
}

void ct__cuda_pinned_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}

int ct__cuda_to_device(void *dst, const void *src, size_t bytes, void *stream)
{
    return ct__cuda_status(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream),
        "cudaMemcpyAsync (host to device)");
}

int ct__cuda_to_host(void *dst, const void *src, size_t bytes, void *stream)
{
    return ct__cuda_status(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream),
        "cudaMemcpyAsync (device to host)");
}
