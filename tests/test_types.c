/*
 * Unit tests of the shared vocabulary (capstore/types.h): canonical UUID
 * text, hex digits, the pack key rule, pack reference keys, error and
 * outcome names, the outcome classes and the PRNG. Each accepted value sits
 * next to the refused values around it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "capstore/types.h"

static const char canonical[] = "0190a3c4-5e6f-7a8b-9c0d-e1f2a3b4c5d6";

static int parse_text(const char *text, cs_uuid *out) {
  return cs_uuid_parse(text, strlen(text), out);
}

static int key_id(const char *key, cs_uuid *out) { return cs_key_pack_id(key, strlen(key), out); }

/* ---- UUID text ---------------------------------------------------------- */

static void test_uuid_parse_canonical(void **state) {
  (void)state;
  static const uint8_t expected[16] = {0x01, 0x90, 0xa3, 0xc4, 0x5e, 0x6f, 0x7a, 0x8b,
                                       0x9c, 0x0d, 0xe1, 0xf2, 0xa3, 0xb4, 0xc5, 0xd6};
  cs_uuid id;
  assert_int_equal(parse_text(canonical, &id), CS_E_OK);
  assert_memory_equal(id.bytes, expected, 16);
  assert_int_equal(parse_text("00000000-0000-0000-0000-000000000000", &id), CS_E_OK);
  assert_int_equal(parse_text("ffffffff-ffff-ffff-ffff-ffffffffffff", &id), CS_E_OK);
  assert_int_equal(id.bytes[0], 0xff);
  assert_int_equal(id.bytes[15], 0xff);
}

static void test_uuid_parse_refuses_uppercase(void **state) {
  (void)state;
  cs_uuid id;
  assert_int_equal(parse_text("0190A3C4-5E6F-7A8B-9C0D-E1F2A3B4C5D6", &id), CS_E_PARSE);
  /* One uppercase digit anywhere is enough to refuse. */
  assert_int_equal(parse_text("0190a3c4-5e6f-7a8b-9c0d-e1f2a3b4c5dF", &id), CS_E_PARSE);
  assert_int_equal(parse_text("A190a3c4-5e6f-7a8b-9c0d-e1f2a3b4c5d6", &id), CS_E_PARSE);
}

static void test_uuid_parse_refuses_dash_positions(void **state) {
  (void)state;
  /* Same length as canonical text: dashes moved by one, or replaced by a digit. */
  static const char *const bad[] = {
      "0190a3c-45e6f-7a8b-9c0d-e1f2a3b4c5d6", "0190a3c45-e6f-7a8b-9c0d-e1f2a3b4c5d6",
      "0190a3c4-5e6f7-a8b-9c0d-e1f2a3b4c5d6", "0190a3c4-5e6f-7a8b-9c0de-1f2a3b4c5d6",
      "0190a3c405e6f07a8b09c0d0e1f2a3b4c5d6", "0190a3c4-5e6f-7a8b-9c0d-e1f2a3b4c5-6",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cs_uuid id;
    assert_int_equal(strlen(bad[i]), CS_UUID_TEXT_LEN);
    if (parse_text(bad[i], &id) != CS_E_PARSE) fail_msg("accepted '%s'", bad[i]);
  }
}

static void test_uuid_parse_refuses_length(void **state) {
  (void)state;
  cs_uuid id;
  assert_int_equal(cs_uuid_parse(canonical, CS_UUID_TEXT_LEN - 1, &id), CS_E_PARSE);
  assert_int_equal(parse_text("0190a3c4-5e6f-7a8b-9c0d-e1f2a3b4c5d6a", &id), CS_E_PARSE);
  assert_int_equal(parse_text("0190a3c45e6f7a8b9c0de1f2a3b4c5d6", &id), CS_E_PARSE);
  assert_int_equal(parse_text("", &id), CS_E_PARSE);
  assert_int_equal(cs_uuid_parse(NULL, CS_UUID_TEXT_LEN, &id), CS_E_PARSE);
  /* The twin: the exact length of the same text is accepted. */
  assert_int_equal(cs_uuid_parse(canonical, CS_UUID_TEXT_LEN, &id), CS_E_OK);
}

static void test_uuid_parse_refuses_non_hex(void **state) {
  (void)state;
  static const char bad[] = {'g', 'z', ' ', '\0', '-', '/', ':', '`', 'G'};
  for (size_t i = 0; i < sizeof bad; i++) {
    char text[CS_UUID_TEXT_LEN + 1];
    memcpy(text, canonical, sizeof text);
    text[14] = bad[i];
    cs_uuid id;
    assert_int_equal(cs_uuid_parse(text, CS_UUID_TEXT_LEN, &id), CS_E_PARSE);
  }
}

/* ---- hex digits ---------------------------------------------------------- */

static void test_hex_value_by_case(void **state) {
  (void)state;
  assert_int_equal(cs_hex_value('0', CS_HEX_LOWER), 0);
  assert_int_equal(cs_hex_value('9', CS_HEX_UPPER), 9);
  assert_int_equal(cs_hex_value('a', CS_HEX_LOWER), 10);
  assert_int_equal(cs_hex_value('f', CS_HEX_ANY), 15);
  assert_int_equal(cs_hex_value('A', CS_HEX_UPPER), 10);
  assert_int_equal(cs_hex_value('F', CS_HEX_ANY), 15);
  /* The other case is refused where the caller asked for one. */
  assert_int_equal(cs_hex_value('a', CS_HEX_UPPER), -1);
  assert_int_equal(cs_hex_value('F', CS_HEX_LOWER), -1);
  static const char bad[] = {'g', 'G', '/', ':', '@', '`', ' ', '\0', '-', (char)0xff};
  for (size_t i = 0; i < sizeof bad; i++) assert_int_equal(cs_hex_value(bad[i], CS_HEX_ANY), -1);
}

static void test_hex_decode(void **state) {
  (void)state;
  uint8_t out[4] = {0};
  assert_int_equal(cs_hex_decode("00ff7a10", 8, CS_HEX_LOWER, out), CS_E_OK);
  assert_memory_equal(out, ((uint8_t[]){0x00, 0xff, 0x7a, 0x10}), 4);
  assert_int_equal(cs_hex_decode("DeadBEEF", 8, CS_HEX_ANY, out), CS_E_OK);
  assert_memory_equal(out, ((uint8_t[]){0xde, 0xad, 0xbe, 0xef}), 4);
  assert_int_equal(cs_hex_decode("", 0, CS_HEX_LOWER, NULL), CS_E_OK);
  /* Refused: an odd length, a non-digit anywhere, a digit of the other case. */
  assert_int_equal(cs_hex_decode("abc", 3, CS_HEX_LOWER, out), CS_E_PARSE);
  assert_int_equal(cs_hex_decode("ab0g", 4, CS_HEX_LOWER, out), CS_E_PARSE);
  assert_int_equal(cs_hex_decode("DEADBEEF", 8, CS_HEX_LOWER, out), CS_E_PARSE);
  assert_int_equal(cs_hex_decode("deadbeef", 8, CS_HEX_UPPER, out), CS_E_PARSE);
}

static void test_uuid_format_round_trip(void **state) {
  (void)state;
  cs_prng prng;
  cs_prng_seed(&prng, 7);
  for (uint32_t round = 0; round < 1000; round++) {
    cs_uuid id, back;
    for (uint32_t i = 0; i < 16; i++) id.bytes[i] = (uint8_t)cs_prng_next(&prng);
    char text[CS_UUID_TEXT_LEN + 1];
    memset(text, 'x', sizeof text);
    cs_uuid_format(&id, text);
    assert_int_equal(strlen(text), CS_UUID_TEXT_LEN);
    assert_int_equal(cs_uuid_parse(text, CS_UUID_TEXT_LEN, &back), CS_E_OK);
    assert_true(cs_uuid_equal(&id, &back));
    assert_int_equal(cs_uuid_compare(&id, &back), 0);
  }
  cs_uuid id;
  char text[CS_UUID_TEXT_LEN + 1];
  assert_int_equal(parse_text(canonical, &id), CS_E_OK);
  cs_uuid_format(&id, text);
  assert_string_equal(text, canonical);
}

static void test_uuid_equal_and_compare(void **state) {
  (void)state;
  cs_uuid a, b;
  assert_int_equal(parse_text(canonical, &a), CS_E_OK);
  b = a;
  b.bytes[15]++;
  assert_false(cs_uuid_equal(&a, &b));
  assert_true(cs_uuid_compare(&a, &b) < 0);
  assert_true(cs_uuid_compare(&b, &a) > 0);
}

/* ---- the pack key rule -------------------------------------------------- */

static void test_key_pack_id_valid(void **state) {
  (void)state;
  cs_uuid expected, id;
  assert_int_equal(parse_text(canonical, &expected), CS_E_OK);
  memset(&id, 0, sizeof id);
  assert_int_equal(key_id("cat/0190a3c4-5e6f-7a8b-9c0d-e1f2a3b4c5d6.dmi-pack", &id), CS_E_OK);
  assert_true(cs_uuid_equal(&id, &expected));
  memset(&id, 0, sizeof id);
  assert_int_equal(key_id("0190a3c4-5e6f-7a8b-9c0d-e1f2a3b4c5d6.dmi-pack", &id), CS_E_OK);
  assert_true(cs_uuid_equal(&id, &expected));
  assert_int_equal(key_id("a/b/c/0190a3c4-5e6f-7a8b-9c0d-e1f2a3b4c5d6.dmi-pack", &id), CS_E_OK);
}

static void test_key_pack_id_refused(void **state) {
  (void)state;
  static const char *const bad[] = {
      "cat/0190a3c4-5e6f-7a8b-9c0d-e1f2a3b4c5d6",               /* no suffix */
      "cat/0190a3c4-5e6f-7a8b-9c0d-e1f2a3b4c5d6.dmi-pac",       /* short suffix */
      "cat/0190a3c4-5e6f-7a8b-9c0d-e1f2a3b4c5d6.dmi-pack.tmp",  /* suffix not last */
      "cat/x0190a3c4-5e6f-7a8b-9c0d-e1f2a3b4c5d6.dmi-pack",     /* uuid not the whole segment */
      "cat/pack-0190a3c4-5e6f-7a8b-9c0d-e1f2a3b4c5d6.dmi-pack", /* prefix in the segment */
      "cat/0190A3C4-5E6F-7A8B-9C0D-E1F2A3B4C5D6.dmi-pack",      /* uppercase */
      "cat/0190a3c4-5e6f-7a8b-9c0d-e1f2a3b4c5d.dmi-pack",       /* one digit short */
      "cat/not-a-uuid.dmi-pack",
      ".dmi-pack",
      "",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cs_uuid id;
    if (key_id(bad[i], &id) != CS_E_PARSE) fail_msg("accepted key '%s'", bad[i]);
  }
  cs_uuid id;
  assert_int_equal(cs_key_pack_id(NULL, 0, &id), CS_E_PARSE);
}

/* ---- pack reference keys ------------------------------------------------ */

static void test_pack_ref_set_key_bounds(void **state) {
  (void)state;
  static char key[CS_KEY_MAX + 1];
  memset(key, 'k', sizeof key);
  cs_pack_ref *ref = calloc(1, sizeof *ref);
  assert_non_null(ref);
  assert_int_equal(cs_pack_ref_set_key(ref, key, CS_KEY_MAX - 1), CS_E_OK);
  assert_int_equal(ref->key_len, CS_KEY_MAX - 1);
  assert_int_equal(ref->key[CS_KEY_MAX - 1], '\0');
  assert_int_equal(strlen(ref->key), CS_KEY_MAX - 1);
  /* One byte more leaves no room for the NUL: refused, and the old key kept. */
  assert_int_equal(cs_pack_ref_set_key(ref, key, CS_KEY_MAX), CS_E_TOO_LARGE);
  assert_int_equal(cs_pack_ref_set_key(ref, key, CS_KEY_MAX + 1), CS_E_TOO_LARGE);
  assert_int_equal(ref->key_len, CS_KEY_MAX - 1);
  assert_int_equal(cs_pack_ref_set_key(ref, "cat/a", 3), CS_E_OK);
  assert_string_equal(ref->key, "cat");
  assert_int_equal(ref->key_len, 3);
  free(ref);
}

/* ---- names and classes -------------------------------------------------- */

static void test_strerror_names_every_error(void **state) {
  (void)state;
  const char *seen[19];
  for (int err = 0; err >= CS_E_SLOT_WRITTEN; err--) {
    const char *text = cs_strerror(err);
    assert_non_null(text);
    assert_true(strlen(text) > 0);
    if (strcmp(text, cs_strerror(1)) == 0) fail_msg("error %d has no name", err);
    for (int k = 0; k < -err; k++)
      if (strcmp(text, seen[k]) == 0) fail_msg("errors %d and %d share a name", err, -k);
    seen[-err] = text;
  }
  /* The negative twins: values outside the enum still get a text. */
  static const int outside[] = {1, CS_E_SLOT_WRITTEN - 1, -1000, 1000, INT32_MIN, INT32_MAX};
  for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
    assert_non_null(cs_strerror(outside[i]));
    assert_string_equal(cs_strerror(outside[i]), "unknown error");
  }
}

static void test_outcome_names(void **state) {
  (void)state;
  for (int o = 0; o < CS_OUT_COUNT_; o++) {
    assert_non_null(cs_outcome_name((cs_outcome)o));
    assert_string_not_equal(cs_outcome_name((cs_outcome)o), "bad_outcome");
  }
  assert_string_equal(cs_outcome_name(CS_OUT_FORBIDDEN), "forbidden");
  assert_string_equal(cs_outcome_name(CS_OUT_COUNT_), "bad_outcome");
  assert_string_equal(cs_outcome_name((cs_outcome)-1), "bad_outcome");
}

static void test_outcome_classes(void **state) {
  (void)state;
  static const struct {
    cs_outcome outcome;
    bool outage;
    bool maybe_applied;
  } cases[] = {
      {CS_OUT_OK, false, false},           {CS_OUT_REFUSED, true, false},
      {CS_OUT_TIMEOUT, true, true},        {CS_OUT_UNKNOWN, true, true},
      {CS_OUT_SERVER_ERROR, true, true},   {CS_OUT_THROTTLED, true, false},
      {CS_OUT_FORBIDDEN, false, false},    {CS_OUT_NOT_FOUND, false, false},
      {CS_OUT_PRECONDITION, false, false}, {CS_OUT_TOO_LARGE, false, false},
      {CS_OUT_INVALID, false, false},
  };
  assert_int_equal(sizeof cases / sizeof cases[0], CS_OUT_COUNT_);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *name = cs_outcome_name(cases[i].outcome);
    if (cs_outcome_is_outage(cases[i].outcome) != cases[i].outage)
      fail_msg("%s: is_outage should be %d", name, cases[i].outage);
    if (cs_outcome_maybe_applied(cases[i].outcome) != cases[i].maybe_applied)
      fail_msg("%s: maybe_applied should be %d", name, cases[i].maybe_applied);
  }
}

/* ---- the PRNG ----------------------------------------------------------- */

static void test_prng_deterministic(void **state) {
  (void)state;
  cs_prng a, b, c;
  cs_prng_seed(&a, 12345);
  cs_prng_seed(&b, 12345);
  cs_prng_seed(&c, 12346);
  uint32_t differ = 0;
  for (uint32_t i = 0; i < 1000; i++) {
    uint64_t x = cs_prng_next(&a);
    assert_int_equal(x, cs_prng_next(&b));
    differ += x != cs_prng_next(&c);
  }
  /* Another seed gives another stream. */
  assert_true(differ > 990);
}

static void test_prng_split_is_deterministic_and_independent(void **state) {
  (void)state;
  cs_prng p1, p2, c1, c2;
  cs_prng_seed(&p1, 99);
  cs_prng_seed(&p2, 99);
  cs_prng_split(&p1, &c1);
  cs_prng_split(&p2, &c2);
  uint32_t same_as_parent = 0;
  for (uint32_t i = 0; i < 100; i++) {
    uint64_t x = cs_prng_next(&c1);
    assert_int_equal(x, cs_prng_next(&c2));
    same_as_parent += x == cs_prng_next(&p1);
  }
  assert_int_equal(same_as_parent, 0);
}

static void test_prng_below_bounds(void **state) {
  (void)state;
  cs_prng prng;
  cs_prng_seed(&prng, 1);
  for (uint32_t i = 0; i < 100; i++) {
    assert_int_equal(cs_prng_below(&prng, 0), 0);
    assert_int_equal(cs_prng_below(&prng, 1), 0);
  }
  bool seen[7] = {false};
  for (uint32_t i = 0; i < 1000; i++) {
    uint64_t r = cs_prng_below(&prng, 7);
    assert_true(r < 7);
    seen[r] = true;
  }
  for (uint32_t v = 0; v < 7; v++) assert_true(seen[v]);
}

static void test_prng_below_large_bounds(void **state) {
  (void)state;
  static const uint64_t bounds[] = {UINT64_MAX, UINT64_MAX - 1, (UINT64_C(1) << 63) + 1,
                                    UINT64_C(1) << 63, UINT64_C(3) << 62};
  cs_prng prng;
  cs_prng_seed(&prng, 2);
  for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++) {
    uint32_t high = 0;
    for (uint32_t i = 0; i < 1000; i++) {
      uint64_t r = cs_prng_below(&prng, bounds[b]);
      assert_true(r < bounds[b]);
      high += r >= bounds[b] / 2;
    }
    /* Uniform: about half land in the upper half of the range. */
    assert_in_range(high, 400, 600);
  }
}

/* Bytes from outside, quoted for a message: control bytes as \xNN, cut with "..." to fit. */
static void test_quote_bytes(void **state) {
  (void)state;
  char out[64];
  cs_quote_bytes("cat/a\x01" "b\0c\x7f", 10, 96, out, sizeof out);
  assert_string_equal(out, "cat/a\\x01b\\x00c\\x7f");
  cs_quote_bytes("abcdefghij", 10, 4, out, sizeof out);
  assert_string_equal(out, "abcd...");
  cs_quote_bytes("", 0, 96, out, sizeof out);
  assert_string_equal(out, "");
  char small[8];
  cs_quote_bytes("abcdefghij", 10, 96, small, sizeof small);
  assert_string_equal(small, "...");
  char tight[12];
  cs_quote_bytes("\x01\x02\x03\x04", 4, 96, tight, sizeof tight);
  assert_true(strlen(tight) < sizeof tight);
  assert_string_equal(tight, "\\x01...");
}


/* Decimal text: 0 to 2^64 - 1, nothing else; canonical refuses a leading zero. */
static void test_decimal_u64(void **state) {
  (void)state;
  uint64_t v = 7;
  assert_int_equal(cs_decimal_u64("0", 1, true, &v), CS_E_OK);
  assert_true(v == 0);
  assert_int_equal(cs_decimal_u64("18446744073709551615", 20, true, &v), CS_E_OK);
  assert_true(v == UINT64_MAX);
  assert_int_equal(cs_decimal_u64("18446744073709551616", 20, false, &v), CS_E_PARSE);
  assert_int_equal(cs_decimal_u64("007", 3, true, &v), CS_E_PARSE);
  assert_int_equal(cs_decimal_u64("007", 3, false, &v), CS_E_OK);
  assert_true(v == 7);
  assert_int_equal(cs_decimal_u64("12x", 3, false, &v), CS_E_PARSE);
  assert_int_equal(cs_decimal_u64("123", 2, true, &v), CS_E_OK); /* len bytes, no terminator needed */
  assert_true(v == 12);
  assert_int_equal(cs_decimal_u64("", 0, false, &v), CS_E_PARSE);
  assert_int_equal(cs_decimal_u64(NULL, 0, false, &v), CS_E_PARSE);
  assert_int_equal(cs_decimal_u64("-1", 2, false, &v), CS_E_PARSE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_uuid_parse_canonical),
      cmocka_unit_test(test_uuid_parse_refuses_uppercase),
      cmocka_unit_test(test_uuid_parse_refuses_dash_positions),
      cmocka_unit_test(test_uuid_parse_refuses_length),
      cmocka_unit_test(test_uuid_parse_refuses_non_hex),
      cmocka_unit_test(test_hex_value_by_case),
      cmocka_unit_test(test_hex_decode),
      cmocka_unit_test(test_uuid_format_round_trip),
      cmocka_unit_test(test_uuid_equal_and_compare),
      cmocka_unit_test(test_key_pack_id_valid),
      cmocka_unit_test(test_key_pack_id_refused),
      cmocka_unit_test(test_pack_ref_set_key_bounds),
      cmocka_unit_test(test_strerror_names_every_error),
      cmocka_unit_test(test_outcome_names),
      cmocka_unit_test(test_outcome_classes),
      cmocka_unit_test(test_prng_deterministic),
      cmocka_unit_test(test_prng_split_is_deterministic_and_independent),
      cmocka_unit_test(test_prng_below_bounds),
      cmocka_unit_test(test_prng_below_large_bounds),
      cmocka_unit_test(test_quote_bytes),
      cmocka_unit_test(test_decimal_u64),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
