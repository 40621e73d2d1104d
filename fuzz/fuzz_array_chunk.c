/*
 * fuzz/fuzz_array_chunk.c: libFuzzer target for the stored form of a
 * capture-array chunk (capstore/array_chunk.h): the trailer and unit table a
 * reader fetches from the end of a chunk before it fetches units by range.
 *
 * Every input is the stored bytes of one chunk write. The parsers must keep
 * their contract:
 *   - cs_array_chunk_tail_parse answers CS_E_OK or CS_E_CORRUPT (with a
 *     message); a parsed tail adds up to the input's length;
 *   - a table that cs_array_chunk_table_check accepts tiles the payload: the
 *     units are in order, none empty, the last ending the payload, and
 *     cs_array_chunk_unit_of finds for every probed byte the unit holding it;
 *   - framing the parsed payload again (codec none) gives a table that
 *     verifies every unit of it;
 *   - the input read as a stored chunk of a small float32 array, Blosc and
 *     raw, through cs_array_read_piece (a reader's region read, its fetches
 *     from the input's bytes): CS_E_OK or CS_E_CORRUPT, every fetch inside
 *     the input, never a read of an unfetched byte (ASan).
 *
 * Replay one input: ./build-fuzz/fuzz/fuzz_array_chunk path/to/input
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capstore/array_chunk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                    \
  do {                                                                                                 \
    if (!(cond)) {                                                                                     \
      fprintf(stderr, "fuzz_array_chunk: invariant broken at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                                         \
    }                                                                                                  \
  } while (0)

typedef struct fetch_ctx {
  const uint8_t *data;
  size_t size;
} fetch_ctx;

static int fetch_input(void *ctx, uint64_t offset, uint64_t length, uint8_t *out, char *msg, size_t msg_size) {
  const fetch_ctx *f = ctx;
  (void)msg, (void)msg_size;
  CHECK(offset <= f->size && length <= f->size - offset);
  memcpy(out, f->data + offset, (size_t)length);
  return CS_E_OK;
}

/* The input as chunk 0 of a 64 x 1024 float32 array in one chunk: a region of rows, read as a reader does. */
static void region_read(const uint8_t *data, size_t size, cs_array_codec codec) {
  cs_array_geometry g = {.dims = 2, .shape = {64, 1024}, .chunk = {64, 1024}};
  cs_array_meta m;
  CHECK(cs_array_meta_make(&m, "fuzz", &g, CS_DTYPE_FLOAT32, codec, NULL, NULL, 0) == CS_E_OK);
  uint32_t row = size > 0 ? data[0] % 64 : 0;
  cs_array_slice s = {.start = {row, 0}, .stop = {row + 1 + (size > 1 ? data[1] % (64 - row) : 0), 1024}};
  cs_array_slice_iter it;
  CHECK(cs_array_slice_begin(&it, &m.geometry, &s) == CS_E_OK);
  cs_array_piece p;
  CHECK(cs_array_slice_next(&it, &p));
  size_t out_len = (size_t)cs_array_slice_elements(&m.geometry, &s) * 4;
  uint8_t *out = malloc(out_len);
  CHECK(out != NULL);
  fetch_ctx f = {data, size};
  char msg[200] = "";
  int rc = cs_array_read_piece(&m, &s, &p, size, fetch_input, &f, out, NULL, msg, sizeof msg);
  CHECK(rc == CS_E_OK || rc == CS_E_CORRUPT || rc == CS_E_NO_MEMORY);
  if (rc == CS_E_CORRUPT) CHECK(msg[0] != '\0');
  free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < CS_ARRAY_CHUNK_TRAILER_BYTES) return 0;
  region_read(data, size, CS_ARRAY_CODEC_BLOSC);
  region_read(data, size, CS_ARRAY_CODEC_NONE);
  cs_array_chunk_tail tail;
  char msg[200] = "";
  int rc = cs_array_chunk_tail_parse(data + size - CS_ARRAY_CHUNK_TRAILER_BYTES, size, &tail, msg, sizeof msg);
  CHECK(rc == CS_E_OK || rc == CS_E_CORRUPT);
  if (rc != CS_E_OK) {
    CHECK(strncmp(msg, "not a valid array chunk: ", 25) == 0);
    return 0;
  }
  CHECK(tail.table_offset + tail.tail_bytes == size && tail.units <= CS_ARRAY_UNITS_MAX);
  const uint8_t *table = data + tail.table_offset;
  rc = cs_array_chunk_table_check(&tail, table, msg, sizeof msg);
  CHECK(rc == CS_E_OK || rc == CS_E_CORRUPT);
  if (rc != CS_E_OK) return 0;
  uint64_t next = 0;
  for (uint32_t k = 0; k < tail.units; k++) {
    uint64_t offset, length;
    cs_array_chunk_unit(table, k, &offset, &length, NULL);
    CHECK(offset == next && length > 0);
    next = offset + length;
    CHECK(cs_array_chunk_unit_of(&tail, table, offset) == k);
    CHECK(cs_array_chunk_unit_of(&tail, table, offset + length - 1) == k);
    (void)cs_array_chunk_unit_verify(table, k, data + offset, length, NULL, 0);
  }
  CHECK(next == tail.payload_bytes);
  CHECK(cs_array_chunk_unit_of(&tail, table, tail.payload_bytes) == tail.units);
  /* Framing the payload again: every unit of the new table verifies. */
  size_t cap = tail.payload_bytes + CS_ARRAY_CHUNK_OVERHEAD(tail.payload_bytes / CS_ARRAY_UNIT_BYTES + 1);
  uint8_t *again = malloc(cap + 1);
  CHECK(again != NULL);
  memcpy(again, data, tail.payload_bytes);
  size_t stored = 0;
  CHECK(cs_array_chunk_frame(CS_ARRAY_CODEC_NONE, again, tail.payload_bytes, cap, &stored, NULL, 0) == CS_E_OK);
  cs_array_chunk_tail t2;
  CHECK(cs_array_chunk_tail_parse(again + stored - 16, stored, &t2, NULL, 0) == CS_E_OK);
  CHECK(cs_array_chunk_table_check(&t2, again + t2.table_offset, NULL, 0) == CS_E_OK);
  for (uint32_t k = 0; k < t2.units; k++) {
    uint64_t offset, length;
    cs_array_chunk_unit(again + t2.table_offset, k, &offset, &length, NULL);
    CHECK(cs_array_chunk_unit_verify(again + t2.table_offset, k, again + offset, length, NULL, 0) == CS_E_OK);
  }
  free(again);
  return 0;
}
