/* tests/cudaemu/test_mma.c — the emulated mma.sync m16n8k16 (trainer/cuda/mma.cuh) against a
 * plain matrix product: A (16, 16) and B (16, 8) of bf16 (then f16) values, distinct in every
 * position, loaded into fragments by the PTX ISA's layout (mma_kernels.cu), D = A B + C. The
 * products are exact and both sides add k = 0..15 onto C in order, so D must match bit for bit;
 * a fragment register or lane out of place moves values and fails. Also: A and B that are not
 * bf16 values are rounded to nearest even on packing, as cvt.rn.bf16x2.f32 does. */
#include <stdio.h>
#include <string.h>

#include "trainer/backend/lowp.h"

int emu_mma(int f16, const float *A, const float *B, const float *C, float *D);

static int failures;

/* D = A B + C, k in order, in f32 */
static void matmul(const float *A, const float *B, const float *C, float *D)
{
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            float s = C[i * 8 + j];
            for (int k = 0; k < 16; k++)
                s += A[i * 16 + k] * B[k * 8 + j];
            D[i * 8 + j] = s;
        }
}

static void check(const char *what, int f16, const float *A, const float *B, const float *C)
{
    float D[128], want[128], Ar[256], Br[128];
    for (int i = 0; i < 256; i++)
        Ar[i] = f16 ? ct__round_f16(A[i]) : ct__round_bf16(A[i]);
    for (int i = 0; i < 128; i++)
        Br[i] = f16 ? ct__round_f16(B[i]) : ct__round_bf16(B[i]);
    memset(D, 0, sizeof D);
    int rc = emu_mma(f16, A, B, C, D);
    if (rc) {
        fprintf(stderr, "%s: launch failed: %d\n", what, rc);
        failures++;
        return;
    }
    matmul(Ar, Br, C, want);
    for (int i = 0; i < 128; i++)
        if (memcmp(&D[i], &want[i], sizeof(float))) {
            fprintf(stderr, "%s: D[%d][%d] = %.9g, want %.9g\n", what, i / 8, i % 8, D[i], want[i]);
            failures++;
            return;
        }
    printf("%s: D = A B + C in all 128 places\n", what);
}

int main(void)
{
    float A[256], B[128], C[128];
    /* distinct small values, exact in bf16 and f16: a misplaced one changes D */
    for (int i = 0; i < 256; i++)
        A[i] = (float)((i * 37) % 251 - 125) / 64.0f;
    for (int i = 0; i < 128; i++) {
        B[i] = (float)((i * 53) % 127 - 63) / 32.0f;
        C[i] = (float)(i % 11) - 5.0f;
    }
    check("bf16", 0, A, B, C);
    check("f16", 1, A, B, C);
    /* values that need rounding: A and B with low bits set */
    for (int i = 0; i < 256; i++)
        A[i] = A[i] * 1.00390625f + 1e-3f * (float)(i % 7);
    for (int i = 0; i < 128; i++)
        B[i] = B[i] * 0.99609375f - 1e-3f * (float)(i % 5);
    check("bf16 rounded", 0, A, B, C);
    check("f16 rounded", 1, A, B, C);
    if (failures)
        fprintf(stderr, "cudaemu_mma: %d failures\n", failures);
    return failures ? 1 : 0;
}
