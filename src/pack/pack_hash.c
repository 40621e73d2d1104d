/*
 * CRC-32 from zlib: the format defines its checksums as zlib's CRC-32, and
 * zlib's implementation is the reference, fast (braided, several GB/s) and
 * already everywhere. crc32_z takes a size_t length, so no 4 GiB split.
 */
#include <assert.h>

#include <zlib.h>

#include "pack_internal.h"

uint32_t pk_crc32(uint32_t crc, const uint8_t *bytes, size_t len) {
  assert(bytes != NULL || len == 0);
  if (bytes == NULL) return (uint32_t)crc32_z(crc, Z_NULL, 0);
  uLong out = crc32_z(crc, bytes, len);
  assert(out <= UINT32_MAX);
  return (uint32_t)out;
}
