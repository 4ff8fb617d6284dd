/* trainer/cuda/device.c — the CUDA device probe, error reporting, host <-> device copies. */
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
