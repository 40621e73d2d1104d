/*
 * A writer opened with hash_elsewhere (the capture runtime hashes on its own
 * thread): finish_footer plus the caller's SHA-256 and cs_pack_trailer_encode
 * must give exactly the bytes and summary of a writer that hashes itself,
 * and each mode refuses the other's finish.
 */
#include "test_pack_util.h"

static void add_records(cs_pack_writer *w) {
  static const uint32_t lengths[] = {0, 1, 63, 64, 65, 100000};
  uint8_t *payload = malloc(100000);
  assert_non_null(payload);
  cs_pack_error err;
  for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
    char id[16];
    snprintf(id, sizeof id, "r%zu", i);
    for (uint32_t j = 0; j < lengths[i]; j++) payload[j] = (uint8_t)(i + j * 13);
    cs_pack_meta m = tp_meta(id, lengths[i]);
    assert_int_equal(cs_pack_writer_add_record(w, &m, payload, lengths[i], &err), CS_E_OK);
  }
  free(payload);
}

static cs_pack_writer *open_writer(tp_bytes *out, bool hash_elsewhere) {
  cs_pack_writer_config config = {.pack_id = tp_uuid(4), .created_at_ns = 1717171717000000001u,
                                  .write = tp_write, .write_context = out,
                                  .hash_elsewhere = hash_elsewhere};
  cs_pack_writer *w = NULL;
  cs_pack_error err;
  assert_int_equal(cs_pack_writer_open(&config, &w, &err), CS_E_OK);
  return w;
}

static void sha256_of(const uint8_t *bytes, size_t len, uint8_t out[32]) {
  unsigned int n = 0;
  assert_int_equal(EVP_Digest(bytes, len, out, &n, EVP_sha256(), NULL), 1);
  assert_int_equal(n, 32);
}

static void test_split_hashing_gives_the_same_pack(void **state) {
  (void)state;
  tp_bytes inside = {0};
  cs_pack_writer *w = open_writer(&inside, false);
  add_records(w);
  cs_pack_summary want;
  cs_pack_error err;
  assert_int_equal(cs_pack_writer_finish(w, &want, &err), CS_E_OK);
  cs_pack_writer_free(w);

  tp_bytes outside = {0};
  w = open_writer(&outside, true);
  add_records(w);
  cs_pack_summary got;
  assert_int_equal(cs_pack_writer_finish_footer(w, &got, &err), CS_E_OK);
  assert_int_equal(outside.len + CS_PACK_TRAILER_SIZE, got.size_bytes);
  uint8_t zero[32] = {0};
  assert_memory_equal(got.sha256, zero, 32);
  sha256_of(outside.data, outside.len, got.trailer_sha256);
  uint8_t trailer[CS_PACK_TRAILER_SIZE];
  cs_pack_trailer_encode(&got, trailer);
  tp_append(&outside, trailer, sizeof trailer);
  sha256_of(outside.data, outside.len, got.sha256);
  cs_pack_writer_free(w);

  assert_int_equal(outside.len, inside.len);
  assert_memory_equal(outside.data, inside.data, inside.len);
  assert_memory_equal(&got, &want, sizeof want);
  cs_pack_summary verified;
  assert_int_equal(cs_pack_verify_buffer(outside.data, outside.len, &verified, &err), CS_E_OK);
  assert_memory_equal(verified.sha256, want.sha256, 32);
  tp_free(&inside);
  tp_free(&outside);
}

static void test_each_mode_refuses_the_other_finish(void **state) {
  (void)state;
  cs_pack_error err;
  cs_pack_summary s;
  tp_bytes a = {0};
  cs_pack_writer *w = open_writer(&a, false);
  add_records(w);
  assert_int_equal(cs_pack_writer_finish_footer(w, &s, &err), CS_E_STATE);
  assert_int_equal(err.kind, CS_PACK_E_STATE);
  assert_int_equal(cs_pack_writer_finish(w, &s, &err), CS_E_OK); /* still usable */
  cs_pack_writer_free(w);
  tp_bytes b = {0};
  w = open_writer(&b, true);
  add_records(w);
  assert_int_equal(cs_pack_writer_finish(w, &s, &err), CS_E_STATE);
  assert_non_null(strstr(err.message, "finish_footer"));
  assert_int_equal(cs_pack_writer_finish_footer(w, NULL, &err), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_pack_writer_finish_footer(w, &s, &err), CS_E_OK);
  assert_int_equal(cs_pack_writer_finish_footer(w, &s, &err), CS_E_STATE); /* finished */
  cs_pack_writer_free(w);
  tp_free(&a);
  tp_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split_hashing_gives_the_same_pack),
      cmocka_unit_test(test_each_mode_refuses_the_other_finish),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
