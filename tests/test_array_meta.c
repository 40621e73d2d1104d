/*
 * Unit tests of the array document (capstore/array_meta.h): canonical bytes
 * whatever the attributes' key order, round trips, the id rule, every
 * refusal of a document named by its field, and the diff that names the
 * field two creators disagree on.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "capstore/array_meta.h"

static cs_array_geometry geom(void) {
  cs_array_geometry g = {.dims = 3};
  uint64_t shape[3] = {24, 4096, 32}, chunk[3] = {1, 512, 32};
  memcpy(g.shape, shape, sizeof shape);
  memcpy(g.chunk, chunk, sizeof chunk);
  return g;
}

static void test_canonical_round_trip(void **state) {
  (void)state;
  cs_array_geometry g = geom();
  cs_array_meta a, b, back;
  char msg[200];
  assert_int_equal(cs_array_meta_make(&a, "eval-2026.attn-entropy", &g, CS_DTYPE_BFLOAT16, CS_ARRAY_CODEC_BLOSC,
                                      "{\"z\": 1, \"a\": [true, null], \"m\": {\"y\": \"\\u00e9\", \"b\": 2}}", msg,
                                      sizeof msg),
                   CS_E_OK);
  assert_int_equal(cs_array_meta_make(&b, "eval-2026.attn-entropy", &g, CS_DTYPE_BFLOAT16, CS_ARRAY_CODEC_BLOSC,
                                      "{\"m\":{\"b\":2,\"y\":\"\\u00e9\"},\"a\":[true,null],\"z\":1}", msg, sizeof msg),
                   CS_E_OK);
  assert_int_equal(a.geometry.item_bytes, 2); /* from the dtype */
  char ta[CS_ARRAY_META_BYTES_MAX], tb[CS_ARRAY_META_BYTES_MAX];
  size_t la, lb;
  assert_int_equal(cs_array_meta_encode(&a, ta, sizeof ta, &la), CS_E_OK);
  assert_int_equal(cs_array_meta_encode(&b, tb, sizeof tb, &lb), CS_E_OK);
  assert_string_equal(ta, tb); /* the same array, the same bytes: the same content-addressed key */
  assert_string_equal(ta, "{\"attributes\":{\"a\":[true,null],\"m\":{\"b\":2,\"y\":\"\\u00E9\"},\"z\":1},"
                          "\"chunk\":[1,512,32],\"codec\":\"blosc\",\"dtype\":\"bfloat16\","
                          "\"format\":\"capstore-array-v1\",\"id\":\"eval-2026.attn-entropy\",\"shape\":[24,4096,32]}");
  assert_int_equal(la, strlen(ta));
  assert_int_equal(cs_array_meta_decode(ta, la, &back, msg, sizeof msg), CS_E_OK);
  char buf[32];
  assert_null(cs_array_meta_diff(&a, &back, buf, sizeof buf));
  assert_int_equal(cs_array_meta_encode(&back, tb, sizeof tb, &lb), CS_E_OK);
  assert_string_equal(ta, tb);
  /* No attributes: "{}". */
  assert_int_equal(cs_array_meta_make(&a, "x", &g, CS_DTYPE_FLOAT32, CS_ARRAY_CODEC_NONE, NULL, msg, sizeof msg), CS_E_OK);
  assert_string_equal(a.attributes, "{}");
  /* Too small a buffer. */
  assert_int_equal(cs_array_meta_encode(&a, ta, 20, &la), CS_E_TOO_LARGE);
}

static void test_id_rule(void **state) {
  (void)state;
  const char *good[] = {"a", "run-1.layer_3.attn", "A.b-c_d", "..x", "x..", "..."};
  const char *bad[] = {"", ".", "..", "e/slots/3", "/a", "a/", "a b", "a\\b", "é", "a:b"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) assert_int_equal(cs_array_id_check(good[i], NULL, 0), CS_E_OK);
  char msg[160];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    msg[0] = '\0';
    assert_int_equal(cs_array_id_check(bad[i], msg, sizeof msg), CS_E_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "array id"));
  }
  char longest[CS_ARRAY_ID_MAX + 2];
  memset(longest, 'a', sizeof longest);
  longest[CS_ARRAY_ID_MAX] = '\0';
  assert_int_equal(cs_array_id_check(longest, NULL, 0), CS_E_OK);
  longest[CS_ARRAY_ID_MAX] = 'a';
  longest[CS_ARRAY_ID_MAX + 1] = '\0';
  assert_int_equal(cs_array_id_check(longest, msg, sizeof msg), CS_E_INVALID_ARGUMENT);
}

static void make_refused(const char *id, cs_array_geometry g, cs_dtype dtype, int codec, const char *attrs,
                         const char *needle) {
  cs_array_meta m;
  char msg[200] = "";
  assert_int_equal(cs_array_meta_make(&m, id, &g, dtype, (cs_array_codec)codec, attrs, msg, sizeof msg),
                   CS_E_INVALID_ARGUMENT);
  if (strstr(msg, needle) == NULL) fail_msg("message \"%s\" does not name \"%s\"", msg, needle);
}

static void test_make_refusals(void **state) {
  (void)state;
  cs_array_geometry g = geom();
  make_refused("a b", g, CS_DTYPE_FLOAT32, 0, NULL, "array id");
  make_refused("a", g, CS_DTYPE_COUNT_, 0, NULL, "dtype");
  make_refused("a", g, CS_DTYPE_FLOAT32, 7, NULL, "codec");
  make_refused("a", g, CS_DTYPE_FLOAT32, 0, "[1,2]", "JSON object");
  make_refused("a", g, CS_DTYPE_FLOAT32, 0, "{\"a\":", "not JSON");
  make_refused("a", g, CS_DTYPE_FLOAT32, 0, "{\"a\":1,\"a\":2}", "not JSON");
  char big[5000];
  memset(big, 'x', sizeof big);
  memcpy(big, "{\"k\":\"", 6);
  memcpy(big + sizeof big - 3, "\"}", 3);
  make_refused("a", g, CS_DTYPE_FLOAT32, 0, big, "4096");
  g.chunk[1] = 5000;
  make_refused("a", g, CS_DTYPE_FLOAT32, 0, NULL, "chunk[1]");
}

static void decode_refused(const char *doc, const char *needle) {
  cs_array_meta m;
  char msg[200] = "";
  assert_int_equal(cs_array_meta_decode(doc, strlen(doc), &m, msg, sizeof msg), CS_E_PARSE);
  if (strstr(msg, needle) == NULL) fail_msg("\"%s\": message \"%s\" does not name \"%s\"", doc, msg, needle);
}

#define DOC(attrs, chunk, codec, dtype, format, id, shape)                                                  \
  "{\"attributes\":" attrs ",\"chunk\":" chunk ",\"codec\":" codec ",\"dtype\":" dtype ",\"format\":" format \
  ",\"id\":" id ",\"shape\":" shape "}"

static void test_decode_refusals(void **state) {
  (void)state;
  cs_array_meta m;
  const char *good = DOC("{}", "[2,3]", "\"none\"", "\"int8\"", "\"capstore-array-v1\"", "\"a\"", "[4,9]");
  assert_int_equal(cs_array_meta_decode(good, strlen(good), &m, NULL, 0), CS_E_OK);
  assert_int_equal(cs_array_chunk_count(&m.geometry), 6);
  decode_refused("[]", "not a JSON object");
  decode_refused("{", "not JSON");
  decode_refused(DOC("{}", "[2,3]", "\"none\"", "\"int8\"", "\"capstore-array-v2\"", "\"a\"", "[4,9]"), "format");
  decode_refused(DOC("{}", "[2]", "\"none\"", "\"int8\"", "\"capstore-array-v1\"", "\"a\"", "[4,9]"), "chunk");
  decode_refused(DOC("{}", "[2,0]", "\"none\"", "\"int8\"", "\"capstore-array-v1\"", "\"a\"", "[4,9]"), "chunk");
  decode_refused(DOC("{}", "[2,3]", "\"none\"", "\"int8\"", "\"capstore-array-v1\"", "\"a\"", "[4,-9]"), "shape");
  decode_refused(DOC("{}", "[2,3]", "\"none\"", "\"int8\"", "\"capstore-array-v1\"", "\"a\"", "[4,2.5]"), "shape");
  decode_refused(DOC("{}", "[2,3]", "\"none\"", "\"int8\"", "\"capstore-array-v1\"", "\"a\"", "[]"), "shape");
  decode_refused(DOC("{}", "[2,3]", "\"zip\"", "\"int8\"", "\"capstore-array-v1\"", "\"a\"", "[4,9]"), "codec");
  decode_refused(DOC("{}", "[2,3]", "\"none\"", "\"int7\"", "\"capstore-array-v1\"", "\"a\"", "[4,9]"), "dtype");
  decode_refused(DOC("{}", "[2,3]", "\"none\"", "\"int8\"", "\"capstore-array-v1\"", "\"a/b\"", "[4,9]"), "array id");
  /* The right fields, spelled otherwise: spaces, another key order, an escaped letter, 2.50 in the attributes. */
  decode_refused("{\"attributes\": {}, \"chunk\":[2,3],\"codec\":\"none\",\"dtype\":\"int8\",\"format\":"
                 "\"capstore-array-v1\",\"id\":\"a\",\"shape\":[4,9]}",
                 "canonical");
  decode_refused("{\"chunk\":[2,3],\"attributes\":{},\"codec\":\"none\",\"dtype\":\"int8\",\"format\":"
                 "\"capstore-array-v1\",\"id\":\"a\",\"shape\":[4,9]}",
                 "canonical");
  decode_refused(DOC("{}", "[2,3]", "\"none\"", "\"int8\"", "\"capstore-array-v1\"", "\"\\u0061\"", "[4,9]"), "canonical");
  decode_refused(DOC("{\"x\":2.50}", "[2,3]", "\"none\"", "\"int8\"", "\"capstore-array-v1\"", "\"a\"", "[4,9]"),
                 "canonical");
  decode_refused(DOC("{}", "[2,3]", "\"none\"", "\"int8\"", "\"capstore-array-v1\"", "\"a\"", "[4,9]") "\n", "canonical");
  decode_refused(DOC("{}", "[2,3]", "\"none\"", "\"int8\"", "\"capstore-array-v1\"", "\"a\\u0000b\"", "[4,9]"), "not JSON");
  decode_refused(DOC("[]", "[2,3]", "\"none\"", "\"int8\"", "\"capstore-array-v1\"", "\"a\"", "[4,9]"), "attributes");
  decode_refused(DOC("{}", "[5,3]", "\"none\"", "\"int8\"", "\"capstore-array-v1\"", "\"a\"", "[4,9]"), "chunk[0]");
  decode_refused("{\"attributes\":{},\"chunk\":[1],\"codec\":\"none\",\"dtype\":\"int8\",\"id\":\"a\",\"shape\":[1]}",
                 "format");
  decode_refused("{\"attributes\":{},\"chunk\":[1],\"codec\":\"none\",\"dtype\":\"int8\",\"format\":"
                 "\"capstore-array-v1\",\"id\":\"a\",\"shape\":[1],\"extra\":1}",
                 "does not know");
  decode_refused("{\"attributes\":{},\"attributes\":{},\"chunk\":[1],\"codec\":\"none\",\"dtype\":\"int8\","
                 "\"format\":\"capstore-array-v1\",\"id\":\"a\",\"shape\":[1]}",
                 "not JSON");
  char huge[CS_ARRAY_META_BYTES_MAX + 2];
  memset(huge, ' ', sizeof huge);
  assert_int_equal(cs_array_meta_decode(huge, sizeof huge, &m, NULL, 0), CS_E_TOO_LARGE);
}

static void test_diff_names_the_field(void **state) {
  (void)state;
  cs_array_geometry g = geom(), g2 = geom();
  cs_array_meta a, b;
  char buf[32];
  assert_int_equal(cs_array_meta_make(&a, "x", &g, CS_DTYPE_FLOAT16, 1, "{\"k\":1}", NULL, 0), CS_E_OK);
  g2.shape[1] = 4095;
  assert_int_equal(cs_array_meta_make(&b, "x", &g2, CS_DTYPE_FLOAT16, 1, "{\"k\":1}", NULL, 0), CS_E_OK);
  assert_string_equal(cs_array_meta_diff(&a, &b, buf, sizeof buf), "shape[1]");
  g2 = geom();
  g2.chunk[2] = 16;
  assert_int_equal(cs_array_meta_make(&b, "x", &g2, CS_DTYPE_FLOAT16, 1, "{\"k\":1}", NULL, 0), CS_E_OK);
  assert_string_equal(cs_array_meta_diff(&a, &b, buf, sizeof buf), "chunk[2]");
  assert_int_equal(cs_array_meta_make(&b, "x", &g, CS_DTYPE_BFLOAT16, 1, "{\"k\":1}", NULL, 0), CS_E_OK);
  assert_string_equal(cs_array_meta_diff(&a, &b, buf, sizeof buf), "dtype");
  assert_int_equal(cs_array_meta_make(&b, "x", &g, CS_DTYPE_FLOAT16, 0, "{\"k\":1}", NULL, 0), CS_E_OK);
  assert_string_equal(cs_array_meta_diff(&a, &b, buf, sizeof buf), "codec");
  assert_int_equal(cs_array_meta_make(&b, "x", &g, CS_DTYPE_FLOAT16, 1, "{\"k\":2}", NULL, 0), CS_E_OK);
  assert_string_equal(cs_array_meta_diff(&a, &b, buf, sizeof buf), "attributes");
  assert_int_equal(cs_array_meta_make(&b, "y", &g, CS_DTYPE_FLOAT16, 1, "{\"k\":1}", NULL, 0), CS_E_OK);
  assert_string_equal(cs_array_meta_diff(&a, &b, buf, sizeof buf), "id");
}


static void test_key_is_content_addressed(void **state) {
  (void)state;
  cs_array_geometry g = geom();
  cs_array_meta a, b;
  assert_int_equal(cs_array_meta_make(&a, "k1", &g, CS_DTYPE_FLOAT32, 1, "{\"x\":1,\"y\":2}", NULL, 0), CS_E_OK);
  assert_int_equal(cs_array_meta_make(&b, "k1", &g, CS_DTYPE_FLOAT32, 1, "{\"y\":2,\"x\":1}", NULL, 0), CS_E_OK);
  char ka[300], kb[300];
  assert_int_equal(cs_array_meta_key(&a, "cap/", ka, sizeof ka), CS_E_OK);
  assert_int_equal(cs_array_meta_key(&b, "cap/", kb, sizeof kb), CS_E_OK);
  assert_string_equal(ka, kb); /* the same array, the same key */
  assert_int_equal(strncmp(ka, "cap/arrays/k1/geometry-", 23), 0);
  assert_int_equal(strlen(ka), 23 + 64 + 5);
  assert_string_equal(ka + strlen(ka) - 5, ".json");
  g.shape[0] = 25;
  assert_int_equal(cs_array_meta_make(&b, "k1", &g, CS_DTYPE_FLOAT32, 1, "{\"x\":1,\"y\":2}", NULL, 0), CS_E_OK);
  assert_int_equal(cs_array_meta_key(&b, "cap/", kb, sizeof kb), CS_E_OK);
  assert_string_not_equal(ka, kb); /* another geometry, another key */
  assert_int_equal(cs_array_meta_key(&a, "cap/", ka, 40), CS_E_TOO_LARGE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_canonical_round_trip), cmocka_unit_test(test_id_rule),
      cmocka_unit_test(test_make_refusals),        cmocka_unit_test(test_decode_refusals),
      cmocka_unit_test(test_diff_names_the_field), cmocka_unit_test(test_key_is_content_addressed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
