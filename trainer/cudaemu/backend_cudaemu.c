/* trainer/cudaemu/backend_cudaemu.c — the CUDA backend's table (trainer/cuda/backend_cuda.c)
 * over the emulator: backend_cuda.c's host side and ct's own kernels (the .cu files of
 * trainer/cuda) run on the CPU, so the op test (tests/engine/test_backend_ops.c) checks them
 * against the CPU on every machine. The emulator has no cuBLASLt (trainer/cuda/gemm.c) and no cuDNN
 * (cudnn.c): the entries whose kernels are theirs are NULL in this table, as a backend that lacks
 * them (CT__BK_CALL fails with CT_ENOSYS naming the entry and the device), and their functions,
 * which backend_cuda.c calls, refuse here with CT_ENOSYS naming the library. supports refuses
 * what runs in them behind an entry that stays (the activations but ReLU, in eltwise_fwd) and
 * the autocast precisions.
 *
 * Not a device of the engine: ct__backend_of(CT_CUDA) never returns this table (a program of the
 * emulator has no CUDA device); tensors on it are made with ct__tensor_empty_on. */
#include <pthread.h>

#include "common/common.h"
#include "trainer/backend/backend.h"
#include "trainer/cuda/cuda.h"
#include "trainer/cudaemu/backend_cudaemu.h"

static int no_library(const char *fn, const char *library)
{
    return ct__error(CT_ENOSYS, "%s: %s, which the CUDA emulator does not have", fn, library);
}

/* ---- gemm.c's functions (cuBLASLt) ---- */

int ct__cuda_matmul_lp(int dt, int64_t m, int64_t k, int64_t n, const float *a, bool ta,
                       const float *b, bool tb, float *c, bool accumulate, void *stream)
{
    return no_library("matmul_lp", "cuBLASLt");
}
int ct__cuda_matmul(int64_t m, int64_t k, int64_t n, const float *a, bool ta, const float *b,
                    bool tb, float *c, bool accumulate, void *stream)
{
    return no_library("matmul", "cuBLASLt");
}
int ct__cuda_ip_fwd(int64_t n, int64_t ic, int64_t oc, const float *x, const float *w,
                    const float *b, float *y, void *stream)
{
    return no_library("ip_fwd", "cuBLASLt");
}
int ct__cuda_ip_bwd_data(int64_t n, int64_t ic, int64_t oc, const float *w, const float *dy,
                         float *dx, void *stream)
{
    return no_library("ip_bwd_data", "cuBLASLt");
}
int ct__cuda_ip_bwd_weights(int64_t n, int64_t ic, int64_t oc, const float *x, const float *dy,
                            float *dw, float *db, void *stream)
{
    return no_library("ip_bwd_weights", "cuBLASLt");
}

/* ---- cudnn.c's functions (cuDNN) ---- */

int ct__cuda_conv_fwd(const ct__conv_p *p, const float *x, const float *w, const float *b, float *y,
                      void *stream)
{
    return no_library("conv_fwd", "cuDNN");
}
int ct__cuda_conv_bwd_data(const ct__conv_p *p, const float *w, const float *dy, float *dx,
                           void *stream)
{
    return no_library("conv_bwd_data", "cuDNN");
}
int ct__cuda_conv_bwd_weights(const ct__conv_p *p, const float *x, const float *dy, float *dw,
                              float *db, void *stream)
{
    return no_library("conv_bwd_weights", "cuDNN");
}
int ct__cuda_bn_fwd_train(const ct__bn_p *p, const float *x, const float *scale, const float *shift,
                          float *y, float *mean, float *var, void *stream)
{
    return no_library("bn_fwd_train", "cuDNN");
}
int ct__cuda_bn_fwd_infer(const ct__bn_p *p, const float *x, const float *scale, const float *shift,
                          const float *mean, const float *var, float *y, void *stream)
{
    return no_library("bn_fwd_infer", "cuDNN");
}
int ct__cuda_bn_bwd(const ct__bn_p *p, const float *x, const float *dy, const float *scale,
                    const float *mean, const float *var, float *dx, float *dscale, float *dshift,
                    void *stream)
{
    return no_library("bn_bwd", "cuDNN");
}
int ct__cuda_pool_fwd(const ct__pool_p *p, const float *x, float *y, void *stream)
{
    return no_library("pool_fwd", "cuDNN");
}
int ct__cuda_pool_bwd(const ct__pool_p *p, const float *x, const float *y, const float *dy,
                      float *dx, void *stream)
{
    return no_library("pool_bwd", "cuDNN");
}
int ct__cuda_eltwise_fwd(int alg, float alpha, int64_t n, const float *x, float *y, void *stream)
{
    return no_library("eltwise_fwd", "cuDNN");
}
int ct__cuda_softmax_fwd(bool log, int64_t rows, int64_t cols, const float *x, float *y,
                         void *stream)
{
    return no_library("softmax_fwd", "cuDNN");
}
int ct__cuda_softmax_bwd(bool log, int64_t rows, int64_t cols, const float *y, const float *dy,
                         float *dx, void *stream)
{
    return no_library("softmax_bwd", "cuDNN");
}

/* ---- the table ---- */

/* the emulator's refusals before CUDA's own: on cuda, activations other than ReLU and the
 * autocast precisions run in cuDNN and cuBLASLt */
static int emu_supports(const ct__op_desc *op)
{
    if (op->kind == CT__OP_ACT && op->alg != CT__ELT_RELU)
        return ct__error(CT_ENOSYS,
                         "%s is not implemented on device cuda over the CUDA emulator: cuda runs "
                         "it in cuDNN, which the emulator does not have",
                         op->name);
    if (op->kind == CT__OP_LOWP)
        return ct__error(CT_ENOSYS,
                         "%s in bf16 or f16 is not implemented on device cuda over the CUDA "
                         "emulator: cuda runs it in cuBLASLt or cuDNN, which the emulator does "
                         "not have",
                         op->name);
    return ct__backend_cuda.supports(op);
}

static ct__backend table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

/* ct__backend_cuda without the entries whose kernels are the libraries', and emu_supports */
static void table_init(void)
{
    table = ct__backend_cuda;
    table.supports = emu_supports;
    table.matmul = NULL;
    table.matmul_lp = NULL;
    table.ip_fwd = NULL;
    table.ip_bwd_data = NULL;
    table.ip_bwd_weights = NULL;
    table.conv_fwd = NULL;
    table.conv_bwd_data = NULL;
    table.conv_bwd_weights = NULL;
    table.bn_fwd_train = NULL;
    table.bn_fwd_infer = NULL;
    table.bn_bwd = NULL;
    table.pool_fwd = NULL;
    table.pool_bwd = NULL;
    table.softmax_fwd = NULL;
    table.softmax_bwd = NULL;
}

const ct__backend *ct__cudaemu_backend(void)
{
    pthread_once(&table_once, table_init);
    return &table;
}
