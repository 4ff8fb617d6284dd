/* trainer/cuda/mma.cuh — the tensor cores' warp-wide matrix multiply-add, mma.sync m16n8k16 with
 * bf16 or f16 operands and f32 accumulators, for ct's kernels (flash_attention.cu). Under nvcc it
 * is the PTX instruction; under the CUDA emulator (CT_EMU_DEVICE_CODE) a warp-wide instruction of
 * the emulator's (ct_emu::warp_compute) that gathers the 32 lanes' fragments by the layout of the
 * PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type") and computes
 * D = A B + C for the warp at once: so the emulator checks that a kernel puts every value where
 * the hardware reads it.
 *
 * Shapes: A (16, 16) row-major, B (16, 8) "col" (stored as B^T: a column's 16 values side by
 * side), C and D (16, 8). With g = lane / 4 (groupID) and t = lane % 4 (threadID_in_group), each
 * lane holds
 *   a[0] = A[g][2t, 2t+1]      a[1] = A[g+8][2t, 2t+1]
 *   a[2] = A[g][2t+8, 2t+9]    a[3] = A[g+8][2t+8, 2t+9]   (two 16-bit values a register,
 *   b[0] = B[2t, 2t+1][g]      b[1] = B[2t+8, 2t+9][g]      the lower column / row in the low half)
 *   c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]   (f32).
 * The emulation multiplies exactly (a product of two bf16 or f16 values is exact in f32) and adds
 * in one fixed order, k from 0 to 15 onto C; the hardware's order of additions is not specified,
 * so a kernel's results may differ from a GPU's in the last bits of f32, never in which values
 * meet. Not here: ldmatrix (kernels build fragments with plain loads), other shapes, tf32. */
#ifndef CT_CUDA_MMA_CUH
#define CT_CUDA_MMA_CUH

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

/* f rounded to bf16 (to nearest, ties to even), its 16 bits */
static __device__ inline uint32_t ct__bf16_bits(float f)
{
#ifdef CT_EMU_DEVICE_CODE
    return __float2bfloat16_rn(f).bits;
#else
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#endif
}

/* lo and hi rounded to bf16, in one register (lo in the low half) */
static __device__ inline uint32_t ct__pack_bf16(float lo, float hi)
{
    return ct__bf16_bits(lo) | ct__bf16_bits(hi) << 16;
}

/* the f32 value of the bf16 in the low 16 bits of bits */
static __device__ inline float ct__bf16_float(uint32_t bits)
{
    return __uint_as_float(bits << 16);
}

/* f rounded to f16, its 16 bits; and its f32 value back */
static __device__ inline uint32_t ct__f16_bits(float f)
{
#ifdef CT_EMU_DEVICE_CODE
    __half h = __float2half_rn(f);
    uint16_t u;
    memcpy(&u, &h, sizeof u);
    return u;
#else
    return __half_as_ushort(__float2half_rn(f));
#endif
}

/* lo and hi rounded to f16, in one register (lo in the low half) */
static __device__ inline uint32_t ct__pack_f16(float lo, float hi)
{
    return ct__f16_bits(lo) | ct__f16_bits(hi) << 16;
}

#ifdef CT_EMU_DEVICE_CODE
static inline float ct__f16_float(uint32_t bits)
{
    uint16_t u = (uint16_t)bits;
    __half h;
    memcpy(&h, &u, sizeof h);
    return __half2float(h);
}

namespace ct_emu_mma
{
/* one lane's operands, as it gives them to the warp-wide instruction */
struct lane_in {
    uint32_t a[4], b[2];
    float c[4];
};

/* D = A B + C for the whole warp from the 32 lanes' fragments (the layout in the file comment);
 * to_f: a 16-bit operand's value */
template <float (*to_f)(uint32_t)> static void mma_m16n8k16(void *const in[32], void *const out[32])
{
    float A[16][16], B[16][8], C[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const lane_in *x = (const lane_in *)in[lane];
        int g = lane >> 2, t = lane & 3;
        for (int e = 0; e < 2; e++) {
            int sh = 16 * e;
            A[g][2 * t + e] = to_f(x->a[0] >> sh & 0xffffu);
            A[g + 8][2 * t + e] = to_f(x->a[1] >> sh & 0xffffu);
            A[g][2 * t + 8 + e] = to_f(x->a[2] >> sh & 0xffffu);
            A[g + 8][2 * t + 8 + e] = to_f(x->a[3] >> sh & 0xffffu);
            B[2 * t + e][g] = to_f(x->b[0] >> sh & 0xffffu);
            B[2 * t + 8 + e][g] = to_f(x->b[1] >> sh & 0xffffu);
            C[g][2 * t + e] = x->c[e];
            C[g + 8][2 * t + e] = x->c[2 + e];
        }
    }
    for (int lane = 0; lane < 32; lane++) {
        float *d = (float *)out[lane];
        int g = lane >> 2, t = lane & 3;
        for (int r = 0; r < 4; r++) {
            int row = g + 8 * (r >> 1), col = 2 * t + (r & 1);
            float s = C[row][col];
            for (int k = 0; k < 16; k++)
                s += A[row][k] * B[k][col]; /* the product is exact: no rounding but the add's */
            d[r] = s;
        }
    }
}
} // namespace ct_emu_mma
#endif

/* d (+)= A B: d is c on entry (the lane's four accumulators), a and b the lane's fragments of bf16
 * pairs. Every lane of the warp calls it together (mma.sync.aligned). */
static __device__ inline void ct__mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2])
{
#ifdef CT_EMU_DEVICE_CODE
    ct_emu_mma::lane_in x = {{a[0], a[1], a[2], a[3]}, {b[0], b[1]}, {d[0], d[1], d[2], d[3]}};
    ct_emu::warp_compute(0xffffffffu, &x, d, ct_emu_mma::mma_m16n8k16<ct__bf16_float>);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* the same with f16 operands */
static __device__ inline void ct__mma_f16(float d[4], const uint32_t a[4], const uint32_t b[2])
{
#ifdef CT_EMU_DEVICE_CODE
    ct_emu_mma::lane_in x = {{a[0], a[1], a[2], a[3]}, {b[0], b[1]}, {d[0], d[1], d[2], d[3]}};
    ct_emu::warp_compute(0xffffffffu, &x, d, ct_emu_mma::mma_m16n8k16<ct__f16_float>);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

#endif
