/*
 * Capture-array chunks in the Blosc 1 format (capstore/blosc_chunk.h),
 * through Debian's libblosc: the codec is the library's; what is ours is the
 * header and start-table checks a reader needs before it fetches blocks by
 * range, and the decode of one block from exactly the bytes fetched.
 */
#include "capstore/blosc_chunk.h"

#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <blosc.h>

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int corrupt(char *msg, size_t msg_size, const char *what) {
  if (msg != NULL && msg_size > 0) snprintf(msg, msg_size, "not a valid Blosc chunk: %s", what);
  return CS_E_CORRUPT;
}

int cs_blosc_info_parse(const uint8_t *bytes, size_t avail, cs_blosc_info *out, char *msg, size_t msg_size) {
  if (bytes == NULL || out == NULL || avail < CS_BLOSC_HEADER_BYTES) {
    if (msg != NULL && msg_size > 0) snprintf(msg, msg_size, "a Blosc header is 16 bytes; %zu given", avail);
    return CS_E_INVALID_ARGUMENT;
  }
  cs_blosc_info in = {.version = bytes[0], .flags = bytes[2], .type_bytes = bytes[3], .nbytes = le32(bytes + 4),
                      .block_bytes = le32(bytes + 8), .cbytes = le32(bytes + 12)};
  in.memcpyed = (in.flags & BLOSC_MEMCPYED) != 0;
  if (in.version < 1 || in.version > BLOSC_VERSION_FORMAT) return corrupt(msg, msg_size, "unknown format version");
  if (in.type_bytes == 0) return corrupt(msg, msg_size, "type size 0");
  if (in.nbytes > (uint32_t)BLOSC_MAX_BUFFERSIZE) return corrupt(msg, msg_size, "nbytes over Blosc's maximum");
  if (in.nbytes > 0 && in.block_bytes == 0) return corrupt(msg, msg_size, "block size 0");
  if (in.nbytes > 0) {
    in.blocks = in.nbytes / in.block_bytes + (in.nbytes % in.block_bytes != 0);
    if (in.blocks > 1 && in.block_bytes % in.type_bytes != 0)
      return corrupt(msg, msg_size, "block size not a multiple of the type size");
  }
  if (in.blocks > CS_BLOSC_BLOCKS_MAX) return corrupt(msg, msg_size, "more than 65,536 blocks");
  in.prefix_bytes = CS_BLOSC_HEADER_BYTES + (in.memcpyed ? 0 : 4 * in.blocks);
  uint64_t least = in.memcpyed ? (uint64_t)CS_BLOSC_HEADER_BYTES + in.nbytes : in.prefix_bytes;
  if (in.memcpyed && in.cbytes != least) return corrupt(msg, msg_size, "a plain copy's cbytes is not 16 + nbytes");
  if (in.cbytes < least) return corrupt(msg, msg_size, "cbytes smaller than the header and start table");
  assert(in.prefix_bytes >= CS_BLOSC_HEADER_BYTES && in.prefix_bytes <= in.cbytes);
  *out = in;
  return CS_E_OK;
}

int cs_blosc_block_extent(const cs_blosc_info *info, const uint8_t *prefix, uint32_t block, uint64_t *offset,
                          uint64_t *length, char *msg, size_t msg_size) {
  if (info == NULL || prefix == NULL || offset == NULL || length == NULL || block >= info->blocks) {
    if (msg != NULL && msg_size > 0) snprintf(msg, msg_size, "no block %u", (unsigned)block);
    return CS_E_INVALID_ARGUMENT;
  }
  if (info->memcpyed) {
    uint64_t at = (uint64_t)block * info->block_bytes;
    *offset = CS_BLOSC_HEADER_BYTES + at;
    *length = info->nbytes - at < info->block_bytes ? info->nbytes - at : info->block_bytes;
    return CS_E_OK;
  }
  uint64_t start = le32(prefix + CS_BLOSC_HEADER_BYTES + 4u * block), end = info->cbytes;
  if (start < info->prefix_bytes || start >= info->cbytes)
    return corrupt(msg, msg_size, "a block starts inside the start table or past cbytes");
  /* The block ends where the next block (in offset order) starts, or at cbytes. */
  for (uint32_t b = 0; b < info->blocks; b++) {
    uint64_t other = le32(prefix + CS_BLOSC_HEADER_BYTES + 4u * b);
    if (b != block && other == start) return corrupt(msg, msg_size, "two blocks start at the same offset");
    if (other > start && other < end) end = other;
  }
  assert(end > start && end <= info->cbytes);
  *offset = start;
  *length = end - start;
  return CS_E_OK;
}

int cs_blosc_encode(const void *src, size_t len, uint32_t type_bytes, uint32_t block_bytes, void *dst, size_t cap,
                    size_t *out_len, char *msg, size_t msg_size) {
  if (src == NULL || dst == NULL || out_len == NULL || type_bytes == 0 || type_bytes > 255 ||
      len > (size_t)BLOSC_MAX_BUFFERSIZE) {
    if (msg != NULL && msg_size > 0) snprintf(msg, msg_size, "Blosc encode: bad arguments");
    return CS_E_INVALID_ARGUMENT;
  }
  if (block_bytes == 0) block_bytes = CS_BLOSC_BLOCK_BYTES_DEFAULT;
  block_bytes = block_bytes / type_bytes * type_bytes;
  if (block_bytes == 0) block_bytes = type_bytes;
  int n = blosc_compress_ctx(5, BLOSC_SHUFFLE, type_bytes, len, src, dst, cap, "lz4", block_bytes, 1);
  if (n <= 0) {
    if (msg != NULL && msg_size > 0)
      snprintf(msg, msg_size, "Blosc encode: %s", n == 0 ? "the output buffer is too small" : "internal error");
    return n == 0 ? CS_E_NO_MEMORY : CS_E_IO;
  }
  *out_len = (size_t)n;
  return CS_E_OK;
}

int cs_blosc_decode(const void *src, size_t len, void *dst, size_t cap, size_t *out_len, char *msg,
                    size_t msg_size) {
  if (src == NULL || dst == NULL || out_len == NULL) return CS_E_INVALID_ARGUMENT;
  cs_blosc_info info;
  int rc = cs_blosc_info_parse(src, len, &info, msg, msg_size);
  if (rc != CS_E_OK) return rc;
  if (info.cbytes != len) return corrupt(msg, msg_size, "cbytes is not the chunk's size");
  size_t nbytes = 0;
  if (blosc_cbuffer_validate(src, len, &nbytes) != 0) return corrupt(msg, msg_size, "refused by blosc");
  if (nbytes > cap) {
    if (msg != NULL && msg_size > 0) snprintf(msg, msg_size, "Blosc decode: %zu bytes do not fit %zu", nbytes, cap);
    return CS_E_NO_MEMORY;
  }
  int n = blosc_decompress_ctx(src, dst, cap, 1);
  if (n < 0 || (size_t)n != nbytes) return corrupt(msg, msg_size, "the blocks do not decompress");
  *out_len = (size_t)n;
  return CS_E_OK;
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int cs_blosc_decode_block(const cs_blosc_info *info, const uint8_t *prefix, uint32_t block, const uint8_t *extent,
                          size_t extent_len, uint8_t *out, size_t cap, size_t *got, char *msg, size_t msg_size) {
  if (info == NULL || prefix == NULL || extent == NULL || out == NULL || got == NULL || block >= info->blocks)
    return CS_E_INVALID_ARGUMENT;
  uint64_t at = (uint64_t)block * info->block_bytes;
  uint64_t size = info->nbytes - at < info->block_bytes ? info->nbytes - at : info->block_bytes;
  if (size > cap) return CS_E_NO_MEMORY;
  if (info->memcpyed) { /* a plain copy: the extent is the block's bytes */
    if (extent_len != size) return corrupt(msg, msg_size, "a plain copy's block is not its size");
    memcpy(out, extent, size);
    *got = size;
    return CS_E_OK;
  }
  if (size % info->type_bytes != 0 || at % info->type_bytes != 0) {
    if (msg != NULL && msg_size > 0)
      snprintf(msg, msg_size, "block %u is not whole items: decode the chunk whole", (unsigned)block);
    return CS_E_UNSUPPORTED;
  }
  uint64_t one = (uint64_t)info->prefix_bytes + extent_len;
  if (extent_len == 0 || one > info->cbytes) return corrupt(msg, msg_size, "a block extent past cbytes");
  uint8_t *buffer = malloc(one);
  if (buffer == NULL) return CS_E_NO_MEMORY;
  /* The header and start table as fetched, this block right after them, cbytes the buffer's size. */
  memcpy(buffer, prefix, info->prefix_bytes);
  put32(buffer + 12, (uint32_t)one);
  put32(buffer + CS_BLOSC_HEADER_BYTES + 4u * block, info->prefix_bytes);
  memcpy(buffer + info->prefix_bytes, extent, extent_len);
  assert(at / info->type_bytes <= INT_MAX && size / info->type_bytes <= INT_MAX);
  int n = blosc_getitem(buffer, (int)(at / info->type_bytes), (int)(size / info->type_bytes), out);
  free(buffer);
  if (n < 0 || (uint64_t)n != size) return corrupt(msg, msg_size, "a block does not decompress");
  *got = (size_t)n;
  return CS_E_OK;
}
