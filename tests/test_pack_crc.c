/*
 * The pack's CRC-32 (pk_crc32: ISA-L's crc32_gzip_refl when the build found
 * it) against zlib's crc32, the format's reference, on random data: every
 * length up to 1 KiB, large buffers, odd alignments and running values split
 * at random points. A failing run prints its seed and the command that
 * replays it (CAPSTORE_TEST_SEED=N).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pack_internal.h"
#include "test_pack_util.h"

static uint64_t seed;

/* splitmix64: a small, fixed generator, so a seed replays exactly. */
static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

static uint8_t *random_bytes(uint64_t *state, size_t len) {
  uint8_t *bytes = malloc(len + 64);
  assert_non_null(bytes);
  for (size_t i = 0; i < len + 64; i++) bytes[i] = (uint8_t)next_random(state);
  return bytes;
}

static void expect_same(const uint8_t *bytes, size_t len, uint32_t start, const char *what) {
  uint32_t want = pk_crc32_zlib(start, bytes, len);
  uint32_t got = pk_crc32(start, bytes, len);
  if (got != want) {
    fail_msg("%s: length %zu start %08x: pk_crc32 %08x, zlib %08x (seed %llu; replay: "
             "CAPSTORE_TEST_SEED=%llu ./test_pack_crc)", what, len, start, got, want,
             (unsigned long long)seed, (unsigned long long)seed);
  }
}

static void test_known_values(void **state) {
  (void)state;
  /* The check value of CRC-32/ISO-HDLC (zlib, gzip, PNG). */
  assert_int_equal(pk_crc32(0, (const uint8_t *)"123456789", 9), 0xcbf43926u);
  assert_int_equal(pk_crc32(0, NULL, 0), 0u);
  assert_int_equal(pk_crc32(0x12345678u, NULL, 0), 0x12345678u);
  /* A wrong polynomial or a missing final inversion would not give this. */
  assert_int_not_equal(pk_crc32(0, (const uint8_t *)"123456788", 9), 0xcbf43926u);
}

static void test_every_short_length_and_alignment(void **state) {
  (void)state;
  uint64_t rng = seed;
  uint8_t *bytes = random_bytes(&rng, 1024);
  for (size_t len = 0; len <= 1024; len++) {
    expect_same(bytes + (len % 61), len > 1024 - 61 ? 1024 - 61 : len, 0, "short");
  }
  for (size_t offset = 0; offset < 64; offset++) expect_same(bytes + offset, 777, 0, "aligned");
  free(bytes);
}

static void test_large_buffers(void **state) {
  (void)state;
  uint64_t rng = seed ^ 1;
  size_t len = (size_t)3 << 20;
  uint8_t *bytes = random_bytes(&rng, len);
  expect_same(bytes, len, 0, "3 MiB");
  expect_same(bytes + 3, len - 3, 0, "3 MiB at an odd address");
  expect_same(bytes, 65536, 0, "64 KiB");
  free(bytes);
}

static void test_running_value_splits(void **state) {
  (void)state;
  uint64_t rng = seed ^ 2;
  size_t len = (size_t)1 << 20;
  uint8_t *bytes = random_bytes(&rng, len);
  uint32_t whole = pk_crc32_zlib(0, bytes, len);
  for (int round = 0; round < 200; round++) {
    uint32_t crc = 0;
    size_t at = 0;
    while (at < len) {
      size_t step = (size_t)(next_random(&rng) % 70000);
      if (step > len - at) step = len - at;
      expect_same(bytes + at, step, crc, "split");
      crc = pk_crc32(crc, bytes + at, step);
      at += step;
    }
    if (crc != whole) fail_msg("split CRC %08x != whole %08x (seed %llu)", crc, whole, (unsigned long long)seed);
  }
  free(bytes);
}

static void test_random_start_values(void **state) {
  (void)state;
  uint64_t rng = seed ^ 3;
  uint8_t *bytes = random_bytes(&rng, 4096);
  for (int i = 0; i < 1000; i++) {
    size_t len = (size_t)(next_random(&rng) % 4096);
    expect_same(bytes, len, (uint32_t)next_random(&rng), "start value");
  }
  free(bytes);
}

int main(void) {
  const char *env = getenv("CAPSTORE_TEST_SEED");
  seed = env != NULL ? strtoull(env, NULL, 10) : 20240613u;
  printf("test_pack_crc: seed %llu, pk_crc32 is %s\n", (unsigned long long)seed,
         pk_crc32_accelerated() ? "ISA-L crc32_gzip_refl" : "zlib crc32_z (ISA-L not built in)");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_known_values),
      cmocka_unit_test(test_every_short_length_and_alignment),
      cmocka_unit_test(test_large_buffers),
      cmocka_unit_test(test_running_value_splits),
      cmocka_unit_test(test_random_start_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
