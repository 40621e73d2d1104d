/*
 * CRC-32 as the format defines it: zlib's CRC-32 (the reflected IEEE
 * polynomial, as in gzip). Intel ISA-L's crc32_gzip_refl computes the same
 * function with PCLMULQDQ / VPCLMULQDQ folding (tens of GB/s against zlib's
 * few); zlib's crc32_z is the reference and the fallback when the build did
 * not find ISA-L (tests/pack.cmake defines CAPSTORE_HAVE_ISAL). Both take a
 * running value the same way: the CRC so far, 0 to start.
 * tests/test_pack_crc.c checks that the two agree on random data, lengths
 * and split points.
 */
#include <assert.h>

#include <zlib.h>
#if CAPSTORE_HAVE_ISAL
#include <isa-l/crc.h>
#endif

#include "pack_internal.h"

uint32_t pk_crc32_zlib(uint32_t crc, const uint8_t *bytes, size_t len) {
  assert(bytes != NULL || len == 0);
  if (bytes == NULL) return (uint32_t)crc32_z(crc, Z_NULL, 0);
  uLong out = crc32_z(crc, bytes, len);
  assert(out <= UINT32_MAX);
  return (uint32_t)out;
}

#if CAPSTORE_HAVE_ISAL
uint32_t pk_crc32(uint32_t crc, const uint8_t *bytes, size_t len) {
  assert(bytes != NULL || len == 0);
  if (len == 0) return crc;
  return crc32_gzip_refl(crc, bytes, (uint64_t)len);
}

bool pk_crc32_accelerated(void) { return true; }
#else
uint32_t pk_crc32(uint32_t crc, const uint8_t *bytes, size_t len) {
  return pk_crc32_zlib(crc, bytes, len);
}

bool pk_crc32_accelerated(void) { return false; }
#endif

uint32_t cs_crc32(uint32_t crc, const void *bytes, size_t len) { return pk_crc32(crc, bytes, len); }
