/*
 * Unit tests of a capture-array chunk's stored form (capstore/array_chunk.h):
 * raw and Blosc payloads framed and parsed back, every unit verified alone,
 * the unit holding any byte found, and each corruption (payload, table,
 * trailer, length) refused and named.
 *
 * With CAPSTORE_BLOSC_OUT=DIR it writes its framed Blosc chunks there
 * (NAME.stored, NAME.raw) for tests/blosc_python_check.py: python3-blosc must
 * decode the stored bytes' first cbytes alone.
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

static void fill(uint8_t *p, size_t len, uint32_t seed) {
  for (size_t i = 0; i < len; i++) p[i] = (uint8_t)(i / 50 + seed + ((i * 2654435761u) >> 29));
}

/* Frames, parses the tail and table back, verifies every unit and finds the unit of every 997th byte. */
static void round_trip(cs_array_codec codec, uint8_t *buf, size_t payload, size_t cap, uint32_t expect_units) {
  size_t stored = 0;
  char msg[200] = "";
  assert_int_equal(cs_array_chunk_frame(codec, buf, payload, cap, &stored, msg, sizeof msg), CS_E_OK);
  assert_int_equal(stored, payload + CS_ARRAY_CHUNK_OVERHEAD(expect_units));
  cs_array_chunk_tail tail;
  assert_int_equal(cs_array_chunk_tail_parse(buf + stored - 16, stored, &tail, msg, sizeof msg), CS_E_OK);
  assert_int_equal(tail.units, expect_units);
  assert_int_equal(tail.payload_bytes, payload);
  assert_int_equal(tail.table_offset + tail.tail_bytes, stored);
  const uint8_t *table = buf + tail.table_offset;
  assert_int_equal(cs_array_chunk_table_check(&tail, table, msg, sizeof msg), CS_E_OK);
  uint64_t next = 0;
  for (uint32_t k = 0; k < tail.units; k++) {
    uint64_t offset, length;
    cs_array_chunk_unit(table, k, &offset, &length, NULL);
    assert_int_equal(offset, next); /* the units tile the payload */
    next = offset + length;
    uint8_t *copy = malloc(length); /* each unit verified from a buffer of its own, as fetched */
    assert_non_null(copy);
    memcpy(copy, buf + offset, length);
    assert_int_equal(cs_array_chunk_unit_verify(table, k, copy, length, msg, sizeof msg), CS_E_OK);
    copy[length / 2] ^= 0x10;
    assert_int_equal(cs_array_chunk_unit_verify(table, k, copy, length, msg, sizeof msg), CS_E_CORRUPT);
    free(copy);
  }
  assert_int_equal(next, payload);
  for (uint64_t at = 0; at < payload; at += 997) {
    uint32_t k = cs_array_chunk_unit_of(&tail, table, at);
    uint64_t offset, length;
    cs_array_chunk_unit(table, k, &offset, &length, NULL);
    assert_true(offset <= at && at < offset + length);
  }
  assert_int_equal(cs_array_chunk_unit_of(&tail, table, payload), tail.units);
}

static void test_raw_payloads(void **state) {
  (void)state;
  const size_t sizes[] = {0, 1, 65535, 65536, 65537, (1u << 20) + 3};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i], cap = n + 4096;
    uint8_t *buf = malloc(cap);
    assert_non_null(buf);
    fill(buf, n, (uint32_t)i);
    round_trip(CS_ARRAY_CODEC_NONE, buf, n, cap, (uint32_t)((n + 65535) / 65536));
    free(buf);
  }
}

static void test_blosc_payloads(void **state) {
  (void)state;
  size_t raw_len = (size_t)3 << 20;
  uint8_t *raw = malloc(raw_len);
  assert_non_null(raw);
  fill(raw, raw_len, 7);
  for (int noise = 0; noise <= 1; noise++) {
    uint32_t x = 2463534242u;
    if (noise) { /* incompressible: Blosc stores a plain copy */
      for (size_t i = 0; i < raw_len; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        raw[i] = (uint8_t)(x >> 7);
      }
    }
    size_t cap = raw_len + 16 + 8192, clen = 0;
    uint8_t *buf = malloc(cap);
    assert_non_null(buf);
    /* The encoder gets no room past the plain copy, so incompressible data becomes one. */
    assert_int_equal(cs_blosc_encode(raw, raw_len, 4, 0, buf, raw_len + 16, &clen, NULL, 0), CS_E_OK);
    cs_blosc_info info;
    assert_int_equal(cs_blosc_info_parse(buf, clen, &info, NULL, 0), CS_E_OK);
    assert_int_equal(info.memcpyed, noise == 1);
    round_trip(CS_ARRAY_CODEC_BLOSC, buf, clen, cap, info.blocks + 1);
    /* Unit k + 1 is block k's extent, as a reader computes it from the start table. */
    const uint8_t *table = buf + clen;
    for (uint32_t b = 0; b < info.blocks; b++) {
      uint64_t offset, length, uoff, ulen;
      assert_int_equal(cs_blosc_block_extent(&info, buf, b, &offset, &length, NULL, 0), CS_E_OK);
      cs_blosc_info_parse(buf, clen, &info, NULL, 0);
      uint32_t k = 0;
      cs_array_chunk_tail tail = {.units = info.blocks + 1, .payload_bytes = (uint32_t)clen};
      k = cs_array_chunk_unit_of(&tail, table, offset);
      cs_array_chunk_unit(table, k, &uoff, &ulen, NULL);
      assert_int_equal(uoff, offset);
      assert_int_equal(ulen, length);
    }
    const char *out = getenv("CAPSTORE_BLOSC_OUT");
    if (out != NULL) {
      char path[512];
      size_t stored = clen + CS_ARRAY_CHUNK_OVERHEAD(info.blocks + 1);
      snprintf(path, sizeof path, "%s/framed-%s.stored", out, noise ? "plain" : "lz4");
      FILE *f = fopen(path, "wb");
      assert_non_null(f);
      assert_int_equal(fwrite(buf, 1, stored, f), stored);
      fclose(f);
      snprintf(path, sizeof path, "%s/framed-%s.raw", out, noise ? "plain" : "lz4");
      f = fopen(path, "wb");
      assert_non_null(f);
      assert_int_equal(fwrite(raw, 1, raw_len, f), raw_len);
      fclose(f);
    }
    /* The stored bytes' first cbytes are the Blosc buffer: any Blosc reader decodes them alone. */
    uint8_t *back = malloc(raw_len);
    size_t got = 0;
    assert_non_null(back);
    assert_int_equal(cs_blosc_decode(buf, clen, back, raw_len, &got, NULL, 0), CS_E_OK);
    assert_memory_equal(back, raw, raw_len);
    free(back);
    free(buf);
  }
  free(raw);
}

static void test_corruption_named(void **state) {
  (void)state;
  size_t n = 200000, cap = n + 4096, stored = 0;
  uint8_t *buf = malloc(cap);
  assert_non_null(buf);
  fill(buf, n, 3);
  char msg[200];
  assert_int_equal(cs_array_chunk_frame(CS_ARRAY_CODEC_NONE, buf, n, cap, &stored, msg, sizeof msg), CS_E_OK);
  cs_array_chunk_tail tail;
  uint8_t *trailer = buf + stored - 16;
  assert_int_equal(cs_array_chunk_tail_parse(trailer, stored + 1, &tail, msg, sizeof msg), CS_E_CORRUPT);
  assert_non_null(strstr(msg, "stored length"));
  trailer[15] = 'X';
  assert_int_equal(cs_array_chunk_tail_parse(trailer, stored, &tail, msg, sizeof msg), CS_E_CORRUPT);
  assert_non_null(strstr(msg, "CSA1"));
  trailer[15] = '1';
  trailer[2] = 0x7F; /* a unit count of millions */
  assert_int_equal(cs_array_chunk_tail_parse(trailer, stored, &tail, msg, sizeof msg), CS_E_CORRUPT);
  assert_non_null(strstr(msg, "unit count"));
  trailer[2] = 0;
  assert_int_equal(cs_array_chunk_tail_parse(trailer, stored, &tail, msg, sizeof msg), CS_E_OK);
  uint8_t *table = buf + tail.table_offset;
  table[5] ^= 1; /* a unit's CRC: the table's CRC catches it */
  assert_int_equal(cs_array_chunk_table_check(&tail, table, msg, sizeof msg), CS_E_CORRUPT);
  assert_non_null(strstr(msg, "table"));
  table[5] ^= 1;
  assert_int_equal(cs_array_chunk_table_check(&tail, table, msg, sizeof msg), CS_E_OK);
  /* Ends that do not increase, or do not end the payload, even with a matching table CRC. */
  uint8_t saved[8];
  memcpy(saved, table + 8, 8);
  memcpy(table + 8, table, 4);
  tail.table_crc32 = cs_crc32(0, table, 8u * tail.units);
  assert_int_equal(cs_array_chunk_table_check(&tail, table, msg, sizeof msg), CS_E_CORRUPT);
  assert_non_null(strstr(msg, "increasing"));
  memcpy(table + 8, saved, 8);
  table[8u * (tail.units - 1)] ^= 1;
  tail.table_crc32 = cs_crc32(0, table, 8u * tail.units);
  assert_int_equal(cs_array_chunk_table_check(&tail, table, msg, sizeof msg), CS_E_CORRUPT);
  assert_non_null(strstr(msg, "end the payload"));
  /* A Blosc payload that is not Blosc; a frame that does not fit. */
  fill(buf, 1000, 1);
  assert_int_equal(cs_array_chunk_frame(CS_ARRAY_CODEC_BLOSC, buf, 1000, cap, &stored, msg, sizeof msg), CS_E_CORRUPT);
  assert_int_equal(cs_array_chunk_frame(CS_ARRAY_CODEC_NONE, buf, 1000, 1000 + 23, &stored, msg, sizeof msg),
                   CS_E_NO_MEMORY);
  assert_int_equal(cs_array_chunk_frame(CS_ARRAY_CODEC_NONE, buf, 1000, 1000 + 24, &stored, msg, sizeof msg), CS_E_OK);
  free(buf);
}


static int fetch_whole(void *ctx, uint64_t offset, uint64_t length, uint8_t *out, char *msg, size_t msg_size) {
  (void)msg;
  (void)msg_size;
  memcpy(out, (const uint8_t *)ctx + offset, length);
  return CS_E_OK;
}

/* A writer's encode: index and size checked and named; every chunk of both codecs reads back exact. */
static void test_encode_checks_and_round_trips(void **state) {
  (void)state;
  cs_array_geometry g = {.dims = 2, .shape = {300, 70}, .chunk = {128, 32}}; /* 3 x 3 chunks, edges cut */
  for (int codec = 0; codec <= 1; codec++) {
    cs_array_meta m;
    assert_int_equal(cs_array_meta_make(&m, "enc", &g, CS_DTYPE_INT16, (cs_array_codec)codec, NULL, NULL, 0), CS_E_OK);
    char msg[200] = "";
    uint8_t elements[128 * 32 * 2];
    size_t stored = 0;
    static uint8_t out[1 << 20];
    assert_int_equal(cs_array_chunk_encode(&m, 9, elements, 10, out, sizeof out, &stored, msg, sizeof msg),
                     CS_E_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "has 9 chunks"));
    assert_int_equal(cs_array_chunk_encode(&m, 8, elements, 128 * 32 * 2, out, sizeof out, &stored, msg, sizeof msg),
                     CS_E_INVALID_ARGUMENT); /* chunk 8 is the corner: 44 x 6 */
    assert_non_null(strstr(msg, "528 bytes"));
    assert_int_equal(cs_array_chunk_stored_max(&m, 9), 0);
    for (uint64_t c = 0; c < 9; c++) {
      uint64_t n = cs_array_chunk_bytes(&m.geometry, c);
      for (uint64_t i = 0; i < n; i++) elements[i] = (uint8_t)(c * 31 + i / 7);
      assert_int_equal(cs_array_chunk_encode(&m, c, elements, n, out, sizeof out, &stored, msg, sizeof msg), CS_E_OK);
      assert_true(stored <= cs_array_chunk_stored_max(&m, c));
      /* The whole chunk back through the region read. */
      uint64_t origin[CS_ARRAY_DIMS_MAX], shape[CS_ARRAY_DIMS_MAX];
      assert_int_equal(cs_array_chunk_at(&m.geometry, c, NULL, origin, shape), CS_E_OK);
      cs_array_slice s;
      memset(&s, 0, sizeof s);
      for (uint32_t d = 0; d < 2; d++) {
        s.start[d] = origin[d];
        s.stop[d] = origin[d] + shape[d];
      }
      cs_array_slice_iter it;
      cs_array_piece p;
      assert_int_equal(cs_array_slice_begin(&it, &m.geometry, &s), CS_E_OK);
      assert_true(cs_array_slice_next(&it, &p));
      uint8_t back[128 * 32 * 2];
      assert_int_equal(cs_array_read_piece(&m, &s, &p, stored, fetch_whole, out, back, NULL, msg, sizeof msg), CS_E_OK);
      assert_memory_equal(back, elements, n);
      assert_false(cs_array_slice_next(&it, &p));
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_raw_payloads),
      cmocka_unit_test(test_blosc_payloads),
      cmocka_unit_test(test_corruption_named),
      cmocka_unit_test(test_encode_checks_and_round_trips),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
