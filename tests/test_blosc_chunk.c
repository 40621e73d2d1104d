/*
 * Unit tests of capture-array chunks in the Blosc 1 format
 * (capstore/blosc_chunk.h): round trips of every item size and block size,
 * each block decoded alone from exactly its prefix and its own extent (each
 * in a buffer of its own size, so ASan sees any read past them), a start
 * table that lies about where a block ends (refused, never read past), the
 * plain-copy form of incompressible data, and every refusal of a bad header
 * or start table named.
 *
 * With CAPSTORE_BLOSC_OUT=DIR it also writes sample chunks and their raw
 * bytes there (NAME.blosc, NAME.raw) for tests/blosc_python_check.py, which
 * decodes them with python3-blosc: another reader. With CAPSTORE_BLOSC_IN=DIR
 * it runs only test_foreign_chunks: the chunks python3-blosc wrote there
 * (every codec, shuffle and item size) parsed, decoded whole and block by
 * block from exactly the bytes a reader fetches.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "capstore/blosc_chunk.h"

/* Compressible: a slow ramp of items with a little noise. */
static void fill_ramp(uint8_t *p, size_t len, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < len; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    p[i] = (uint8_t)(i / 64 + ((x & 7) == 0 ? x >> 24 : 0));
  }
}

static void fill_noise(uint8_t *p, size_t len, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 7;
  for (size_t i = 0; i < len; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    p[i] = (uint8_t)(x >> 11);
  }
}

static void write_file(const char *dir, const char *name, const char *ext, const void *p, size_t len) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

/* Encodes, decodes whole, then decodes every block alone from its prefix and extent. */
static void round_trip(const uint8_t *raw, size_t len, uint32_t item, uint32_t block, const char *name) {
  size_t cap = len + CS_BLOSC_HEADER_BYTES, clen = 0, got = 0;
  uint8_t *chunk = malloc(cap), *back = malloc(len + 1), *prefix = malloc(cap), *one = malloc(len + 1);
  assert_true(chunk && back && prefix && one);
  char msg[200] = "";
  assert_int_equal(cs_blosc_encode(raw, len, item, block, chunk, cap, &clen, msg, sizeof msg), CS_E_OK);
  const char *out = getenv("CAPSTORE_BLOSC_OUT");
  if (out != NULL && name != NULL) {
    write_file(out, name, "blosc", chunk, clen);
    write_file(out, name, "raw", raw, len);
  }
  assert_int_equal(cs_blosc_decode(chunk, clen, back, len, &got, msg, sizeof msg), CS_E_OK);
  assert_int_equal(got, len);
  assert_memory_equal(back, raw, len);
  cs_blosc_info info;
  assert_int_equal(cs_blosc_info_parse(chunk, clen, &info, msg, sizeof msg), CS_E_OK);
  assert_int_equal(info.nbytes, len);
  assert_int_equal(info.cbytes, clen);
  assert_int_equal(info.type_bytes, item);
  assert_int_equal(info.blocks, len / info.block_bytes + (len % info.block_bytes != 0));
  uint64_t covered = 0;
  for (uint32_t b = 0; b < info.blocks; b++) {
    uint64_t offset = 0, length = 0;
    assert_int_equal(cs_blosc_block_extent(&info, chunk, b, &offset, &length, msg, sizeof msg), CS_E_OK);
    assert_true(offset >= info.prefix_bytes && offset + length <= clen);
    covered += length;
    /* Exactly what a reader fetched: the prefix and this block's extent, each in a buffer of its own size. */
    memcpy(prefix, chunk, info.prefix_bytes);
    uint8_t *fetched = malloc(length);
    assert_non_null(fetched);
    memcpy(fetched, chunk + offset, length);
    assert_int_equal(cs_blosc_decode_block(&info, prefix, b, fetched, length, one, len, &got, msg, sizeof msg),
                     CS_E_OK);
    free(fetched);
    uint64_t at = (uint64_t)b * info.block_bytes;
    assert_int_equal(got, len - at < info.block_bytes ? len - at : info.block_bytes);
    assert_memory_equal(one, raw + at, got);
  }
  /* The extents tile the buffer after the prefix: no byte belongs to two blocks, none to no block. */
  assert_int_equal(covered + (info.memcpyed ? CS_BLOSC_HEADER_BYTES : info.prefix_bytes), clen);
  free(chunk);
  free(back);
  free(prefix);
  free(one);
}

static void test_round_trips(void **state) {
  (void)state;
  const uint32_t items[] = {1, 2, 4, 8};
  const size_t lens[] = {8, 4096, 100000, (size_t)1 << 20};
  const uint32_t blocks[] = {0, 4096, 65536};
  uint8_t *raw = malloc((size_t)1 << 20);
  assert_non_null(raw);
  for (size_t i = 0; i < 4; i++) {
    for (size_t l = 0; l < 4; l++) {
      for (size_t b = 0; b < 3; b++) {
        size_t len = lens[l] / items[i] * items[i];
        fill_ramp(raw, len, (uint32_t)(i * 100 + l * 10 + b));
        char name[64];
        snprintf(name, sizeof name, "ramp-i%u-n%zu-b%u", (unsigned)items[i], len, (unsigned)blocks[b]);
        round_trip(raw, len, items[i], blocks[b], name);
      }
    }
  }
  free(raw);
}

/* Incompressible data: Blosc stores a plain copy (no start table); blocks still decode alone. */
static void test_plain_copy(void **state) {
  (void)state;
  size_t len = 200000;
  uint8_t *raw = malloc(len), *chunk = malloc(len + 16);
  assert_true(raw && chunk);
  fill_noise(raw, len, 3);
  size_t clen = 0;
  assert_int_equal(cs_blosc_encode(raw, len, 4, 16384, chunk, len + 16, &clen, NULL, 0), CS_E_OK);
  cs_blosc_info info;
  assert_int_equal(cs_blosc_info_parse(chunk, clen, &info, NULL, 0), CS_E_OK);
  assert_true(info.memcpyed);
  assert_int_equal(info.prefix_bytes, CS_BLOSC_HEADER_BYTES);
  round_trip(raw, len, 4, 16384, "noise-i4");
  free(raw);
  free(chunk);
}

static void expect_corrupt(const uint8_t *chunk, size_t len, const char *needle) {
  cs_blosc_info info;
  char msg[200] = "";
  int rc = cs_blosc_info_parse(chunk, len, &info, msg, sizeof msg);
  if (rc != CS_E_CORRUPT) fail_msg("expected a refusal naming \"%s\"; got %d", needle, rc);
  if (strstr(msg, needle) == NULL) fail_msg("message \"%s\" does not name \"%s\"", msg, needle);
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void test_bad_headers_named(void **state) {
  (void)state;
  size_t len = (size_t)1 << 20, clen = 0;
  uint8_t *raw = malloc(len), *good = malloc(len + 16), *bad = malloc(len + 16);
  assert_true(raw && good && bad);
  fill_ramp(raw, len, 9);
  assert_int_equal(cs_blosc_encode(raw, len, 4, 16384, good, len + 16, &clen, NULL, 0), CS_E_OK);
  cs_blosc_info info;
  char msg[200];
  size_t got;
  assert_int_equal(cs_blosc_info_parse(good, clen, &info, NULL, 0), CS_E_OK);
  assert_true(info.blocks >= 4); /* Blosc decides the block size (docs/arrays.md); these cases need 4 */
  assert_int_equal(cs_blosc_info_parse(good, 15, &info, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "16 bytes"));
  memcpy(bad, good, clen);
  bad[0] = 9;
  expect_corrupt(bad, clen, "version");
  memcpy(bad, good, clen);
  bad[3] = 0;
  expect_corrupt(bad, clen, "type size");
  memcpy(bad, good, clen);
  put32(bad + 8, 0);
  expect_corrupt(bad, clen, "block size 0");
  memcpy(bad, good, clen);
  put32(bad + 8, 4095); /* not a multiple of 4 */
  expect_corrupt(bad, clen, "multiple of the type size");
  memcpy(bad, good, clen);
  put32(bad + 8, 4);
  put32(bad + 4, 4 * 70000); /* 70,000 blocks */
  expect_corrupt(bad, clen, "65,536 blocks");
  memcpy(bad, good, clen);
  put32(bad + 12, 16 + 4 * info.blocks - 1); /* shorter than its own start table */
  expect_corrupt(bad, clen, "cbytes");
  memcpy(bad, good, clen);
  put32(bad + 4, 0x7FFFFFFF);
  expect_corrupt(bad, clen, "nbytes");
  /* The start table: a block inside the prefix, past cbytes, or two at one offset. */
  assert_false(info.memcpyed);
  uint64_t off, n;
  memcpy(bad, good, clen);
  put32(bad + 16 + 4 * 2, 8);
  assert_int_equal(cs_blosc_block_extent(&info, bad, 2, &off, &n, msg, sizeof msg), CS_E_CORRUPT);
  assert_non_null(strstr(msg, "start table"));
  put32(bad + 16 + 4 * 2, info.cbytes);
  assert_int_equal(cs_blosc_block_extent(&info, bad, 2, &off, &n, msg, sizeof msg), CS_E_CORRUPT);
  memcpy(bad, good, clen);
  memcpy(bad + 16 + 4 * 3, bad + 16 + 4 * 2, 4);
  assert_int_equal(cs_blosc_block_extent(&info, bad, 2, &off, &n, msg, sizeof msg), CS_E_CORRUPT);
  assert_non_null(strstr(msg, "same offset"));
  assert_int_equal(cs_blosc_block_extent(&info, good, info.blocks, &off, &n, msg, sizeof msg),
                   CS_E_INVALID_ARGUMENT);
  /* A start table that lies about where block 0 ends (block 1 "starts" 100 bytes into it): the extent is
     100 bytes, the decode fails on them and reads nothing else (each buffer exactly its size: ASan checks). */
  memcpy(bad, good, clen);
  uint32_t start0 = (uint32_t)good[16] | (uint32_t)good[17] << 8 | (uint32_t)good[18] << 16 | (uint32_t)good[19] << 24;
  put32(bad + 16 + 4, start0 + 100);
  assert_int_equal(cs_blosc_block_extent(&info, bad, 0, &off, &n, msg, sizeof msg), CS_E_OK);
  assert_int_equal(n, 100);
  uint8_t *prefix = malloc(info.prefix_bytes), *extent = malloc(n), *block = malloc(info.block_bytes);
  assert_true(prefix && extent && block);
  memcpy(prefix, bad, info.prefix_bytes);
  memcpy(extent, bad + off, n);
  assert_int_equal(cs_blosc_decode_block(&info, prefix, 0, extent, n, block, info.block_bytes, &got, msg, sizeof msg),
                   CS_E_CORRUPT);
  free(prefix);
  free(extent);
  free(block);
  /* Whole decodes: a length that is not cbytes, a buffer too small, garbage blocks. */
  assert_int_equal(cs_blosc_decode(good, clen - 1, raw, len, &got, msg, sizeof msg), CS_E_CORRUPT);
  assert_int_equal(cs_blosc_decode(good, clen, raw, len - 1, &got, msg, sizeof msg), CS_E_NO_MEMORY);
  memcpy(bad, good, clen);
  memset(bad + info.prefix_bytes, 0xFF, clen - info.prefix_bytes);
  assert_int_not_equal(cs_blosc_decode(bad, clen, raw, len, &got, msg, sizeof msg), CS_E_OK);
  free(raw);
  free(good);
  free(bad);
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *p = malloc((size_t)n + 1);
  assert_non_null(p);
  assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return p;
}

/* One chunk another writer made: whole, then every block alone from its prefix and extent. */
static void foreign_one(const char *dir, const char *name) {
  char path[600];
  size_t clen, len, got;
  snprintf(path, sizeof path, "%s/%s.blosc", dir, name);
  uint8_t *chunk = read_file(path, &clen);
  snprintf(path, sizeof path, "%s/%s.raw", dir, name);
  uint8_t *raw = read_file(path, &len);
  uint8_t *back = malloc(len + 1), *prefix = malloc(clen);
  assert_true(back && prefix);
  char msg[200] = "";
  if (cs_blosc_decode(chunk, clen, back, len, &got, msg, sizeof msg) != CS_E_OK) fail_msg("%s: %s", name, msg);
  assert_int_equal(got, len);
  assert_memory_equal(back, raw, len);
  cs_blosc_info info;
  assert_int_equal(cs_blosc_info_parse(chunk, clen, &info, msg, sizeof msg), CS_E_OK);
  for (uint32_t b = 0; b < info.blocks; b++) {
    uint64_t offset, length;
    assert_int_equal(cs_blosc_block_extent(&info, chunk, b, &offset, &length, msg, sizeof msg), CS_E_OK);
    memcpy(prefix, chunk, info.prefix_bytes);
    uint8_t *fetched = malloc(length);
    assert_non_null(fetched);
    memcpy(fetched, chunk + offset, length);
    int rc = cs_blosc_decode_block(&info, prefix, b, fetched, length, back, len, &got, msg, sizeof msg);
    free(fetched);
    if (rc != CS_E_OK) fail_msg("%s block %u: %s", name, (unsigned)b, msg);
    assert_memory_equal(back, raw + (uint64_t)b * info.block_bytes, got);
  }
  print_message("foreign %s: %u blocks of %u bytes, %s\n", name, (unsigned)info.blocks, (unsigned)info.block_bytes,
                info.memcpyed ? "plain copy" : "compressed");
  free(chunk);
  free(raw);
  free(back);
  free(prefix);
}

static void test_foreign_chunks(void **state) {
  (void)state;
  const char *dir = getenv("CAPSTORE_BLOSC_IN");
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  int seen = 0;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (n <= 6 || strcmp(e->d_name + n - 6, ".blosc") != 0) continue;
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(n - 6), e->d_name);
    foreign_one(dir, name);
    seen++;
  }
  closedir(d);
  assert_true(seen > 0);
}

int main(void) {
  if (getenv("CAPSTORE_BLOSC_IN") != NULL) {
    const struct CMUnitTest foreign[] = {cmocka_unit_test(test_foreign_chunks)};
    return cmocka_run_group_tests(foreign, NULL, NULL);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trips),
      cmocka_unit_test(test_plain_copy),
      cmocka_unit_test(test_bad_headers_named),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
