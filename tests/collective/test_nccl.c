/* tests/collective/test_nccl.c — the NCCL backend on one GPU (world size 1: NCCL refuses two
 * ranks on one device): allreduce f32 (sum, avg), f16 and bf16 sums, broadcast, allgather,
 * barriers (five in a row) on device buffers; the bucketer over device buffers without
 * opts.device (a blocking grouped allreduce per bucket), and on device gradients (opts.device:
 * finish returns once the allreduces are enqueued, the compute stream waits for them; values
 * read back after it); abort makes the next call return CT_ECANCELED; a communicator rebuilt
 * from a new group id (new unique id) works.
 * Exits 77 without a GPU, and checks that a CPU-only build refuses the backend with CT_ENOSYS. */
#include <stdint.h>

#include "harness.h"

#ifdef CT_TEST_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "trainer/backend/backend.h"

static uint16_t to_half(float f) /* exact for small integers */
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
    if (f == 0)
        return (uint16_t)sign;
    return (uint16_t)(sign | ((e - 127 + 15) << 10) | (m >> 13));
}

static float from_half(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    uint32_t x = e == 0 ? sign : sign | ((e - 15 + 127) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static int gpu_main(ct_rendezvous *rdv)
{
    ct_comm *c = NULL;
    ct_comm_opts o = {.rendezvous = rdv,
                      .group_id = "nccl-1",
                      .rank = 0,
                      .world_size = 1,
                      .backend = CT_COMM_NCCL,
                      .timeout_ms = 20000};
    CHECK_RC(ct_comm_new(&o, &c));
    enum { N = 1000 };
    float h[N], back[N];
    uint16_t hh[N];
    void *d = NULL, *d2 = NULL;
    CHECK(cudaMalloc(&d, N * sizeof(float)) == cudaSuccess);
    CHECK(cudaMalloc(&d2, N * sizeof(float)) == cudaSuccess);
    for (int i = 0; i < N; i++)
        h[i] = (float)(i % 100);
    CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK_RC(ct_comm_allreduce(c, d, N, CT_F32, CT_COMM_SUM, 0));
    CHECK_RC(ct_comm_allreduce(c, d, N, CT_F32, CT_COMM_AVG, 0));
    CHECK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int i = 0; i < N; i++)
        if (back[i] != h[i]) {
            fprintf(stderr, "f32 [%d] = %g, want %g\n", i, back[i], h[i]);
            return 1;
        }
    for (int dt = CT_F16; dt <= CT_BF16; dt++) {
        for (int i = 0; i < N; i++) {
            uint32_t x;
            memcpy(&x, &h[i], 4);
            hh[i] = dt == CT_F16 ? to_half(h[i]) : (uint16_t)(x >> 16); /* exact: small ints */
        }
        CHECK(cudaMemcpy(d, hh, sizeof hh, cudaMemcpyHostToDevice) == cudaSuccess);
        CHECK_RC(ct_comm_allreduce(c, d, N, (ct_dtype)dt, CT_COMM_SUM, 0));
        CHECK(cudaMemcpy(hh, d, sizeof hh, cudaMemcpyDeviceToHost) == cudaSuccess);
        for (int i = 0; i < N; i++) {
            uint32_t x = (uint32_t)hh[i] << 16;
            float v;
            memcpy(&v, &x, 4);
            if (dt == CT_F16)
                v = from_half(hh[i]);
            if (v != h[i]) {
                fprintf(stderr, "%s [%d] = %g, want %g\n", dt == CT_F16 ? "f16" : "bf16", i, v,
                        h[i]);
                return 1;
            }
        }
    }
    CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK_RC(ct_comm_broadcast(c, d, N, CT_F32, 0, 0));
    CHECK_RC(ct_comm_allgather(c, d, d2, N, CT_F32, 0));
    CHECK(cudaMemcpy(back, d2, sizeof back, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(memcmp(back, h, sizeof h) == 0);
    /* the barrier reuses the communicator's scratch float: again and again */
    for (int i = 0; i < 5; i++)
        CHECK_RC(ct_comm_barrier(c, 0));
    /* bucketer over device gradients: one grouped NCCL allreduce per bucket */
    {
        float *gr[2] = {(float *)d, (float *)d2};
        size_t cnt[2] = {N, N};
        ct_bucketer *b = NULL;
        CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice) == cudaSuccess);
        CHECK_RC(ct_bucketer_new(c, gr, cnt, 2, &(ct_bucketer_opts){.first_bucket_bytes = 1}, &b));
        CHECK(ct_bucketer_num_buckets(b) == 2);
        CHECK_RC(ct_bucketer_mark_ready(b, 0));
        CHECK_RC(ct_bucketer_mark_ready(b, 1));
        CHECK_RC(ct_bucketer_finish(b));
        ct_bucketer_destroy(&b);
        CHECK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost) == cudaSuccess);
        CHECK(memcmp(back, h, sizeof h) == 0); /* world size 1: the average is the value */
    }
    /* the bucketer on device gradients (opts.device): gradients written by kernels queued just
     * before mark_ready; finish only makes the compute stream wait for the NCCL stream's done
     * event (the watchdog polls the ops' completion), so the copy queued after it, and the
     * download after that, see the reduced values */
    {
        const ct__backend *bk = ct__backend_of(CT_CUDA);
        CHECK(bk);
        float *g0 = NULL, *g1 = NULL, *o1 = NULL;
        CHECK_RC(bk->alloc((void **)&g0, N * sizeof(float)));
        CHECK_RC(bk->alloc((void **)&g1, N * sizeof(float)));
        CHECK_RC(bk->alloc((void **)&o1, N * sizeof(float)));
        float *gr[2] = {g0, g1};
        size_t cnt[2] = {N, N};
        ct_bucketer *b = NULL;
        CHECK_RC(ct_bucketer_new(
            c, gr, cnt, 2, &(ct_bucketer_opts){.first_bucket_bytes = 1, .device = CT_CUDA}, &b));
        for (int s = 0; s < 3; s++) {
            CHECK_RC(bk->fill(N, (float)(s + 1), g0));
            CHECK_RC(ct_bucketer_mark_ready(b, 0));
            CHECK_RC(bk->fill(N, (float)(s + 2), g1));
            CHECK_RC(ct_bucketer_mark_ready(b, 1));
            CHECK_RC(ct_bucketer_finish(b));
            CHECK_RC(bk->copy(o1, g1, N * sizeof(float)));
            CHECK_RC(bk->download(back, o1, sizeof back));
            for (int i = 0; i < N; i++)
                CHECK(back[i] == (float)(s + 2)); /* world size 1: the average is the value */
        }
        CHECK_RC(ct_bucketer_wait(b));
        ct_bucketer_destroy(&b);
        bk->free(g0);
        bk->free(g1);
        bk->free(o1);
        CHECK_RC(bk->synchronize(NULL));
    }
    ct_comm_abort(c);
    CHECK(ct_comm_allreduce(c, d, N, CT_F32, CT_COMM_SUM, 0) == CT_ECANCELED);
    ct_comm_destroy(&c);
    o.group_id = "nccl-2"; /* rebuilt from a new unique id */
    CHECK_RC(ct_comm_new(&o, &c));
    CHECK_RC(ct_comm_allreduce(c, d, N, CT_F32, CT_COMM_SUM, 0));
    ct_comm_destroy(&c);
    cudaFree(d);
    cudaFree(d2);
    fprintf(stderr, "nccl: ok (world size 1)\n");
    return 0;
}
#endif

int main(void)
{
    if (t_rdv_init() < 0)
        return 1;
    ct_rendezvous *rdv = ct_rendezvous_file_new(t_rdv_dir);
    int rc = 77, ngpu = 0;
#ifdef CT_TEST_HAVE_CUDA
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess)
        ngpu = 0;
    if (ngpu > 0)
        rc = gpu_main(rdv);
#endif
    if (ngpu == 0) {
        /* without CUDA/NCCL built in, or without a device: refused with CT_ENOSYS */
        ct_comm *c = NULL;
        int e = ct_comm_new(&(ct_comm_opts){.rendezvous = rdv,
                                            .group_id = "nccl-cpu",
                                            .rank = 0,
                                            .world_size = 1,
                                            .backend = CT_COMM_NCCL},
                            &c);
        if (e != CT_ENOSYS || c) {
            fprintf(stderr, "no GPU: nccl backend gave %d (%s), want CT_ENOSYS\n", e,
                    ct_last_error());
            rc = 1;
        } else {
            fprintf(stderr, "nccl: no GPU, skipped (CT_ENOSYS checked)\n");
        }
    }
    ct_rendezvous_file_destroy(&rdv);
    t_rdv_cleanup();
    return rc;
}
