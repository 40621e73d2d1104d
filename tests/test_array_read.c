/*
 * Unit tests of reading one capture-array chunk's region (cs_array_read_piece,
 * capstore/array_chunk.h) from stored chunks in memory, through a fetch that
 * counts: a seeded property test against brute force over random geometries,
 * slices and both codecs; a slice that touches one row of a Blosc chunk
 * fetches its last 4 KiB (trailer and table), the prefix and that row's
 * block, nothing else; a corrupt unit the region does not need is never read, one it needs
 * is refused. Replay the property test with CAPSTORE_SEED=<seed>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "capstore/array_chunk.h"

#include "test_prop.h"

typedef struct stored_chunk {
  uint8_t *bytes;
  size_t len;
  uint64_t fetched; /* bytes fetched from it */
  uint64_t fetches;
} stored_chunk;

static int fetch_mem(void *ctx, uint64_t offset, uint64_t length, uint8_t *out, char *msg, size_t msg_size) {
  stored_chunk *c = ctx;
  if (offset + length > c->len) {
    snprintf(msg, msg_size, "fetch past the end");
    return CS_E_IO;
  }
  memcpy(out, c->bytes + offset, length);
  c->fetched += length;
  c->fetches++;
  return CS_E_OK;
}

/* The stored form of chunk `index` of an array whose element i has bytes element(i). */
static void element(uint64_t i, uint32_t item, uint8_t *out) {
  for (uint32_t b = 0; b < item; b++) out[b] = (uint8_t)(b == 0 ? i : b == 1 ? i >> 8 : (i * 7 + b) >> 4);
}

static stored_chunk make_chunk(const cs_array_meta *m, uint64_t index) {
  const cs_array_geometry *g = &m->geometry;
  uint64_t origin[CS_ARRAY_DIMS_MAX], shape[CS_ARRAY_DIMS_MAX];
  assert_int_equal(cs_array_chunk_at(g, index, NULL, origin, shape), CS_E_OK);
  uint64_t n = cs_array_chunk_bytes(g, index), elems = n / g->item_bytes;
  uint8_t *raw = malloc(n);
  assert_non_null(raw);
  for (uint64_t e = 0; e < elems; e++) { /* element e of the chunk (C order) is array element at origin + coords */
    uint64_t rest = e, lin = 0, coords[CS_ARRAY_DIMS_MAX];
    for (uint32_t d = g->dims; d-- > 0;) {
      coords[d] = rest % shape[d];
      rest /= shape[d];
    }
    for (uint32_t d = 0; d < g->dims; d++) lin = lin * g->shape[d] + origin[d] + coords[d];
    element(lin, g->item_bytes, raw + e * g->item_bytes);
  }
  size_t cap = n + 16 + CS_ARRAY_CHUNK_OVERHEAD(CS_ARRAY_UNITS_MAX), payload = n;
  stored_chunk c = {.bytes = malloc(cap)};
  assert_non_null(c.bytes);
  if (m->codec == CS_ARRAY_CODEC_BLOSC)
    assert_int_equal(cs_blosc_encode(raw, n, g->item_bytes, 0, c.bytes, n + 16, &payload, NULL, 0), CS_E_OK);
  else memcpy(c.bytes, raw, n);
  char msg[200] = "";
  if (cs_array_chunk_frame(m->codec, c.bytes, payload, cap, &c.len, msg, sizeof msg) != CS_E_OK) fail_msg("%s", msg);
  free(raw);
  return c;
}

/* Reads a slice through cs_array_read_piece and checks every element against brute force. */
static void read_and_check(const cs_array_meta *m, stored_chunk *chunks, const cs_array_slice *s) {
  const cs_array_geometry *g = &m->geometry;
  uint64_t n = cs_array_slice_elements(g, s);
  uint8_t *out = malloc(n * g->item_bytes + 1);
  PROP_CHECK(out != NULL);
  cs_array_slice_iter it;
  PROP_CHECK(cs_array_slice_begin(&it, g, s) == CS_E_OK);
  cs_array_piece p;
  char msg[200] = "";
  while (cs_array_slice_next(&it, &p)) {
    stored_chunk *c = &chunks[p.chunk_index];
    int rc = cs_array_read_piece(m, s, &p, c->len, fetch_mem, c, out, NULL, msg, sizeof msg);
    if (rc != CS_E_OK) print_error("read_piece: %s\n", msg);
    PROP_CHECK(rc == CS_E_OK);
  }
  uint64_t at[CS_ARRAY_DIMS_MAX], i = 0;
  memcpy(at, s->start, sizeof at);
  while (i < n) {
    uint64_t lin = 0;
    uint8_t want[8];
    for (uint32_t d = 0; d < g->dims; d++) lin = lin * g->shape[d] + at[d];
    element(lin, g->item_bytes, want);
    PROP_CHECK(memcmp(out + i * g->item_bytes, want, g->item_bytes) == 0);
    i++;
    for (uint32_t d = g->dims; d-- > 0;) {
      if (++at[d] < s->stop[d]) break;
      at[d] = s->start[d];
    }
  }
  free(out);
}

static void prop_one(cs_prng *r) {
  static const cs_dtype dtypes[] = {CS_DTYPE_UINT8, CS_DTYPE_BFLOAT16, CS_DTYPE_FLOAT32, CS_DTYPE_INT64};
  cs_array_geometry g = {.dims = 1 + (uint32_t)cs_prng_below(r, 3)};
  for (uint32_t d = 0; d < g.dims; d++) {
    g.shape[d] = 1 + cs_prng_below(r, d == g.dims - 1 ? 300 : 12);
    g.chunk[d] = 1 + cs_prng_below(r, g.shape[d]);
  }
  cs_array_meta m;
  cs_array_codec codec = (cs_array_codec)cs_prng_below(r, 2);
  PROP_CHECK(cs_array_meta_make(&m, "prop", &g, dtypes[cs_prng_below(r, 4)], codec, NULL, NULL, 0) == CS_E_OK);
  uint64_t count = cs_array_chunk_count(&m.geometry);
  if (count > 200) return;
  stored_chunk *chunks = calloc(count, sizeof *chunks);
  PROP_CHECK(chunks != NULL);
  for (uint64_t c = 0; c < count; c++) chunks[c] = make_chunk(&m, c);
  for (int k = 0; k < 4; k++) {
    cs_array_slice s;
    memset(&s, 0, sizeof s);
    for (uint32_t d = 0; d < g.dims; d++) {
      uint64_t a = cs_prng_below(r, g.shape[d]), b = cs_prng_below(r, g.shape[d]);
      s.start[d] = a < b ? a : b;
      s.stop[d] = (a < b ? b : a) + 1;
    }
    read_and_check(&m, chunks, &s);
  }
  for (uint64_t c = 0; c < count; c++) free(chunks[c].bytes);
  free(chunks);
}

static void test_property_against_brute_force(void **state) {
  (void)state;
  prop_run(prop_one, 150, "build/tests/test_array_read");
}

/* The one piece of a slice that lies inside one chunk (asserted: exactly one). */
static cs_array_piece only_piece(const cs_array_meta *m, const cs_array_slice *s) {
  cs_array_slice_iter it;
  cs_array_piece p, after;
  assert_int_equal(cs_array_slice_begin(&it, &m->geometry, s), CS_E_OK);
  assert_true(cs_array_slice_next(&it, &p));
  assert_false(cs_array_slice_next(&it, &after));
  return p;
}

/* A 256 x 1024 float32 array in one Blosc chunk of several blocks: one row fetches one block. */
static void test_one_row_fetches_one_block(void **state) {
  (void)state;
  cs_array_geometry g = {.dims = 2, .shape = {256, 1024}, .chunk = {256, 1024}};
  cs_array_meta m;
  assert_int_equal(cs_array_meta_make(&m, "rows", &g, CS_DTYPE_FLOAT32, CS_ARRAY_CODEC_BLOSC, NULL, NULL, 0), CS_E_OK);
  stored_chunk c = make_chunk(&m, 0);
  cs_blosc_info info;
  assert_int_equal(cs_blosc_info_parse(c.bytes, c.len, &info, NULL, 0), CS_E_OK);
  assert_true(info.blocks >= 4);
  cs_array_slice s = {.start = {100, 0}, .stop = {101, 1024}}; /* one row: 4 KiB of a 1 MiB chunk */
  cs_array_piece p = only_piece(&m, &s);
  uint8_t out[4096];
  cs_array_read_stats st = {0};
  char msg[200] = "";
  assert_int_equal(cs_array_read_piece(&m, &s, &p, c.len, fetch_mem, &c, out, &st, msg, sizeof msg), CS_E_OK);
  assert_int_equal(st.blocks_decoded, 1);
  assert_int_equal(st.fetches, 3); /* the last 4 KiB (trailer and table), the prefix, the block */
  uint64_t block_off, block_len;
  uint64_t row_block = (uint64_t)100 * 4096 / info.block_bytes;
  assert_int_equal(cs_blosc_block_extent(&info, c.bytes, (uint32_t)row_block, &block_off, &block_len, NULL, 0),
                   CS_E_OK);
  assert_true(CS_ARRAY_CHUNK_OVERHEAD(info.blocks + 1) <= 4096);
  assert_int_equal(st.bytes_fetched, 4096 + info.prefix_bytes + block_len);
  assert_true(st.bytes_fetched * 2 < c.len); /* far less than the chunk */
  print_message("one row of a %zu-byte stored chunk (%u blocks): %llu bytes in %llu fetches\n", c.len,
                (unsigned)info.blocks, (unsigned long long)st.bytes_fetched, (unsigned long long)st.fetches);
  /* A corrupt byte in a block the row does not need is never read; one in its block is refused. */
  uint32_t other = row_block == 0 ? 1 : 0;
  uint64_t other_off, other_len;
  cs_blosc_block_extent(&info, c.bytes, other, &other_off, &other_len, NULL, 0);
  c.bytes[other_off + other_len / 2] ^= 0x40;
  assert_int_equal(cs_array_read_piece(&m, &s, &p, c.len, fetch_mem, &c, out, NULL, msg, sizeof msg), CS_E_OK);
  c.bytes[other_off + other_len / 2] ^= 0x40;
  c.bytes[block_off + block_len / 2] ^= 0x40;
  assert_int_equal(cs_array_read_piece(&m, &s, &p, c.len, fetch_mem, &c, out, NULL, msg, sizeof msg), CS_E_CORRUPT);
  assert_non_null(strstr(msg, "CRC-32"));
  c.bytes[block_off + block_len / 2] ^= 0x40;
  /* Stored bytes of another length, or of another geometry, are refused. */
  assert_int_equal(cs_array_read_piece(&m, &s, &p, c.len - 1, fetch_mem, &c, out, NULL, msg, sizeof msg),
                   CS_E_CORRUPT);
  cs_array_geometry g2 = {.dims = 2, .shape = {256, 1024}, .chunk = {128, 1024}};
  cs_array_meta m2;
  assert_int_equal(cs_array_meta_make(&m2, "rows", &g2, CS_DTYPE_FLOAT32, CS_ARRAY_CODEC_BLOSC, NULL, NULL, 0), CS_E_OK);
  p = only_piece(&m2, &s);
  assert_int_equal(cs_array_read_piece(&m2, &s, &p, c.len, fetch_mem, &c, out, NULL, msg, sizeof msg), CS_E_CORRUPT);
  free(c.bytes);
}

/* Raw chunks: one row of a 1 MiB chunk fetches its last 4 KiB (trailer and table) and the 64 KiB unit holding it. */
static void test_raw_row_fetches_one_unit(void **state) {
  (void)state;
  cs_array_geometry g = {.dims = 2, .shape = {256, 1024}, .chunk = {256, 1024}};
  cs_array_meta m;
  assert_int_equal(cs_array_meta_make(&m, "raw", &g, CS_DTYPE_FLOAT32, CS_ARRAY_CODEC_NONE, NULL, NULL, 0), CS_E_OK);
  stored_chunk c = make_chunk(&m, 0);
  cs_array_slice s = {.start = {100, 0}, .stop = {101, 1024}};
  cs_array_piece p = only_piece(&m, &s);
  uint8_t out[4096];
  cs_array_read_stats st = {0};
  assert_int_equal(cs_array_read_piece(&m, &s, &p, c.len, fetch_mem, &c, out, &st, NULL, 0), CS_E_OK);
  assert_int_equal(st.fetches, 2);
  assert_int_equal(st.bytes_fetched, 4096 + CS_ARRAY_UNIT_BYTES);
  /* Rows 15-17 cross from unit 0 into unit 1 (byte 65,536): both units, in one fetch, and every element right. */
  cs_array_slice across = {.start = {15, 0}, .stop = {18, 1024}};
  static uint8_t out3[3 * 4096];
  p = only_piece(&m, &across);
  memset(&st, 0, sizeof st);
  assert_int_equal(cs_array_read_piece(&m, &across, &p, c.len, fetch_mem, &c, out3, &st, NULL, 0), CS_E_OK);
  assert_int_equal(st.fetches, 2);
  assert_int_equal(st.units_verified, 2);
  assert_int_equal(st.bytes_fetched, 4096 + 2 * CS_ARRAY_UNIT_BYTES);
  for (uint64_t i = 0; i < 3 * 1024; i++) {
    uint8_t want[4];
    element(15 * 1024 + i, 4, want);
    assert_memory_equal(out3 + i * 4, want, 4);
  }
  free(c.bytes);
}


static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* A stored chunk with the units a malicious writer chose (ends[0..n)), every CRC valid. */
static stored_chunk forge(const uint8_t *payload, uint32_t len, const uint32_t *ends, uint32_t n) {
  stored_chunk c = {.len = len + CS_ARRAY_CHUNK_OVERHEAD(n)};
  c.bytes = malloc(c.len);
  assert_non_null(c.bytes);
  memcpy(c.bytes, payload, len);
  uint8_t *table = c.bytes + len;
  for (uint32_t k = 0, start = 0; k < n; start = ends[k], k++) {
    put32(table + 8 * k, ends[k]);
    put32(table + 8 * k + 4, cs_crc32(0, payload + start, ends[k] - start));
  }
  put32(table + 8 * n, n);
  put32(table + 8 * n + 4, len);
  put32(table + 8 * n + 8, cs_crc32(0, table, 8u * n));
  memcpy(table + 8 * n + 12, "CSA1", 4);
  return c;
}

static int read_row(const cs_array_meta *m, stored_chunk *c, uint64_t row, char *msg, size_t msg_size) {
  cs_array_slice s = {.start = {row, 0}, .stop = {row + 1, m->geometry.shape[1]}};
  cs_array_piece p = only_piece(m, &s);
  static uint8_t out[1 << 16];
  return cs_array_read_piece(m, &s, &p, c->len, fetch_mem, c, out, NULL, msg, msg_size);
}

/* Stored bytes whose table has valid CRCs but lies: each refused as corrupt, naming what. */
static void test_hostile_tables_refused(void **state) {
  (void)state;
  cs_array_geometry g = {.dims = 2, .shape = {256, 1024}, .chunk = {256, 1024}};
  cs_array_meta m;
  assert_int_equal(cs_array_meta_make(&m, "hostile", &g, CS_DTYPE_FLOAT32, CS_ARRAY_CODEC_BLOSC, NULL, NULL, 0), CS_E_OK);
  stored_chunk good = make_chunk(&m, 0);
  cs_blosc_info info;
  assert_int_equal(cs_blosc_info_parse(good.bytes, good.len, &info, NULL, 0), CS_E_OK);
  static uint32_t ends[CS_BLOSC_BLOCKS_MAX + 1], merged[CS_BLOSC_BLOCKS_MAX + 1], shifted[CS_BLOSC_BLOCKS_MAX + 1],
      short0[CS_BLOSC_BLOCKS_MAX + 2];
  uint32_t n = info.blocks + 1;
  for (uint32_t k = 0; k < n; k++) ends[k] = (uint32_t)(good.bytes[good.len - 16 - 8 * (n - k)] |
                                                        good.bytes[good.len - 16 - 8 * (n - k) + 1] << 8 |
                                                        good.bytes[good.len - 16 - 8 * (n - k) + 2] << 16 |
                                                        (uint32_t)good.bytes[good.len - 16 - 8 * (n - k) + 3] << 24);
  char msg[200];
  /* Blocks 0 and 1 in one unit: a block is not one unit, so it is not decoded from bytes it shares. */

  merged[0] = ends[0];
  for (uint32_t k = 2; k < n; k++) merged[k - 1] = ends[k];
  stored_chunk c = forge(good.bytes, info.cbytes, merged, n - 1);
  assert_int_equal(read_row(&m, &c, 0, msg, sizeof msg), CS_E_CORRUPT);
  free(c.bytes);
  /* Same count, but unit 1 ends inside block 1: not one unit per block. */

  memcpy(shifted, ends, sizeof ends[0] * n);
  shifted[1] = ends[1] + 8;
  c = forge(good.bytes, info.cbytes, shifted, n);
  assert_int_equal(read_row(&m, &c, 0, msg, sizeof msg), CS_E_CORRUPT);
  assert_non_null(strstr(msg, "not one unit"));
  free(c.bytes);
  /* A first unit shorter than the Blosc header. */

  short0[0] = 8;
  memcpy(short0 + 1, ends, sizeof ends[0] * n);
  c = forge(good.bytes, info.cbytes, short0, n + 1);
  assert_int_equal(read_row(&m, &c, 0, msg, sizeof msg), CS_E_CORRUPT);
  assert_non_null(strstr(msg, "Blosc header"));
  free(c.bytes);
  /* A Blosc type size other than the dtype's (2 for float32). */
  size_t raw_len = 256 * 1024 * 4, clen = 0;
  uint8_t *raw = malloc(raw_len), *enc = malloc(raw_len + 16);
  assert_true(raw && enc);
  for (size_t i = 0; i < raw_len; i++) raw[i] = (uint8_t)(i / 300);
  assert_int_equal(cs_blosc_encode(raw, raw_len, 2, 0, enc, raw_len + 16, &clen, NULL, 0), CS_E_OK);
  size_t stored = 0;
  uint8_t *framed = malloc(raw_len + 16 + CS_ARRAY_CHUNK_OVERHEAD(CS_ARRAY_UNITS_MAX));
  assert_non_null(framed);
  memcpy(framed, enc, clen);
  assert_int_equal(cs_array_chunk_frame(CS_ARRAY_CODEC_BLOSC, framed, clen,
                                        raw_len + 16 + CS_ARRAY_CHUNK_OVERHEAD(CS_ARRAY_UNITS_MAX), &stored, NULL, 0),
                   CS_E_OK);
  c = (stored_chunk){.bytes = framed, .len = stored};
  assert_int_equal(read_row(&m, &c, 3, msg, sizeof msg), CS_E_CORRUPT);
  assert_non_null(strstr(msg, "type size"));
  /* Raw: a payload 4 bytes short of the chunk, framed with valid CRCs. */
  cs_array_meta raw_meta;
  assert_int_equal(cs_array_meta_make(&raw_meta, "hostile", &g, CS_DTYPE_FLOAT32, CS_ARRAY_CODEC_NONE, NULL, NULL, 0),
                   CS_E_OK);
  memcpy(framed, raw, raw_len - 4);
  assert_int_equal(cs_array_chunk_frame(CS_ARRAY_CODEC_NONE, framed, raw_len - 4,
                                        raw_len + 16 + CS_ARRAY_CHUNK_OVERHEAD(CS_ARRAY_UNITS_MAX), &stored, NULL, 0),
                   CS_E_OK);
  c = (stored_chunk){.bytes = framed, .len = stored};
  assert_int_equal(read_row(&raw_meta, &c, 3, msg, sizeof msg), CS_E_CORRUPT);
  assert_non_null(strstr(msg, "raw payload"));
  free(framed);
  free(raw);
  free(enc);
  free(good.bytes);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_row_fetches_one_block),
      cmocka_unit_test(test_raw_row_fetches_one_unit),
      cmocka_unit_test(test_hostile_tables_refused),
      cmocka_unit_test(test_property_against_brute_force),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
