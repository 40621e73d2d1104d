/* Pack writer, descriptor validation and canonical JSON. */
#include "test_pack_util.h"

#include "pack_internal.h"

/* ---- dtypes ---- */

static void test_dtype_table(void **state) {
  (void)state;
  static const struct {
    const char *name;
    uint32_t size;
  } want[CS_DTYPE_COUNT_] = {{"bool", 1},    {"uint8", 1},   {"int8", 1},     {"int16", 2},
                             {"int32", 4},   {"int64", 8},   {"float16", 2},  {"bfloat16", 2},
                             {"float32", 4}, {"float64", 8}};
  for (int i = 0; i < (int)CS_DTYPE_COUNT_; i++) {
    assert_string_equal(cs_dtype_name((cs_dtype)i), want[i].name);
    assert_int_equal(cs_dtype_item_size((cs_dtype)i), want[i].size);
    cs_dtype parsed;
    assert_int_equal(cs_dtype_parse(want[i].name, strlen(want[i].name), &parsed), CS_E_OK);
    assert_int_equal(parsed, i);
  }
  cs_dtype parsed;
  assert_null(cs_dtype_name(CS_DTYPE_COUNT_));
  assert_int_equal(cs_dtype_item_size(CS_DTYPE_COUNT_), 0);
  assert_int_equal(cs_dtype_parse("float", 5, &parsed), CS_E_NOT_FOUND);
  assert_int_equal(cs_dtype_parse("float32x", 8, &parsed), CS_E_NOT_FOUND);
  assert_int_equal(cs_dtype_parse("Float32", 7, &parsed), CS_E_NOT_FOUND);
}

/* ---- descriptor ranges, each on both sides of its boundary ---- */

static cs_pack_error_kind validate(const cs_pack_meta *m, uint64_t length) {
  cs_pack_error err;
  int rc = cs_pack_meta_validate(m, length, &err);
  assert_true((rc == CS_E_OK) == (err.kind == CS_PACK_OK));
  if (rc != CS_E_OK) assert_int_equal(rc, CS_E_INVALID_ARGUMENT);
  return err.kind;
}

static void test_meta_text_bounds(void **state) {
  (void)state;
  char text[514];
  memset(text, 'x', sizeof text);
  cs_pack_meta m = tp_meta("id", 4);
  m.hook_name = (cs_pack_text){text, 512};
  assert_int_equal(validate(&m, 4), CS_PACK_OK);
  m.hook_name = (cs_pack_text){text, 513};
  cs_pack_error err;
  cs_pack_meta_validate(&m, 4, &err);
  tp_expect(err, CS_PACK_E_FIELD_RANGE, "hook_name is 513 bytes");
  assert_string_equal(err.field, "hook_name");
  m.hook_name = (cs_pack_text){text, 1};
  assert_int_equal(validate(&m, 4), CS_PACK_OK);
  m.hook_name = (cs_pack_text){text, 0};
  assert_int_equal(validate(&m, 4), CS_PACK_E_FIELD_RANGE);
  m = tp_meta("id", 4);
  m.tenant_id = cs_pack_text_of(NULL);
  cs_pack_meta_validate(&m, 4, &err);
  tp_expect(err, CS_PACK_E_FIELD_RANGE, "tenant_id is null");
  m = tp_meta("id", 4);
  m.adapter_revision = cs_pack_text_of("lora");
  assert_int_equal(validate(&m, 4), CS_PACK_OK);
  m.adapter_revision = (cs_pack_text){"", 0};
  assert_int_equal(validate(&m, 4), CS_PACK_E_FIELD_RANGE);
}

static void test_meta_utf8(void **state) {
  (void)state;
  static const struct {
    const char *bytes;
    size_t len;
    bool valid;
  } cases[] = {
      {"\xc3\xa9", 2, true},           {"\xf0\x9f\x98\x80", 4, true},  {"a\0b", 3, true},
      {"\xf4\x8f\xbf\xbf", 4, true},   {"\xef\xbf\xbf", 3, true},      {"\xc3", 1, false},
      {"\xc0\xaf", 2, false},          {"\xe0\x80\xaf", 3, false},     {"\xed\xa0\x80", 3, false},
      {"\xf4\x90\x80\x80", 4, false},  {"\xff", 1, false},             {"\x80", 1, false},
      {"\xe2\x82", 2, false},          {"\xf8\x88\x80\x80\x80", 5, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cs_pack_meta m = tp_meta("id", 4);
    m.run_id = (cs_pack_text){cases[i].bytes, cases[i].len};
    cs_pack_error err;
    int rc = cs_pack_meta_validate(&m, 4, &err);
    if (cases[i].valid) {
      assert_int_equal(rc, CS_E_OK);
    } else {
      tp_expect(err, CS_PACK_E_FIELD_RANGE, "run_id is not valid UTF-8");
    }
  }
}

static void test_meta_number_bounds(void **state) {
  (void)state;
  cs_pack_meta m = tp_meta("id", 4);
  m.layer_number = -1;
  assert_int_equal(validate(&m, 4), CS_PACK_OK);
  m.layer_number = INT32_MAX;
  assert_int_equal(validate(&m, 4), CS_PACK_OK);
  m.layer_number = -2;
  cs_pack_error err;
  cs_pack_meta_validate(&m, 4, &err);
  tp_expect(err, CS_PACK_E_FIELD_RANGE, "layer_number is -2");
  m = tp_meta("id", 4);
  m.token_start = 7;
  m.token_end = 7;
  assert_int_equal(validate(&m, 4), CS_PACK_OK);
  m.token_end = 6;
  cs_pack_meta_validate(&m, 4, &err);
  tp_expect(err, CS_PACK_E_FIELD_RANGE, "token_end 6 is below token_start 7");
  m = tp_meta("id", 4);
  m.step_number = UINT64_MAX;
  m.captured_at_ns = UINT64_MAX;
  m.token_start = UINT64_MAX;
  m.token_end = UINT64_MAX;
  m.producer_rank = UINT32_MAX;
  m.batch_position = UINT32_MAX;
  assert_int_equal(validate(&m, 4), CS_PACK_OK);
  m.dtype = CS_DTYPE_COUNT_;
  cs_pack_meta_validate(&m, 4, &err);
  tp_expect(err, CS_PACK_E_FIELD_RANGE, "dtype");
}

static void test_meta_shape_bounds(void **state) {
  (void)state;
  cs_pack_meta m = tp_meta("id", 0);
  m.rank = 32;
  for (int i = 0; i < 32; i++) m.shape[i] = 1;
  assert_int_equal(validate(&m, 1), CS_PACK_OK);
  m.rank = 33;
  cs_pack_error err;
  cs_pack_meta_validate(&m, 1, &err);
  tp_expect(err, CS_PACK_E_FIELD_RANGE, "rank 33");
  m = tp_meta("id", 0);
  m.rank = 2;
  m.shape[0] = CS_PACK_DIM_MAX;
  m.shape[1] = 0;
  assert_int_equal(validate(&m, 0), CS_PACK_OK);
  m.shape[0] = CS_PACK_DIM_MAX + 1u;
  cs_pack_meta_validate(&m, 0, &err);
  tp_expect(err, CS_PACK_E_FIELD_RANGE, "dimension 0 is 2147483648");
  /* A scalar is one element. */
  m = tp_meta("id", 0);
  m.rank = 0;
  m.dtype = CS_DTYPE_FLOAT64;
  assert_int_equal(validate(&m, 8), CS_PACK_OK);
  cs_pack_meta_validate(&m, 0, &err);
  tp_expect(err, CS_PACK_E_SHAPE_LENGTH, "is 8 bytes but the decoded length is 0");
}

static void test_meta_shape_overflow(void **state) {
  (void)state;
  cs_pack_meta m = tp_meta("id", 0);
  m.dtype = CS_DTYPE_FLOAT64;
  m.rank = 3;
  m.shape[0] = m.shape[1] = m.shape[2] = CS_PACK_DIM_MAX; /* 2^93 x 8: past 2^64 */
  cs_pack_error err;
  cs_pack_meta_validate(&m, 0, &err);
  tp_expect(err, CS_PACK_E_SHAPE_LENGTH, "exceeds 2^64-1");
  m.shape[2] = 0; /* a zero dimension makes the product 0 however large the rest */
  assert_int_equal(validate(&m, 0), CS_PACK_OK);
  m.rank = 2; /* (2^31-1)^2 x 8 is just past 2^64 ... */
  cs_pack_meta_validate(&m, 0, &err);
  tp_expect(err, CS_PACK_E_SHAPE_LENGTH, "exceeds 2^64-1");
  m.dtype = CS_DTYPE_FLOAT16; /* ... and x 2 is just below it */
  uint64_t big = (uint64_t)CS_PACK_DIM_MAX * CS_PACK_DIM_MAX * 2u;
  assert_int_equal(validate(&m, big), CS_PACK_OK);
  assert_int_equal(validate(&m, big - 1), CS_PACK_E_SHAPE_LENGTH);
}

/* ---- canonical JSON ---- */

static void expect_json(const char *bytes, size_t len, const char *want) {
  pk_buf buf = {0};
  pk_json_string(&buf, bytes, len);
  pk_buf_put(&buf, "", 1);
  assert_false(buf.failed);
  assert_string_equal((const char *)buf.data, want);
  pk_buf_free(&buf);
}

static void test_json_escapes(void **state) {
  (void)state;
  /* Each expectation is Python's json.dumps(s, ensure_ascii=True). */
  expect_json("plain ASCII ~/!", 15, "\"plain ASCII ~/!\"");
  expect_json("\"\\", 2, "\"\\\"\\\\\"");
  expect_json("\b\f\n\r\t", 5, "\"\\b\\f\\n\\r\\t\"");
  expect_json("\x01\x1f\x7f", 3, "\"\\u0001\\u001f\\u007f\"");
  expect_json("\0", 1, "\"\\u0000\"");
  expect_json("\x0b", 1, "\"\\u000b\"");
  expect_json("\xc3\xa9", 2, "\"\\u00e9\"");
  expect_json("\xe6\x97\xa5", 3, "\"\\u65e5\"");
  expect_json("\xe2\x80\xa8", 3, "\"\\u2028\"");
  expect_json("\xef\xbb\xbf", 3, "\"\\ufeff\"");
  expect_json("\xf0\x9f\x98\x80", 4, "\"\\ud83d\\ude00\"");
  expect_json("\xf4\x8f\xbf\xbf", 4, "\"\\udbff\\udfff\"");
  expect_json("\xf0\x90\x80\x80", 4, "\"\\ud800\\udc00\"");
  expect_json("", 0, "\"\"");
}

static void test_json_meta_key_order(void **state) {
  (void)state;
  for (uint32_t i = 1; i < PK_META_FIELD_COUNT; i++) {
    assert_true(strcmp(pk_meta_field_names[i - 1], pk_meta_field_names[i]) < 0);
  }
  cs_pack_meta m = tp_meta("id", 4);
  pk_buf buf = {0};
  pk_json_meta(&buf, &m);
  pk_buf_put(&buf, "", 1);
  const char *text = (const char *)buf.data;
  const char *at = text;
  for (uint32_t i = 0; i < PK_META_FIELD_COUNT; i++) {
    char key[48];
    snprintf(key, sizeof key, "\"%s\":", pk_meta_field_names[i]);
    const char *hit = strstr(text, key);
    assert_non_null(hit);
    assert_true(hit >= at);
    at = hit;
  }
  assert_string_equal(text,
                      "{\"adapter_revision\":null,\"batch_position\":0,\"capture_id\":\"id\","
                      "\"capture_policy_version\":\"p1\",\"captured_at_ns\":1717171717000000000,"
                      "\"dtype\":\"uint8\",\"experiment_id\":\"exp\",\"hook_name\":\"layers.0\","
                      "\"layer_number\":0,\"model_id\":\"model\",\"model_revision\":\"rev\","
                      "\"producer_rank\":0,\"request_id\":\"req\",\"run_id\":\"run\","
                      "\"sequence_id\":\"seq\",\"session_id\":\"session-a\",\"shape\":[4],"
                      "\"step_number\":1,\"tenant_id\":\"tenant-a\",\"token_end\":3,"
                      "\"token_start\":2}");
  pk_buf_free(&buf);
}

static void test_json_integers(void **state) {
  (void)state;
  pk_buf buf = {0};
  pk_buf_put_u64(&buf, 0);
  pk_buf_put(&buf, " ", 1);
  pk_buf_put_u64(&buf, UINT64_MAX);
  pk_buf_put(&buf, " ", 1);
  pk_buf_put_i64(&buf, -1);
  pk_buf_put(&buf, " ", 1);
  pk_buf_put_i64(&buf, INT64_MIN);
  pk_buf_put(&buf, "", 1);
  assert_string_equal((const char *)buf.data,
                      "0 18446744073709551615 -1 -9223372036854775808");
  pk_buf_free(&buf);
  assert_int_equal(pk_u64_digits(0), 1);
  assert_int_equal(pk_u64_digits(9), 1);
  assert_int_equal(pk_u64_digits(10), 2);
  assert_int_equal(pk_u64_digits(UINT64_MAX), 20);
}

/* ---- writer ---- */

static void test_writer_empty_matches_golden(void **state) {
  (void)state;
  tp_bytes golden = tp_read_file(CS_PACK_GOLDEN_DIR "/empty.dmi-pack");
  tp_bytes out = {0};
  cs_pack_writer_config config = {.created_at_ns = 0, .write = tp_write, .write_context = &out};
  cs_pack_writer *w = NULL;
  cs_pack_error err;
  assert_int_equal(cs_pack_writer_open(&config, &w, &err), CS_E_OK);
  cs_pack_summary s;
  assert_int_equal(cs_pack_writer_finish(w, &s, &err), CS_E_OK);
  assert_int_equal(out.len, golden.len);
  assert_memory_equal(out.data, golden.data, golden.len);
  assert_int_equal(s.size_bytes, out.len);
  assert_int_equal(s.record_count, 0);
  assert_int_equal(s.footer_offset, 64);
  cs_pack_key_fields fields;
  assert_int_equal(cs_pack_writer_key_fields(w, &fields, &err), CS_E_STATE);
  cs_pack_writer_free(w);
  tp_free(&out);
  tp_free(&golden);
}

static void test_writer_summary_and_layout(void **state) {
  (void)state;
  const uint32_t lengths[] = {3, 0, 0, 64, 65, 1};
  tp_bytes out = {0};
  cs_pack_writer *w = tp_open(&out);
  cs_pack_error err;
  uint64_t expected_offsets[] = {64, 128, 128, 128, 192, 320};
  for (uint32_t i = 0; i < 6; i++) {
    char id[16];
    snprintf(id, sizeof id, "r%u", i);
    cs_pack_meta m = tp_meta(id, lengths[i]);
    uint8_t payload[80] = {0};
    memset(payload, 0xA5, sizeof payload);
    assert_int_equal(cs_pack_writer_begin_record(w, &m, lengths[i], &err), CS_E_OK);
    assert_int_equal(cs_pack_writer_bytes_written(w), expected_offsets[i]);
    assert_int_equal(cs_pack_writer_append(w, payload, lengths[i], &err), CS_E_OK);
    assert_int_equal(cs_pack_writer_end_record(w, &err), CS_E_OK);
  }
  uint64_t predicted = cs_pack_writer_size_if_finished(w);
  cs_pack_summary s;
  assert_int_equal(cs_pack_writer_finish(w, &s, &err), CS_E_OK);
  assert_int_equal(s.size_bytes, predicted);
  assert_int_equal(s.size_bytes, out.len);
  assert_int_equal(s.footer_offset, 384);
  assert_int_equal(s.record_count, 6);
  cs_pack_summary verified;
  assert_int_equal(cs_pack_verify_buffer(out.data, out.len, &verified, &err), CS_E_OK);
  assert_memory_equal(&verified, &s, sizeof s);
  uint8_t digest[32];
  unsigned int n = 0;
  EVP_Digest(out.data, out.len, digest, &n, EVP_sha256(), NULL);
  assert_memory_equal(digest, s.sha256, 32);
  EVP_Digest(out.data, out.len - 64, digest, &n, EVP_sha256(), NULL);
  assert_memory_equal(digest, s.trailer_sha256, 32);
  cs_pack_writer_free(w);
  tp_free(&out);
}

/* Appending in pieces of any size gives the same bytes as one append. */
static void test_writer_chunked_equals_whole(void **state) {
  (void)state;
  const size_t length = 3 * 65536 + 17;
  uint8_t *payload = malloc(length);
  for (size_t i = 0; i < length; i++) payload[i] = (uint8_t)(i * 7 + (i >> 9));
  tp_bytes whole = {0};
  cs_pack_writer *w = tp_open(&whole);
  cs_pack_meta m = tp_meta("big", (uint32_t)length);
  cs_pack_error err;
  assert_int_equal(cs_pack_writer_add_record(w, &m, payload, length, &err), CS_E_OK);
  assert_int_equal(cs_pack_writer_finish(w, NULL, &err), CS_E_OK);
  cs_pack_writer_free(w);
  const size_t pieces[] = {1, 7, 4096, 65536 + 1};
  for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++) {
    tp_bytes chunked = {0};
    w = tp_open(&chunked);
    assert_int_equal(cs_pack_writer_begin_record(w, &m, length, &err), CS_E_OK);
    for (size_t at = 0; at < length; at += pieces[p]) {
      size_t n = length - at < pieces[p] ? length - at : pieces[p];
      assert_int_equal(cs_pack_writer_append(w, payload + at, n, &err), CS_E_OK);
    }
    assert_int_equal(cs_pack_writer_end_record(w, &err), CS_E_OK);
    assert_int_equal(cs_pack_writer_finish(w, NULL, &err), CS_E_OK);
    assert_int_equal(chunked.len, whole.len);
    assert_memory_equal(chunked.data, whole.data, whole.len);
    cs_pack_writer_free(w);
    tp_free(&chunked);
  }
  free(payload);
  tp_free(&whole);
}

static void test_writer_payload_length(void **state) {
  (void)state;
  tp_bytes out = {0};
  cs_pack_writer *w = tp_open(&out);
  cs_pack_meta m = tp_meta("a", 4);
  cs_pack_error err;
  const uint8_t bytes[5] = {1, 2, 3, 4, 5};
  assert_int_equal(cs_pack_writer_begin_record(w, &m, 4, &err), CS_E_OK);
  uint64_t before = cs_pack_writer_bytes_written(w);
  assert_int_equal(cs_pack_writer_append(w, bytes, 5, &err), CS_E_INVALID_ARGUMENT);
  tp_expect(err, CS_PACK_E_PAYLOAD_LENGTH, "appending 5 bytes would pass its declared 4");
  assert_int_equal(cs_pack_writer_bytes_written(w), before); /* nothing was written */
  assert_int_equal(cs_pack_writer_append(w, bytes, 3, &err), CS_E_OK);
  assert_int_equal(cs_pack_writer_end_record(w, &err), CS_E_INVALID_ARGUMENT);
  tp_expect(err, CS_PACK_E_PAYLOAD_LENGTH, "3 of its declared 4 bytes");
  assert_int_equal(cs_pack_writer_append(w, bytes + 3, 1, &err), CS_E_OK);
  assert_int_equal(cs_pack_writer_end_record(w, &err), CS_E_OK);
  assert_int_equal(cs_pack_writer_append(w, NULL, 0, &err), CS_E_STATE);
  assert_int_equal(cs_pack_writer_finish(w, NULL, &err), CS_E_OK);
  assert_int_equal(cs_pack_verify_buffer(out.data, out.len, NULL, &err), CS_E_OK);
  cs_pack_writer_free(w);
  tp_free(&out);
}

static void test_writer_state_errors(void **state) {
  (void)state;
  tp_bytes out = {0};
  cs_pack_writer *w = tp_open(&out);
  cs_pack_meta m = tp_meta("a", 0);
  cs_pack_error err;
  assert_int_equal(cs_pack_writer_end_record(w, &err), CS_E_STATE);
  tp_expect(err, CS_PACK_E_STATE, "no record is open");
  assert_int_equal(cs_pack_writer_append(w, "x", 1, &err), CS_E_STATE);
  assert_int_equal(cs_pack_writer_begin_record(w, &m, 0, &err), CS_E_OK);
  assert_int_equal(cs_pack_writer_begin_record(w, &m, 0, &err), CS_E_STATE);
  tp_expect(err, CS_PACK_E_STATE, "a record is open");
  assert_int_equal(cs_pack_writer_finish(w, NULL, &err), CS_E_STATE);
  assert_int_equal(cs_pack_writer_end_record(w, &err), CS_E_OK);
  assert_int_equal(cs_pack_writer_begin_record(w, NULL, 0, &err), CS_E_INVALID_ARGUMENT);
  assert_int_equal(cs_pack_writer_finish(w, NULL, &err), CS_E_OK);
  assert_int_equal(cs_pack_writer_finish(w, NULL, &err), CS_E_STATE);
  tp_expect(err, CS_PACK_E_STATE, "finished");
  assert_int_equal(cs_pack_writer_begin_record(w, &m, 0, &err), CS_E_STATE);
  cs_pack_writer_free(w);
  tp_free(&out);
}

static void test_writer_open_arguments(void **state) {
  (void)state;
  tp_bytes out = {0};
  cs_pack_writer *w = NULL;
  cs_pack_error err;
  cs_pack_writer_config config = {.write = NULL};
  assert_int_equal(cs_pack_writer_open(&config, &w, &err), CS_E_INVALID_ARGUMENT);
  tp_expect(err, CS_PACK_E_ARGUMENT, "write");
  config = (cs_pack_writer_config){.write = tp_write, .write_context = &out,
                                   .records_max = CS_PACK_RECORDS_MAX + 1};
  assert_int_equal(cs_pack_writer_open(&config, &w, &err), CS_E_INVALID_ARGUMENT);
  tp_expect(err, CS_PACK_E_ARGUMENT, "records_max 1000001");
  config.records_max = CS_PACK_RECORDS_MAX;
  config.footer_bytes_max = CS_PACK_FOOTER_BYTES_MAX + 1ull;
  assert_int_equal(cs_pack_writer_open(&config, &w, &err), CS_E_INVALID_ARGUMENT);
  tp_expect(err, CS_PACK_E_ARGUMENT, "footer_bytes_max");
  config.footer_bytes_max = CS_PACK_FOOTER_BYTES_MAX;
  assert_int_equal(cs_pack_writer_open(&config, &w, &err), CS_E_OK);
  assert_int_equal(out.len, 64);
  cs_pack_writer_free(w);
  tp_free(&out);
}

static void test_writer_callback_failure_is_sticky(void **state) {
  (void)state;
  tp_bytes out = {.fail_at = 2}; /* the header goes out; the payload does not */
  cs_pack_writer *w = NULL;
  cs_pack_writer_config config = {.write = tp_write, .write_context = &out};
  cs_pack_error err;
  assert_int_equal(cs_pack_writer_open(&config, &w, &err), CS_E_OK);
  cs_pack_meta m = tp_meta("a", 4);
  assert_int_equal(cs_pack_writer_add_record(w, &m, "abcd", 4, &err), CS_E_IO);
  tp_expect(err, CS_PACK_E_WRITE, "write callback failed at offset 64");
  assert_int_equal(cs_pack_writer_finish(w, NULL, &err), CS_E_STATE);
  tp_expect(err, CS_PACK_E_STATE, "an earlier write failed");
  cs_pack_writer_free(w);
  tp_free(&out);
  tp_bytes fails_header = {.fail_at = 1};
  config.write_context = &fails_header;
  w = (cs_pack_writer *)&config; /* open must reset it to NULL on failure */
  assert_int_equal(cs_pack_writer_open(&config, &w, &err), CS_E_IO);
  tp_expect(err, CS_PACK_E_WRITE, "offset 0");
  assert_null(w);
  tp_free(&fails_header);
}

static void test_writer_refusals_leave_it_usable(void **state) {
  (void)state;
  tp_bytes out = {0};
  cs_pack_writer *w = tp_open(&out);
  cs_pack_error err;
  cs_pack_meta m = tp_meta("a", 4);
  assert_int_equal(cs_pack_writer_add_record(w, &m, "abcd", 4, &err), CS_E_OK);
  size_t written = out.len;
  /* duplicate id */
  assert_int_equal(cs_pack_writer_begin_record(w, &m, 4, &err), CS_E_INVALID_ARGUMENT);
  tp_expect(err, CS_PACK_E_DUPLICATE_ID, "record 1: capture_id repeats");
  assert_int_equal(err.record_index, 1);
  /* another tenant, session or rank */
  cs_pack_meta other = tp_meta("b", 4);
  other.tenant_id = cs_pack_text_of("tenant-b");
  assert_int_equal(cs_pack_writer_begin_record(w, &other, 4, &err), CS_E_INVALID_ARGUMENT);
  tp_expect(err, CS_PACK_E_KEY_FIELDS, "tenant_id differs");
  other = tp_meta("b", 4);
  other.session_id = cs_pack_text_of("session-a2");
  assert_int_equal(cs_pack_writer_begin_record(w, &other, 4, &err), CS_E_INVALID_ARGUMENT);
  tp_expect(err, CS_PACK_E_KEY_FIELDS, "session_id differs");
  other = tp_meta("b", 4);
  other.producer_rank = 1;
  assert_int_equal(cs_pack_writer_begin_record(w, &other, 4, &err), CS_E_INVALID_ARGUMENT);
  tp_expect(err, CS_PACK_E_KEY_FIELDS, "producer_rank differs");
  /* shape and length disagree */
  other = tp_meta("b", 4);
  assert_int_equal(cs_pack_writer_begin_record(w, &other, 5, &err), CS_E_INVALID_ARGUMENT);
  tp_expect(err, CS_PACK_E_SHAPE_LENGTH, "record 1: prod(shape)");
  assert_int_equal(out.len, written); /* refusals wrote nothing */
  other = tp_meta("b", 4);
  assert_int_equal(cs_pack_writer_add_record(w, &other, "efgh", 4, &err), CS_E_OK);
  assert_int_equal(cs_pack_writer_finish(w, NULL, &err), CS_E_OK);
  assert_int_equal(cs_pack_verify_buffer(out.data, out.len, NULL, &err), CS_E_OK);
  cs_pack_writer_free(w);
  tp_free(&out);
}

static void test_writer_record_limit(void **state) {
  (void)state;
  tp_bytes out = {0};
  cs_pack_writer_config config = {.write = tp_write, .write_context = &out, .records_max = 2};
  cs_pack_writer *w = NULL;
  cs_pack_error err;
  assert_int_equal(cs_pack_writer_open(&config, &w, &err), CS_E_OK);
  cs_pack_meta a = tp_meta("a", 0), b = tp_meta("b", 0), c = tp_meta("c", 0);
  assert_int_equal(cs_pack_writer_add_record(w, &a, NULL, 0, &err), CS_E_OK);
  assert_int_equal(cs_pack_writer_add_record(w, &b, NULL, 0, &err), CS_E_OK);
  assert_int_equal(cs_pack_writer_add_record(w, &c, NULL, 0, &err), CS_E_TOO_LARGE);
  tp_expect(err, CS_PACK_E_TOO_MANY_RECORDS, "limit of 2 records");
  assert_int_equal(cs_pack_writer_finish(w, NULL, &err), CS_E_OK);
  assert_int_equal(cs_pack_verify_buffer(out.data, out.len, NULL, &err), CS_E_OK);
  cs_pack_writer_free(w);
  tp_free(&out);
}

/* The footer limit is exact: a footer of exactly the limit is written, one byte more is not. */
static void test_writer_footer_limit(void **state) {
  (void)state;
  tp_bytes probe = {0};
  cs_pack_writer *w = tp_open(&probe);
  cs_pack_meta a = tp_meta("a", 1);
  cs_pack_error err;
  cs_pack_summary s;
  assert_int_equal(cs_pack_writer_add_record(w, &a, "x", 1, &err), CS_E_OK);
  assert_int_equal(cs_pack_writer_finish(w, &s, &err), CS_E_OK);
  cs_pack_writer_free(w);
  for (int delta = 0; delta <= 1; delta++) {
    tp_bytes out = {0};
    cs_pack_writer_config config = {.pack_id = tp_uuid(1),
                                    .created_at_ns = 1717171717123456789u,
                                    .write = tp_write,
                                    .write_context = &out,
                                    .footer_bytes_max = s.footer_length - (uint64_t)delta};
    assert_int_equal(cs_pack_writer_open(&config, &w, &err), CS_E_OK);
    int rc = cs_pack_writer_add_record(w, &a, "x", 1, &err);
    if (delta == 0) {
      assert_int_equal(rc, CS_E_OK);
      assert_int_equal(cs_pack_writer_finish(w, NULL, &err), CS_E_OK);
      assert_int_equal(out.len, probe.len);
    } else {
      assert_int_equal(rc, CS_E_TOO_LARGE);
      tp_expect(err, CS_PACK_E_FOOTER_TOO_LARGE, "over the limit");
      assert_int_equal(out.len, 64);
      assert_int_equal(cs_pack_writer_finish(w, NULL, &err), CS_E_OK);
    }
    cs_pack_writer_free(w);
    tp_free(&out);
  }
  tp_free(&probe);
}

static void test_writer_text_round_trip(void **state) {
  (void)state;
  tp_bytes out = {0};
  cs_pack_writer *w = tp_open(&out);
  cs_pack_meta m = tp_meta("id\0with nul", 0);
  m.capture_id.len = 12;
  m.model_id = cs_pack_text_of("mod\xc3\xa8le \xf0\x9f\x98\x80 \"q\"\n");
  m.adapter_revision = cs_pack_text_of("lora-1");
  m.layer_number = -1;
  m.step_number = UINT64_MAX;
  m.token_start = (uint64_t)INT64_MAX + 1u;
  m.token_end = UINT64_MAX;
  cs_pack_error err;
  assert_int_equal(cs_pack_writer_add_record(w, &m, NULL, 0, &err), CS_E_OK);
  assert_int_equal(cs_pack_writer_finish(w, NULL, &err), CS_E_OK);
  cs_pack_trailer t;
  assert_int_equal(cs_pack_trailer_parse(tp_trailer(&out), out.len, &t, &err), CS_E_OK);
  cs_pack_footer f;
  assert_int_equal(cs_pack_footer_parse(&t, out.data + t.footer_offset, t.footer_length, &f, &err),
                   CS_E_OK);
  assert_true(f.canonical);
  const cs_pack_meta *r = &f.records[0].meta;
  assert_int_equal(r->capture_id.len, 12);
  assert_memory_equal(r->capture_id.bytes, "id\0with nul", 12);
  assert_string_equal(r->model_id.bytes, "mod\xc3\xa8le \xf0\x9f\x98\x80 \"q\"\n");
  assert_string_equal(r->adapter_revision.bytes, "lora-1");
  assert_int_equal(r->layer_number, -1);
  assert_true(r->step_number == UINT64_MAX && r->token_end == UINT64_MAX);
  assert_true(r->token_start == (uint64_t)INT64_MAX + 1u);
  cs_pack_footer_free(&f);
  cs_pack_writer_free(w);
  tp_free(&out);
}

/* cs_pack_meta_footer_bytes_max bounds what the writer really puts in the footer, for the worst texts and shapes. */
static void test_meta_footer_bound(void **state) {
  (void)state;
  static char worst[4][513];
  memset(worst[0], 0x01, 512);      /* control bytes: six-byte escapes */
  memset(worst[1], '"', 512);       /* two-byte escapes */
  for (int i = 0; i < 510; i += 3) { /* U+FFFF as UTF-8: one escape of six for three bytes */
    worst[2][i] = (char)0xef;
    worst[2][i + 1] = (char)0xbf;
    worst[2][i + 2] = (char)0xbf;
  }
  worst[2][510] = worst[2][511] = 'a';
  memset(worst[3], 'a', 1);
  for (int w = 0; w < 4; w++) {
    tp_bytes out = {0};
    cs_pack_writer *writer = tp_open(&out);
    uint64_t bound = 0;
    for (uint32_t r = 0; r < 8; r++) {
      char id[16];
      snprintf(id, sizeof id, "%u", r);
      cs_pack_meta m = tp_meta(id, 1);
      cs_pack_text t = {worst[w], strlen(worst[w])};
      m.tenant_id = m.experiment_id = m.run_id = m.session_id = m.request_id = m.sequence_id = t;
      m.model_id = m.model_revision = m.adapter_revision = m.capture_policy_version = m.hook_name = t;
      m.layer_number = -1;
      m.producer_rank = UINT32_MAX;
      m.step_number = m.token_start = m.token_end = m.captured_at_ns = UINT64_MAX;
      m.batch_position = UINT32_MAX;
      m.rank = CS_PACK_RANK_MAX;
      for (uint32_t d = 0; d < CS_PACK_RANK_MAX; d++) m.shape[d] = 1;
      uint8_t byte = 7;
      cs_pack_error err;
      assert_int_equal(cs_pack_writer_add_record(writer, &m, &byte, 1, &err), CS_E_OK);
      bound += cs_pack_meta_footer_bytes_max(&m);
    }
    cs_pack_summary sum;
    cs_pack_error err;
    assert_int_equal(cs_pack_writer_finish(writer, &sum, &err), CS_E_OK);
    if (sum.footer_length > bound) fail_msg("texts %d: footer %llu bytes over the bound %llu", w,
                                            (unsigned long long)sum.footer_length, (unsigned long long)bound);
    cs_pack_writer_free(writer);
    tp_free(&out);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dtype_table),
      cmocka_unit_test(test_meta_text_bounds),
      cmocka_unit_test(test_meta_utf8),
      cmocka_unit_test(test_meta_number_bounds),
      cmocka_unit_test(test_meta_shape_bounds),
      cmocka_unit_test(test_meta_footer_bound),
      cmocka_unit_test(test_meta_shape_overflow),
      cmocka_unit_test(test_json_escapes),
      cmocka_unit_test(test_json_meta_key_order),
      cmocka_unit_test(test_json_integers),
      cmocka_unit_test(test_writer_empty_matches_golden),
      cmocka_unit_test(test_writer_summary_and_layout),
      cmocka_unit_test(test_writer_chunked_equals_whole),
      cmocka_unit_test(test_writer_payload_length),
      cmocka_unit_test(test_writer_state_errors),
      cmocka_unit_test(test_writer_open_arguments),
      cmocka_unit_test(test_writer_callback_failure_is_sticky),
      cmocka_unit_test(test_writer_refusals_leave_it_usable),
      cmocka_unit_test(test_writer_record_limit),
      cmocka_unit_test(test_writer_footer_limit),
      cmocka_unit_test(test_writer_text_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
