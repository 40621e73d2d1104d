/* The object key rule and the object metadata set. */
#include "test_pack_util.h"

static void expect_segment(const char *value, size_t len, const char *want) {
  char out[3 * 160 + 80];
  size_t out_len = 0;
  assert_int_equal(cs_pack_key_segment(value, len, out, sizeof out, &out_len), CS_E_OK);
  assert_string_equal(out, want);
  assert_int_equal(out_len, strlen(want));
}

static void test_segment_encoding(void **state) {
  (void)state;
  expect_segment("Az09-_.=", 8, "Az09-_.=");
  expect_segment("~", 1, "%7E");
  expect_segment("a/b", 3, "a%2Fb");
  expect_segment("a b%c", 5, "a%20b%25c");
  expect_segment("\xc3\xa9", 2, "%C3%A9");
  expect_segment("\xf0\x9f\x98\x80", 4, "%F0%9F%98%80");
  expect_segment("a\0b", 3, "a%00b");
  expect_segment("+:@?#&", 6, "%2B%3A%40%3F%23%26");
  expect_segment("", 0, "");
}

static void test_segment_length_boundary(void **state) {
  (void)state;
  char value[1000];
  memset(value, 's', sizeof value);
  char want[161];
  memset(want, 's', 160);
  want[160] = '\0';
  expect_segment(value, 160, want);
  expect_segment(value, 161,
                 "sha256-1593e766486569f32d318805e3824664e2944d0d1d55333bca78a7e3fb0fa6ce");
  memset(value, 'x', sizeof value);
  expect_segment(value, 1000,
                 "sha256-44f8354494a5ba03ba1792a8d3e9c534c47a9181980fde7a3f44b06ef2ae7c7f");
  /* The limit is on the encoded form: 26 x "é" (6 encoded bytes each) + 4 = 160 stays... */
  char accents[64];
  size_t n = 0;
  for (int i = 0; i < 26; i++, n += 2) memcpy(accents + n, "\xc3\xa9", 2);
  memcpy(accents + n, "abcd", 4);
  char encoded[200] = "";
  for (int i = 0; i < 26; i++) strcat(encoded, "%C3%A9");
  strcat(encoded, "abcd");
  expect_segment(accents, n + 4, encoded);
  /* ... and 27 x "é" (162 encoded, 54 raw bytes) is hashed (over the raw bytes). */
  n = 0;
  for (int i = 0; i < 27; i++, n += 2) memcpy(accents + n, "\xc3\xa9", 2);
  expect_segment(accents, n,
                 "sha256-2276e051a6111964a16d9b9a7d073ae9a52d2ed9aebf654820a8c59a552f95cc");
}

static void test_segment_hash_prefix(void **state) {
  (void)state;
  expect_segment("sha256-abc", 10,
                 "sha256-ebf5465ab0550f30961c3acd5eaa22cb0bad604a8638b0c44c2692c42cd4fcfe");
  expect_segment("sha256-", 7,
                 "sha256-dfde52af987539e47957ca31c6703f5d33acba313a839d99c1ebddc514f3696b");
  expect_segment("sha256", 6, "sha256");
  expect_segment("sha256_x", 8, "sha256_x");
  expect_segment("SHA256-x", 8, "SHA256-x");
  expect_segment("xsha256-", 8, "xsha256-");
}

static void test_segment_small_buffer(void **state) {
  (void)state;
  char out[8];
  size_t len = 0;
  assert_int_equal(cs_pack_key_segment("abcdefgh", 8, out, sizeof out, &len), CS_E_TOO_LARGE);
  assert_int_equal(cs_pack_key_segment("abcdefg", 7, out, sizeof out, &len), CS_E_OK);
  assert_string_equal(out, "abcdefg");
}

static cs_pack_key_fields fields_of(const char *tenant, const char *session, uint32_t rank,
                                    uint64_t captured_at_ns) {
  cs_pack_key_fields f = {.tenant_id = cs_pack_text_of(tenant),
                          .session_id = cs_pack_text_of(session),
                          .producer_rank = rank,
                          .captured_at_ns = captured_at_ns};
  assert_int_equal(cs_uuid_parse("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", 36, &f.pack_id), 0);
  return f;
}

static void expect_key(const char *prefix, cs_pack_key_fields f, const char *want) {
  char key[CS_KEY_MAX];
  size_t len = 0;
  cs_pack_error err;
  assert_int_equal(cs_pack_object_key(prefix, strlen(prefix), &f, key, &len, &err), CS_E_OK);
  assert_string_equal(key, want);
  assert_int_equal(len, strlen(want));
  cs_uuid id;
  assert_int_equal(cs_key_pack_id(key, len, &id), CS_E_OK);
  assert_true(cs_uuid_equal(&id, &f.pack_id));
}

static void test_object_key(void **state) {
  (void)state;
  expect_key("", fields_of("acme", "s1", 0, 0),
             "v1/tenant=acme/date=1970-01-01/session=s1/rank=0/"
             "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.dmi-pack");
  expect_key("catalog-a/", fields_of("org/team~x", "s\xc3\xa9", UINT32_MAX, 951782400000000000u),
             "catalog-a/v1/tenant=org%2Fteam%7Ex/date=2000-02-29/session=s%C3%A9/"
             "rank=4294967295/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.dmi-pack");
  /* A nanosecond that stays in its day, the first of the next, and the far end of u64. */
  expect_key("a/b/", fields_of("t", "s", 7, 1709251199999999359u),
             "a/b/v1/tenant=t/date=2024-02-29/session=s/rank=7/"
             "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.dmi-pack");
  expect_key("", fields_of("t", "s", 7, 1709251200000000000u),
             "v1/tenant=t/date=2024-03-01/session=s/rank=7/"
             "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.dmi-pack");
  expect_key("", fields_of("t", "s", 7, UINT64_MAX),
             "v1/tenant=t/date=2554-07-21/session=s/rank=7/"
             "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.dmi-pack");
  expect_key("", fields_of("sha256-abc", "s", 1, 4102444800000000000u),
             "v1/tenant=sha256-ebf5465ab0550f30961c3acd5eaa22cb0bad604a8638b0c44c2692c42cd4fcfe/"
             "date=2100-01-01/session=s/rank=1/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.dmi-pack");
}

/* The date of captured_at_ns in the key (the rest of the key fixed). */
static void expect_date(uint64_t captured_at_ns, const char *want) {
  cs_pack_key_fields f = fields_of("t", "s", 0, captured_at_ns);
  char key[CS_KEY_MAX];
  size_t len = 0;
  cs_pack_error err;
  assert_int_equal(cs_pack_object_key("", 0, &f, key, &len, &err), CS_E_OK);
  const char *date = strstr(key, "/date=");
  assert_non_null(date);
  char got[11];
  memcpy(got, date + 6, 10);
  got[10] = '\0';
  if (strcmp(got, want) != 0) fail_msg("captured_at_ns %llu: date %s, DMI gives %s", (unsigned long long)captured_at_ns, got, want);
}

/*
 * DMI dates a key with datetime.fromtimestamp(ns / 1e9, tz=UTC): through a
 * double number of seconds rounded to microseconds, so the last few hundred
 * nanoseconds of a UTC day get the next day's date. Each pair is the last
 * nanosecond Python dates as one day and the first it dates as the next
 * (python3 -c 'import datetime; print(datetime.datetime.fromtimestamp(
 * N / 1e9, tz=datetime.timezone.utc))'); pack.key_dates checks a million more.
 */
static void test_object_key_date_dmi(void **state) {
  (void)state;
  expect_date(1700006399999999999u, "2023-11-15"); /* issue 12's example: floor gives 2023-11-14 */
  expect_date(86399999999500u, "1970-01-01");       /* exact doubles: the half microsecond alone */
  expect_date(86399999999501u, "1970-01-02");
  expect_date(1709164799999999359u, "2024-02-28");  /* 640 ns before midnight in 2024 */
  expect_date(1709164799999999360u, "2024-02-29");
  expect_date(1709164800000000000u, "2024-02-29");
  expect_date(3455999999999999232u, "2079-07-07");  /* 767 ns before, past 2^61 ns */
  expect_date(3455999999999999233u, "2079-07-08");
  expect_date(18446659199999998975u, "2554-07-20"); /* 1,024 ns before, past 2^63 ns */
  expect_date(18446659199999998976u, "2554-07-21");
  expect_date(UINT64_MAX, "2554-07-21");
  expect_date(0, "1970-01-01");
}

static void test_object_key_prefix(void **state) {
  (void)state;
  cs_pack_key_fields f = fields_of("t", "s", 0, 0);
  char key[CS_KEY_MAX];
  size_t len = 0;
  cs_pack_error err;
  assert_int_equal(cs_pack_object_key("catalog", 7, &f, key, &len, &err), CS_E_INVALID_ARGUMENT);
  tp_expect(err, CS_PACK_E_ARGUMENT, "end with '/'");
  assert_int_equal(cs_pack_object_key("a\0/", 3, &f, key, &len, &err), CS_E_INVALID_ARGUMENT);
  /* The longest prefix that fits, and one byte more. */
  char prefix[CS_KEY_MAX];
  size_t rest = strlen("v1/tenant=t/date=1970-01-01/session=s/rank=0/"
                       "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.dmi-pack");
  size_t fits = CS_KEY_MAX - 1 - rest;
  memset(prefix, 'p', sizeof prefix);
  prefix[fits - 1] = '/';
  assert_int_equal(cs_pack_object_key(prefix, fits, &f, key, &len, &err), CS_E_OK);
  assert_int_equal(len, CS_KEY_MAX - 1);
  prefix[fits - 1] = 'p';
  prefix[fits] = '/';
  assert_int_equal(cs_pack_object_key(prefix, fits + 1, &f, key, &len, &err), CS_E_TOO_LARGE);
  tp_expect(err, CS_PACK_E_KEY_TOO_LONG, "1024 bytes or more");
}

static void test_key_fields_from_packs(void **state) {
  (void)state;
  const uint32_t lengths[] = {1, 2};
  tp_bytes p = tp_build(2, lengths);
  cs_pack_error err;
  cs_pack_trailer t;
  cs_pack_footer f;
  assert_int_equal(cs_pack_trailer_parse(tp_trailer(&p), p.len, &t, &err), CS_E_OK);
  assert_int_equal(cs_pack_footer_parse(&t, p.data + t.footer_offset, t.footer_length, &f, &err),
                   CS_E_OK);
  cs_pack_key_fields k;
  /* The key is dated by the first record's captured_at_ns, not the pack's created_at_ns. */
  f.records[0].meta.captured_at_ns = 1700006399999999999u;
  f.records[1].meta.captured_at_ns = 1600000000000000000u;
  assert_int_equal(f.created_at_ns, 1717171717123456789u);
  assert_int_equal(cs_pack_footer_key_fields(&f, &k, &err), CS_E_OK);
  assert_string_equal(k.tenant_id.bytes, "tenant-a");
  assert_string_equal(k.session_id.bytes, "session-a");
  assert_int_equal(k.captured_at_ns, 1700006399999999999u);
  /* Records that disagree (DMI writes such packs) are named by the first one. */
  f.records[1].meta.tenant_id = cs_pack_text_of("tenant-b");
  f.records[1].meta.session_id = cs_pack_text_of("session-b");
  f.records[1].meta.producer_rank = 9;
  assert_int_equal(cs_pack_footer_key_fields(&f, &k, &err), CS_E_OK);
  assert_string_equal(k.tenant_id.bytes, "tenant-a");
  assert_string_equal(k.session_id.bytes, "session-a");
  assert_int_equal(k.producer_rank, 0);
  char key[CS_KEY_MAX];
  size_t key_len = 0;
  assert_int_equal(cs_pack_object_key("", 0, &k, key, &key_len, &err), CS_E_OK);
  assert_string_equal(key, "v1/tenant=tenant-a/date=2023-11-15/session=session-a/rank=0/"
                           "01122334-4556-6778-899a-abbccddeef00.dmi-pack");
  f.record_count = 0;
  assert_int_equal(cs_pack_footer_key_fields(&f, &k, &err), CS_E_STATE);
  f.record_count = 2;
  cs_pack_footer_free(&f);
  tp_free(&p);
  /* The writer names the same fields. */
  tp_bytes out = {0};
  cs_pack_writer *w = tp_open(&out);
  cs_pack_meta m = tp_meta("a", 0);
  assert_int_equal(cs_pack_writer_key_fields(w, &k, &err), CS_E_STATE);
  assert_int_equal(cs_pack_writer_add_record(w, &m, NULL, 0, &err), CS_E_OK);
  m = tp_meta("b", 0);
  m.captured_at_ns = 1600000000000000000u;
  assert_int_equal(cs_pack_writer_add_record(w, &m, NULL, 0, &err), CS_E_OK);
  assert_int_equal(cs_pack_writer_key_fields(w, &k, &err), CS_E_OK);
  assert_int_equal(k.tenant_id.len, 8);
  assert_memory_equal(k.tenant_id.bytes, "tenant-a", 8);
  assert_int_equal(k.producer_rank, 0);
  assert_int_equal(k.captured_at_ns, 1717171717000000000u);
  cs_pack_writer_free(w);
  tp_free(&out);
}

/* The writer refuses records that mix keys by default (the runtime's packs) and takes them with mixed_keys. */
static void test_writer_mixed_keys(void **state) {
  (void)state;
  for (int mixed = 0; mixed <= 1; mixed++) {
    tp_bytes out = {0};
    cs_pack_writer_config config = {.pack_id = tp_uuid(1), .created_at_ns = 5, .write = tp_write,
                                    .write_context = &out, .mixed_keys = mixed == 1};
    cs_pack_writer *w = NULL;
    cs_pack_error err;
    assert_int_equal(cs_pack_writer_open(&config, &w, &err), CS_E_OK);
    cs_pack_meta m = tp_meta("a", 0);
    assert_int_equal(cs_pack_writer_add_record(w, &m, NULL, 0, &err), CS_E_OK);
    m = tp_meta("b", 0);
    m.producer_rank = 1;
    m.tenant_id = cs_pack_text_of("tenant-b");
    int rc = cs_pack_writer_add_record(w, &m, NULL, 0, &err);
    if (mixed == 0) {
      assert_int_equal(rc, CS_E_INVALID_ARGUMENT);
      tp_expect(err, CS_PACK_E_KEY_FIELDS, "tenant_id differs");
    } else {
      assert_int_equal(rc, CS_E_OK);
    }
    cs_pack_summary summary;
    assert_int_equal(cs_pack_writer_finish(w, &summary, &err), CS_E_OK);
    assert_int_equal(summary.record_count, mixed == 1 ? 2 : 1);
    cs_pack_key_fields k;
    assert_int_equal(cs_pack_writer_key_fields(w, &k, &err), CS_E_OK);
    assert_memory_equal(k.tenant_id.bytes, "tenant-a", 8);
    assert_int_equal(k.producer_rank, 0);
    assert_int_equal(cs_pack_verify_buffer(out.data, out.len, &summary, &err), CS_E_OK);
    cs_pack_writer_free(w);
    tp_free(&out);
  }
}

static void test_object_metadata(void **state) {
  (void)state;
  cs_pack_summary s;
  memset(&s, 0, sizeof s);
  assert_int_equal(cs_uuid_parse("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", 36, &s.pack_id), 0);
  s.created_at_ns = UINT64_MAX;
  s.record_count = 1000000;
  for (int i = 0; i < 32; i++) s.sha256[i] = (uint8_t)(0xf0 + (i & 15));
  cs_pack_object_meta meta;
  cs_pack_object_meta_fill(&s, &meta);
  assert_string_equal(meta.content_type, "application/vnd.dmi.pack");
  assert_string_equal(meta.entries[0].name, "dmi-format");
  assert_string_equal(meta.entries[0].value, "dmi-pack-v1");
  assert_string_equal(meta.entries[1].name, "dmi-pack-id");
  assert_string_equal(meta.entries[1].value, "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b");
  assert_string_equal(meta.entries[2].name, "dmi-sha256");
  assert_string_equal(meta.entries[2].value,
                      "f0f1f2f3f4f5f6f7f8f9fafbfcfdfefff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff");
  assert_string_equal(meta.entries[3].name, "dmi-record-count");
  assert_string_equal(meta.entries[3].value, "1000000");
  assert_string_equal(meta.entries[4].name, "dmi-created-at-ns");
  assert_string_equal(meta.entries[4].value, "18446744073709551615");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_segment_encoding),
      cmocka_unit_test(test_segment_length_boundary),
      cmocka_unit_test(test_segment_hash_prefix),
      cmocka_unit_test(test_segment_small_buffer),
      cmocka_unit_test(test_object_key),
      cmocka_unit_test(test_object_key_date_dmi),
      cmocka_unit_test(test_object_key_prefix),
      cmocka_unit_test(test_key_fields_from_packs),
      cmocka_unit_test(test_writer_mixed_keys),
      cmocka_unit_test(test_object_metadata),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
