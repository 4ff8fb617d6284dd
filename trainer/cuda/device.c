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
