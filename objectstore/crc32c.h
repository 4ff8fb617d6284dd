/* objectstore/crc32c.h — CRC-32C (Castagnoli), the checksum of every transferred chunk.
 *
 * Uses the SSE4.2 crc32 instruction (three interleaved streams) when the CPU has it, else a
 * portable slicing-by-8 table version; both give identical results. Not a cryptographic hash:
 * it detects transmission errors, not tampering. All functions are thread-safe. */
#ifndef CT_OBJECTSTORE_CRC32C_H
#define CT_OBJECTSTORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 to start) over len bytes of buf and returns the new value. Standard CRC-32C:
 * ct__crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t ct__crc32c(uint32_t crc, const void *buf, size_t len);

/* Copies len bytes from src to dst (non-overlapping) and returns the CRC-32C of them, extended
 * from crc, in one pass over the data. */
uint32_t ct__crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len);

/* The portable version, always available (for tests that compare the two). */
uint32_t ct__crc32c_sw(uint32_t crc, const void *buf, size_t len);

#endif
