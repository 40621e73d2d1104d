/*
 * fuzz/fuzz_blosc.c: libFuzzer target for the Blosc chunk parsers
 * (capstore/blosc_chunk.h): the header and the start table a reader fetches
 * by range before it fetches blocks.
 *
 * Every input is a chunk as a store might return it. The parsers must keep
 * their contract:
 *   - cs_blosc_info_parse answers CS_E_OK, CS_E_CORRUPT (with a message) or,
 *     under 16 bytes, CS_E_INVALID_ARGUMENT;
 *   - a parsed header's prefix lies within cbytes, its block count matches
 *     nbytes and the block size, and is within CS_BLOSC_BLOCKS_MAX;
 *   - with the whole prefix present, every block's extent either is refused
 *     as corrupt or lies after the prefix and within cbytes, and the extents
 *     of distinct blocks never overlap.
 * The codec itself (libblosc) runs only on what the reader verified against
 * its checksum (docs/arrays.md, "Objects and records"), and a single block
 * only in a buffer of exactly the bytes fetched (cs_blosc_decode_block), so
 * it is not fuzzed here.
 *
 * Replay one input: ./build-fuzz/fuzz/fuzz_blosc path/to/input
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capstore/blosc_chunk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "fuzz_blosc: invariant broken at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                                   \
    }                                                                                            \
  } while (0)

enum { EXTENTS_CHECKED = 256 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cs_blosc_info info;
  char msg[200] = "";
  int rc = cs_blosc_info_parse(data, size, &info, msg, sizeof msg);
  if (size < CS_BLOSC_HEADER_BYTES) {
    CHECK(rc == CS_E_INVALID_ARGUMENT);
    return 0;
  }
  CHECK(rc == CS_E_OK || rc == CS_E_CORRUPT);
  if (rc != CS_E_OK) {
    CHECK(strncmp(msg, "not a valid Blosc chunk: ", 25) == 0 && msg[25] != '\0');
    return 0;
  }
  CHECK(info.prefix_bytes >= CS_BLOSC_HEADER_BYTES && info.prefix_bytes <= info.cbytes);
  CHECK(info.blocks <= CS_BLOSC_BLOCKS_MAX);
  CHECK(info.nbytes == 0 ? info.blocks == 0
                         : (uint64_t)(info.blocks - 1) * info.block_bytes < info.nbytes &&
                               (uint64_t)info.blocks * info.block_bytes >= info.nbytes);
  if (size < info.prefix_bytes) return 0;
  static uint64_t starts[EXTENTS_CHECKED], ends[EXTENTS_CHECKED];
  uint32_t checked = 0;
  for (uint32_t b = 0; b < info.blocks && checked < EXTENTS_CHECKED; b++) {
    uint64_t offset = 0, length = 0;
    rc = cs_blosc_block_extent(&info, data, b, &offset, &length, msg, sizeof msg);
    CHECK(rc == CS_E_OK || rc == CS_E_CORRUPT);
    if (rc != CS_E_OK) continue;
    CHECK(length > 0 && offset >= (info.memcpyed ? CS_BLOSC_HEADER_BYTES : info.prefix_bytes));
    CHECK(offset + length <= info.cbytes);
    for (uint32_t k = 0; k < checked; k++) CHECK(offset + length <= starts[k] || offset >= ends[k]);
    starts[checked] = offset;
    ends[checked] = offset + length;
    checked++;
  }
  uint64_t offset, length;
  CHECK(cs_blosc_block_extent(&info, data, info.blocks, &offset, &length, NULL, 0) == CS_E_INVALID_ARGUMENT);
  return 0;
}
