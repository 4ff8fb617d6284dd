/* tests/cuda/nospill_probe.cu — the control of cuda_spill_is_error: a small kernel that needs few
 * registers, built with the same options as spill_probe.cu (ct_cuda_compile_options); its build
 * must pass, so the spill probe fails for its spills and not for the options. Never linked. */
__global__ void nospill_probe(float *y, const float *x, float a, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] += a * x[i];
}
