/* tests/objectstore/test_crc32c.c — CRC-32C: known vectors, hardware == portable for every
 * length and alignment around the 3-stream block size, and the copy variant. */
#include "tests/objectstore/os_test.h"
#include "objectstore/crc32c.h"

int main(void)
{
    unsigned char *buf = malloc(200064), *dst = malloc(200064);
    CHECK(buf && dst);
    CHECK_EQ(ct__crc32c(0, "123456789", 9), 0xE3069283u);
    CHECK_EQ(ct__crc32c_sw(0, "123456789", 9), 0xE3069283u);
    CHECK_EQ(ct__crc32c(0, "", 0), 0);
    /* RFC 3720 B.4: 32 bytes of zeros, of 0xff. */
    memset(buf, 0, 32);
    CHECK_EQ(ct__crc32c(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xff, 32);
    CHECK_EQ(ct__crc32c(0, buf, 32), 0x62A8AB43u);

    os_fill(buf, 200000, 7);
    size_t lens[] = {1, 7, 8, 63, 4096, 24575, 24576, 24577, 49152 + 13, 100000, 199990};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        for (size_t al = 0; al < 9; al++) {
            size_t n = lens[i];
            uint32_t sw = ct__crc32c_sw(0, buf + al, n);
            CHECK_EQ(ct__crc32c(0, buf + al, n), sw);
            memset(dst, 0, n + 16);
            CHECK_EQ(ct__crc32c_copy(0, dst + (8 - al % 8), buf + al, n), sw);
            CHECK(!memcmp(dst + (8 - al % 8), buf + al, n));
            /* Incremental = one shot. */
            size_t h = n / 3;
            CHECK_EQ(ct__crc32c(ct__crc32c(0, buf + al, h), buf + al + h, n - h), sw);
        }
    }
    /* One flipped bit changes the CRC. */
    uint32_t a = ct__crc32c(0, buf, 100000);
    buf[54321] ^= 4;
    CHECK(ct__crc32c(0, buf, 100000) != a);
    free(buf);
    free(dst);
    printf("ok\n");
    return 0;
fail:
    return 1;
}
