/*
 * Unit tests of the capture-array geometry core (capstore/array.h): every
 * refusal of a bad geometry or slice named, the chunk grid with cut edge
 * chunks, and a seeded property test against brute force: an array split
 * into chunks and read back through random slices (some chunks unwritten,
 * reading as zeros), each overlapped chunk given exactly once, and the Blosc
 * blocks a region needs. Replay the property test with CAPSTORE_SEED=<seed>.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "capstore/array.h"
#include "array_oracle.h"

#include "test_prop.h"

static cs_array_geometry geom2(uint64_t s0, uint64_t s1, uint64_t c0, uint64_t c1, uint32_t item) {
  cs_array_geometry g = {.dims = 2, .item_bytes = item};
  g.shape[0] = s0;
  g.shape[1] = s1;
  g.chunk[0] = c0;
  g.chunk[1] = c1;
  return g;
}

static void refused(const cs_array_geometry *g, const char *needle) {
  char msg[160] = "";
  assert_int_equal(cs_array_geometry_check(g, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  if (strstr(msg, needle) == NULL) fail_msg("message \"%s\" does not name \"%s\"", msg, needle);
}

static void test_geometry_refusals(void **state) {
  (void)state;
  cs_array_geometry g = geom2(10, 7, 4, 3, 4);
  assert_int_equal(cs_array_geometry_check(&g, NULL, 0), CS_E_OK);
  cs_array_geometry bad = g;
  bad.dims = 0;
  refused(&bad, "dims");
  bad.dims = 9;
  refused(&bad, "dims");
  bad = g;
  bad.item_bytes = 3;
  refused(&bad, "item_bytes");
  bad = g;
  bad.shape[1] = 0;
  refused(&bad, "shape[1]");
  bad = g;
  bad.chunk[0] = 0;
  refused(&bad, "chunk[0]");
  bad = g;
  bad.chunk[1] = 8; /* larger than the shape */
  refused(&bad, "chunk[1]");
  bad = geom2(UINT64_C(1) << 20, UINT64_C(1) << 20, 1, 1, 1); /* 2^40 chunks */
  refused(&bad, "2^24 chunks");
  bad = geom2(UINT64_C(1) << 20, UINT64_C(1) << 20, UINT64_C(1) << 20, UINT64_C(1) << 20, 1); /* a 1 TiB chunk */
  refused(&bad, "1 GiB");
  bad = geom2(UINT64_MAX, UINT64_MAX, UINT64_C(1) << 40, UINT64_C(1) << 40, 8); /* overflowing products */
  assert_int_equal(cs_array_geometry_check(&bad, NULL, 0), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_array_geometry_check(NULL, NULL, 0), CS_E_INVALID_ARGUMENT);
}

static void test_grid_and_edge_chunks(void **state) {
  (void)state;
  cs_array_geometry g = geom2(10, 7, 4, 3, 2); /* grid 3 x 3 */
  assert_int_equal(cs_array_chunk_count(&g), 9);
  assert_int_equal(cs_array_total_bytes(&g), 140);
  uint64_t coords[CS_ARRAY_DIMS_MAX], origin[CS_ARRAY_DIMS_MAX], shape[CS_ARRAY_DIMS_MAX];
  assert_int_equal(cs_array_chunk_at(&g, 8, coords, origin, shape), CS_E_OK);
  assert_int_equal(coords[0], 2);
  assert_int_equal(coords[1], 2);
  assert_int_equal(origin[0], 8);
  assert_int_equal(origin[1], 6);
  assert_int_equal(shape[0], 2); /* cut at the edge: rows 8, 9 */
  assert_int_equal(shape[1], 1); /* column 6 */
  assert_int_equal(cs_array_chunk_bytes(&g, 8), 2 * 1 * 2);
  assert_int_equal(cs_array_chunk_bytes(&g, 0), 4 * 3 * 2);
  assert_int_equal(cs_array_chunk_bytes(&g, 5), 4 * 1 * 2); /* coords (1, 2) */
  assert_int_equal(cs_array_chunk_bytes(&g, 9), 0);         /* out of range */
  assert_int_equal(cs_array_chunk_at(&g, 9, NULL, NULL, NULL), CS_E_INVALID_ARGUMENT);
  uint64_t sum = 0;
  for (uint64_t i = 0; i < 9; i++) sum += cs_array_chunk_bytes(&g, i);
  assert_int_equal(sum, cs_array_total_bytes(&g)); /* no padding anywhere */
}

static void test_slice_refusals_and_empty(void **state) {
  (void)state;
  cs_array_geometry g = geom2(10, 7, 4, 3, 4);
  cs_array_slice s = {.start = {2, 5}, .stop = {1, 7}};
  char msg[120] = "";
  assert_int_equal(cs_array_slice_check(&g, &s, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "start[0]"));
  s = (cs_array_slice){.start = {0, 0}, .stop = {10, 8}};
  assert_int_equal(cs_array_slice_check(&g, &s, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "stop[1]"));
  cs_array_slice_iter it;
  assert_int_equal(cs_array_slice_begin(&it, &g, &s), CS_E_INVALID_ARGUMENT);
  s = (cs_array_slice){.start = {3, 4}, .stop = {3, 7}}; /* empty: no chunk */
  assert_int_equal(cs_array_slice_begin(&it, &g, &s), CS_E_OK);
  cs_array_piece p;
  assert_false(cs_array_slice_next(&it, &p));
  assert_int_equal(cs_array_slice_elements(&g, &s), 0);
  /* A missing geometry or slice is refused, each alone. */
  assert_int_equal(cs_array_slice_check(NULL, &s, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "no geometry or slice"));
  assert_int_equal(cs_array_slice_check(&g, NULL, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "no geometry or slice"));
}

static void test_stamps(void **state) {
  (void)state;
  cs_array_geometry g = geom2(10, 7, 4, 3, 4); /* 9 chunks */
  cs_array_stamp empty, f1, f2, f2_again, c1, c2, other, untouched = {.nonce = 5};
  assert_int_equal(cs_array_stamp_make(&g, 0, 0, 0, &empty), CS_E_OK);
  assert_int_equal(cs_array_stamp_make(&g, 77, 1, 1000, &f1), CS_E_OK);
  assert_int_equal(cs_array_stamp_make(&g, 77, 2, 2000, &f2), CS_E_OK);
  assert_int_equal(cs_array_stamp_make(&g, 77, 2, 2000, &f2_again), CS_E_OK);
  assert_int_equal(cs_array_stamp_make(&g, 77, 9, 5000, &c1), CS_E_OK);
  assert_int_equal(cs_array_stamp_make(&g, 77, 9, 9000, &c2), CS_E_OK); /* complete: the time no longer counts */
  assert_int_equal(cs_array_stamp_make(&g, 78, 9, 5000, &other), CS_E_OK);
  /* What a catalog's answer cannot say of this array: refused, not asserted. */
  assert_int_equal(cs_array_stamp_make(&g, 77, 10, 5000, &untouched), CS_E_CORRUPT);
  assert_int_equal(cs_array_stamp_make(&g, 0, 3, 5000, &untouched), CS_E_CORRUPT);
  assert_int_equal(cs_array_stamp_make(&g, 77, 0, 5000, &untouched), CS_E_CORRUPT);
  assert_int_equal(untouched.nonce, 5);
  assert_int_equal(empty.state, CS_ARRAY_EMPTY);
  assert_int_equal(f1.state, CS_ARRAY_FILLING);
  assert_int_equal(c1.state, CS_ARRAY_COMPLETE);
  assert_false(cs_array_stamp_equal(&f1, &f2));
  assert_true(cs_array_stamp_equal(&f2, &f2_again));
  assert_true(cs_array_stamp_equal(&c1, &c2));
  assert_false(cs_array_stamp_equal(&f2, &c1));
  assert_false(cs_array_stamp_equal(&c1, &other));
  assert_true(cs_array_stamp_same_array(&f1, &c1));
  assert_false(cs_array_stamp_same_array(&c1, &other));
  /* A filling stamp can never equal a complete one, whatever its fields. */
  cs_array_stamp forged = c1;
  forged.state = CS_ARRAY_FILLING;
  assert_false(cs_array_stamp_equal(&forged, &c1));
}

/* ---- the property test ------------------------------------------------------------------- */


enum { PROP_ELEMENTS = 4096, PROP_CHUNKS = 512 };

static uint64_t linear(const cs_array_geometry *g, const uint64_t at[CS_ARRAY_DIMS_MAX]) {
  uint64_t i = 0;
  for (uint32_t d = 0; d < g->dims; d++) i = i * g->shape[d] + at[d];
  return i;
}

/* Element i's bytes: a pattern no two elements share within the array. */
static void element(uint64_t i, uint32_t item, uint8_t *out) {
  for (uint32_t b = 0; b < item; b++) out[b] = (uint8_t)((i * 131 + b * 7 + 1) >> (b % 2 ? 8 : 0));
  out[0] = (uint8_t)i;
  if (item > 1) out[1] = (uint8_t)(i >> 8);
}

static void random_geometry(cs_prng *r, cs_array_geometry *g) {
  static const uint32_t items[] = {1, 2, 4, 8};
  for (;;) {
    memset(g, 0, sizeof *g);
    /* Up to CS_ARRAY_DIMS_MAX dimensions (every stride array full); past the fourth, short ones. */
    g->dims = 1 + (uint32_t)cs_prng_below(r, CS_ARRAY_DIMS_MAX);
    g->item_bytes = items[cs_prng_below(r, 4)];
    uint64_t n = 1;
    for (uint32_t d = 0; d < g->dims; d++) {
      g->shape[d] = 1 + cs_prng_below(r, d < 4 ? 12 : 3);
      g->chunk[d] = 1 + cs_prng_below(r, g->shape[d]);
      n *= g->shape[d];
    }
    if (n <= PROP_ELEMENTS && cs_array_chunk_count(g) <= PROP_CHUNKS) return;
  }
}

static void random_slice(cs_prng *r, const cs_array_geometry *g, cs_array_slice *s) {
  memset(s, 0, sizeof *s);
  for (uint32_t d = 0; d < g->dims; d++) {
    uint64_t a = cs_prng_below(r, g->shape[d] + 1), b = cs_prng_below(r, g->shape[d] + 1);
    s->start[d] = a < b ? a : b;
    s->stop[d] = a < b ? b : a;
    if (cs_prng_below(r, 8) != 0 && s->start[d] == s->stop[d]) s->stop[d] = g->shape[d], s->start[d] = 0;
  }
}

/* Splits the whole array into its chunks through the slice -> chunk copy. */
static void split(const cs_array_geometry *g, uint8_t *whole, uint8_t *chunks[PROP_CHUNKS]) {
  cs_array_slice all;
  memset(&all, 0, sizeof all);
  for (uint32_t d = 0; d < g->dims; d++) all.stop[d] = g->shape[d];
  cs_array_slice_iter it;
  PROP_CHECK(cs_array_slice_begin(&it, g, &all) == CS_E_OK);
  cs_array_piece p;
  uint64_t seen = 0;
  while (cs_array_slice_next(&it, &p)) {
    PROP_CHECK(p.chunk_index == seen); /* the whole slice gives every chunk, in order */
    cs_array_piece_copy(g, &all, &p, chunks[p.chunk_index], whole, false);
    seen++;
  }
  PROP_CHECK(seen == cs_array_chunk_count(g));
}

/* The chunk holding element `at`, and its offset in that chunk's bytes (brute force). */
static void locate(const cs_array_geometry *g, const uint64_t at[CS_ARRAY_DIMS_MAX], uint64_t *chunk,
                   uint64_t *offset) {
  uint64_t grid[CS_ARRAY_DIMS_MAX];
  cs_array_grid(g, grid);
  uint64_t c = 0, o = 0;
  for (uint32_t d = 0; d < g->dims; d++) c = c * grid[d] + at[d] / g->chunk[d];
  uint64_t shape[CS_ARRAY_DIMS_MAX];
  PROP_CHECK(cs_array_chunk_at(g, c, NULL, NULL, shape) == CS_E_OK);
  for (uint32_t d = 0; d < g->dims; d++) o = o * shape[d] + at[d] % g->chunk[d];
  *chunk = c;
  *offset = o * g->item_bytes;
}

static bool next_coord(const cs_array_geometry *g, const cs_array_slice *s, uint64_t at[CS_ARRAY_DIMS_MAX]) {
  for (uint32_t d = g->dims; d-- > 0;) {
    if (++at[d] < s->stop[d]) return true;
    at[d] = s->start[d];
  }
  return false;
}

static void check_chunks(const cs_array_geometry *g, uint8_t *chunks[PROP_CHUNKS], const uint8_t *whole) {
  cs_array_slice all;
  memset(&all, 0, sizeof all);
  for (uint32_t d = 0; d < g->dims; d++) all.stop[d] = g->shape[d];
  uint64_t at[CS_ARRAY_DIMS_MAX] = {0};
  do {
    uint64_t c, o;
    locate(g, at, &c, &o);
    PROP_CHECK(o + g->item_bytes <= cs_array_chunk_bytes(g, c));
    PROP_CHECK(memcmp(chunks[c] + o, whole + linear(g, at) * g->item_bytes, g->item_bytes) == 0);
  } while (next_coord(g, &all, at));
}

static void check_blocks(const cs_array_geometry *g, const cs_array_piece *p, cs_prng *r) {
  uint64_t chunk_bytes = g->item_bytes;
  for (uint32_t d = 0; d < g->dims; d++) chunk_bytes *= p->chunk_shape[d];
  uint64_t block = 1 + cs_prng_below(r, chunk_bytes + 8);
  uint64_t blocks = (chunk_bytes + block - 1) / block;
  uint64_t need[PROP_ELEMENTS * 8 / 64 + 1] = {0}, want[PROP_ELEMENTS * 8 / 64 + 1] = {0}, want_count = 0;
  want_count = array_oracle_region_blocks(g, p, block, want); /* brute force: every byte of every element */
  uint64_t words = (blocks + 63) / 64;
  PROP_CHECK(cs_array_region_blocks(g, p, block, need, words) == want_count);
  PROP_CHECK(memcmp(need, want, words * sizeof need[0]) == 0);
  if (words > 1) { /* too small a bitmap: refused, untouched */
    uint64_t small[PROP_ELEMENTS * 8 / 64 + 1] = {0};
    PROP_CHECK(cs_array_region_blocks(g, p, block, small, words - 1) == 0);
    PROP_CHECK(small[0] == 0);
  }
}

static void prop_one(cs_prng *r) {
  static uint8_t whole[PROP_ELEMENTS * 8], out[PROP_ELEMENTS * 8], store[PROP_ELEMENTS * 8];
  static uint8_t *chunks[PROP_CHUNKS];
  static bool written[PROP_CHUNKS];
  cs_array_geometry g;
  random_geometry(r, &g);
  PROP_CHECK(cs_array_geometry_check(&g, NULL, 0) == CS_E_OK);
  uint64_t n = cs_array_total_bytes(&g) / g.item_bytes, count = cs_array_chunk_count(&g), used = 0;
  for (uint64_t i = 0; i < n; i++) element(i, g.item_bytes, whole + i * g.item_bytes);
  for (uint64_t c = 0; c < count; c++) {
    chunks[c] = store + used;
    used += cs_array_chunk_bytes(&g, c);
    written[c] = cs_prng_below(r, 4) != 0;
  }
  PROP_CHECK(used == cs_array_total_bytes(&g));
  memset(store, 0xEE, sizeof store);
  split(&g, whole, chunks);
  check_chunks(&g, chunks, whole);
  for (int k = 0; k < 6; k++) {
    cs_array_slice s;
    random_slice(r, &g, &s);
    cs_array_slice_iter it;
    PROP_CHECK(cs_array_slice_begin(&it, &g, &s) == CS_E_OK);
    memset(out, 0xAB, sizeof out);
    bool given[PROP_CHUNKS] = {false};
    cs_array_piece p;
    uint64_t last = 0, pieces = 0;
    while (cs_array_slice_next(&it, &p)) {
      PROP_CHECK(p.chunk_index < count && !given[p.chunk_index]);
      PROP_CHECK(pieces == 0 || p.chunk_index > last);
      given[p.chunk_index] = true;
      last = p.chunk_index;
      pieces++;
      cs_array_piece_copy(&g, &s, &p, written[p.chunk_index] ? chunks[p.chunk_index] : NULL, out, true);
      check_blocks(&g, &p, r);
    }
    uint64_t elements = cs_array_slice_elements(&g, &s);
    if (elements == 0) {
      PROP_CHECK(pieces == 0);
      continue;
    }
    /* Every element of the slice, against brute force; every chunk overlapped was given. */
    uint64_t at[CS_ARRAY_DIMS_MAX] = {0}, i = 0;
    bool touched[PROP_CHUNKS] = {false};
    memcpy(at, s.start, sizeof at);
    do {
      uint64_t c, o;
      locate(&g, at, &c, &o);
      PROP_CHECK(given[c]);
      touched[c] = true;
      uint8_t zero[8] = {0};
      const uint8_t *expect = written[c] ? whole + linear(&g, at) * g.item_bytes : zero;
      PROP_CHECK(memcmp(out + i * g.item_bytes, expect, g.item_bytes) == 0);
      i++;
    } while (next_coord(&g, &s, at));
    PROP_CHECK(i == elements);
    PROP_CHECK(out[elements * g.item_bytes] == 0xAB); /* nothing written past the slice */
    uint64_t overlapped = 0;
    for (uint64_t c = 0; c < count; c++) overlapped += touched[c];
    PROP_CHECK(overlapped == pieces); /* no chunk given that holds none of the slice */
  }
}

static void test_property_against_brute_force(void **state) {
  (void)state;
  prop_run(prop_one, 600, "build/tests/test_array");
}

/* The arbiter: the first candidate of each slot (and of the geometry) wins; an answer out of order is refused. */
static void test_arbiter(void **state) {
  (void)state;
  cs_array_arbiter a;
  memset(&a, 0, sizeof a);
  assert_int_equal(cs_array_arbiter_next(&a, true, 0, 9), CS_ARRAY_WINS);
  assert_int_equal(cs_array_arbiter_next(&a, true, 0, 3), CS_ARRAY_LOSES); /* a later geometry loses, whatever its version */
  assert_int_equal(cs_array_arbiter_next(&a, false, 2, 5), CS_ARRAY_WINS);
  assert_int_equal(cs_array_arbiter_next(&a, false, 2, 5), CS_ARRAY_LOSES); /* a tie: the catalog's order decided */
  assert_int_equal(cs_array_arbiter_next(&a, false, 2, 7), CS_ARRAY_LOSES);
  assert_int_equal(cs_array_arbiter_next(&a, false, 3, 1), CS_ARRAY_WINS);   /* a new slot, whatever its version */
  assert_int_equal(cs_array_arbiter_next(&a, false, 3, 0), CS_ARRAY_OUT_OF_ORDER);
  memset(&a, 0, sizeof a);
  assert_int_equal(cs_array_arbiter_next(&a, false, 4, 1), CS_ARRAY_WINS); /* no geometry yet: chunks alone */
  assert_int_equal(cs_array_arbiter_next(&a, false, 1, 1), CS_ARRAY_OUT_OF_ORDER);
  memset(&a, 0, sizeof a);
  assert_int_equal(cs_array_arbiter_next(&a, false, 0, 1), CS_ARRAY_WINS);
  assert_int_equal(cs_array_arbiter_next(&a, true, 0, 1), CS_ARRAY_OUT_OF_ORDER); /* the geometry after a chunk */
}


/* A slot's claim: its one spelling, what is refused, and when it is stale. */
static void test_claims(void **state) {
  (void)state;
  const char *nonce = "0123456789abcdef0123456789abcdef";
  char out[CS_ARRAY_CLAIM_BYTES_MAX];
  size_t len = 0;
  uint64_t at = 0;
  assert_int_equal(cs_array_claim_format(nonce, 1796083200000000000u, out, &len), CS_E_OK);
  assert_int_equal(len, 32 + 1 + 19);
  assert_memory_equal(out, "0123456789abcdef0123456789abcdef 1796083200000000000", len);
  assert_int_equal(cs_array_claim_parse(out, len, &at), CS_E_OK);
  assert_true(at == 1796083200000000000u);
  assert_int_equal(cs_array_claim_format(nonce, UINT64_MAX, out, &len), CS_E_OK);
  assert_int_equal(len, CS_ARRAY_CLAIM_BYTES_MAX);
  assert_int_equal(cs_array_claim_parse(out, len, &at), CS_E_OK);
  assert_true(at == UINT64_MAX);
  assert_int_equal(cs_array_claim_format(nonce, 0, out, &len), CS_E_OK);
  assert_int_equal(cs_array_claim_parse(out, len, &at), CS_E_OK);
  assert_true(at == 0);
  assert_int_equal(cs_array_claim_format("0123456789ABCDEF0123456789abcdef", 1, out, &len), CS_E_INVALID_ARGUMENT);
  static const char *const bad[] = {
      "0123456789abcdef0123456789abcdef",                       /* the nonce alone (the first writers' claims) */
      "0123456789abcdef0123456789abcdef ",                      /* no time */
      "0123456789abcdef0123456789abcdef 01",                    /* a leading zero */
      "0123456789abcdef0123456789abcdef 18446744073709551616",  /* past 2^64 - 1 */
      "0123456789abcdef0123456789abcdef 12 ",                   /* trailing bytes */
      "0123456789abcdef0123456789abcdef\t12",                   /* not a space */
      "0123456789ABCDEF0123456789abcdef 12",                    /* upper case */
      "0123456789abcdef0123456789abcde 12",                     /* a short nonce */
      "0123456789abcdef0123456789abcdef -1",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (cs_array_claim_parse(bad[i], strlen(bad[i]), &at) != CS_E_PARSE) fail_msg("parsed: '%s'", bad[i]);
  assert_int_equal(cs_array_claim_parse(NULL, 0, &at), CS_E_PARSE);
  assert_true(cs_array_claim_stale(100, 160, 60));
  assert_false(cs_array_claim_stale(100, 159, 60));
  assert_false(cs_array_claim_stale(100, 99, 0)); /* from the future: never */
  assert_true(cs_array_claim_stale(0, UINT64_MAX, UINT64_MAX));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_geometry_refusals),
      cmocka_unit_test(test_grid_and_edge_chunks),
      cmocka_unit_test(test_slice_refusals_and_empty),
      cmocka_unit_test(test_stamps),
      cmocka_unit_test(test_arbiter),
      cmocka_unit_test(test_claims),
      cmocka_unit_test(test_property_against_brute_force),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
