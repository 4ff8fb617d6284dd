/* trainer/cpu/loops.c — the few CPU kernels oneDNN has no primitive for, as plain C loops
 * (OpenMP over the outer dimension when the work is large). Not here: anything oneDNN does. */
#include <string.h>

#include "trainer/cpu/cpu.h"

#define PAR_MIN 32768

/* simd: without it GCC keeps these loops scalar (y may alias the inputs). axpy adds every
 * gradient that accumulates (a tensor used twice, gradient accumulation). Small arrays get no
 * OpenMP region at all: even with its if() false, one costs a GOMP_parallel call per use. */
void ct__cpu_add(int64_t n, const float *a, const float *b, float *y)
{
    if (n > PAR_MIN) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = a[i] + b[i];
        return;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

void ct__cpu_axpy(int64_t n, float alpha, const float *x, float *y)
{
    if (n > PAR_MIN) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] += alpha * x[i];
        return;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        y[i] += alpha * x[i];
}

/* Columns in blocks of 32 held in 8 SSE registers over all rows, so y is read and written
 * once, not once per row (a Linear's bias gradient in gemm.c's path). Each column still sums
 * its rows in order, as the plain loop does. */
typedef float v4f __attribute__((vector_size(16)));

static inline v4f load4(const float *p)
{
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

void ct__cpu_add_col_sums(int64_t rows, int64_t cols, const float *x, float *y)
{
    int64_t c0 = 0;
    for (; c0 + 32 <= cols; c0 += 32) {
        v4f acc[8];
        memcpy(acc, y + c0, sizeof acc);
        v4f a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3], a4 = acc[4], a5 = acc[5],
            a6 = acc[6], a7 = acc[7];
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * cols + c0;
            a0 += load4(xr), a1 += load4(xr + 4), a2 += load4(xr + 8), a3 += load4(xr + 12);
            a4 += load4(xr + 16), a5 += load4(xr + 20), a6 += load4(xr + 24), a7 += load4(xr + 28);
        }
        acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
        acc[4] = a4, acc[5] = a5, acc[6] = a6, acc[7] = a7;
        memcpy(y + c0, acc, sizeof acc);
    }
    if (c0 == cols)
        return;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
#pragma omp simd
        for (int64_t c = c0; c < cols; c++)
            y[c] += xr[c];
    }
}

/* ReLU and leaky ReLU (slope >= 0): oneDNN's eltwise costs 0.5-2 us a call in fixed costs and
 * ran below memory speed here (8192 floats' backward: 3.5 us), which a small MLP pays 4 times a
 * batch; these loops run at memory speed.
 * Slope 0 gives 0, not 0 * v: that is -0 for a negative v and NaN for an infinite one (PyTorch's
 * relu(-inf) is 0, its gradient 0 where dy is inf); a NaN input stays NaN. trainer/cuda's ReLU
 * gives the same bits. */
static inline float relu_fwd1(float slope, float v)
{
    return v > 0.0f ? v : slope != 0.0f || v != v ? slope * v : 0.0f;
}

static inline float relu_bwd1(float slope, float y, float g)
{
    return y > 0.0f ? g : slope != 0.0f ? slope * g : 0.0f;
}

void ct__cpu_relu_fwd(float slope, int64_t n, const float *x, float *y)
{
    if (n > PAR_MIN) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++)
            y[i] = relu_fwd1(slope, x[i]);
        return;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        y[i] = relu_fwd1(slope, x[i]);
}

void ct__cpu_relu_bwd(float slope, int64_t n, const float *y, const float *dy, float *dx)
{
    if (n > PAR_MIN) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++)
            dx[i] = relu_bwd1(slope, y[i], dy[i]);
        return;
    }
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        dx[i] = relu_bwd1(slope, y[i], dy[i]);
}

/* PyTorch's adaptive pooling window: [floor(i*in/out), ceil((i+1)*in/out)). */
static inline int64_t win_start(int64_t i, int64_t in, int64_t out)
{
    return (i * in) / out;
}
static inline int64_t win_end(int64_t i, int64_t in, int64_t out)
{
    return ((i + 1) * in + out - 1) / out;
}

void ct__cpu_adaptive_avg_fwd(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                              const float *x, float *y)
{
#pragma omp parallel for if (nc * ih * iw > PAR_MIN) schedule(static)
    for (int64_t c = 0; c < nc; c++) {
        const float *xp = x + c * ih * iw;
        float *yp = y + c * oh * ow;
        for (int64_t i = 0; i < oh; i++) {
            int64_t h0 = win_start(i, ih, oh), h1 = win_end(i, ih, oh);
            for (int64_t j = 0; j < ow; j++) {
                int64_t w0 = win_start(j, iw, ow), w1 = win_end(j, iw, ow);
                float s = 0.0f;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++)
                        s += xp[h * iw + w];
                yp[i * ow + j] = s / (float)((h1 - h0) * (w1 - w0));
            }
        }
    }
}

void ct__cpu_adaptive_avg_bwd(int64_t nc, int64_t ih, int64_t iw, int64_t oh, int64_t ow,
                              const float *dy, float *dx, bool acc)
{
    if (!acc)
        memset(dx, 0, (size_t)(nc * ih * iw) * sizeof(float));
#pragma omp parallel for if (nc * ih * iw > PAR_MIN) schedule(static)
    for (int64_t c = 0; c < nc; c++) {
        float *xp = dx + c * ih * iw;
        const float *yp = dy + c * oh * ow;
        for (int64_t i = 0; i < oh; i++) {
            int64_t h0 = win_start(i, ih, oh), h1 = win_end(i, ih, oh);
            for (int64_t j = 0; j < ow; j++) {
                int64_t w0 = win_start(j, iw, ow), w1 = win_end(j, iw, ow);
                float g = yp[i * ow + j] / (float)((h1 - h0) * (w1 - w0));
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++)
                        xp[h * iw + w] += g;
            }
        }
    }
}
