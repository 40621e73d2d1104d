/*
 * Pack reader and verifier: every refusal of the format, each from a valid
 * pack with one field or byte changed (and the checksums re-sealed so that
 * the check under test is the one that fires), plus the positive twins.
 *
 * The base pack has three uint8 records: cap-0 (4 bytes at 64), cap-1 (100
 * bytes at 128), cap-2 (3 bytes at 256); the footer starts at 320.
 */
#include "test_pack_util.h"

static const uint32_t base_lengths[] = {4, 100, 3};

static tp_bytes base_pack(void) { return tp_build(3, base_lengths); }

/* Verifies the base pack with one footer substitution. */
static cs_pack_error replaced(const char *from, const char *to) {
  tp_bytes base = base_pack();
  tp_bytes changed = tp_replace(&base, from, to);
  cs_pack_error err = tp_verify(&changed);
  tp_free(&changed);
  tp_free(&base);
  return err;
}

/* Verifies the base pack with byte `at` XOR-ed by `mask`, resealed or not. */
static cs_pack_error flipped(size_t at, uint8_t mask, bool reseal) {
  tp_bytes p = base_pack();
  p.data[at] ^= mask;
  if (reseal) tp_reseal(&p);
  cs_pack_error err = tp_verify(&p);
  tp_free(&p);
  return err;
}

static void test_base_pack_is_valid(void **state) {
  (void)state;
  tp_bytes p = base_pack();
  assert_int_equal(tp_get_le(tp_trailer(&p) + 12, 8), 320);
  cs_pack_error err = tp_verify(&p);
  assert_int_equal(err.kind, CS_PACK_OK);
  tp_free(&p);
}

static void test_golden_packs_verify(void **state) {
  (void)state;
  const char *names[] = {"dtypes", "text", "empty", "keys_slash"};
  for (size_t i = 0; i < 4; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.dmi-pack", CS_PACK_GOLDEN_DIR, names[i]);
    tp_bytes p = tp_read_file(path);
    cs_pack_error err = tp_verify(&p);
    if (err.kind != CS_PACK_OK) fail_msg("%s: %s", names[i], err.message);
    cs_pack_trailer t;
    cs_pack_footer f;
    assert_int_equal(cs_pack_trailer_parse(tp_trailer(&p), p.len, &t, &err), CS_E_OK);
    assert_int_equal(cs_pack_footer_parse(&t, p.data + t.footer_offset, t.footer_length, &f, &err),
                     CS_E_OK);
    assert_true(f.canonical);
    if (strcmp(names[i], "text") == 0) {
      assert_true(f.created_at_ns == UINT64_MAX);
      assert_true(f.records[3].meta.step_number == UINT64_MAX);
      assert_true(f.records[3].meta.token_start == (uint64_t)INT64_MAX + 1u);
      assert_int_equal(f.records[3].meta.layer_number, -1);
      assert_int_equal(f.records[3].meta.rank, 32);
      assert_null(f.records[0].meta.adapter_revision.bytes);
    }
    cs_pack_footer_free(&f);
    tp_free(&p);
  }
}

/* ---- header and trailer ---- */

static void test_magic(void **state) {
  (void)state;
  tp_bytes p = base_pack();
  size_t trailer_at = p.len - 64;
  tp_free(&p);
  cs_pack_error err = flipped(trailer_at, 1, false);
  tp_expect(err, CS_PACK_E_BAD_MAGIC, "trailer magic at offset");
  assert_string_equal(err.field, "trailer.magic");
  assert_int_equal(err.offset, trailer_at);
  err = flipped(0, 1, true);
  tp_expect(err, CS_PACK_E_BAD_MAGIC, "header magic at offset 0");
  assert_string_equal(err.field, "header.magic");
}

static void test_versions(void **state) {
  (void)state;
  tp_bytes p = base_pack();
  size_t t = p.len - 64;
  tp_free(&p);
  tp_expect(flipped(t + 8, 3, false), CS_PACK_E_UNKNOWN_MAJOR, "trailer major version 2");
  tp_expect(flipped(t + 10, 1, false), CS_PACK_E_NEWER_MINOR, "trailer minor version 1");
  tp_expect(flipped(8, 3, true), CS_PACK_E_UNKNOWN_MAJOR, "header major version 2 at offset 8");
  cs_pack_error err = flipped(10, 1, true);
  tp_expect(err, CS_PACK_E_NEWER_MINOR, "header minor version 1 at offset 10");
  assert_string_equal(err.field, "header.minor_version");
  /* The footer's versions must repeat the trailer's. */
  err = replaced("\"major_version\":1", "\"major_version\":2");
  tp_expect(err, CS_PACK_E_MISMATCH, "major_version is 2 but the trailer says 1");
  tp_expect(replaced("\"minor_version\":0", "\"minor_version\":1"), CS_PACK_E_MISMATCH,
            "minor_version");
}

static void test_header_fields(void **state) {
  (void)state;
  tp_expect(flipped(12, 1, true), CS_PACK_E_HEADER_SIZE, "header size at offset 12 is 65");
  tp_expect(flipped(40, 1, true), CS_PACK_E_HEADER_FIELD, "flags at offset 40");
  tp_expect(flipped(50, 0x80, true), CS_PACK_E_HEADER_FIELD, "offset 50 is 0x80");
  tp_expect(flipped(63, 1, true), CS_PACK_E_HEADER_FIELD, "offset 63");
  cs_pack_error err = flipped(20, 1, true);
  tp_expect(err, CS_PACK_E_MISMATCH, "pack id at offset 16");
  assert_string_equal(err.field, "header.pack_id");
  tp_expect(flipped(33, 1, true), CS_PACK_E_MISMATCH, "created_at_ns");
}

static void test_truncated(void **state) {
  (void)state;
  uint8_t bytes[128] = {0};
  cs_pack_error err;
  assert_int_equal(cs_pack_verify_buffer(bytes, 127, NULL, &err), CS_E_CORRUPT);
  tp_expect(err, CS_PACK_E_TRUNCATED, "127 bytes");
  cs_pack_trailer t;
  assert_int_equal(cs_pack_trailer_parse(bytes, 127, &t, &err), CS_E_CORRUPT);
  tp_expect(err, CS_PACK_E_TRUNCATED, "shorter than a header and a trailer");
  /* 128 bytes is long enough to be judged on its magic. */
  assert_int_equal(cs_pack_trailer_parse(bytes, 128, &t, &err), CS_E_CORRUPT);
  assert_int_equal(err.kind, CS_PACK_E_BAD_MAGIC);
}

/* Parses the base trailer with footer_offset and footer_length replaced. */
static cs_pack_error trailer_with(uint64_t footer_offset, uint64_t footer_length,
                                  uint64_t object_size) {
  tp_bytes p = base_pack();
  uint8_t t[64];
  memcpy(t, tp_trailer(&p), 64);
  tp_put_le(t + 12, footer_offset, 8);
  tp_put_le(t + 20, footer_length, 8);
  cs_pack_trailer parsed;
  cs_pack_error err;
  memset(&err, 0, sizeof err);
  cs_pack_trailer_parse(t, object_size, &parsed, &err);
  tp_free(&p);
  return err;
}

static void test_footer_range(void **state) {
  (void)state;
  tp_bytes p = base_pack();
  uint64_t size = p.len, length = tp_get_le(tp_trailer(&p) + 20, 8);
  tp_free(&p);
  assert_int_equal(trailer_with(320, length, size).kind, CS_PACK_OK);
  cs_pack_error err = trailer_with(0, length, size);
  tp_expect(err, CS_PACK_E_OFFSET_LOW, "footer_offset 0 is below 64");
  assert_string_equal(err.field, "trailer.footer_offset");
  tp_expect(trailer_with(63, length, size), CS_PACK_E_OFFSET_LOW, "63");
  tp_expect(trailer_with(64 + 1, length, size), CS_PACK_E_ALIGNMENT, "65 is not 64-byte aligned");
  tp_expect(trailer_with(320, length + 1, size), CS_PACK_E_FOOTER_END,
            "does not end where the trailer begins");
  tp_expect(trailer_with(320, length - 1, size), CS_PACK_E_FOOTER_END, "trailer begins");
  tp_expect(trailer_with(384, length, size), CS_PACK_E_FOOTER_END, "offset 384");
  tp_expect(trailer_with(320, UINT64_MAX - 100, size), CS_PACK_E_FOOTER_TOO_LARGE, "64 MiB");
}

static void test_footer_size_limit(void **state) {
  (void)state;
  const uint64_t limit = CS_PACK_FOOTER_BYTES_MAX;
  const uint64_t offset = (uint64_t)1 << 30;
  assert_int_equal(trailer_with(offset, limit, offset + limit + 64).kind, CS_PACK_OK);
  cs_pack_error err = trailer_with(offset, limit + 1, offset + limit + 65);
  tp_expect(err, CS_PACK_E_FOOTER_TOO_LARGE, "footer length 67108865 is over the 64 MiB limit");
}

static void test_checksums(void **state) {
  (void)state;
  tp_bytes p = base_pack();
  size_t size = p.len;
  tp_free(&p);
  cs_pack_error err = flipped(330, 1, false);
  tp_expect(err, CS_PACK_E_FOOTER_CRC, "footer at offset 320 has CRC-32");
  err = flipped(size - 1, 1, false);
  tp_expect(err, CS_PACK_E_SHA256, "SHA-256 of bytes 0..");
  assert_string_equal(err.field, "trailer.sha256");
  err = flipped(65, 1, true);
  tp_expect(err, CS_PACK_E_PAYLOAD_CRC, "record 0 at offset 64 has CRC-32");
  assert_int_equal(err.record_index, 0);
  assert_int_equal(err.offset, 64);
  err = flipped(227, 4, true);
  tp_expect(err, CS_PACK_E_PAYLOAD_CRC, "record 1 at offset 128");
  /* Without the reseal the payload flip is caught by the SHA-256 instead. */
  tp_expect(flipped(258, 1, false), CS_PACK_E_PAYLOAD_CRC, "record 2 at offset 256");
  tp_expect(flipped(68, 1, true), CS_PACK_E_PADDING, "padding byte at offset 68 is 0x01");
  tp_expect(flipped(319, 2, true), CS_PACK_E_PADDING, "offset 319");
  tp_expect(replaced("\"checksum\":\"", "\"checksum\":\"0"), CS_PACK_E_FIELD_RANGE,
            "checksum is not 8 lowercase hex digits");
}

/* ---- record layout ---- */

static void test_layout(void **state) {
  (void)state;
  cs_pack_error err = replaced("\"offset\":64,", "\"offset\":0,");
  tp_expect(err, CS_PACK_E_OFFSET_LOW, "record 0 offset 0 is below 64");
  assert_int_equal(err.record_index, 0);
  tp_expect(replaced("\"offset\":128,", "\"offset\":129,"), CS_PACK_E_ALIGNMENT,
            "record 1 offset 129 is not 64-byte aligned");
  tp_expect(replaced("\"offset\":128,", "\"offset\":64,"), CS_PACK_E_RECORD_ORDER,
            "record 1 at offset 64 overlaps record 0");
  err = replaced("\"offset\":256,", "\"offset\":64,");
  tp_expect(err, CS_PACK_E_RECORD_ORDER, "record 2 at offset 64 comes before record 1");
  assert_int_equal(err.record_index, 2);
  tp_expect(replaced("\"offset\":256,", "\"offset\":320,"), CS_PACK_E_GAP,
            "record 2 starts at offset 320, leaving a gap after offset 256");
}

static void test_record_into_footer(void **state) {
  (void)state;
  tp_bytes base = base_pack();
  tp_bytes a = tp_replace(&base, "\"shape\":[3]", "\"shape\":[100]");
  tp_bytes b = tp_replace(&a, "\"decoded_length\":3,", "\"decoded_length\":100,");
  tp_bytes c = tp_replace(&b, "\"stored_length\":3}", "\"stored_length\":100}");
  cs_pack_error err = tp_verify(&c);
  tp_expect(err, CS_PACK_E_RECORD_INTO_FOOTER,
            "record 2 at offset 256 of 100 bytes runs into the footer at offset 320");
  tp_free(&a);
  tp_free(&b);
  tp_free(&c);
  tp_free(&base);
}

static void test_footer_gap(void **state) {
  (void)state;
  tp_bytes base = base_pack();
  uint64_t len = tp_get_le(tp_trailer(&base) + 20, 8);
  tp_bytes p = {0};
  uint8_t zeros[64] = {0};
  tp_append(&p, base.data, 320);
  tp_append(&p, zeros, 64);
  tp_append(&p, base.data + 320, (size_t)len + 64);
  tp_put_le(tp_trailer(&p) + 12, 384, 8);
  tp_reseal(&p);
  cs_pack_error err = tp_verify(&p);
  tp_expect(err, CS_PACK_E_GAP, "footer starts at offset 384, leaving a gap after offset 320");
  tp_free(&p);
  tp_free(&base);
}

/* ---- footer fields ---- */

static void test_duplicate_ids(void **state) {
  (void)state;
  cs_pack_error err = replaced("\"capture_id\":\"cap-2\"", "\"capture_id\":\"cap-0\"");
  tp_expect(err, CS_PACK_E_DUPLICATE_ID, "records[2]: capture_id repeats records[0]'s");
  assert_int_equal(err.record_index, 2);
  assert_string_equal(err.field, "capture_id");
  /* Ids that differ only in length are distinct. */
  assert_int_equal(replaced("\"capture_id\":\"cap-2\"", "\"capture_id\":\"cap-\"").kind,
                   CS_PACK_OK);
}

static void test_field_ranges(void **state) {
  (void)state;
  cs_pack_error err = replaced("\"token_end\":3", "\"token_end\":1");
  tp_expect(err, CS_PACK_E_FIELD_RANGE, "record 0: field token_end 1 is below token_start 2");
  assert_string_equal(err.field, "token_end");
  tp_expect(replaced("\"layer_number\":0", "\"layer_number\":-2"), CS_PACK_E_FIELD_RANGE,
            "layer_number is -2, outside -1 .. 2147483647");
  assert_int_equal(replaced("\"layer_number\":0", "\"layer_number\":-1").kind, CS_PACK_OK);
  tp_expect(replaced("\"layer_number\":0", "\"layer_number\":2147483648"),
            CS_PACK_E_FIELD_RANGE, "layer_number is 2147483648");
  tp_expect(replaced("\"producer_rank\":0", "\"producer_rank\":4294967296"),
            CS_PACK_E_FIELD_RANGE, "producer_rank is 4294967296, outside 0 .. 4294967295");
  assert_int_equal(replaced("\"batch_position\":0", "\"batch_position\":4294967295").kind,
                   CS_PACK_OK);
  tp_expect(replaced("\"run_id\":\"run\"", "\"run_id\":\"\""), CS_PACK_E_FIELD_RANGE,
            "run_id is 0 bytes");
  tp_expect(replaced("\"step_number\":1", "\"step_number\":-1"), CS_PACK_E_FIELD_RANGE,
            "step_number is -1");
  err = replaced("\"step_number\":1", "\"step_number\":18446744073709551616");
  tp_expect(err, CS_PACK_E_FIELD_RANGE, "outside -2^63 .. 2^64-1");
  assert_true(err.offset > 320 && err.offset != CS_PACK_NO_OFFSET);
  assert_int_equal(replaced("\"step_number\":1", "\"step_number\":18446744073709551615").kind,
                   CS_PACK_OK);
  tp_expect(replaced("\"shape\":[4]", "\"shape\":[2147483648]"), CS_PACK_E_FIELD_RANGE,
            "shape is 2147483648");
  tp_expect(replaced("\"dtype\":\"uint8\"", "\"dtype\":\"complex64\""), CS_PACK_E_FIELD_RANGE,
            "dtype \"complex64\" is not one of the 10 dtypes");
  tp_expect(replaced("\"pack_id\":\"01", "\"pack_id\":\"0A"), CS_PACK_E_FIELD_RANGE,
            "pack_id is not a canonical lowercase UUID");
  tp_expect(replaced("\"format\":\"dmi-pack\"", "\"format\":\"dmi-pak\""),
            CS_PACK_E_FIELD_RANGE, "format");
  tp_expect(replaced("\"stored_length\":4}", "\"stored_length\":5}"), CS_PACK_E_FIELD_RANGE,
            "stored_length 5 differs from decoded_length 4");
}

static void test_shape_length(void **state) {
  (void)state;
  cs_pack_error err = replaced("\"shape\":[4]", "\"shape\":[2]");
  tp_expect(err, CS_PACK_E_SHAPE_LENGTH, "record 0: prod(shape) x itemsize(uint8) is 2 bytes");
  tp_expect(replaced("\"dtype\":\"uint8\"", "\"dtype\":\"int16\""), CS_PACK_E_SHAPE_LENGTH,
            "itemsize(int16) is 8 bytes but the decoded length is 4");
  assert_int_equal(replaced("\"shape\":[4]", "\"shape\":[2,2]").kind, CS_PACK_OK);
  assert_int_equal(replaced("\"shape\":[4]", "\"shape\":[1,4,1]").kind, CS_PACK_OK);
}

static void test_codec(void **state) {
  (void)state;
  cs_pack_error err = replaced("\"codec\":\"none\"", "\"codec\":\"zstd\"");
  tp_expect(err, CS_PACK_E_CODEC, "codec is not \"none\"");
  assert_int_equal(err.record_index, 0);
}

static void test_footer_json(void **state) {
  (void)state;
  cs_pack_error err = replaced("\"format\":\"dmi-pack\"", "\"format\":\"dmi-pack\",,");
  tp_expect(err, CS_PACK_E_FOOTER_JSON, "invalid JSON near offset");
  assert_true(err.offset >= 320);
  tp_expect(replaced("\"format\":\"dmi-pack\"", "\"format\":\"dmi-pack\",\"format\":\"dmi-pack\""),
            CS_PACK_E_FOOTER_JSON, "duplicate");
  tp_expect(replaced("{\"created_at_ns\"", "[{\"created_at_ns\""), CS_PACK_E_FOOTER_JSON,
            "invalid JSON");
  tp_expect(replaced("\"run_id\":\"run\"", "\"run_id\":\"r\\ud800\""), CS_PACK_E_FOOTER_JSON,
            "invalid Unicode");
}

/* Keys a newer writer adds are ignored at every level, whatever their values. */
static void test_footer_unknown_keys_ignored(void **state) {
  (void)state;
  tp_bytes base = base_pack();
  tp_bytes a = tp_replace(&base, "\"format\":\"dmi-pack\"",
                          "\"format\":\"dmi-pack\",\"extra\":{\"nested\":[1.5,-2e300,"
                          "123456789012345678901234567890,null,true,\"x\"]}");
  tp_bytes b = tp_replace(&a, "\"codec\":\"none\"", "\"codec\":\"none\",\"compression\":0.25");
  tp_bytes p = tp_replace(&b, "\"dtype\":\"uint8\"", "\"dtype\":\"uint8\",\"device\":\"cuda\"");
  cs_pack_error err = tp_verify(&p);
  assert_int_equal(err.kind, CS_PACK_OK);
  cs_pack_trailer t;
  cs_pack_footer f;
  assert_int_equal(cs_pack_trailer_parse(tp_trailer(&p), p.len, &t, &err), CS_E_OK);
  assert_int_equal(cs_pack_footer_parse(&t, p.data + t.footer_offset, t.footer_length, &f, &err),
                   CS_E_OK);
  assert_false(f.canonical); /* the bytes hold more than the canonical encoding */
  assert_int_equal(f.record_count, 3);
  assert_string_equal(f.records[0].meta.hook_name.bytes, "layers.0");
  assert_int_equal(f.records[0].meta.dtype, CS_DTYPE_UINT8);
  /* Re-encoding gives the canonical footer, without the unknown keys. */
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(cs_pack_footer_encode(&f, &text, &len, &err), CS_E_OK);
  assert_int_equal(len, tp_get_le(tp_trailer(&base) + 20, 8));
  assert_memory_equal(text, base.data + tp_get_le(tp_trailer(&base) + 12, 8), len);
  free(text);
  cs_pack_footer_free(&f);
  tp_free(&p);
  tp_free(&b);
  tp_free(&a);
  tp_free(&base);
}

/* What a reader must still refuse: duplicate keys (known or not), missing keys. */
static void test_footer_keys(void **state) {
  (void)state;
  tp_expect(replaced("\"format\":\"dmi-pack\"", "\"format\":\"dmi-pack\",\"x\":1,\"x\":2"),
            CS_PACK_E_FOOTER_JSON, "duplicate");
  tp_expect(replaced("\"codec\":\"none\"", "\"codec\":\"none\",\"codec\":\"none\""),
            CS_PACK_E_FOOTER_JSON, "duplicate");
  cs_pack_error err = replaced("\"format\":\"dmi-pack\",", "");
  tp_expect(err, CS_PACK_E_KEY_MISSING, "footer: required key \"format\" is missing");
  assert_string_equal(err.field, "format");
  err = replaced("\"hook_name\":\"layers.0\",", "");
  tp_expect(err, CS_PACK_E_KEY_MISSING, "records[0].metadata: required key \"hook_name\"");
  /* Keys are case-sensitive: "Checksum" is an unknown key, and checksum is then missing. */
  tp_expect(replaced("\"checksum\":", "\"Checksum\":"), CS_PACK_E_KEY_MISSING,
            "footer records[0]: required key \"checksum\"");
  /* A known key keeps its type even next to unknown ones. */
  tp_expect(replaced("\"step_number\":1", "\"step_number\":\"1\",\"step\":1"),
            CS_PACK_E_FIELD_TYPE, "field step_number is not an integer");
}

static void test_field_types(void **state) {
  (void)state;
  cs_pack_error err = replaced("\"offset\":64,", "\"offset\":\"64\",");
  tp_expect(err, CS_PACK_E_FIELD_TYPE, "field offset is not an integer");
  err = replaced("\"step_number\":1", "\"step_number\":1.0");
  tp_expect(err, CS_PACK_E_FIELD_TYPE, "field step_number is not an integer: the number at offset");
  assert_true(err.offset > 320);
  assert_string_equal(err.field, "step_number");
  tp_expect(replaced("\"step_number\":1", "\"step_number\":1e3"), CS_PACK_E_FIELD_TYPE,
            "fraction or an exponent");
  err = replaced("\"step_number\":1", "\"step_number\":18446744073709551616");
  tp_expect(err, CS_PACK_E_FIELD_RANGE, "field step_number is outside -2^63 .. 2^64-1");
  assert_true(err.offset > 320);
  tp_expect(replaced("\"layer_number\":0", "\"layer_number\":-9223372036854775809"),
            CS_PACK_E_FIELD_RANGE, "layer_number is outside");
  tp_expect(replaced("\"step_number\":1", "\"step_number\":01"), CS_PACK_E_FOOTER_JSON,
            "invalid JSON");
  tp_expect(replaced("\"step_number\":1", "\"step_number\":1."), CS_PACK_E_FOOTER_JSON,
            "invalid JSON");
  tp_expect(replaced("\"shape\":[4]", "\"shape\":4"), CS_PACK_E_FIELD_TYPE,
            "shape is not an array");
  tp_expect(replaced("\"adapter_revision\":null", "\"adapter_revision\":5"), CS_PACK_E_FIELD_TYPE,
            "adapter_revision is not a string or null");
  tp_expect(replaced("\"run_id\":\"run\"", "\"run_id\":null"), CS_PACK_E_FIELD_TYPE,
            "run_id is not a string");
  tp_expect(replaced("\"records\":[", "\"records\":[7,"), CS_PACK_E_FIELD_TYPE,
            "footer records[0] is not an object");
  tp_expect(replaced("\"layer_number\":0", "\"layer_number\":true"), CS_PACK_E_FIELD_TYPE,
            "layer_number");
}

/* A footer whose records array holds count copies of element. */
static cs_pack_error footer_of_records(uint32_t count, const char *element) {
  static const char head[] = "{\"created_at_ns\":0,\"format\":\"dmi-pack\",\"major_version\":1,"
                             "\"minor_version\":0,\"pack_id\":\"00000000-0000-0000-0000-"
                             "000000000000\",\"records\":[";
  size_t element_len = strlen(element);
  size_t cap = strlen(head) + (size_t)count * (element_len + 1) + 3;
  char *text = malloc(cap);
  size_t len = strlen(head);
  memcpy(text, head, len);
  for (uint32_t i = 0; i < count; i++) {
    if (i > 0) text[len++] = ',';
    memcpy(text + len, element, element_len);
    len += element_len;
  }
  memcpy(text + len, "]}", 2);
  len += 2;
  assert_true(len < cap);
  cs_pack_trailer t = {.major_version = 1,
                       .object_size = 64 + (uint64_t)len + 64,
                       .footer_offset = 64,
                       .footer_length = (uint64_t)len};
  t.footer_crc32 = (uint32_t)crc32_z(0, (const uint8_t *)text, len);
  cs_pack_footer f;
  cs_pack_error err;
  memset(&err, 0, sizeof err);
  int rc = cs_pack_footer_parse(&t, (const uint8_t *)text, len, &f, &err);
  if (rc == CS_E_OK) cs_pack_footer_free(&f);
  free(text);
  return err;
}

/* The record limit, on both sides, from a footer of null records (cheap to parse). */
static void test_too_many_records(void **state) {
  (void)state;
  cs_pack_error err = footer_of_records(CS_PACK_RECORDS_MAX + 1, "null");
  tp_expect(err, CS_PACK_E_TOO_MANY_RECORDS, "1000001 records, over the limit of 1000000");
  err = footer_of_records(CS_PACK_RECORDS_MAX, "null");
  tp_expect(err, CS_PACK_E_FIELD_TYPE, "footer records[0] is not an object");
}

/*
 * Footers of many small values are refused before jansson builds a tree (the
 * tree of [{},{},...] costs about 80 times the text): without the bound, a
 * 3 MB footer of empty objects took 240 MB, and a 64 MiB one about 5 GB.
 */
static void test_footer_cost_bound(void **state) {
  (void)state;
  const char *worst[] = {"{}", "[]", "{\"a\":[]}", "[[[[[]]]]]", "0", "\"\""};
  for (size_t i = 0; i < sizeof worst / sizeof worst[0]; i++) {
    cs_pack_error err = footer_of_records(CS_PACK_RECORDS_MAX, worst[i]);
    tp_expect(err, CS_PACK_E_FOOTER_COMPLEX, "over the limit of 20 x its length");
    assert_int_equal(err.offset, 64);
  }
  /* Small footers of the same shapes fit in the slack, and fail on their fields. */
  tp_expect(footer_of_records(100, "{}"), CS_PACK_E_KEY_MISSING, "required key \"checksum\"");
}

static void test_non_canonical_footer_is_read(void **state) {
  (void)state;
  tp_bytes base = base_pack();
  tp_bytes p = tp_replace(&base, "\"run_id\":\"run\"", "\"run_id\" : \"r\\u0075n\"");
  cs_pack_error err = tp_verify(&p);
  assert_int_equal(err.kind, CS_PACK_OK);
  cs_pack_trailer t;
  cs_pack_footer f;
  assert_int_equal(cs_pack_trailer_parse(tp_trailer(&p), p.len, &t, &err), CS_E_OK);
  assert_int_equal(cs_pack_footer_parse(&t, p.data + t.footer_offset, t.footer_length, &f, &err),
                   CS_E_OK);
  assert_false(f.canonical);
  assert_string_equal(f.records[0].meta.run_id.bytes, "run");
  /* Re-encoding gives back the canonical footer the writer wrote. */
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(cs_pack_footer_encode(&f, &text, &len, &err), CS_E_OK);
  assert_int_equal(len, tp_get_le(tp_trailer(&base) + 20, 8));
  assert_memory_equal(text, base.data + 320, len);
  free(text);
  cs_pack_footer_free(&f);
  tp_free(&p);
  tp_free(&base);
}

/* An error after a substituted big integer still names its original offset. */
static void test_json_error_offset_after_big_integer(void **state) {
  (void)state;
  tp_bytes base = base_pack();
  tp_bytes small = tp_replace(&base, "\"step_number\":1", "\"step_number\":9223372036854775807");
  tp_bytes big = tp_replace(&base, "\"step_number\":1", "\"step_number\":18446744073709551615");
  tp_bytes small_bad = tp_replace(&small, "\"token_start\":2}", "\"token_start\":2}}");
  tp_bytes big_bad = tp_replace(&big, "\"token_start\":2}", "\"token_start\":2}}");
  cs_pack_error small_err = tp_verify(&small_bad);
  cs_pack_error big_err = tp_verify(&big_bad);
  assert_int_equal(small_err.kind, CS_PACK_E_FOOTER_JSON);
  assert_int_equal(big_err.kind, CS_PACK_E_FOOTER_JSON);
  assert_int_equal(big_err.offset, small_err.offset + 1); /* one digit longer */
  tp_free(&small_bad);
  tp_free(&big_bad);
  tp_free(&small);
  tp_free(&big);
  tp_free(&base);
}

/* ---- streaming ---- */

static void test_streaming_verifier(void **state) {
  (void)state;
  tp_bytes p = tp_read_file(CS_PACK_GOLDEN_DIR "/dtypes.dmi-pack");
  cs_pack_error err;
  cs_pack_summary whole, piecewise;
  assert_int_equal(cs_pack_verify_buffer(p.data, p.len, &whole, &err), CS_E_OK);
  cs_pack_trailer t;
  cs_pack_footer f;
  assert_int_equal(cs_pack_trailer_parse(tp_trailer(&p), p.len, &t, &err), CS_E_OK);
  assert_int_equal(cs_pack_footer_parse(&t, p.data + t.footer_offset, t.footer_length, &f, &err),
                   CS_E_OK);
  const size_t pieces[] = {1, 3, 64, 1000};
  for (size_t k = 0; k < 4; k++) {
    cs_pack_verifier *v = NULL;
    assert_int_equal(cs_pack_verifier_new(&t, &f, &v, &err), CS_E_OK);
    for (size_t at = 0; at < p.len; at += pieces[k]) {
      size_t n = p.len - at < pieces[k] ? p.len - at : pieces[k];
      assert_int_equal(cs_pack_verifier_update(v, p.data + at, n, &err), CS_E_OK);
    }
    assert_int_equal(cs_pack_verifier_update(v, p.data, 1, &err), CS_E_INVALID_ARGUMENT);
    tp_expect(err, CS_PACK_E_ARGUMENT, "pass the object size");
    assert_int_equal(cs_pack_verifier_finish(v, &piecewise, &err), CS_E_OK);
    assert_memory_equal(&whole, &piecewise, sizeof whole);
    cs_pack_verifier_free(v);
  }
  cs_pack_verifier *v = NULL;
  assert_int_equal(cs_pack_verifier_new(&t, &f, &v, &err), CS_E_OK);
  assert_int_equal(cs_pack_verifier_update(v, p.data, p.len - 1, &err), CS_E_OK);
  assert_int_equal(cs_pack_verifier_finish(v, NULL, &err), CS_E_CORRUPT);
  tp_expect(err, CS_PACK_E_TRUNCATED, "only");
  cs_pack_verifier_free(v);
  /* After a refusal the verifier refuses everything. */
  tp_bytes bad = tp_read_file(CS_PACK_GOLDEN_DIR "/dtypes.dmi-pack");
  bad.data[65] ^= 1;
  assert_int_equal(cs_pack_verifier_new(&t, &f, &v, &err), CS_E_OK);
  assert_int_equal(cs_pack_verifier_update(v, bad.data, 128, &err), CS_E_CORRUPT);
  assert_int_equal(err.kind, CS_PACK_E_PAYLOAD_CRC);
  assert_int_equal(cs_pack_verifier_update(v, bad.data + 64, 64, &err), CS_E_STATE);
  assert_int_equal(cs_pack_verifier_finish(v, NULL, &err), CS_E_STATE);
  cs_pack_verifier_free(v);
  tp_free(&bad);
  /* A footer given with the wrong length is the caller's mistake. */
  cs_pack_footer other;
  assert_int_equal(cs_pack_footer_parse(&t, p.data + t.footer_offset, t.footer_length - 1, &other,
                                        &err),
                   CS_E_INVALID_ARGUMENT);
  cs_pack_footer_free(&f);
  tp_free(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_base_pack_is_valid),
      cmocka_unit_test(test_golden_packs_verify),
      cmocka_unit_test(test_magic),
      cmocka_unit_test(test_versions),
      cmocka_unit_test(test_header_fields),
      cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_footer_range),
      cmocka_unit_test(test_footer_size_limit),
      cmocka_unit_test(test_checksums),
      cmocka_unit_test(test_layout),
      cmocka_unit_test(test_record_into_footer),
      cmocka_unit_test(test_footer_gap),
      cmocka_unit_test(test_duplicate_ids),
      cmocka_unit_test(test_field_ranges),
      cmocka_unit_test(test_shape_length),
      cmocka_unit_test(test_codec),
      cmocka_unit_test(test_footer_json),
      cmocka_unit_test(test_footer_unknown_keys_ignored),
      cmocka_unit_test(test_footer_keys),
      cmocka_unit_test(test_field_types),
      cmocka_unit_test(test_too_many_records),
      cmocka_unit_test(test_footer_cost_bound),
      cmocka_unit_test(test_non_canonical_footer_is_read),
      cmocka_unit_test(test_json_error_offset_after_big_integer),
      cmocka_unit_test(test_streaming_verifier),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
