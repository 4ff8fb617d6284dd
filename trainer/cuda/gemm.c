/* trainer/cuda/gemm.c — matrix products on cuBLASLt (cuda.h): the general product, and a
 * Linear's forward (bias in cuBLASLt's epilogue) and backward.
 *
 * ct's matrices are row-major; cuBLASLt's are column-major. A row-major (r,c) matrix is the
 * column-major (c,r) one in the same memory, so c = op(a) op(b) is computed as
 * c^T = op(b)^T op(a)^T: b is cuBLASLt's first operand, a its second, and each is transposed
 * when ct's is not stored the way the product reads it.
 *
 * Compute type CUBLAS_COMPUTE_32F: plain f32, no TF32, so results stay within f32 rounding of
 * the CPU's (TF32 would differ by about 1e-3; a precision option can allow it later). A plan
 * (descriptors and the heuristic's first algorithm) is made once per shape and kept, per thread
 * like the cuBLASLt handle; the workspace comes from the caching allocator. */
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
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (ct's b), B (ct's a), C = D */
    cublasLtMatmulAlgo_t algo;
    size_t workspace;
} plan;

static __thread cublasLtHandle_t handle;
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

/* The descriptors and algorithm of c (m,n) = op(a) op(b) for this shape. */
static int plan_make(plan *p)
{
    int rc;
    cublasOperation_t op_b = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's A */
    cublasOperation_t op_a = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's B */
    if ((rc = lt_status(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                        "cublasLtMatmulDescCreate")) < 0 ||
        (rc = lt_status(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b,
                                                       sizeof op_b),
                        "cublasLtMatmulDescSetAttribute (TRANSA)")) < 0 ||
        (rc = lt_status(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a,
                                                       sizeof op_a),
                        "cublasLtMatmulDescSetAttribute (TRANSB)")) < 0)
        return rc;
    if (p->bias) { /* a bias per row of c^T, that is per column of c */
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        if ((rc = lt_status(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                           &ep, sizeof ep),
                            "cublasLtMatmulDescSetAttribute (EPILOGUE)")) < 0)
            return rc;
    }
    /* column-major shapes as stored: b is (n,k) when !tb, (k,n) when tb; a is (k,m) when !ta,
     * (m,k) when ta; c^T is (n,m) */
    uint64_t b_rows = (uint64_t)(p->tb ? p->k : p->n), b_cols = (uint64_t)(p->tb ? p->n : p->k);
    uint64_t a_rows = (uint64_t)(p->ta ? p->m : p->k), a_cols = (uint64_t)(p->ta ? p->k : p->m);
    if ((rc = lt_status(
             cublasLtMatrixLayoutCreate(&p->la, CUDA_R_32F, b_rows, b_cols, (int64_t)b_rows),
             "cublasLtMatrixLayoutCreate")) < 0 ||
        (rc = lt_status(
             cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_32F, a_rows, a_cols, (int64_t)a_rows),
             "cublasLtMatrixLayoutCreate")) < 0 ||
        (rc = lt_status(
             cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, (uint64_t)p->n, (uint64_t)p->m, p->n),
             "cublasLtMatrixLayoutCreate")) < 0)
        return rc;
    cublasLtMatmulPreference_t pref = NULL;
    size_t ws = WORKSPACE_BYTES;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if ((rc = lt_status(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate")) <
        0)
        return rc;
    rc = lt_status(cublasLtMatmulPreferenceSetAttribute(
                       pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                   "cublasLtMatmulPreferenceSetAttribute");
    if (rc == 0)
        rc = lt_status(cublasLtMatmulAlgoGetHeuristic(handle, p->desc, p->la, p->lb, p->lc, p->lc,
                                                      pref, 1, &res, &found),
                       "cublasLtMatmulAlgoGetHeuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    if (rc == 0 && found < 1)
        rc = ct__error(CT_ECUDA, "cuBLASLt has no algorithm for %lldx%lldx%lld (ta %d, tb %d)",
                       (long long)p->m, (long long)p->k, (long long)p->n, p->ta, p->tb);
    if (rc == 0) {
        p->algo = res.algo;
        p->workspace = res.workspaceSize;
    }
    return rc;
}

static int plan_get(int64_t m, int64_t k, int64_t n, bool ta, bool tb, bool bias, bool acc,
                    plan **out)
{
    int rc;
    if (!handle && (rc = lt_status(cublasLtCreate(&handle), "cublasLtCreate")) < 0)
        return rc;
    for (int i = 0; i < nplans; i++) {
        plan *p = &plans[i];
        if (p->m == m && p->k == k && p->n == n && p->ta == ta && p->tb == tb && p->bias == bias &&
            p->accumulate == acc) {
            *out = p;
            return 0;
        }
    }
    if (nplans == MAX_PLANS) /* a model with this many shapes is rare: start over */
        for (; nplans > 0; nplans--)
            plan_destroy(&plans[nplans - 1]);
    plan *p = &plans[nplans];
    *p = (plan){.m = m, .k = k, .n = n, .ta = ta, .tb = tb, .bias = bias, .accumulate = acc};
    if ((rc = plan_make(p)) < 0) {
        plan_destroy(p);
        return rc;
    }
    nplans++;
    *out = p;
    return 0;
}

/* c (m,n) = op(a) op(b) [+ c] [+ bias per column] */
static int product(const char *fn, int64_t m, int64_t k, int64_t n, const float *a, bool ta,
                   const float *b, bool tb, float *c, bool acc, const float *bias, void *stream)
{
    if (!a || !b || !c || m < 0 || k < 0 || n < 0)
        return ct__error(CT_EINVAL, "%s: %s", fn,
                         m < 0 || k < 0 || n < 0 ? "a negative size" : "a buffer is NULL");
    if (m == 0 || n == 0)
        return 0;
    if (k == 0) /* an empty sum: c is 0 (+ c) (+ bias); not worth a plan */
        return ct__error(CT_ENOSYS, "%s: k = 0 is not supported on CUDA", fn);
    plan *p;
    int rc = plan_get(m, k, n, ta, tb, bias != NULL, acc, &p);
    if (rc < 0)
        return rc;
    if (bias && (rc = lt_status(cublasLtMatmulDescSetAttribute(
                                    p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
                                "cublasLtMatmulDescSetAttribute (BIAS_POINTER)")) < 0)
        return rc;
    void *ws = NULL;
    if (p->workspace && (rc = ct__cuda_malloc(&ws, p->workspace, stream)) < 0)
        return rc;
    const float one = 1.0f, beta = acc ? 1.0f : 0.0f;
    rc = lt_status(cublasLtMatmul(handle, p->desc, &one, b, p->la, a, p->lb, &beta, c, p->lc, c,
                                  p->lc, &p->algo, ws, p->workspace, (cudaStream_t)stream),
                   fn);
    int frc = ct__cuda_free(ws); /* stream-ordered: reused only after this product */
    return rc ? rc : frc;
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
