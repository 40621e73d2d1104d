/*
 * The ClickHouse adapter's parsers and writers without a server: "Code: N"
 * from error bodies (as 18.16 writes them), the classification of answers,
 * the strict TabSeparated reader, the url check, and the bulk form of
 * descriptor rows (catalog.h) read back by that reader, each accepted input
 * next to its refused twin.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "capstore/clickhouse.h"

static cs_outcome classify(long status, const char *body) {
  int32_t code = -1;
  return cs_clickhouse_classify(status, body, strlen(body), &code);
}

static void test_error_code(void **state) {
  (void)state;
  static const char body[] = "Code: 202, e.displayText() = DB::Exception: Too many simultaneous queries";
  int32_t code = 0;
  assert_int_equal(cs_clickhouse_parse_error(body, strlen(body), &code), CS_E_OK);
  assert_int_equal(code, 202);
  assert_int_equal(cs_clickhouse_parse_error("Code: x", 7, &code), CS_E_PARSE);
  assert_int_equal(cs_clickhouse_parse_error("no code here", 12, &code), CS_E_PARSE);
  assert_int_equal(cs_clickhouse_parse_error("Code: 1234567", 13, &code), CS_E_PARSE); /* too long */
  assert_int_equal(cs_clickhouse_parse_error("Code: ", 6, &code), CS_E_PARSE);
}

static void test_classify(void **state) {
  (void)state;
  assert_int_equal(classify(200, "1\n"), CS_OUT_OK);
  assert_int_equal(classify(500, "Code: 202, e.displayText() = DB::Exception: Too many simultaneous queries."),
                   CS_OUT_THROTTLED);
  assert_int_equal(classify(400, "Code: 62, e.displayText() = DB::Exception: Syntax error: failed at position 1:"
                                 " SELECT 1. Max query size exceeded, e.what() = DB::Exception\n"),
                   CS_OUT_TOO_LARGE);
  assert_int_equal(classify(400, "Code: 62, e.displayText() = DB::Exception: Syntax error: failed at position 1"),
                   CS_OUT_INVALID);
  assert_int_equal(classify(500, "Code: 53, e.displayText() = DB::Exception: Type mismatch in IN or VALUES section"),
                   CS_OUT_INVALID);
  /* The rows' body refused by the format parser (18.16's answers to a malformed TabSeparated body). */
  assert_int_equal(classify(500, "Code: 27, e.displayText() = DB::Exception: Cannot parse input: expected \\t before: "
                                 "\\n: (at row 1)"),
                   CS_OUT_INVALID);
  assert_int_equal(classify(500, "Code: 130, e.displayText() = DB::Exception: Cannot read array from text: (at row 1)"),
                   CS_OUT_INVALID);
  assert_int_equal(classify(500, "Code: 241, e.displayText() = DB::Exception: Memory limit exceeded"),
                   CS_OUT_SERVER_ERROR);
  assert_int_equal(classify(500, "Code: 998, unknown"), CS_OUT_SERVER_ERROR);
  /* A replicated table's answers (18.16, all HTTP 500): 319 may have applied; the others did not apply. */
  assert_int_equal(classify(500, "Code: 319, e.displayText() = DB::Exception: Unknown status, client must retry. "
                                 "Reason: Code: 159, e.displayText() = DB::Exception: Timeout while waiting for "
                                 "quorum, e.what() = DB::Exception"),
                   CS_OUT_UNKNOWN);
  assert_int_equal(classify(500, "Code: 285, e.displayText() = DB::Exception: Number of alive replicas (2) is less "
                                 "than requested quorum (3)., e.what() = DB::Exception"),
                   CS_OUT_REFUSED);
  assert_int_equal(classify(500, "Code: 286, e.displayText() = DB::Exception: Quorum for previous write has not "
                                 "been satisfied yet. Status: version: 1"),
                   CS_OUT_REFUSED);
  assert_int_equal(classify(500, "Code: 289, e.displayText() = DB::Exception: Replica doesn't have part all_3_3_0 "
                                 "which was successfully written to quorum of other replicas."),
                   CS_OUT_REFUSED);
  assert_int_equal(classify(500, "Code: 242, e.displayText() = DB::Exception: Table is in readonly mode"),
                   CS_OUT_REFUSED);
  assert_int_equal(classify(500, "Code: 999, e.displayText() = Coordination::Exception: Connection loss"),
                   CS_OUT_REFUSED);
  assert_int_equal(classify(404, "Code: 60, e.displayText() = DB::Exception: Table default.x doesn't exist."),
                   CS_OUT_NOT_FOUND);
  assert_int_equal(classify(500, "Code: 193, e.displayText() = DB::Exception: Wrong password for user capstore"),
                   CS_OUT_FORBIDDEN);
  /* 200 with an exception in the body (an error after streaming started) is not OK. */
  assert_int_equal(classify(200, "1\nCode: 395, e.displayText() = DB::Exception: Value passed to 'throwIf'"),
                   CS_OUT_SERVER_ERROR);
  assert_int_equal(classify(200, "Code: 241, e.displayText() = DB::Exception: Memory limit exceeded\n"),
                   CS_OUT_SERVER_ERROR);
}

/*
 * A 200 answer's rows may echo stored text holding "Code: N" (a record's
 * metadata, a claim's holder): inside a row it is data. An exception the
 * server wrote after the rows starts a line and is still classified by its code.
 */
static void test_classify_200_rows_echo_codes(void **state) {
  (void)state;
  static const char row[] = "00112233-4455-6677-8899-aabbccddeeff\tcat/k.dmi-pack\tCode: 319, e.displayText() = "
                            "DB::Exception: Unknown status, client must retry\tt\n";
  int32_t code = -1;
  assert_int_equal(cs_clickhouse_classify(200, row, strlen(row), &code), CS_OUT_OK);
  assert_int_equal(code, 0);
  assert_int_equal(classify(200, "3\t1\tCode: 242\n"), CS_OUT_OK);
  assert_int_equal(classify(200, "1\tholder Code: 62 Max query size exceeded\n"), CS_OUT_OK);
  /* A newline inside a value is escaped (\\n): text after it does not start a line. */
  assert_int_equal(classify(200, "1\ta\\nCode: 286\n"), CS_OUT_OK);
  /* The twins: the same rows with the server's exception after them. */
  char body[512];
  snprintf(body, sizeof body, "%sCode: 319, e.displayText() = DB::Exception: Unknown status, client must retry. "
                              "Reason: Timeout while waiting for quorum, e.what() = DB::Exception\n", row);
  assert_int_equal(cs_clickhouse_classify(200, body, strlen(body), &code), CS_OUT_UNKNOWN);
  assert_int_equal(code, 319);
  assert_int_equal(classify(200, "3\t1\tCode: 242\nCode: 289, e.displayText() = DB::Exception: Replica doesn't "
                                 "have part all_3_3_0\n"),
                   CS_OUT_REFUSED);
  /* "Code: " at a line start without a number is not an exception; a later one is. */
  assert_int_equal(classify(200, "Code: x\n"), CS_OUT_OK);
  assert_int_equal(classify(200, "Code: x\nCode: 202, e.displayText() = DB::Exception: Too many\n"),
                   CS_OUT_THROTTLED);
  /* Any other status: the body is the exception, read wherever its code is. */
  assert_int_equal(classify(500, "x Code: 242, e.displayText() = DB::Exception: Table is in readonly mode"),
                   CS_OUT_REFUSED);
  assert_int_equal(classify(503, ""), CS_OUT_THROTTLED);
  assert_int_equal(classify(429, ""), CS_OUT_THROTTLED);
  assert_int_equal(classify(502, "bad gateway"), CS_OUT_SERVER_ERROR);
  assert_int_equal(classify(413, ""), CS_OUT_TOO_LARGE);
  assert_int_equal(classify(403, ""), CS_OUT_FORBIDDEN);
}

/* The schema check's answer: which tables exist, of which kind, in which database. */
static void test_tables_answer(void **state) {
  (void)state;
  static const char *const names[5] = {"p_claims_v1", "p_descriptors_v1", "p_inventory_v1", "p_publishes_v1",
                                       "p_rejected_v1"};
  bool exists[5];
  char db[65], detail[256], body[256];
  snprintf(body, sizeof body, "p_claims_v1\tReplicatedMergeTree\np_inventory_v1\tReplicatedMergeTree\n\tcapdb\n");
  assert_int_equal(cs_clickhouse_tables_answer(body, strlen(body), names, true, exists, db, sizeof db, detail,
                                               sizeof detail), CS_E_OK);
  assert_true(exists[0] && exists[2] && !exists[1] && !exists[3] && !exists[4]);
  assert_string_equal(db, "capdb");
  /* The same tables to a client without the cluster's settings: refused, naming the table and its engine. */
  snprintf(body, sizeof body, "p_claims_v1\tReplicatedMergeTree\n\tcapdb\n");
  assert_int_equal(cs_clickhouse_tables_answer(body, strlen(body), names, false, exists, db, sizeof db, detail,
                                               sizeof detail), CS_E_CONFIG);
  assert_non_null(strstr(detail, "p_claims_v1 is ReplicatedMergeTree"));
  snprintf(body, sizeof body, "p_rejected_v1\tMergeTree\n\tcapdb\n");
  assert_int_equal(cs_clickhouse_tables_answer(body, strlen(body), names, true, exists, db, sizeof db, detail,
                                               sizeof detail), CS_E_CONFIG);
  assert_non_null(strstr(detail, "not replicated"));
  /* No database row, a table not asked for, a database name out of [A-Za-z0-9_], two database rows: malformed. */
  const char *bad[] = {"p_claims_v1\tMergeTree\n", "other\tMergeTree\n\tcapdb\n", "\tcap-db\n",
                       "\tcapdb\n\tcapdb\n", "\tcapdb"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(body, sizeof body, "%s", bad[i]);
    assert_int_equal(cs_clickhouse_tables_answer(body, strlen(body), names, false, exists, db, sizeof db, detail,
                                                 sizeof detail), CS_E_PARSE);
  }
}

static int tsv_rows(const char *text, uint32_t columns, char out[][64]) {
  static char buf[1024];
  size_t n = strlen(text);
  memcpy(buf, text, n);
  cs_clickhouse_tsv tsv = {buf, buf + n};
  char *fields[8];
  size_t lengths[8];
  int rows = 0, got;
  while ((got = cs_clickhouse_tsv_next(&tsv, fields, lengths, columns)) == 1) {
    for (uint32_t i = 0; i < columns; i++)
      snprintf(out[(size_t)rows * columns + i], 64, "%s", fields[i] == NULL ? "<null>" : fields[i]);
    rows++;
  }
  return got < 0 ? got : rows;
}

static void test_tsv_strict(void **state) {
  (void)state;
  char out[16][64];
  assert_int_equal(tsv_rows("1\ta\\tb\n2\t\\N\n", 2, out), 2);
  assert_string_equal(out[1], "a\tb");
  assert_string_equal(out[3], "<null>");
  assert_int_equal(tsv_rows("x\\\\y\\'z\t\\n\n", 2, out), 1);
  assert_string_equal(out[0], "x\\y'z");
  assert_string_equal(out[1], "\n");
  assert_int_equal(tsv_rows("", 2, out), 0);
  assert_int_equal(tsv_rows("1\t2", 2, out), CS_E_PARSE);       /* no final newline */
  assert_int_equal(tsv_rows("1\n", 2, out), CS_E_PARSE);        /* a short row */
  assert_int_equal(tsv_rows("1\t2\t3\n", 2, out), CS_E_PARSE);  /* a long row */
  assert_int_equal(tsv_rows("a\\qb\t1\n", 2, out), CS_E_PARSE); /* an unknown escape */
  assert_int_equal(tsv_rows("a\\", 1, out), CS_E_PARSE);
}

/* \0 is U+0000 in a field, kept with the field's length; a raw NUL byte (the server escapes it) is not. */
static void test_tsv_nul(void **state) {
  (void)state;
  static char buf[] = "\\0a\\0b\\0\t\\\\0\t\\0\n";
  cs_clickhouse_tsv tsv = {buf, buf + sizeof buf - 1};
  char *f[3];
  size_t len[3];
  assert_int_equal(cs_clickhouse_tsv_next(&tsv, f, len, 3), 1);
  assert_int_equal(len[0], 5);
  assert_memory_equal(f[0], "\0a\0b\0", 6); /* the terminator too */
  assert_int_equal(len[1], 2);
  assert_string_equal(f[1], "\\0"); /* an escaped backslash, then a 0 */
  assert_int_equal(len[2], 1);
  assert_int_equal(f[2][0], '\0');
  assert_int_equal(cs_clickhouse_tsv_next(&tsv, f, len, 3), 0);
  static char raw[] = "a\0b\n";
  tsv = (cs_clickhouse_tsv){raw, raw + sizeof raw - 1};
  assert_int_equal(cs_clickhouse_tsv_next(&tsv, f, len, 1), CS_E_PARSE);
}

static void test_u64_strict(void **state) {
  (void)state;
  uint64_t v = 0;
  assert_int_equal(cs_clickhouse_parse_u64("18446744073709551615", &v), CS_E_OK);
  assert_true(v == UINT64_MAX);
  assert_int_equal(cs_clickhouse_parse_u64("0", &v), CS_E_OK);
  assert_int_equal(cs_clickhouse_parse_u64("18446744073709551616", &v), CS_E_PARSE);
  assert_int_equal(cs_clickhouse_parse_u64("-1", &v), CS_E_PARSE);
  assert_int_equal(cs_clickhouse_parse_u64(" 1", &v), CS_E_PARSE);
  assert_int_equal(cs_clickhouse_parse_u64("01", &v), CS_E_PARSE);
  assert_int_equal(cs_clickhouse_parse_u64("", &v), CS_E_PARSE);
}

static void test_table_names(void **state) {
  (void)state;
  char name[128];
  assert_int_equal(cs_clickhouse_table_name("capstore", "claims", name, sizeof name), CS_E_OK);
  assert_string_equal(name, "capstore_claims_v1");
  assert_int_equal(cs_clickhouse_table_name("a-b", "claims", name, sizeof name), CS_E_CONFIG);
  assert_int_equal(cs_clickhouse_table_name("x'; DROP", "claims", name, sizeof name), CS_E_CONFIG);
  assert_int_equal(cs_clickhouse_table_name("", "claims", name, sizeof name), CS_E_CONFIG);
  cs_clickhouse_config cfg = {.url = "http://127.0.0.1:1/", .table_prefix = "ok", .allow_insecure = true};
  cs_catalog cat;
  assert_int_equal(cs_clickhouse_open(&cfg, &cat), CS_E_OK); /* no request is sent */
  cat.ops->close(cat.self);
  cfg.table_prefix = "bad prefix";
  assert_int_equal(cs_clickhouse_open(&cfg, &cat), CS_E_CONFIG);
  cfg.table_prefix = "ok";
  cfg.user = "a\r\nX-Injected: 1";
  assert_int_equal(cs_clickhouse_open(&cfg, &cat), CS_E_CONFIG);
}

/* The url: an explicit http(s) scheme, plain http only with allow_insecure; the refusal names the field. */
static void url_refused(const char *url, bool insecure, const char *field) {
  cs_clickhouse_config cfg = {.url = url, .table_prefix = "ok", .allow_insecure = insecure};
  char msg[256];
  assert_int_equal(cs_clickhouse_config_validate(&cfg, msg, sizeof msg), CS_E_CONFIG);
  if (strstr(msg, field) == NULL) fail_msg("'%s': message '%s' does not name %s", url == NULL ? "(null)" : url, msg, field);
  cs_catalog cat;
  assert_int_equal(cs_clickhouse_open(&cfg, &cat), CS_E_CONFIG);
}

static void url_accepted(const char *url, bool insecure) {
  cs_clickhouse_config cfg = {.url = url, .table_prefix = "ok", .allow_insecure = insecure};
  char msg[256];
  assert_int_equal(cs_clickhouse_config_validate(&cfg, msg, sizeof msg), CS_E_OK);
  cs_catalog cat;
  assert_int_equal(cs_clickhouse_open(&cfg, &cat), CS_E_OK);
  cat.ops->close(cat.self);
}

static void test_url_validated(void **state) {
  (void)state;
  url_refused("localhost:8123", true, "clickhouse.url");
  url_refused("ftp://x", true, "clickhouse.url");
  url_refused("file:///etc/passwd", true, "clickhouse.url");
  url_refused("gopher://127.0.0.1:70/_x", true, "clickhouse.url"); /* bytes to any port */
  url_refused("dict://127.0.0.1:11211/stats", true, "clickhouse.url");
  url_refused("HTTP://127.0.0.1:8123/", true, "clickhouse.url"); /* the scheme as written, lower case */
  url_refused("", true, "clickhouse.url");
  url_refused(NULL, true, "clickhouse.url");
  url_refused("https://", false, "clickhouse.url");
  url_refused("https://user@host:8443/", false, "clickhouse.url");
  url_refused("https://host:70000/", false, "clickhouse.url");
  url_refused("http://127.0.0.1:8123/", false, "clickhouse.allow_insecure");
  url_accepted("http://127.0.0.1:8123/", true);
  url_accepted("https://ch.example:8443/", false);
  url_accepted("https://ch.example/?database=x", false);
  assert_int_equal(cs_clickhouse_config_validate(NULL, NULL, 0), CS_E_INVALID_ARGUMENT);
}

/*
 * The replicated mode's settings come from cs_clickhouse_config (cluster,
 * insert_quorum), never from the url: a name the server decodes to one of
 * them is refused by name, with or without a cluster; other settings pass.
 */
static void setting_refused(const char *url, const char *name) {
  for (int clustered = 0; clustered < 2; clustered++) {
    cs_clickhouse_config cfg = {.url = url, .table_prefix = "ok", .cluster = clustered ? "c1" : NULL,
                                .insert_quorum = clustered ? 2 : 0};
    char msg[256];
    assert_int_equal(cs_clickhouse_config_validate(&cfg, msg, sizeof msg), CS_E_CONFIG);
    char quoted[80];
    snprintf(quoted, sizeof quoted, "replication setting '%s'", name);
    if (strstr(msg, quoted) == NULL || strstr(msg, "clickhouse.url") == NULL ||
        strstr(msg, "catalog.clickhouse.cluster") == NULL || strstr(msg, "insert_quorum instead") == NULL)
      fail_msg("'%s': message '%s' does not name %s, the url and the settings to use", url, msg, name);
    cs_catalog cat;
    assert_int_equal(cs_clickhouse_open(&cfg, &cat), CS_E_CONFIG);
  }
  char found[64];
  assert_true(cs_clickhouse_url_replication_setting(url, found, sizeof found));
  assert_string_equal(found, name);
}

static void test_url_replication_settings(void **state) {
  (void)state;
  setting_refused("https://ch:8443/?insert_quorum=2", "insert_quorum");
  setting_refused("https://ch:8443/?insert%5Fquorum=2", "insert_quorum");
  setting_refused("https://ch:8443/?insert%5fquorum%5Ftimeout=1", "insert_quorum_timeout");
  setting_refused("https://ch:8443/?database=x&insert_quorum_timeout=1", "insert_quorum_timeout");
  setting_refused("https://ch:8443/?max_threads=2&insert_quorum_parallel=1", "insert_quorum_parallel");
  setting_refused("https://ch:8443/?INSERT_QUORUM=2", "INSERT_QUORUM");
  setting_refused("https://ch:8443/?insert_quorum", "insert_quorum");
  setting_refused("https://ch:8443/?select_sequential_consistency=0", "select_sequential_consistency");
  setting_refused("https://ch:8443/?select%5Fsequential%5Fconsistency=0", "select_sequential_consistency");
  setting_refused("https://ch:8443/?distributed_ddl_task_timeout=1", "distributed_ddl_task_timeout");
  setting_refused("https://ch:8443/?a=1&&distributed%5Fddl%5Ftask%5Ftimeout=9", "distributed_ddl_task_timeout");
  /* The twins: settings that only look alike, a name in a value, after the fragment, a bad escape kept as text. */
  url_accepted("https://ch.example/?max_threads=2", false);
  url_accepted("https://ch.example/?database=insert_quorum&max_threads=2", false);
  url_accepted("https://ch.example/?select_sequential_consistency_x=1&xinsert_quorum=1", false);
  url_accepted("https://ch.example/?distributed_ddl_task_timeout2=1", false);
  url_accepted("https://ch.example/?insert%5Gquorum=2", false);
  url_accepted("https://ch.example/insert_quorum=2", false); /* a path, not a query */
  char found[64] = "x";
  assert_false(cs_clickhouse_url_replication_setting("https://ch/?a=2#&insert_quorum=2", found, sizeof found));
  assert_string_equal(found, "");
  assert_false(cs_clickhouse_url_replication_setting(NULL, found, sizeof found));
  /* A name of the family the server does not know is named by the family, its bytes never echoed (a control
     byte, or text the caller did not mean for a message). */
  assert_true(cs_clickhouse_url_replication_setting("https://ch/?insert_quorum%0A=1", found, sizeof found));
  assert_string_equal(found, "insert_quorum*");
  assert_true(cs_clickhouse_url_replication_setting("https://ch/?insert_quorum%FF%EF?S3CR3T-=1", found, sizeof found));
  assert_string_equal(found, "insert_quorum*");
  assert_true(cs_clickhouse_url_replication_setting("https://ch/?Insert_Quorum_Timeout=1", found, sizeof found));
  assert_string_equal(found, "Insert_Quorum_Timeout");
}

/* ---- the bulk form of descriptor rows (catalog.h) ------------------------ */

static void record_make(cs_pack_ref *ref, cs_pack_record *rec, const char *capture_id, const char *key) {
  memset(ref, 0, sizeof *ref);
  memset(rec, 0, sizeof *rec);
  for (int i = 0; i < 16; i++) ref->pack_id.bytes[i] = (uint8_t)(0x11 * i);
  assert_int_equal(cs_pack_ref_set_key(ref, key, strlen(key)), CS_E_OK);
  cs_pack_meta *m = &rec->meta;
  m->capture_id = cs_pack_text_of(capture_id);
  m->tenant_id = cs_pack_text_of("t'1");
  m->experiment_id = cs_pack_text_of("a\\b");
  m->run_id = cs_pack_text_of("tab\there");
  m->session_id = cs_pack_text_of("line\nbreak\r\n");
  m->request_id = cs_pack_text_of("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  m->sequence_id = cs_pack_text_of("");
  m->model_id = cs_pack_text_of("\\N");
  m->model_revision = cs_pack_text_of("\b\f\x01\x7f");
  m->adapter_revision = cs_pack_text_of(NULL);
  m->capture_policy_version = cs_pack_text_of("\\");
  m->hook_name = cs_pack_text_of("\t");
  m->layer_number = -1;
  m->producer_rank = UINT32_MAX;
  m->step_number = UINT64_MAX;
  m->token_start = 0;
  m->token_end = 7;
  m->batch_position = 3;
  m->dtype = CS_DTYPE_BFLOAT16;
  m->rank = 3;
  m->shape[0] = 2;
  m->shape[1] = 2147483647;
  m->shape[2] = 0;
  m->captured_at_ns = 12345;
  rec->offset = 64;
  rec->stored_length = 8;
  rec->decoded_length = 8;
  rec->crc32 = UINT32_MAX;
}

static void assert_field(const char *got, size_t len, cs_pack_text want) {
  if (want.bytes == NULL) {
    assert_null(got);
    return;
  }
  assert_non_null(got);
  assert_int_equal(len, want.len);
  assert_memory_equal(got, want.bytes, want.len);
}

/* Formatted, then read back by the adapter's strict reader: every value survives, in column order. */
static void test_bulk_row_round_trip(void **state) {
  (void)state;
  cs_pack_ref ref;
  cs_pack_record rec;
  record_make(&ref, &rec, "cap\t0\n", "cat/x'); DROP TABLE y; --\\/k.dmi-pack");
  static char row[4096];
  size_t n = cs_catalog_tsv_row(&ref, &rec, 42, row, sizeof row);
  assert_true(n > 0 && n < sizeof row);
  assert_int_equal(cs_catalog_tsv_row(&ref, &rec, 42, NULL, 0), n); /* measuring agrees with writing */
  assert_int_equal(row[n - 1], '\n');
  assert_null(memchr(row, '\r', n));
  cs_clickhouse_tsv tsv = {row, row + n};
  char *f[CS_CATALOG_DESCRIPTOR_COLUMN_COUNT];
  size_t len[CS_CATALOG_DESCRIPTOR_COLUMN_COUNT];
  assert_int_equal(cs_clickhouse_tsv_next(&tsv, f, len, CS_CATALOG_DESCRIPTOR_COLUMN_COUNT), 1);
  assert_int_equal(cs_clickhouse_tsv_next(&tsv, f, len, CS_CATALOG_DESCRIPTOR_COLUMN_COUNT), 0);
  assert_string_equal(f[0], "00112233-4455-6677-8899-aabbccddeeff");
  assert_field(f[1], len[1], cs_pack_text_of(ref.key));
  const cs_pack_meta *m = &rec.meta;
  const cs_pack_text texts[12] = {m->capture_id, m->tenant_id, m->experiment_id, m->run_id,
                                  m->session_id, m->request_id, m->sequence_id, m->model_id,
                                  m->model_revision, m->adapter_revision, m->capture_policy_version, m->hook_name};
  for (int i = 0; i < 12; i++) assert_field(f[2 + i], len[2 + i], texts[i]);
  const char *rest[14] = {"-1", "4294967295", "18446744073709551615", "0", "7", "3", "bfloat16",
                          "[2,2147483647,0]", "12345", "64", "8", "8", "4294967295", "42"};
  for (int i = 0; i < 14; i++) assert_string_equal(f[14 + i], rest[i]);
}

static void test_bulk_row_refusals(void **state) {
  (void)state;
  cs_pack_ref ref;
  cs_pack_record rec;
  record_make(&ref, &rec, "c", "k");
  char row[1024];
  size_t n = cs_catalog_tsv_row(&ref, &rec, 1, NULL, 0);
  memset(row, 'x', sizeof row);
  assert_int_equal(cs_catalog_tsv_row(&ref, &rec, 1, row, 10), n); /* too small: the length, nothing past cap */
  for (size_t i = 10; i < sizeof row; i++) assert_int_equal(row[i], 'x');
  rec.meta.rank = 0;
  assert_int_equal(cs_catalog_tsv_row(&ref, &rec, 1, row, sizeof row), n - strlen("2,2147483647,0"));
  row[n - strlen("2,2147483647,0")] = '\0';
  assert_non_null(strstr(row, "\t[]\t"));
  rec.meta.run_id = (cs_pack_text){"a\0b", 3};
  size_t with_nul = cs_catalog_tsv_row(&ref, &rec, 1, row, sizeof row - 1);
  assert_true(with_nul > 0 && with_nul < sizeof row);
  row[with_nul] = '\0';
  assert_non_null(strstr(row, "\ta\\0b\t")); /* U+0000 in a text is written \0, not refused */
  record_make(&ref, &rec, NULL, "k");
  assert_int_equal(cs_catalog_tsv_row(&ref, &rec, 1, row, sizeof row), 0); /* absent capture id */
  record_make(&ref, &rec, "c", "k");
  rec.meta.dtype = CS_DTYPE_COUNT_;
  assert_int_equal(cs_catalog_tsv_row(&ref, &rec, 1, row, sizeof row), 0);
  record_make(&ref, &rec, "c", "k");
  rec.meta.rank = CS_PACK_RANK_MAX + 1;
  assert_int_equal(cs_catalog_tsv_row(&ref, &rec, 1, row, sizeof row), 0);
  record_make(&ref, &rec, "c", "k");
  ref.key[0] = '\0';
  assert_int_equal(cs_catalog_tsv_row(&ref, &rec, 1, row, sizeof row), 0); /* a NUL in the key */
}

/* Reads the one row of text (28 columns) through the reader and cs_clickhouse_descriptor_row. */
static int descriptor_of(char *text, size_t len, cs_descriptor_row *row) {
  cs_clickhouse_tsv tsv = {text, text + len};
  char *f[CS_CATALOG_DESCRIPTOR_COLUMN_COUNT];
  size_t flen[CS_CATALOG_DESCRIPTOR_COLUMN_COUNT];
  assert_int_equal(cs_clickhouse_tsv_next(&tsv, f, flen, CS_CATALOG_DESCRIPTOR_COLUMN_COUNT), 1);
  return cs_clickhouse_descriptor_row(f, flen, row);
}

/*
 * U+0000 in every text, written by the bulk form and read back as
 * READ_DESCRIPTORS reads an answer: each text whole. The twins: a NUL in the
 * key, a number, the dtype or the shape of an answer row is malformed, never
 * read as the C string before it.
 */
static void test_descriptor_row_nul(void **state) {
  (void)state;
  cs_pack_ref ref;
  cs_pack_record rec;
  record_make(&ref, &rec, "c", "cat/k.dmi-pack");
  cs_pack_meta *m = &rec.meta;
  m->capture_id = (cs_pack_text){"\0c", 2};
  m->tenant_id = (cs_pack_text){"t\0\\0", 4};
  m->hook_name = (cs_pack_text){"\\N\0", 3};
  m->adapter_revision = (cs_pack_text){"\0", 1};
  static char row[4096];
  size_t n = cs_catalog_tsv_row(&ref, &rec, 42, row, sizeof row);
  assert_true(n > 0 && n < sizeof row);
  cs_descriptor_row got;
  assert_int_equal(descriptor_of(row, n, &got), CS_E_OK);
  assert_string_equal(got.key, "cat/k.dmi-pack");
  const cs_pack_meta *g = &got.record.meta;
  const cs_pack_text gt[12] = {g->capture_id, g->tenant_id, g->experiment_id, g->run_id,
                               g->session_id, g->request_id, g->sequence_id, g->model_id,
                               g->model_revision, g->adapter_revision, g->capture_policy_version, g->hook_name};
  const cs_pack_text wt[12] = {m->capture_id, m->tenant_id, m->experiment_id, m->run_id,
                               m->session_id, m->request_id, m->sequence_id, m->model_id,
                               m->model_revision, m->adapter_revision, m->capture_policy_version, m->hook_name};
  for (int i = 0; i < 12; i++) assert_field(gt[i].bytes, gt[i].len, wt[i]);
  assert_int_equal(g->dtype, CS_DTYPE_BFLOAT16);
  assert_true(got.version == 42);
  static const char *const bad[4][2] = {
      {"\tcat/k.dmi-pack\t", "\tcat/k\\0.dmi-pack\t"}, /* the key */
      {"\t4294967295\t18446744073709551615\t", "\t4294967295\t1\\08\t"}, /* step_number */
      {"\tbfloat16\t", "\tbfloat16\\0\t"},                              /* the dtype */
      {"\t[2,2147483647,0]\t", "\t[2\\0,2147483647,0]\t"}};             /* the shape */
  for (int b = 0; b < 4; b++) {
    n = cs_catalog_tsv_row(&ref, &rec, 42, row, sizeof row);
    row[n] = '\0';
    char *at = strstr(row, bad[b][0]);
    assert_non_null(at);
    static char edited[4096];
    size_t head = (size_t)(at - row), old = strlen(bad[b][0]), new_len = strlen(bad[b][1]);
    memcpy(edited, row, head);
    memcpy(edited + head, bad[b][1], new_len);
    memcpy(edited + head + new_len, at + old, n - head - old);
    size_t edited_len = n - old + new_len;
    if (descriptor_of(edited, edited_len, &got) != CS_E_PARSE) fail_msg("a NUL in '%s' was read", bad[b][1]);
  }
}

/* index_bytes: the rows at the widest version, so no version's rows cost more. */
/* One LIST_PACKS answer row (7 columns) through the reader and cs_clickhouse_inventory_row. */
static int inventory_of(const char *text, cs_inventory_row *row) {
  static char copy[512];
  snprintf(copy, sizeof copy, "%s", text);
  cs_clickhouse_tsv tsv = {copy, copy + strlen(copy)};
  char *f[CS_CLICKHOUSE_INVENTORY_COLUMN_COUNT];
  size_t flen[CS_CLICKHOUSE_INVENTORY_COLUMN_COUNT];
  if (cs_clickhouse_tsv_next(&tsv, f, flen, CS_CLICKHOUSE_INVENTORY_COLUMN_COUNT) != 1) return CS_E_PARSE;
  return cs_clickhouse_inventory_row(f, flen, row);
}

static void test_inventory_row(void **state) {
  (void)state;
  static const char id[] = "01a23495-c97e-779b-b980-615d8f6e3df0";
  static const char sha[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  char text[400];
  cs_inventory_row row;
  snprintf(text, sizeof text, "%s\tcap/v1/a\\tb.dmi-pack\t4096\t%s\t3\t1764000000000000000\t7\n", id, sha);
  assert_int_equal(inventory_of(text, &row), CS_E_OK);
  char back[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(&row.ref.pack_id, back);
  assert_string_equal(back, id);
  assert_string_equal(row.ref.key, "cap/v1/a\tb.dmi-pack"); /* TabSeparated's escape \\t: the key holds a tab */
  assert_int_equal(row.ref.size_bytes, 4096);
  assert_int_equal(row.ref.sha256[0], 0x00);
  assert_int_equal(row.ref.sha256[31], 0xff);
  assert_int_equal(row.ref.record_count, 3);
  assert_int_equal(row.ref.created_at_ns, UINT64_C(1764000000000000000));
  assert_int_equal(row.version, 7);
  /* Refused: an upper-case or short sha256, a NULL field, a NUL in the key, a record count past 32 bits, a sign. */
  static const char upper[] = "00112233445566778899AABBCCDDEEFF00112233445566778899aabbccddeeff";
  const char *bad[][7] = {
      {id, "k", "1", upper, "1", "1", "1"},      {id, "k", "1", "0011", "1", "1", "1"},
      {id, "\\N", "1", sha, "1", "1", "1"},    {id, "k\\0x", "1", sha, "1", "1", "1"},
      {id, "k", "1", sha, "4294967296", "1", "1"}, {id, "k", "-1", sha, "1", "1", "1"},
      {"01a23495", "k", "1", sha, "1", "1", "1"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(text, sizeof text, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", bad[i][0], bad[i][1], bad[i][2], bad[i][3],
             bad[i][4], bad[i][5], bad[i][6]);
    assert_int_equal(inventory_of(text, &row), CS_E_PARSE);
  }
}

/* A descriptor row in the bulk form with the search answer's three pack columns (tail) after it, parsed. */
static int search_of(const char *tail, cs_search_row *row) {
  cs_pack_ref ref;
  cs_pack_record rec;
  record_make(&ref, &rec, "c\0d", "cat/k.dmi-pack");
  rec.meta.capture_id.len = 3; /* c, NUL, d */
  static char text[4096];
  size_t n = cs_catalog_tsv_row(&ref, &rec, 42, text, sizeof text);
  if (n == 0 || n + strlen(tail) >= sizeof text) return CS_E_INVALID_ARGUMENT; /* never: the row is valid */
  text[n - 1] = '\t';
  memcpy(text + n, tail, strlen(tail));
  cs_clickhouse_tsv tsv = {text, text + n + strlen(tail)};
  char *f[CS_CLICKHOUSE_SEARCH_COLUMN_COUNT];
  size_t flen[CS_CLICKHOUSE_SEARCH_COLUMN_COUNT];
  if (cs_clickhouse_tsv_next(&tsv, f, flen, CS_CLICKHOUSE_SEARCH_COLUMN_COUNT) != 1) return CS_E_PARSE;
  return cs_clickhouse_search_row(f, flen, row);
}

/*
 * A SEARCH answer row: the descriptor's columns (texts whole, NUL included),
 * the pack's size, sha256 and the end of its last record, from which the
 * footer offset is the next multiple of 64 (at least 64). Refused: the
 * inventory's refusals, \N, a NUL or a sign in a number, an end whose
 * footer offset would overflow.
 */
static void test_search_row(void **state) {
  (void)state;
  static const char sha[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  static const struct {
    const char *end;
    uint64_t footer;
  } ends[] = {{"0", 64}, {"1", 64}, {"64", 64}, {"65", 128}, {"232", 256}, {"18446744073709551552", UINT64_C(18446744073709551552)}};
  char tail[256];
  cs_search_row row;
  for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
    snprintf(tail, sizeof tail, "4096\t%s\t%s\n", sha, ends[i].end);
    assert_int_equal(search_of(tail, &row), CS_E_OK);
    assert_true(row.footer_offset == ends[i].footer);
  }
  assert_int_equal(row.pack_size_bytes, 4096);
  assert_int_equal(row.pack_sha256[0], 0x00);
  assert_int_equal(row.pack_sha256[31], 0xff);
  assert_true(row.d.version == 42);
  assert_int_equal(row.d.record.meta.capture_id.len, 3);
  assert_memory_equal(row.d.record.meta.capture_id.bytes, "c\0d", 3);
  assert_string_equal(row.d.key, "cat/k.dmi-pack");
  static const char upper[] = "00112233445566778899AABBCCDDEEFF00112233445566778899aabbccddeeff";
  const char *bad[][3] = {
      {"4096", upper, "64"}, {"4096", "0011", "64"},       {"\\N", sha, "64"},
      {"4096", sha, "\\N"},  {"4096", sha, "6\\04"},       {"-1", sha, "64"},
      {"4096", sha, "18446744073709551553"}, /* its footer offset is past 2^64 */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(tail, sizeof tail, "%s\t%s\t%s\n", bad[i][0], bad[i][1], bad[i][2]);
    if (search_of(tail, &row) != CS_E_PARSE) fail_msg("search row %zu was read", i);
  }
  snprintf(tail, sizeof tail, "4096\t%s\n", sha); /* a column short */
  assert_int_equal(search_of(tail, &row), CS_E_PARSE);
}

/*
 * SEARCH refuses before sending: a filter cs_search_filter_check refuses
 * (CS_E_INVALID_ARGUMENT), a statement over query_bytes_max (outcome
 * TOO_LARGE), a page of no rows (OK, answered here). The url names a port
 * nobody listens on: anything sent would come back REFUSED.
 */
static void test_search_refused_unsent(void **state) {
  (void)state;
  cs_clickhouse_config cfg = {.url = "http://127.0.0.1:1/", .allow_insecure = true, .connect_timeout_ns = CS_SEC_NS};
  cs_catalog cat;
  assert_int_equal(cs_clickhouse_open(&cfg, &cat), CS_E_OK);
  static cs_search_row rows[4];
  uint32_t count = 9;
  cs_catalog_result res;
  cs_search_filter f;
  memset(&f, 0, sizeof f);
  assert_int_equal(cat.ops->search(cat.self, 1, &f, NULL, rows, 0, &count, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_int_equal(count, 0);
  f.has_layer = true, f.layer_min = 2, f.layer_max = 1;
  assert_int_equal(cat.ops->search(cat.self, 1, &f, NULL, rows, 4, &count, &res), CS_E_INVALID_ARGUMENT);
  memset(&f, 0, sizeof f);
  static char big[512];
  memset(big, '\x01', sizeof big); /* each byte written \x01: 4 bytes */
  static cs_pack_text ids[CS_SEARCH_LIST_MAX];
  for (uint32_t i = 0; i < CS_SEARCH_LIST_MAX; i++) ids[i] = (cs_pack_text){big, sizeof big};
  f.capture_ids = ids, f.capture_id_count = CS_SEARCH_LIST_MAX;
  assert_int_equal(cat.ops->search(cat.self, 1, &f, NULL, rows, 4, &count, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_TOO_LARGE);
  assert_int_equal(count, 0);
  f.capture_id_count = 1; /* the same filter, small: sent, and refused by nobody listening */
  assert_int_equal(cat.ops->search(cat.self, 1, &f, NULL, rows, 4, &count, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_REFUSED);
  cat.ops->close(cat.self);
}

static void test_index_bytes(void **state) {
  (void)state;
  static cs_pack_ref ref;
  static cs_pack_record recs[3];
  for (int i = 0; i < 3; i++) record_make(&ref, &recs[i], i == 1 ? "c1\\" : "c", "cat/k.dmi-pack");
  uint64_t sum = 0;
  for (int i = 0; i < 3; i++) sum += cs_catalog_tsv_row(&ref, &recs[i], UINT64_MAX, NULL, 0);
  assert_true(cs_catalog_index_bytes(&ref, recs, 3) == sum);
  uint64_t small = 0;
  for (int i = 0; i < 3; i++) small += cs_catalog_tsv_row(&ref, &recs[i], 1, NULL, 0);
  assert_true(small + 3 * 19 == sum);
  assert_true(cs_catalog_index_bytes(&ref, recs, 0) == 0);
  assert_true(cs_catalog_index_bytes(NULL, recs, 3) == 0);
  recs[2].meta.hook_name = (cs_pack_text){"\0\0", 2}; /* costs its escapes: \0\0, 4 bytes */
  assert_true(cs_catalog_index_bytes(&ref, recs, 3) == sum + 4 - 2); /* it was \t, 2 bytes */
  assert_int_equal(cs_pack_ref_set_key(&ref, "cat/\0k", 6), CS_E_OK);
  assert_true(cs_catalog_index_bytes(&ref, recs, 3) == 0); /* a NUL in the key: INDEX refuses the pack */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_error_code), cmocka_unit_test(test_classify),   cmocka_unit_test(test_tables_answer),
      cmocka_unit_test(test_tsv_strict),
      cmocka_unit_test(test_u64_strict), cmocka_unit_test(test_table_names), cmocka_unit_test(test_url_validated),
      cmocka_unit_test(test_url_replication_settings), cmocka_unit_test(test_classify_200_rows_echo_codes),
      cmocka_unit_test(test_bulk_row_round_trip), cmocka_unit_test(test_bulk_row_refusals),
      cmocka_unit_test(test_index_bytes), cmocka_unit_test(test_tsv_nul), cmocka_unit_test(test_descriptor_row_nul),
      cmocka_unit_test(test_inventory_row), cmocka_unit_test(test_search_row),
      cmocka_unit_test(test_search_refused_unsent),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
