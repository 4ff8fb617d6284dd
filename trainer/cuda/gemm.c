/* trainer/cuda/gemm.c — matrix products on cuBLASLt (cuda.h): the general product, and a
 * Linear's forward (bias in cuBLASLt's epilogue) and backward.
 *
 * ct's matrices are row-major; cuBLASLt's are column-major. A row-major (r,c) matrix is the
 * column-major (c,r) one in the same memory, so c = op(a) op(b) is computed as
 * c^T = op(b)^T op(a)^T: b is cuBLASLt's first operand, a its second, and each is transposed
 * when ct's is not stored the way the product reads it.
 *
 * Compute type CUBLAS_COMPUTE_32F: plain f32, no TF32, so results stay within f32 rounding of
 * the CPU's; TF32 (CUBLAS_COMPUTE_32F_FAST_TF32, about 1e-3 apart) only after ct_set_tf32(true).
 * Autocast products (ct__cuda_matmul_lp) convert a and b to bf16 / f16 into stream-ordered
 * scratch, then multiply with those operand types, CUBLAS_COMPUTE_32F and an f32 c. A plan
 * (descriptors and the heuristic's first algorithm) is made once per shape and pointer
 * alignments and kept, per thread like the cuBLASLt handle; the workspace comes from the caching
 * allocator.
 *
 * Alignment. cuBLASLt's heuristic assumes 256-byte aligned matrices unless told otherwise, and the
 * kernels it then picks may load 16 bytes at a time: given a narrowed view (any 4-byte offset)
 * they fail with CUBLAS_STATUS_NOT_SUPPORTED or fault on a misaligned address. So a plan's key
 * holds each pointer's alignment (the largest power of two dividing it, at most 256) and the
 * heuristic is told them (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*); the bias pointer has no such
 * preference, the heuristic reads its value instead, so it is set before the query. When no
 * algorithm takes the bias in the epilogue at its alignment, the plan adds it with a kernel of ours
 * after the product (ct__cuda_add_bias). The same product may so run other kernels, and round
 * differently, at other alignments. */
#include <cublasLt.h>
#include <pthread.h>
#include <string.h>

#include "common/common.h"

#include "trainer/cuda/cuda_internal.h"

#define WORKSPACE_BYTES ((size_t)32 << 20) /* what cuBLAS asks for on Hopper */
#define MAX_PLANS 128

typedef struct plan {
    int64_t m, k, n;
    bool ta, tb, bias, accumulate;
    int dev;   /* the device slot (cur_dev) whose handle made it */
    int dt;    /* operand type: CT_F32, CT_BF16 or CT_F16 (c is f32) */
    bool tf32; /* f32 operands with TF32 math (ct_set_tf32) */
    uint32_t align_a, align_b, align_c, align_bias; /* ct's a, b, c = d, bias (0: none) */
    bool bias_apart; /* the bias is added after the product: no epilogue takes it here */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (ct's b), B (ct's a), C = D */
    cublasLtMatmulAlgo_t algo;
    size_t workspace;
} plan;

/* per device index (cuda:N; a device past the last shares slot 0, as all did before indices):
 * the backend made the device of the call's memory current (backend_cuda.c) */
static __thread cublasLtHandle_t handles[CT_MAX_DEVICE_INDEX];
static __thread plan plans[MAX_PLANS];
static __thread int nplans;

static int lt_status(cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    return ct__error(s == CUBLAS_STATUS_ALLOC_FAILED ? CT_ENOMEM : CT_ECUDA, "%s: %s", what,
                     cublasLtGetStatusString(s));
}

static void plan_destroy(plan *p)
{
    if (p->la)
        cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb)
        cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc)
        cublasLtMatrixLayoutDestroy(p->lc);
    if (p->desc)
        cublasLtMatmulDescDestroy(p->desc);
    memset(p, 0, sizeof *p);
}

/* The largest power of two that divides p's address, at most 256 (cuBLASLt's default
 * assumption). */
static uint32_t align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && a % al)
        al /= 2;
    return al;
}

/* The operation descriptor: transposes, and the bias epilogue with `bias` (a pointer of the
 * plan's bias alignment) when with_bias. */
static int desc_make(plan *p, bool with_bias, const float *bias)
{
    int rc;
    cublasOperation_t op_b = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's A */
    cublasOperation_t op_a = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's B */
    cublasComputeType_t ct = p->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    if ((rc = lt_status(cublasLtMatmulDescCreate(&p->desc, ct, CUDA_R_32F),
                        "cublasLtMatmulDescCreate")) < 0 ||
        (rc = lt_status(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b,
                                                       sizeof op_b),
                        "cublasLtMatmulDescSetAttribute (TRANSA)")) < 0 ||
        (rc = lt_status(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a,
                                                       sizeof op_a),
                        "cublasLtMatmulDescSetAttribute (TRANSB)")) < 0)
        return rc;
    if (with_bias) { /* a bias per row of c^T, that is per column of c */
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        if ((rc = lt_status(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                           &ep, sizeof ep),
                            "cublasLtMatmulDescSetAttribute (EPILOGUE)")) < 0 ||
            (rc = lt_status(cublasLtMatmulDescSetAttribute(
                                p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
                            "cublasLtMatmulDescSetAttribute (BIAS_POINTER)")) < 0)
            return rc;
    }
    return 0;
}

/* The heuristic's first algorithm for the plan's descriptors and alignments: *found is 0 when it
 * has none. */
static int algo_pick(plan *p, int *found)
{
    cublasLtMatmulPreference_t pref = NULL;
    size_t ws = WORKSPACE_BYTES;
    cublasLtMatmulHeuristicResult_t res;
    /* cuBLASLt's A is ct's b, its B ct's a, its C and D ct's c */
    struct {
        cublasLtMatmulPreferenceAttributes_t attr;
        uint32_t bytes;
    } al[4] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, p->align_b},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p->align_a},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, p->align_c},
               {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p->align_c}};
    *found = 0;
    int rc = lt_status(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    if (rc < 0)
        return rc;
    rc = lt_status(cublasLtMatmulPreferenceSetAttribute(
                       pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                   "cublasLtMatmulPreferenceSetAttribute (MAX_WORKSPACE_BYTES)");
    for (int i = 0; i < 4 && rc == 0; i++)
        rc = lt_status(cublasLtMatmulPreferenceSetAttribute(pref, al[i].attr, &al[i].bytes,
                                                            sizeof al[i].bytes),
                       "cublasLtMatmulPreferenceSetAttribute (MIN_ALIGNMENT)");
    if (rc == 0) {
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handles[p->dev], p->desc, p->la, p->lb,
                                                           p->lc, p->lc, pref, 1, &res, found);
        /* cuBLASLt answers NOT_SUPPORTED, not an empty list, when nothing fits */
        if (st == CUBLAS_STATUS_NOT_SUPPORTED ||
            (st == CUBLAS_STATUS_SUCCESS && *found >= 1 && res.state != CUBLAS_STATUS_SUCCESS))
            *found = 0;
        else
            rc = lt_status(st, "cublasLtMatmulAlgoGetHeuristic");
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (rc == 0 && *found >= 1) {
        p->algo = res.algo;
        p->workspace = res.workspaceSize;
    }
    return rc;
}

/* The descriptors and algorithm of c (m,n) = op(a) op(b) for this shape and these alignments;
 * bias (when p->bias) is the call's, for its alignment. */
static int plan_make(plan *p, const float *bias)
{
    int rc = desc_make(p, p->bias, bias);
    if (rc < 0)
        return rc;
    /* column-major shapes as stored: b is (n,k) when !tb, (k,n) when tb; a is (k,m) when !ta,
     * (m,k) when ta; c^T is (n,m) */
    uint64_t b_rows = (uint64_t)(p->tb ? p->k : p->n), b_cols = (uint64_t)(p->tb ? p->n : p->k);
    uint64_t a_rows = (uint64_t)(p->ta ? p->m : p->k), a_cols = (uint64_t)(p->ta ? p->k : p->m);
    cudaDataType_t ot = p->dt == CT_BF16 ? CUDA_R_16BF : p->dt == CT_F16 ? CUDA_R_16F : CUDA_R_32F;
    if ((rc = lt_status(cublasLtMatrixLayoutCreate(&p->la, ot, b_rows, b_cols, (int64_t)b_rows),
                        "cublasLtMatrixLayoutCreate")) < 0 ||
        (rc = lt_status(cublasLtMatrixLayoutCreate(&p->lb, ot, a_rows, a_cols, (int64_t)a_rows),
                        "cublasLtMatrixLayoutCreate")) < 0 ||
        (rc = lt_status(
             cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, (uint64_t)p->n, (uint64_t)p->m, p->n),
             "cublasLtMatrixLayoutCreate")) < 0)
        return rc;
    int found = 0;
    if ((rc = algo_pick(p, &found)) < 0)
        return rc;
    if (found < 1 && p->bias) { /* no epilogue takes a bias at this alignment: add it apart */
        cublasLtMatmulDescDestroy(p->desc);
        p->desc = NULL;
        p->bias_apart = true;
        if ((rc = desc_make(p, false, NULL)) < 0 || (rc = algo_pick(p, &found)) < 0)
            return rc;
    }
    if (found < 1)
        return ct__error(CT_ECUDA,
                         "cuBLASLt has no algorithm for %lldx%lldx%lld (ta %d, tb %d) with a, b, c "
                         "aligned to %u, %u, %u bytes",
                         (long long)p->m, (long long)p->k, (long long)p->n, p->ta, p->tb,
                         p->align_a, p->align_b, p->align_c);
    return 0;
}

static int plan_get(int dt, int64_t m, int64_t k, int64_t n, const void *a, bool ta, const void *b,
                    bool tb, const float *c, bool acc, const float *bias, plan **out)
{
    int rc, dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= CT_MAX_DEVICE_INDEX) {
        (void)cudaGetLastError();
        dev = 0;
    }
    if (!handles[dev] && (rc = lt_status(cublasLtCreate(&handles[dev]), "cublasLtCreate")) < 0)
        return rc;
    plan key = {.m = m,
                .dev = dev,
                .k = k,
                .n = n,
                .ta = ta,
                .tb = tb,
                .bias = bias != NULL,
                .accumulate = acc,
                .dt = dt,
                .tf32 = dt == CT_F32 && ct__tf32_allowed(),
                .align_a = align_of(a),
                .align_b = align_of(b),
                .align_c = align_of(c),
                .align_bias = bias ? align_of(bias) : 0};
    for (int i = 0; i < nplans; i++) {
        plan *p = &plans[i];
        if (p->dev == dev && p->m == m && p->k == k && p->n == n && p->ta == ta && p->tb == tb &&
            p->bias == key.bias && p->accumulate == acc && p->dt == dt && p->tf32 == key.tf32 &&
            p->align_a == key.align_a && p->align_b == key.align_b && p->align_c == key.align_c &&
            p->align_bias == key.align_bias) {
            *out = p;
            return 0;
        }
    }
    if (nplans == MAX_PLANS) /* a model with this many shapes is rare: start over */
        for (; nplans > 0; nplans--)
            plan_destroy(&plans[nplans - 1]);
    plan *p = &plans[nplans];
    *p = key;
    if ((rc = plan_make(p, bias)) < 0) {
        plan_destroy(p);
        return rc;
    }
    nplans++;
    *out = p;
    return 0;
}

/* c (m,n) = op(a) op(b) [+ c] [+ bias per column]; a and b of type dt (c f32) */
static int product_dt(const char *fn, int dt, int64_t m, int64_t k, int64_t n, const void *a,
                      bool ta, const void *b, bool tb, float *c, bool acc, const float *bias,
                      void *stream)
{
    if (!a || !b || !c || m < 0 || k < 0 || n < 0)
        return ct__error(CT_EINVAL, "%s: %s", fn,
                         m < 0 || k < 0 || n < 0 ? "a negative size" : "a buffer is NULL");
    if (m == 0 || n == 0)
        return 0;
    if (k == 0) /* an empty sum: c is 0 (+ c) (+ bias); not worth a plan */
        return ct__error(CT_ENOSYS, "%s: k = 0 is not supported on CUDA", fn);
    plan *p;
    int rc = plan_get(dt, m, k, n, a, ta, b, tb, c, acc, bias, &p);
    if (rc < 0)
        return rc;
    /* this call's bias: of the alignment the plan was made for */
    if (bias && !p->bias_apart &&
        (rc = lt_status(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &bias, sizeof bias),
                        "cublasLtMatmulDescSetAttribute (BIAS_POINTER)")) < 0)
        return rc;
    void *ws = NULL;
    if (p->workspace && (rc = ct__cuda_malloc(&ws, p->workspace, stream)) < 0)
        return rc;
    const float one = 1.0f, beta = acc ? 1.0f : 0.0f;
    rc =
        lt_status(cublasLtMatmul(handles[p->dev], p->desc, &one, b, p->la, a, p->lb, &beta, c,
                                 p->lc, c, p->lc, &p->algo, ws, p->workspace, (cudaStream_t)stream),
                  fn);
    if (rc == 0 && bias && p->bias_apart)
        rc = ct__cuda_add_bias(c, bias, m, n, stream);
    int frc = ct__cuda_free(ws); /* stream-ordered: reused only after this product */
    return rc ? rc : frc;
}

static int product(const char *fn, int64_t m, int64_t k, int64_t n, const float *a, bool ta,
                   const float *b, bool tb, float *c, bool acc, const float *bias, void *stream)
{
    return product_dt(fn, CT_F32, m, k, n, a, ta, b, tb, c, acc, bias, stream);
}

int ct__cuda_matmul_lp(int dt, int64_t m, int64_t k, int64_t n, const float *a, bool ta,
                       const float *b, bool tb, float *c, bool accumulate, void *stream)
{
    if (dt != CT_BF16 && dt != CT_F16)
        return ct__error(CT_EINVAL, "cuda_matmul_lp: precision %d is not an autocast dtype", dt);
    if (!a || !b || !c || m < 0 || k < 0 || n < 0)
        return ct__error(CT_EINVAL, "cuda_matmul_lp: %s",
                         m < 0 || k < 0 || n < 0 ? "a negative size" : "a buffer is NULL");
    if (m == 0 || n == 0)
        return 0;
    void *la = NULL, *lb = NULL;
    int rc = ct__cuda_malloc(&la, (size_t)(m * k) * 2, stream);
    if (rc == 0)
        rc = ct__cuda_malloc(&lb, (size_t)(k * n) * 2, stream);
    if (rc == 0)
        rc = ct__cuda_to_lp(dt, a, la, m * k, stream);
    if (rc == 0)
        rc = ct__cuda_to_lp(dt, b, lb, k * n, stream);
    if (rc == 0)
        rc = product_dt("cuda_matmul_lp", dt, m, k, n, la, ta, lb, tb, c, accumulate, NULL, stream);
    /* stream-ordered frees: reused only after the product */
    int f1 = la ? ct__cuda_free(la) : 0, f2 = lb ? ct__cuda_free(lb) : 0;
    return rc ? rc : f1 ? f1 : f2;
}

int ct__cuda_matmul(int64_t m, int64_t k, int64_t n, const float *a, bool ta, const float *b,
                    bool tb, float *c, bool accumulate, void *stream)
{
    return product("cuda_matmul", m, k, n, a, ta, b, tb, c, accumulate, NULL, stream);
}

int ct__cuda_ip_fwd(int64_t n, int64_t ic, int64_t oc, const float *x, const float *w,
                    const float *b, float *y, void *stream)
{
    return product("cuda_ip_fwd", n, ic, oc, x, false, w, true, y, false, b, stream);
}

int ct__cuda_ip_bwd_data(int64_t n, int64_t ic, int64_t oc, const float *w, const float *dy,
                         float *dx, void *stream)
{
    return product("cuda_ip_bwd_data", n, oc, ic, dy, false, w, false, dx, false, NULL, stream);
}

int ct__cuda_ip_bwd_weights(int64_t n, int64_t ic, int64_t oc, const float *x, const float *dy,
                            float *dw, float *db, void *stream)
{
    int rc = product("cuda_ip_bwd_weights", oc, n, ic, dy, true, x, false, dw, false, NULL, stream);
    if (rc == 0 && db)
        rc = ct__cuda_col_sums(dy, n, oc, db, false, stream);
    return rc;
}
