/* objectstore/crc32c.c — CRC-32C: SSE4.2 hardware (three interleaved streams) and slicing-by-8.
 *
 * The crc32 instruction has a latency of three cycles and a throughput of one, so one stream
 * runs at a third of the possible speed. The hardware path splits each 3*LONG-byte block into
 * three streams, runs them together, then merges the streams' CRCs with a precomputed "append
 * LONG zero bytes" operator (a linear map on the 32-bit state, stored as 4 x 256 tables), as in
 * Mark Adler's crc32c.c. Not a cryptographic hash. */
#include "objectstore/crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82f63b78u /* CRC-32C, reflected */
#define LONG 8192        /* bytes per stream per block in the hardware path */

static uint32_t sw_table[8][256];
static uint32_t long_shift[4][256]; /* state -> state after LONG zero bytes */
static int have_hw;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* A linear map on the 32-bit CRC state, as its images of the 32 unit vectors. */
typedef struct {
    uint32_t col[32];
} gf2_op;

static uint32_t op_apply(const gf2_op *op, uint32_t v)
{
    uint32_t r = 0;
    for (int i = 0; v; i++, v >>= 1)
        if (v & 1)
            r ^= op->col[i];
    return r;
}

static gf2_op op_compose(const gf2_op *a, const gf2_op *b) /* a after b */
{
    gf2_op r;
    for (int i = 0; i < 32; i++)
        r.col[i] = op_apply(a, b->col[i]);
    return r;
}

static void init_tables(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        sw_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            sw_table[k][n] = (sw_table[k - 1][n] >> 8) ^ sw_table[0][sw_table[k - 1][n] & 0xff];

    /* One zero bit, then square up to one byte, then raise to LONG bytes. */
    gf2_op bit, byte, acc, sq;
    for (int i = 0; i < 32; i++) {
        uint32_t v = 1u << i;
        bit.col[i] = v & 1 ? (v >> 1) ^ POLY : v >> 1;
    }
    byte = bit;
    for (int k = 1; k < 8; k++)
        byte = op_compose(&bit, &byte);
    int have_acc = 0;
    sq = byte;
    for (unsigned n = LONG; n; n >>= 1) {
        if (n & 1) {
            acc = have_acc ? op_compose(&sq, &acc) : sq;
            have_acc = 1;
        }
        sq = op_compose(&sq, &sq);
    }
    for (int k = 0; k < 4; k++)
        for (uint32_t v = 0; v < 256; v++)
            long_shift[k][v] = op_apply(&acc, v << (8 * k));
#if defined(__x86_64__)
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static inline uint32_t shift_long(uint32_t c)
{
    return long_shift[0][c & 0xff] ^ long_shift[1][(c >> 8) & 0xff] ^
           long_shift[2][(c >> 16) & 0xff] ^ long_shift[3][c >> 24];
}

static uint32_t sw_raw(uint32_t c, const unsigned char *p, size_t len)
{
    while (len && ((uintptr_t)p & 7)) {
        c = sw_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        len--;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c;
        c = sw_table[7][w & 0xff] ^ sw_table[6][(w >> 8) & 0xff] ^ sw_table[5][(w >> 16) & 0xff] ^
            sw_table[4][(w >> 24) & 0xff] ^ sw_table[3][(w >> 32) & 0xff] ^
            sw_table[2][(w >> 40) & 0xff] ^ sw_table[1][(w >> 48) & 0xff] ^ sw_table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        c = sw_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

uint32_t ct__crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&init_once, init_tables);
    return ~sw_raw(~crc, buf, len);
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t hw_raw(uint32_t c32, unsigned char *dst,
                                                         const unsigned char *p, size_t len)
{
    uint64_t c = c32;
    while (len && ((uintptr_t)p & 7)) {
        if (dst)
            *dst++ = *p;
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        len--;
    }
    while (len >= 3 * LONG) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *end = p + LONG;
        if (dst) {
            do {
                uint64_t a, b, d;
                memcpy(&a, p, 8);
                memcpy(&b, p + LONG, 8);
                memcpy(&d, p + 2 * LONG, 8);
                memcpy(dst, &a, 8);
                memcpy(dst + LONG, &b, 8);
                memcpy(dst + 2 * LONG, &d, 8);
                c = __builtin_ia32_crc32di(c, a);
                c1 = __builtin_ia32_crc32di(c1, b);
                c2 = __builtin_ia32_crc32di(c2, d);
                p += 8;
                dst += 8;
            } while (p < end);
            dst += 2 * LONG;
        } else {
            do {
                uint64_t a, b, d;
                memcpy(&a, p, 8);
                memcpy(&b, p + LONG, 8);
                memcpy(&d, p + 2 * LONG, 8);
                c = __builtin_ia32_crc32di(c, a);
                c1 = __builtin_ia32_crc32di(c1, b);
                c2 = __builtin_ia32_crc32di(c2, d);
                p += 8;
            } while (p < end);
        }
        c = shift_long((uint32_t)c) ^ c1;
        c = shift_long((uint32_t)c) ^ c2;
        p += 2 * LONG;
        len -= 3 * LONG;
    }
    while (len >= 8) {
        uint64_t a;
        memcpy(&a, p, 8);
        if (dst) {
            memcpy(dst, &a, 8);
            dst += 8;
        }
        c = __builtin_ia32_crc32di(c, a);
        p += 8;
        len -= 8;
    }
    while (len--) {
        if (dst)
            *dst++ = *p;
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    }
    return (uint32_t)c;
}
#endif

uint32_t ct__crc32c(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&init_once, init_tables);
#if defined(__x86_64__)
    if (have_hw)
        return ~hw_raw(~crc, NULL, buf, len);
#endif
    return ~sw_raw(~crc, buf, len);
}

uint32_t ct__crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len)
{
    pthread_once(&init_once, init_tables);
#if defined(__x86_64__)
    if (have_hw)
        return ~hw_raw(~crc, dst, src, len);
#endif
    memcpy(dst, src, len);
    return ~sw_raw(~crc, dst, len);
}
